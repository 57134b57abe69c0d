// measure.test.ts: the benchmark harness's timing helpers (lib/bench/measure.ts) with scripted calls and probes:
// warm-up calls are untimed, every timed repetition has a probe right before and right after it (their mean is its
// probe), and the median is the middle sample (the mean of the two middle ones for an even count).
import { describe, expect, it } from "vitest";

import { median, timeMedian, timeWithProbe } from "../../lib/bench/measure.js";

// Busy-waits `ms` milliseconds of wall time (a timer may fire early against hrtime: Node's loop clock is cached).
const spin = (ms: number) => {
    const t0 = process.hrtime.bigint();
    while (Number(process.hrtime.bigint() - t0) / 1e6 < ms);
};

describe("bench timing helpers", () => {
    it("median: odd and even counts, unsorted input left as given", () => {
        const xs = [5, 1, 4];
        expect(median(xs)).toBe(4);
        expect(xs).toEqual([5, 1, 4]);
        expect(median([4, 1, 3, 2])).toBe(2.5);
        expect(median([7])).toBe(7);
    });

    it("timeWithProbe: two probes around each repetition, none around the warm-ups", async () => {
        const events: string[] = [];
        let probeValue = 0;
        let calls = 0;
        const fn = async () => {
            events.push(`call${++calls}`);
            spin(2);
            await Promise.resolve();
        };
        const probe = () => {
            events.push("probe");
            return (probeValue += 10); // 10, 20, 30, ...: the mean of a repetition's pair is known
        };
        const t = await timeWithProbe(fn, probe, 3, 2);
        expect(events).toEqual([
            "call1",
            "call2",
            "probe",
            "call3",
            "probe",
            "probe",
            "call4",
            "probe",
            "probe",
            "call5",
            "probe",
        ]);
        expect(t.samplesMs).toHaveLength(3);
        expect(t.probes).toEqual([15, 35, 55]);
        for (const s of t.samplesMs) expect(s).toBeGreaterThanOrEqual(2); // each sample times its call (its 2 ms of spinning)
        expect(t.medianMs).toBe(median(t.samplesMs));
    });

    it("timeMedian: the warm-ups run first and are not among the samples", async () => {
        const durations = [300, 300, 1, 9, 5]; // the two warm-ups spin longest; a sample would show them
        let i = 0;
        const t = await timeMedian(async () => spin(durations[i++]), 3, 2);
        expect(i).toBe(5);
        expect(t.samplesMs).toHaveLength(3);
        expect(Math.max(...t.samplesMs)).toBeLessThan(250);
        expect(t.medianMs).toBeGreaterThanOrEqual(5); // the middle of 1, 9, 5 ms
    });
});
