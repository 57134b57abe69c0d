// rolloutCorrection.ts (bench): the rollout correction at B=256, T=4096 (token-level truncated IS weights with every
// mismatch metric, and the measure-only default call) against verl's rollout_corr_helper in torch
// (bench/python/rollout_correction.py), in the same run.
import { rolloutCorrection } from "../rl/rolloutCorrection.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { rolloutCorrectionBatch, SHAPES } from "./batches.js";

const [B, T] = SHAPES.rolloutCorrection;

export async function benchRolloutCorrection(ctx: BenchContext): Promise<BenchRow[]> {
    const n = B * T;
    const batch = rolloutCorrectionBatch();
    const base = ctx.python
        ? runPython({ kernel: "rollout_correction", B, T, threshold: 2, threads: ctx.threads, reps: ctx.pythonReps })
        : { ok: false as const, error: "skipped" };
    const tis = { preset: "tis" as const, device: "cpu" as const };
    const t = await timeMedian(() => rolloutCorrection(batch, tis), ctx.reps);
    const tMeasure = await timeMedian(() => rolloutCorrection(batch, { device: "cpu" }), ctx.reps);
    // Read both log-probs (f32) and the u8 mask, write the weights and the loss's mask (f32); measuring only writes the
    // mask.
    const bytes = n * (4 + 4 + 1 + 4 + 4),
        measureBytes = n * (4 + 4 + 1 + 4);
    const size = `B=${B} T=${T}`;
    const baselineMs = base.ok ? base.median_ms! : null;
    return [
        {
            kernel: "rolloutCorrection",
            size,
            impl: "maporl rolloutCorrection, token TIS (preset tis), with its metrics",
            medianMs: t.medianMs,
            peakExtraBytes: await peakExtraBytes(() => rolloutCorrection(batch, tis)),
            bytesMoved: bytes,
            baselineMs,
        },
        {
            kernel: "rolloutCorrection",
            size,
            impl: "maporl rolloutCorrection, default call (metrics only)",
            medianMs: tMeasure.medianMs,
            peakExtraBytes: await peakExtraBytes(() => rolloutCorrection(batch, { device: "cpu" })),
            bytesMoved: measureBytes,
            baselineMs: null,
        },
        {
            kernel: "rolloutCorrection",
            size,
            impl: "PyTorch verl rollout_corr_helper mirror, token TIS, the same metrics",
            medianMs: baselineMs,
            peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes,
            baselineMs: null,
            note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
        },
    ];
}
