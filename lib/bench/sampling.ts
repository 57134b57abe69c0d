// sampling.ts (bench): sample at B=64, V=151936, temperature 0.7, with top-k 50 + top-p 0.9, top-p 0.9 alone (vLLM's
// common setting; our cut by histogram, no sort) and unfiltered, and unfiltered at temperature 1,
// against the vLLM-native-path PyTorch mirror (bench/python/sampling.py: full sort, masks, softmax, exponential
// race, log-probs) in the same run. Logits: normal(0, 2) with 64 tokens per row raised by 6..14 (an LM's
// peaked head and flat tail), the same construction on both sides (different random draws).
import { sample } from "../rl/sampling.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { lcg } from "../random.js";

function benchLogits(B: number, V: number): Float32Array {
    const next = lcg(7);
    const z = new Float32Array(B * V);
    for (let i = 0; i < z.length; i += 2) {
        // Box-Muller, two normals per draw
        const r = Math.sqrt(-2 * Math.log(next() + 1e-12)),
            a = 2 * Math.PI * next();
        z[i] = 2 * r * Math.cos(a);
        if (i + 1 < z.length) z[i + 1] = 2 * r * Math.sin(a);
    }
    for (let b = 0; b < B; b++) for (let j = 0; j < 64; j++) z[b * V + Math.floor(next() * V)]! += 6 + 8 * next();
    return z;
}

export async function benchSampling(ctx: BenchContext): Promise<BenchRow[]> {
    const B = 64,
        V = 151936;
    const batch = { logits: benchLogits(B, V), shape: [B, V] as [number, number] };
    const bytes = B * V * 4; // one read of the logits
    const rows: BenchRow[] = [];
    // The issue's setting, top-p alone, unfiltered, and unfiltered at temperature 1 (on-policy RL rollouts; most of
    // these rows are then within the noise's reach of the max, so the race's Philox work dominates).
    const filters = [
        { k: 50, p: 0.9, T: 0.7 },
        { k: 0, p: 0.9, T: 0.7 },
        { k: 0, p: 1, T: 0.7 },
        { k: 0, p: 1, T: 1 },
    ];
    for (const { k, p, T } of filters) {
        const spec = {
            kernel: "sampling",
            B,
            V,
            temperature: T,
            ...(k ? { top_k: k } : {}),
            ...(p < 1 ? { top_p: p } : {}),
        };
        const base = ctx.python
            ? runPython({ ...spec, threads: ctx.threads, reps: ctx.pythonReps })
            : { ok: false as const, error: "skipped" };
        const opts = {
            temperature: T,
            ...(k ? { topK: k } : {}),
            ...(p < 1 ? { topP: p } : {}),
            seed: 1,
            device: "cpu" as const,
        };
        let pos = 0;
        const t = await timeMedian(() => sample(batch, { ...opts, position: pos++ }), ctx.reps);
        const tNoRaw = await timeMedian(
            () => sample(batch, { ...opts, position: pos++, rawLogprobs: false }),
            ctx.reps,
        );
        const size = `B=${B} V=${V} T=${T}${k ? ` k=${k}` : ""}${p < 1 ? ` p=${p}` : ""}`;
        const baselineMs = base.ok ? base.median_ms! : null;
        rows.push(
            {
                kernel: "sample",
                size,
                impl: "maporl sample (token, logprobs, rawLogprobs)",
                medianMs: t.medianMs,
                peakExtraBytes: await peakExtraBytes(() => sample(batch, opts)),
                bytesMoved: bytes,
                baselineMs,
            },
            {
                kernel: "sample",
                size,
                impl: "maporl sample, rawLogprobs: false",
                medianMs: tNoRaw.medianMs,
                peakExtraBytes: null,
                bytesMoved: bytes,
                baselineMs,
            },
            {
                kernel: "sample",
                size,
                impl: "PyTorch vLLM-native mirror (sort, masks, exp race)",
                medianMs: baselineMs,
                peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
                bytesMoved: bytes,
                baselineMs: null,
                note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
            },
        );
    }
    return rows;
}
