// groupAdvantages.ts (bench): GRPO advantages at N=4096, G=8 (the JS call overhead included) and at
// N=1,048,576, G=16, against the PyTorch mirror of verl's grpo_vectorized (bench/python/grpo.py). Two layouts:
// 'adjacent' (verl's: the G responses of a prompt next to each other, ids ascending; our fast path) and
// 'shuffled' (ids a random permutation // G; the general path with a statistics table).
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { freshRows } from "./freshRows.js";
import { grpoBatch } from "./batches.js";

export async function benchGroupAdvantages(ctx: BenchContext): Promise<BenchRow[]> {
    const rows: BenchRow[] = [];
    for (const [N, G] of [
        [4096, 8],
        [1 << 20, 16],
    ] as const) {
        for (const layout of ["adjacent", "shuffled"] as const) {
            const batch = grpoBatch(N, G, layout);
            const base = ctx.python
                ? runPython({ kernel: "grpo", N, G, layout, threads: ctx.threads, reps: Math.max(ctx.pythonReps, 10) })
                : { ok: false as const, error: "skipped" };
            const size = `N=${N} G=${G} ${layout}`;
            const t = await timeMedian(
                () => groupAdvantages(batch, { device: "cpu" }),
                N > 100_000 ? Math.max(10, ctx.reps / 3) : ctx.reps * 10,
            );
            // Floor: read scores and ids once, write A (the statistics tables are cache-resident or per run).
            const bytes = N * 12;
            rows.push({
                kernel: "groupAdvantages",
                size,
                impl: "maporl grpo (from JS)",
                medianMs: t.medianMs,
                peakExtraBytes: await peakExtraBytes(() => groupAdvantages(batch, { device: "cpu" })),
                bytesMoved: bytes,
                baselineMs: base.ok ? base.median_ms! : null,
            });
            if (N > 100_000) {
                // the kernel without the fresh output's page faults (4 MiB: ~1,000 first touches)
                const out = new Float32Array(N);
                const r = await timeMedian(
                    () => groupAdvantages(batch, { device: "cpu", out }),
                    Math.max(10, ctx.reps / 3),
                );
                rows.push({
                    kernel: "groupAdvantages",
                    size,
                    impl: "maporl grpo (from JS), `out` reused",
                    medianMs: r.medianMs,
                    peakExtraBytes: await peakExtraBytes(() => groupAdvantages(batch, { device: "cpu", out })),
                    bytesMoved: bytes,
                    baselineMs: base.ok ? base.median_ms! : null,
                });
                if (layout === "adjacent")
                    rows.push(
                        ...freshRows("groupAdvantages", size, ctx, bytes, base.ok ? base.median_ms! : null, "grpo"),
                    );
            }
            rows.push({
                kernel: "groupAdvantages",
                size,
                impl: "PyTorch grpo_vectorized mirror",
                medianMs: base.ok ? base.median_ms! : null,
                peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
                bytesMoved: bytes,
                baselineMs: null,
                note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
            });
        }
    }
    return rows;
}
