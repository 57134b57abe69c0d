// measure.ts: timing and memory probes of the benchmark harness, the same method as bench/python/common.py:
// median of wall-clock repetitions after a warm-up, and the growth of the resident set's high-water mark
// (VmHWM reset through /proc/self/clear_refs) during one run. Linux-only for memory; null elsewhere.
import { readFileSync, writeFileSync } from "node:fs";

export interface Timing {
    medianMs: number;
    samplesMs: number[];
}

/** Median of `reps` timed calls after `warmup` untimed ones. The event loop turns between calls (untimed), as in a
 * training loop: outputs V8 collected meanwhile go back to the output pool (lib/alloc.ts). */
export async function timeMedian(fn: () => unknown | Promise<unknown>, reps: number, warmup = 2): Promise<Timing> {
    for (let i = 0; i < warmup; i++) await fn();
    const samples: number[] = [];
    for (let i = 0; i < reps; i++) {
        await new Promise((resolve) => setImmediate(resolve));
        const t0 = process.hrtime.bigint();
        await fn();
        samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    return { medianMs: median(samples), samplesMs: samples };
}

/** As timeMedian, with a machine probe (a copy bandwidth, a peak FLOP rate) measured right before and right after each
 * timed call: `probes[i]` is the mean of the two around `samplesMs[i]`. On a shared machine whose speed drifts
 * within minutes, a kernel's share of the probe is then taken against the probe of the same moment, not one
 * measured minutes away. */
export async function timeWithProbe(
    fn: () => unknown | Promise<unknown>,
    probe: () => number,
    reps: number,
    warmup = 1,
): Promise<Timing & { probes: number[] }> {
    for (let i = 0; i < warmup; i++) await fn();
    const samples: number[] = [],
        probes: number[] = [];
    for (let i = 0; i < reps; i++) {
        await new Promise((resolve) => setImmediate(resolve));
        const before = probe();
        const t0 = process.hrtime.bigint();
        await fn();
        samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
        probes.push((before + probe()) / 2);
    }
    return { medianMs: median(samples), samplesMs: samples, probes };
}

export function median(xs: readonly number[]): number {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function statusKiB(field: string): number | null {
    try {
        const line = readFileSync("/proc/self/status", "utf8")
            .split("\n")
            .find((l) => l.startsWith(field + ":"));
        return line ? Number(line.split(/\s+/)[1]) : null;
    } catch {
        return null;
    }
}

/** Peak resident-set growth in bytes while `fn` runs once, or null where it cannot be read. */
export async function peakExtraBytes(fn: () => unknown | Promise<unknown>): Promise<number | null> {
    try {
        writeFileSync("/proc/self/clear_refs", "5");
    } catch {
        await fn();
        return null;
    }
    const before = statusKiB("VmRSS");
    await fn();
    const peak = statusKiB("VmHWM");
    return before === null || peak === null ? null : Math.max(0, peak - before) * 1024;
}
