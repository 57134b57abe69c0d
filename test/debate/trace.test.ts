// trace.test.ts: spans reach OpenTelemetry through @opentelemetry/api when the application registered a provider
// (here a minimal in-memory one), with their attributes, timing and error status; teeTracer feeds several tracers.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import {
    trace,
    type Span as OtelSpan,
    type SpanOptions,
    type Tracer as OtelApiTracer,
    type TracerProvider,
} from "@opentelemetry/api";
import { describe, expect, it } from "vitest";

import { JsonlTracer, otelTracer, teeTracer, type Span } from "../../lib/index.js";

interface Captured {
    name: string;
    options: SpanOptions;
    status?: { code: number; message?: string };
    end?: unknown;
}

function memoryProvider(out: Captured[]): TracerProvider {
    const tracer = {
        startSpan(name: string, options: SpanOptions = {}) {
            const c: Captured = { name, options };
            out.push(c);
            return {
                setStatus(s: { code: number; message?: string }) {
                    c.status = s;
                    return this;
                },
                end(t?: unknown) {
                    c.end = t;
                },
            } as unknown as OtelSpan;
        },
    } as unknown as OtelApiTracer;
    return { getTracer: () => tracer };
}

const span = (over: Partial<Span> = {}): Span => ({
    name: "debate.turn",
    runId: "r",
    episode: "e",
    agent: 1,
    turn: 2,
    parent: 0,
    startMs: 1000,
    latencyMs: 25,
    promptTokens: 10,
    completionTokens: 4,
    finishReason: "stop",
    ...over,
});

describe("tracing", () => {
    it("exports spans to OpenTelemetry and the JSONL file together", async () => {
        const captured: Captured[] = [];
        trace.setGlobalTracerProvider(memoryProvider(captured));
        const dir = mkdtempSync(join(tmpdir(), "maporl-otel-"));
        const file = new JsonlTracer(dir);
        const t = teeTracer(file, await otelTracer());
        t.span(span());
        t.span(span({ agent: 0, error: "HTTP 500", finishReason: "error" }));
        t.close();
        expect(captured.length).toBe(2);
        expect(captured[0]).toMatchObject({
            name: "debate.turn",
            options: {
                startTime: 1000,
                attributes: {
                    "maporl.agent": 1,
                    "maporl.turn": 2,
                    "maporl.completion_tokens": 4,
                    "maporl.finish_reason": "stop",
                },
            },
            end: 1025,
        });
        expect(captured[1].status).toEqual({ code: 2, message: "HTTP 500" });
        expect(
            readFileSync(file.file, "utf8")
                .trim()
                .split("\n")
                .map((l) => JSON.parse(l).agent),
        ).toEqual([1, 0]);
        expect(() => file.span(span())).toThrow(/is closed/);
        trace.disable();
    });
});
