// trace.ts: per-turn tracing. Every agent turn is a span (agent, turn, parent, latency, prompt and completion
// tokens, finish reason, error, the answer's text) written as one JSON line to <dir>/trace.jsonl. Each line is a single write(2)
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
    /** The answer's text, extracted answer and verifier score (debate turns that produced one): what a run needs to
     * be audited or resumed from its trace alone. */
    text?: string;
    extracted?: string | null;
    score?: number;
    /** Remote policies: the endpoint that answered (or failed), the served model (an adapter's version), and the HTTP
     * attempts made (retries and failovers included). */
    endpoint?: string;
    model?: string;
    attempts?: number;
    /** Workflow turns (lib/env/workflow.ts): the role, the hand-off chain that led to the turn (its length is
     * `parent`), every tool call with its outcome, how many failed, and the shared artifact's version before and after. */
    role?: string;
    delegation?: string[];
    toolCalls?: { name: string; ok: boolean; ms: number; error?: string }[];
    toolErrors?: number;
    artifactSeen?: number | null;
    artifactAfter?: number;
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

/** Sends every span to several tracers (e.g. the JSONL file and OpenTelemetry). */
export function teeTracer(...tracers: Tracer[]): Tracer {
    return { span: (s) => tracers.forEach((t) => t.span(s)), close: () => tracers.forEach((t) => t.close()) };
}

/**
 * A tracer that exports spans through `@opentelemetry/api` (an optional peer dependency) to whatever SDK the
 * application configured; without an SDK the API's no-op tracer drops them. Rejects with a clear error when the
 * package is not installed.
 */
export async function otelTracer(name = "maporl"): Promise<Tracer> {
    let api: typeof import("@opentelemetry/api");
    try {
        api = await import("@opentelemetry/api");
    } catch {
        throw new Error(
            "otelTracer: @opentelemetry/api is not installed (npm install @opentelemetry/api, then configure an SDK)",
        );
    }
    const tracer = api.trace.getTracer(name);
    return {
        span(s) {
            const span = tracer.startSpan(s.name, {
                startTime: s.startMs,
                attributes: {
                    "maporl.run": s.runId,
                    "maporl.episode": s.episode,
                    "maporl.agent": s.agent,
                    "maporl.turn": s.turn,
                    "maporl.parent": s.parent,
                    "maporl.prompt_tokens": s.promptTokens,
                    "maporl.completion_tokens": s.completionTokens,
                    "maporl.finish_reason": s.finishReason,
                },
            });
            if (s.error) span.setStatus({ code: api.SpanStatusCode.ERROR, message: s.error });
            span.end(s.startMs + s.latencyMs);
        },
        close() {},
    };
}
