// gae.ts (bench): GAE at B=256, T=4096 against the verl-style PyTorch loop (bench/python/gae.py), which
// whitens as verl's compute_gae_advantage_return does; our rows with whiten are the like-for-like ones.
import { gae } from "../rl/gae.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { freshRows } from "./freshRows.js";
import { gaeBatch, SHAPES } from "./batches.js";

const [B, T] = SHAPES.gae;

export async function benchGae(ctx: BenchContext): Promise<BenchRow[]> {
    const n = B * T;
    const size = `B=${B} T=${T}`;
    const batch = gaeBatch();
    const out = { advantages: new Float32Array(n), returns: new Float32Array(n) };
    // Bytes per token: read r, V, mask (f32), write A, R; whitening re-reads the mask and A and rewrites A.
    const bytes = (whiten: boolean) => n * (whiten ? 32 : 20);

    const baselines = [true, false].map((whiten) =>
        ctx.python
            ? runPython({
                  kernel: "gae",
                  B,
                  T,
                  gamma: 1,
                  lambda: 0.95,
                  whiten,
                  threads: ctx.threads,
                  reps: ctx.pythonReps,
              })
            : { ok: false, error: "skipped (--no-python)" },
    );
    const rows: BenchRow[] = [];
    const variants: [string, boolean, object][] = [
        ["maporl gae, whiten", true, {}],
        ["maporl gae, whiten, out= reused", true, { out }],
        ["maporl gae", false, {}],
        ["maporl gae, out= reused", false, { out }],
    ];
    const maskU8 = new Uint8Array(n).fill(1);
    {
        // our compact mask form (verl's response_mask is int64), outputs reused: the lowest-traffic call
        const opts = { gamma: 1, lambda: 0.95, whiten: true, device: "cpu" as const, out };
        const t = await timeMedian(() => gae({ ...batch, mask: maskU8 }, opts), ctx.reps);
        rows.push({
            kernel: "gae",
            size,
            impl: "maporl gae, whiten, u8 mask, out= reused",
            medianMs: t.medianMs,
            peakExtraBytes: null,
            bytesMoved: n * 26,
            baselineMs: baselines[0]!.ok ? baselines[0]!.median_ms! : null,
        });
    }
    for (const [impl, whiten, extra] of variants) {
        const opts = { gamma: 1, lambda: 0.95, whiten, device: "cpu" as const, ...extra };
        const t = await timeMedian(() => gae(batch, opts), ctx.reps);
        rows.push({
            kernel: "gae",
            size,
            impl,
            medianMs: t.medianMs,
            peakExtraBytes: await peakExtraBytes(() => gae(batch, opts)),
            bytesMoved: bytes(whiten),
            baselineMs: baselines[whiten ? 0 : 1]!.ok ? baselines[whiten ? 0 : 1]!.median_ms! : null,
        });
    }
    rows.push(
        ...freshRows("gae", size, ctx, bytes(true), baselines[0]!.ok ? baselines[0]!.median_ms! : null, "whiten"),
    );
    [true, false].forEach((whiten, k) => {
        const b = baselines[k]!;
        rows.push({
            kernel: "gae",
            size,
            impl: `PyTorch verl-style loop${whiten ? ", whiten" : ""}`,
            medianMs: b.ok ? b.median_ms! : null,
            peakExtraBytes: b.ok ? (b.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes(whiten),
            baselineMs: null,
            note: b.ok ? `torch ${b.torch}, ${b.threads} threads` : b.error,
        });
    });
    return rows;
}
