// reinforceReturns.ts (bench): REINFORCE++ returns + whitening at B=256, T=4096 against the verl-style PyTorch
// loop (bench/python/reinforce.py), in the same run.
import { reinforceReturns } from "../rl/reinforceReturns.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { freshRows } from "./freshRows.js";
import { reinforceBatch, SHAPES } from "./batches.js";

const [B, T] = SHAPES.reinforceReturns;

export async function benchReinforceReturns(ctx: BenchContext): Promise<BenchRow[]> {
    const n = B * T;
    const batch = reinforceBatch();
    const base = ctx.python
        ? runPython({ kernel: "reinforce", B, T, gamma: 1, whiten: true, threads: ctx.threads, reps: ctx.pythonReps })
        : { ok: false as const, error: "skipped" };
    const opts = { gamma: 1, whiten: true, device: "cpu" as const };
    const t = await timeMedian(() => reinforceReturns(batch, opts), ctx.reps);
    const out = { returns: new Float32Array(n), advantages: new Float32Array(n) };
    const tOut = await timeMedian(() => reinforceReturns(batch, { ...opts, out }), ctx.reps);
    // The same with a Uint8Array mask, the compact form the API takes (verl's response_mask is int64).
    const batchU8 = { ...batch, mask: new Uint8Array(n).fill(1) };
    const tU8 = await timeMedian(() => reinforceReturns(batchU8, { ...opts, out }), ctx.reps);
    // Read r and the f32 mask, write G; the whitening pass reads G and the mask and writes A.
    const bytes = n * (12 + 12);
    const size = `B=${B} T=${T}`;
    return [
        {
            kernel: "reinforceReturns",
            size,
            impl: "maporl reinforceReturns, whiten",
            medianMs: t.medianMs,
            peakExtraBytes: await peakExtraBytes(() => reinforceReturns(batch, opts)),
            bytesMoved: bytes,
            baselineMs: base.ok ? base.median_ms! : null,
        },
        {
            kernel: "reinforceReturns",
            size,
            impl: "maporl reinforceReturns, whiten, out= reused",
            medianMs: tOut.medianMs,
            peakExtraBytes: await peakExtraBytes(() => reinforceReturns(batch, { ...opts, out })),
            bytesMoved: bytes,
            baselineMs: base.ok ? base.median_ms! : null,
        },
        {
            kernel: "reinforceReturns",
            size,
            impl: "maporl reinforceReturns, whiten, u8 mask, out= reused",
            medianMs: tU8.medianMs,
            peakExtraBytes: null,
            bytesMoved: n * (9 + 9),
            baselineMs: base.ok ? base.median_ms! : null,
        },
        ...freshRows("reinforceReturns", size, ctx, bytes, base.ok ? base.median_ms! : null, "whiten"),
        {
            kernel: "reinforceReturns",
            size,
            impl: "PyTorch verl-style loop, whiten",
            medianMs: base.ok ? base.median_ms! : null,
            peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes,
            baselineMs: null,
            note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
        },
    ];
}
