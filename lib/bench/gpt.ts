// gpt.ts (bench): the embedded policy (NativePolicy) against the same architecture in PyTorch (bench/python/gpt.py),
// same run, 2 threads: training tokens/s (one AdamW step on [32, 128] tokens, dModel 128, 4 layers, 4 heads,
// vocab 64) and greedy generation tokens/s with a KV cache (batch 32, 16-token prompts, 64 new tokens).
import { NativePolicy } from "../model/nativePolicy.js";
import { CharTokenizer } from "../policy/tokenizer.js";
import { timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { lcg } from "../random.js";

export async function benchGpt(ctx: BenchContext): Promise<BenchRow[]> {
    // 57 alphabet characters + 7 special tokens = vocabulary 64
    const tok = new CharTokenizer("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01234");
    const L = 4,
        C = 128,
        H = 4,
        T = 128,
        B = 32,
        V = tok.vocabSize;
    const p = await NativePolicy.create({ contextLength: T, layers: L, heads: H, dModel: C, seed: 0, tokenizer: tok });
    const next = lcg(5);
    const batch = {
        tokens: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        targets: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        mask: new Uint8Array(B * T).fill(1),
        shape: [B, T] as [number, number],
    };
    const reps = Math.max(3, Math.floor(ctx.reps / 10));
    const train = await timeMedian(() => p.trainStep(batch, { lr: 3e-4 }), reps, 1);
    const base = ctx.python
        ? runPython({
              kernel: "gpt",
              vocab: V,
              context: T,
              layers: L,
              dModel: C,
              heads: H,
              batch: B,
              threads: ctx.threads,
              reps: 3,
              warmup: 1,
          })
        : { ok: false as const, error: "skipped" };
    const prompts = Array.from({ length: B }, () => ({
        prompt: Array.from({ length: 14 }, () => "abcdefgh"[Math.floor(next() * 8)]).join(""),
        sampling: { temperature: 0, maxTokens: 64 },
    }));
    const gen = await timeMedian(() => p.generate(prompts), 3, 1); // 14 chars + <bos>, <|user|>... = 17-token prompts
    const gbase = ctx.python
        ? runPython({
              kernel: "gpt",
              mode: "generate",
              vocab: V,
              context: T,
              layers: L,
              dModel: C,
              heads: H,
              batch: B,
              prompt: 17,
              new: 64,
              threads: ctx.threads,
              reps: 3,
              warmup: 1,
          })
        : { ok: false as const, error: "skipped" };
    const bytes = p.parameterCount * 4; // the floor column does not apply (compute-bound); the parameters read once
    await p.dispose();
    const ts = (ms: number | null, tokens: number) =>
        ms === null ? "" : `${Math.round(tokens / (ms / 1e3))} tokens/s`;
    const tb = base.ok ? base.median_ms! : null,
        gb = gbase.ok ? gbase.median_ms! : null;
    return [
        {
            kernel: "gpt train step",
            size: `B=${B} T=${T} d=${C} L=${L}`,
            impl: "maporl NativePolicy.trainStep",
            medianMs: train.medianMs,
            peakExtraBytes: null,
            bytesMoved: bytes,
            baselineMs: tb,
            note: ts(train.medianMs, B * T),
        },
        {
            kernel: "gpt train step",
            size: `B=${B} T=${T} d=${C} L=${L}`,
            impl: "PyTorch same architecture, AdamW",
            medianMs: tb,
            peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes,
            baselineMs: null,
            note: base.ok ? `${ts(tb, B * T)}, torch ${base.torch}, ${base.threads} threads` : base.error,
        },
        {
            kernel: "gpt generate",
            size: `B=${B} prompt=17 new=64`,
            impl: "maporl NativePolicy.generate (KV cache, greedy)",
            medianMs: gen.medianMs,
            peakExtraBytes: null,
            bytesMoved: bytes,
            baselineMs: gb,
            note: ts(gen.medianMs, B * 64),
        },
        {
            kernel: "gpt generate",
            size: `B=${B} prompt=17 new=64`,
            impl: "PyTorch eager loop with KV cache",
            medianMs: gb,
            peakExtraBytes: null,
            bytesMoved: bytes,
            baselineMs: null,
            note: gbase.ok ? `${ts(gb, B * 64)}, torch ${gbase.torch}` : gbase.error,
        },
    ];
}
