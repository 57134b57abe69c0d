// trace.ts: per-turn tracing. Every agent turn is a span (agent, turn, parent, latency, prompt and completion
// tokens, finish reason, error) written as one JSON line to <dir>/trace.jsonl. Each line is a single write(2)
// to a file opened for append, so a crash loses at most the line being written and never leaves a torn line
// in the middle of the file.
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";

export interface Span {
    name: string;
    runId: string;
    episode: string;
    agent: number;
    turn: number;
    /** Delegation depth: 0 for a debate turn. */
    parent: number;
    startMs: number;
    latencyMs: number;
    promptTokens: number;
    completionTokens: number;
    finishReason: string;
    error?: string;
}

export interface Tracer {
    span(s: Span): void;
    close(): void;
}

/** Appends spans to `<dir>/trace.jsonl` (the directory is created). */
export class JsonlTracer implements Tracer {
    readonly file: string;
    private fd: number | null;

    constructor(dir: string) {
        if (typeof dir !== "string" || !dir) throw new TypeError("JsonlTracer: dir: expected a directory path");
        mkdirSync(dir, { recursive: true });
        this.file = join(dir, "trace.jsonl");
        this.fd = openSync(this.file, "a");
    }

    span(s: Span): void {
        if (this.fd === null) throw new Error(`JsonlTracer: ${this.file} is closed`);
        writeSync(this.fd, JSON.stringify(s) + "\n");
    }

    close(): void {
        if (this.fd !== null) closeSync(this.fd);
        this.fd = null;
    }
}
