// runs.ts: a run directory's logs without their wall-clock parts. metrics.jsonl's `kind: "timing"` lines and
// summary.json's `stages` record when stages ran; everything else of an interrupted and resumed run equals an
// uninterrupted one byte for byte, which is what the resume tests compare.
import { readFileSync } from "node:fs";
import { join } from "node:path";

export function metricsWithoutTimings(text: string): string {
    return text
        .split("\n")
        .filter((l) => !l.startsWith('{"kind":"timing"'))
        .join("\n");
}

export function summaryWithoutTimings(text: string): unknown {
    const s = JSON.parse(text) as Record<string, unknown>;
    delete s.stages;
    return s;
}

/** metrics.jsonl of a run, and the stage names its timing lines record (in order). */
export function readMetrics(dir: string): { metrics: string; timed: string[] } {
    const text = readFileSync(join(dir, "metrics.jsonl"), "utf8");
    const timed = text
        .split("\n")
        .filter((l) => l.startsWith('{"kind":"timing"'))
        .map((l) => (JSON.parse(l) as { stage: string }).stage);
    return { metrics: metricsWithoutTimings(text), timed };
}
