// lora.ts (bench): LoRA adapters at the SmolLM2-135M shape (bench/llama.ts's model; rank 16, alpha 32, every block
// projection targeted) against full fine-tuning of the same model and against eager PyTorch with a hand-written LoRA
// (bench/python/lora.py), same run and thread count: the training step (B=4, T=256: tokens/s and the peak memory it
// adds; on the float32 base and on bfloat16 and int8 ones), and generation with three adapters in one batch against the same number of rows on one adapter.
import { NativePolicy } from "../model/nativePolicy.js";
import { lcg } from "../random.js";
import { timeMedian } from "./measure.js";
import { blasName, runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { SMOL } from "./llama.js";

export async function benchLora(ctx: BenchContext): Promise<BenchRow[]> {
    const rows: BenchRow[] = [];
    const next = lcg(11);
    const V = SMOL.vocab_size,
        rank = 16,
        alpha = 32;
    const size = "SmolLM2-135M shape";
    const ts = (ms: number | null, tokens: number) =>
        ms === null ? "" : `${Math.round(tokens / (ms / 1e3))} tokens/s`;
    const B = 4,
        T = 256;
    const batch = {
        tokens: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        targets: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        mask: new Uint8Array(B * T).fill(1),
        shape: [B, T] as [number, number],
    };
    // The smallest footprint first (each peak RSS is the process's so far): LoRA on an int8 base, on a bfloat16
    // base, on the float32 base, full fine-tuning last.
    const rssStart = process.memoryUsage().rss;
    const qBase = await NativePolicy.fromConfig(SMOL, { tokenizer: null, seed: 0, contextLength: 512, dtype: "int8" });
    const qAgent = await qBase.withAdapter("a0", { rank, alpha });
    const qStep = await timeMedian(() => qAgent.trainStep(batch, { lr: 1e-4 }), 2, 1);
    const rssQ = process.resourceUsage().maxRSS * 1024;
    await qAgent.dispose();
    await qBase.dispose();
    const bfBase = await NativePolicy.fromConfig(SMOL, {
        tokenizer: null,
        seed: 0,
        contextLength: 512,
        dtype: "bfloat16",
    });
    const bfAgent = await bfBase.withAdapter("a0", { rank, alpha });
    const bfStep = await timeMedian(() => bfAgent.trainStep(batch, { lr: 1e-4 }), 2, 1);
    const rssBf = process.resourceUsage().maxRSS * 1024;
    await bfAgent.dispose();
    await bfBase.dispose();
    const base = await NativePolicy.fromConfig(SMOL, { tokenizer: null, seed: 0, contextLength: 512 });
    const agent = await base.withAdapter("a0", { rank, alpha });
    const bytes = base.parameterCount * 4;
    const rss0 = process.memoryUsage().rss;
    const lora = await timeMedian(() => agent.trainStep(batch, { lr: 1e-4 }), 2, 1);
    const rssLora = process.resourceUsage().maxRSS * 1024;
    const py = !ctx.python
        ? { ok: false as const, error: "skipped" }
        : runPython({
              kernel: "lora",
              vocab: V,
              hidden: 576,
              layers: 30,
              heads: 9,
              kv_heads: 3,
              intermediate: 1536,
              tie: true,
              context: 512,
              threads: ctx.threads,
              reps: 3,
              warmup: 1,
              batch: B,
              T,
              rank,
              alpha,
          });
    const pym = py.ok ? py.median_ms! : null;
    rows.push({
        kernel: "lora train step",
        size: `${size}, r=${rank}, B=${B} T=${T}`,
        impl: "maporl trainStep on an adapter (base frozen)",
        medianMs: lora.medianMs,
        peakExtraBytes: Math.max(0, rssLora - rss0),
        bytesMoved: bytes,
        baselineMs: pym,
        note: `${ts(lora.medianMs, B * T)}; ${(agent.parameterCount / 1e6).toFixed(2)}M trainable; peak RSS ${(rssLora / 2 ** 30).toFixed(2)} GiB`,
    });
    rows.push({
        kernel: "lora train step",
        size: `${size}, r=${rank}, B=${B} T=${T}`,
        impl: "maporl trainStep on an adapter, base in bfloat16",
        medianMs: bfStep.medianMs,
        peakExtraBytes: Math.max(0, rssBf - rssStart),
        bytesMoved: bytes / 2,
        baselineMs: pym,
        note: `${ts(bfStep.medianMs, B * T)}; peak RSS ${(rssBf / 2 ** 30).toFixed(2)} GiB (measured second)`,
    });
    rows.push({
        kernel: "lora train step",
        size: `${size}, r=${rank}, B=${B} T=${T}`,
        impl: "maporl trainStep on an adapter, base in int8 (Q8_0)",
        medianMs: qStep.medianMs,
        peakExtraBytes: Math.max(0, rssQ - rssStart),
        bytesMoved: (bytes / 4) * (34 / 32),
        baselineMs: pym,
        note: `${ts(qStep.medianMs, B * T)}; ${(qStep.medianMs / bfStep.medianMs).toFixed(2)}x the bfloat16 base's step; peak RSS ${(rssQ / 2 ** 30).toFixed(2)} GiB (measured first)`,
    });
    rows.push({
        kernel: "lora train step",
        size: `${size}, r=${rank}, B=${B} T=${T}`,
        impl: "PyTorch hand-written LoRA, AdamW",
        medianMs: pym,
        peakExtraBytes: py.ok ? (py.peak_extra_bytes ?? null) : null,
        bytesMoved: bytes,
        baselineMs: null,
        note: py.ok ? `${ts(pym, B * T)}, torch ${py.torch}, ${blasName(py)}` : py.error,
    });
    // Generation: 24 rows on one adapter, or 8 rows on each of three adapters in one batch.
    const more = [agent, await base.withAdapter("a1"), await base.withAdapter("a2")];
    const req = () => ({
        promptTokenIds: Array.from({ length: 32 }, () => Math.floor(next() * V)),
        sampling: { temperature: 0, maxTokens: 32 },
    });
    const reqs = Array.from({ length: 24 }, req);
    const single = await timeMedian(() => agent.generate(reqs), 2, 1);
    const mixed = await timeMedian(
        () => Promise.all(more.map((a, k) => a.generate(reqs.slice(8 * k, 8 * k + 8)))),
        2,
        1,
    );
    rows.push({
        kernel: "lora generate",
        size: `${size}, 24 rows, prompt=32 new=32`,
        impl: "one adapter",
        medianMs: single.medianMs,
        peakExtraBytes: null,
        bytesMoved: bytes,
        baselineMs: null,
        note: ts(single.medianMs, 24 * 32),
    });
    rows.push({
        kernel: "lora generate",
        size: `${size}, 24 rows, prompt=32 new=32`,
        impl: "three adapters, 8 rows each, one batch",
        medianMs: mixed.medianMs,
        peakExtraBytes: null,
        bytesMoved: bytes,
        baselineMs: single.medianMs,
        note: `${ts(mixed.medianMs, 24 * 32)} (ratio: one adapter / three)`,
    });
    for (const a of more) await a.dispose();
    // Full fine-tuning of the same model, for the comparison (its gradients and moments: 12 bytes per parameter more).
    const full = await base.withAdapter(null);
    const ft = await timeMedian(() => full.trainStep(batch, { lr: 1e-5 }), 2, 1);
    const rssFull = process.resourceUsage().maxRSS * 1024;
    rows.push({
        kernel: "lora train step",
        size: `${size}, r=${rank}, B=${B} T=${T}`,
        impl: "maporl full fine-tuning (same model, for comparison)",
        medianMs: ft.medianMs,
        peakExtraBytes: Math.max(0, rssFull - rss0),
        bytesMoved: bytes,
        baselineMs: lora.medianMs,
        note: `${ts(ft.medianMs, B * T)}; peak RSS ${(rssFull / 2 ** 30).toFixed(2)} GiB (ratio: LoRA / full)`,
    });
    await full.dispose();
    await base.dispose();
    return rows;
}
