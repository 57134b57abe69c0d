// llama.ts (bench): a Hugging Face Llama-architecture model in the native engine at the SmolLM2-135M shape (hidden
// 576, 30 layers, 9 heads, 3 KV heads, intermediate 1536, vocab 49152, tied head; random weights, float32) against
// the same architecture in eager PyTorch (bench/python/llama.py), same run and thread count: KV-cache generation
// (batch 8, 64-token prompts, 64 new tokens), single-stream decoding against the weight-read floor (the weights'
// bytes per token over the read bandwidth: a read-only stream on every thread, measureReadBandwidth; the copy
// bandwidth counted as read + write is ~1.3x higher here, traffic a read stream cannot reach), a full fine-tuning
// step (B=4, T=256), single-stream decoding on a bfloat16 base (dtype 'bfloat16': half the bytes per token) and on an
// int8 base (dtype 'int8': Q8_0, 34 bytes per 32 weights), the forward's GEMM efficiency (FLOP/s against the FMA peak). The probes (bandwidth,
// peak) are measured right before and after each timed repetition and each share is the median over repetitions of
// the kernel against its own repetition's probe: a shared VM's speed drifts 2x within minutes, so a probe taken
// once, minutes away, moved a share by ten points and more. And loading a ~1 GB bf16 checkpoint (the Qwen2.5-0.5B
// shape) in a fresh process: seconds and peak RSS.
import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { native } from "../native.js";
import { NativePolicy } from "../model/nativePolicy.js";
import { readHfConfig } from "../model/hf.js";
import { lcg } from "../random.js";
import { median, timeMedian, timeWithProbe } from "./measure.js";
import { blasName, runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { benchLlamaCpp } from "./llamaCpp.js";

export const SMOL = {
    model_type: "llama",
    vocab_size: 49152,
    hidden_size: 576,
    intermediate_size: 1536,
    num_hidden_layers: 30,
    num_attention_heads: 9,
    num_key_value_heads: 3,
    max_position_embeddings: 2048,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
    eos_token_id: [],
};
const QWEN05 = {
    model_type: "qwen2",
    vocab_size: 151936,
    hidden_size: 896,
    intermediate_size: 4864,
    num_hidden_layers: 24,
    num_attention_heads: 14,
    num_key_value_heads: 2,
    max_position_embeddings: 32768,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    eos_token_id: 151645,
    torch_dtype: "bfloat16",
};

// A bf16 checkpoint of `cfg`'s architecture with random values, written tensor by tensor (no model in memory).
function writeRandomBf16(dir: string, cfg: Record<string, unknown>): number {
    const info = readHfConfig(dir, cfg);
    const h = native.llamaCreate({ ...{ ...info.engine, layers: 1 }, seed: null }); // one block's names, repeated per layer below
    const one = native.gptTensors(h).filter((t) => !t.name.startsWith("value_head."));
    native.gptFree(h);
    const tensors: { name: string; shape: number[] }[] = [];
    for (const t of one) {
        const shape = t.shape.filter((d) => d > 0);
        if (!t.name.startsWith("model.layers.0.")) tensors.push({ name: t.name, shape });
        else
            for (let l = 0; l < info.engine.layers; l++)
                tensors.push({ name: t.name.replace("layers.0.", `layers.${l}.`), shape });
    }
    const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
    let off = 0;
    for (const t of tensors) {
        const n = 2 * t.shape.reduce((a, b) => a * b, 1);
        header[t.name] = { dtype: "BF16", shape: t.shape, data_offsets: [off, off + n] };
        off += n;
    }
    let json = JSON.stringify(header);
    json = json.padEnd(Math.ceil(json.length / 8) * 8, " ");
    const fd = openSync(join(dir, "model.safetensors"), "w");
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    writeSync(fd, len);
    writeSync(fd, Buffer.from(json));
    const chunk = new Uint16Array(1 << 22),
        next = lcg(3);
    for (let i = 0; i < chunk.length; i++)
        chunk[i] = (0x3c00 + Math.floor(next() * 0x200) - 0x100) | (next() < 0.5 ? 0x8000 : 0); // |x| ~ 0.004..0.03
    for (let left = off; left > 0; left -= Math.min(left, chunk.byteLength))
        writeSync(fd, new Uint8Array(chunk.buffer, 0, Math.min(left, chunk.byteLength)));
    closeSync(fd);
    writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
    return 8 + json.length + off;
}

// The matrix elements of the SMOL shape: every block's projections (q, o: C x C; k, v: C x kv; gate, up, down:
// C x I) and the tied embedding / LM head (V x C). A token's forward multiplies each once; a bf16 base stores them.
const SMOL_HD = SMOL.hidden_size / SMOL.num_attention_heads;
const SMOL_MATRICES =
    SMOL.num_hidden_layers *
        (2 * SMOL.hidden_size * SMOL.hidden_size +
            2 * SMOL.hidden_size * SMOL.num_key_value_heads * SMOL_HD +
            3 * SMOL.hidden_size * SMOL.intermediate_size) +
    SMOL.vocab_size * SMOL.hidden_size;

// Floating-point operations of one forward over B sequences of T tokens at the SMOL shape: 2 per multiply-add of
// every matrix, and causal attention's QK^T and AV (T (T + 1) / 2 pairs per head).
export function llamaForwardFlops(B: number, T: number): number {
    const attention = (SMOL.num_hidden_layers * SMOL.num_attention_heads * 2 * SMOL_HD * (T * (T + 1))) / 2;
    return 2 * (B * T * SMOL_MATRICES + B * attention);
}

/** PyTorch's time over ours for the same work, measured on the reference 2-core machine (AVX-512, 2026-12-02,
 * bench/results/reference-llama-cpu-2threads-2026-12-02.json): the estimates printed before the baselines run. */
const TORCH_OVER_OURS = { "generate B=8": 4.3, "decode B=1": 8.6, "train step": 1.3 };
const minutes = (ms: number) =>
    ms >= 90_000 ? `${(ms / 60_000).toFixed(0)} min` : `${Math.max(1, Math.round(ms / 1000))} s`;

export async function benchLlama(ctx: BenchContext): Promise<BenchRow[]> {
    const rows: BenchRow[] = [];
    const next = lcg(7);
    const V = SMOL.vocab_size;
    const p = await NativePolicy.fromConfig(SMOL, { tokenizer: null, seed: 0, contextLength: 512 });
    const bytes = p.parameterCount * 4;
    const ts = (ms: number | null, tokens: number) =>
        ms === null ? "" : `${Math.round(tokens / (ms / 1e3))} tokens/s`;
    const spec = {
        kernel: "llama",
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
    };
    // Each baseline runs in a child process for minutes on a CPU: its estimate is printed first, from the time we
    // just measured for the same work and PyTorch's ratio to it on the reference 2-core machine (TORCH_OVER_OURS).
    const py = (extra: Record<string, unknown>, what: keyof typeof TORCH_OVER_OURS, oursMs: number) => {
        if (!ctx.python) return { ok: false as const, error: "skipped" };
        const runs = spec.reps + spec.warmup,
            est = runs * oursMs * TORCH_OVER_OURS[what];
        ctx.log?.(`  llama: PyTorch baseline of ${what} (${runs} runs): about ${minutes(est)}...`);
        const t0 = performance.now(),
            r = runPython({ ...spec, ...extra });
        ctx.log?.(`  llama: PyTorch baseline of ${what} took ${minutes(performance.now() - t0)}`);
        return r;
    };
    const size = "SmolLM2-135M shape";
    // Generation, batch 8.
    const reqs = Array.from({ length: 8 }, () => ({
        promptTokenIds: Array.from({ length: 64 }, () => Math.floor(next() * V)),
        sampling: { temperature: 0, maxTokens: 64 },
    }));
    const gen = await timeMedian(() => p.generate(reqs), 2, 1);
    ctx.log?.(`  llama: generate B=8, maporl ${gen.medianMs.toFixed(0)} ms`);
    const gb = py({ mode: "generate", batch: 8, prompt: 64, new: 64 }, "generate B=8", gen.medianMs);
    const gbm = gb.ok ? gb.median_ms! : null;
    rows.push({
        kernel: "llama generate",
        size: `${size}, B=8 prompt=64 new=64`,
        impl: "maporl NativePolicy.generate (KV cache, greedy)",
        medianMs: gen.medianMs,
        peakExtraBytes: null,
        bytesMoved: bytes,
        baselineMs: gbm,
        note: ts(gen.medianMs, 8 * 64),
    });
    rows.push({
        kernel: "llama generate",
        size: `${size}, B=8 prompt=64 new=64`,
        impl: "PyTorch eager loop with KV cache",
        medianMs: gbm,
        peakExtraBytes: null,
        bytesMoved: bytes,
        baselineMs: null,
        note: gb.ok ? `${ts(gbm, 8 * 64)}, torch ${gb.torch}, ${blasName(gb)}` : gb.error,
    });
    // Single stream: every new token reads every weight once.
    const one = [{ promptTokenIds: reqs[0]!.promptTokenIds.slice(0, 4), sampling: { temperature: 0, maxTokens: 64 } }];
    const readBw = () => native.measureReadBandwidth(256 << 20, 3);
    // The share of the weight-read floor: per repetition, the floor's time (68 decode steps, 4 prompt + 64 new, each
    // reading `b` bytes at the bandwidth probed around it) over the decode's; the median of those.
    const floorShare = (t: { samplesMs: number[]; probes: number[] }, b: number) => {
        const floors = t.probes.map((bps) => (b / bps) * 1e3 * 68);
        return {
            share: median(t.samplesMs.map((ms, i) => floors[i]! / ms)),
            floorTps: 64 / (median(floors) / 1e3),
            bw: median(t.probes),
        };
    };
    const single = await timeWithProbe(() => p.generate(one), readBw, 3, 1);
    const f32Floor = floorShare(single, bytes);
    ctx.log?.(`  llama: decode B=1, maporl ${median(single.samplesMs).toFixed(0)} ms`);
    const sb = py({ mode: "generate", batch: 1, prompt: 4, new: 64 }, "decode B=1", median(single.samplesMs));
    const sbm = sb.ok ? sb.median_ms! : null;
    rows.push({
        kernel: "llama decode B=1",
        size: `${size}, prompt=4 new=64`,
        impl: "maporl NativePolicy.generate",
        medianMs: single.medianMs,
        peakExtraBytes: null,
        bytesMoved: bytes * 68,
        readOnly: true,
        baselineMs: sbm,
        note:
            `${ts(single.medianMs, 64)}; weight-read floor ${Math.round(f32Floor.floorTps)} tokens/s at ` +
            `${(f32Floor.bw / 1e9).toFixed(1)} GB/s read (${(100 * f32Floor.share).toFixed(0)}% of it)`,
    });
    rows.push({
        kernel: "llama decode B=1",
        size: `${size}, prompt=4 new=64`,
        impl: "PyTorch eager loop with KV cache",
        medianMs: sbm,
        peakExtraBytes: null,
        bytesMoved: bytes * 68,
        readOnly: true,
        baselineMs: null,
        note: sb.ok ? `${ts(sbm, 64)}, torch ${sb.torch}, ${blasName(sb)}` : sb.error,
    });
    // Single stream on a bfloat16 base (the matrices kept bf16, widened in the GEMV): half the bytes per token.
    const pb = await NativePolicy.fromConfig(SMOL, { tokenizer: null, seed: 0, contextLength: 512, dtype: "bfloat16" });
    const bfBytes = 2 * SMOL_MATRICES + 4 * (pb.parameterCount - SMOL_MATRICES); // (norms and the value head stay float32)
    const singleBf = await timeWithProbe(() => pb.generate(one), readBw, 3, 1);
    const bfFloor = floorShare(singleBf, bfBytes);
    rows.push({
        kernel: "llama decode B=1",
        size: `${size}, prompt=4 new=64`,
        impl: "maporl NativePolicy.generate, dtype bfloat16",
        medianMs: singleBf.medianMs,
        peakExtraBytes: null,
        bytesMoved: bfBytes * 68,
        readOnly: true,
        baselineMs: sbm,
        note:
            `${ts(singleBf.medianMs, 64)}; weight-read floor ${Math.round(bfFloor.floorTps)} tokens/s at ${(bfFloor.bw / 1e9).toFixed(1)} GB/s read ` +
            `(${(100 * bfFloor.share).toFixed(0)}% of it)`,
    });
    await pb.dispose();
    // Single stream on an int8 base (Q8_0 blocks: 34 bytes per 32 weights; W8A8: activations quantized per block too).
    const pq = await NativePolicy.fromConfig(SMOL, { tokenizer: null, seed: 0, contextLength: 512, dtype: "int8" });
    const qBytes = (34 / 32) * SMOL_MATRICES + 4 * (pq.parameterCount - SMOL_MATRICES);
    const singleQ = await timeWithProbe(() => pq.generate(one), readBw, 3, 1);
    const qFloor = floorShare(singleQ, qBytes);
    rows.push({
        kernel: "llama decode B=1",
        size: `${size}, prompt=4 new=64`,
        impl: "maporl NativePolicy.generate, dtype int8",
        medianMs: singleQ.medianMs,
        peakExtraBytes: null,
        bytesMoved: qBytes * 68,
        readOnly: true,
        baselineMs: sbm,
        note:
            `${ts(singleQ.medianMs, 64)}; weight-read floor ${Math.round(qFloor.floorTps)} tokens/s at ${(qFloor.bw / 1e9).toFixed(1)} GB/s read ` +
            `(${(100 * qFloor.share).toFixed(0)}% of it)`,
    });
    await pq.dispose();
    // Full fine-tuning step.
    const B = 4,
        T = 256;
    const batch = {
        tokens: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        targets: Int32Array.from({ length: B * T }, () => Math.floor(next() * V)),
        mask: new Uint8Array(B * T).fill(1),
        shape: [B, T] as [number, number],
    };
    const rss0 = process.memoryUsage().rss;
    const train = await timeMedian(() => p.trainStep(batch, { lr: 1e-5 }), 2, 1);
    const rss1 = process.resourceUsage().maxRSS * 1024;
    ctx.log?.(`  llama: train step, maporl ${train.medianMs.toFixed(0)} ms`);
    const tb = py({ mode: "train", batch: B, T }, "train step", train.medianMs);
    const tbm = tb.ok ? tb.median_ms! : null;
    rows.push({
        kernel: "llama train step",
        size: `${size}, B=${B} T=${T}`,
        impl: "maporl NativePolicy.trainStep (full fine-tuning, AdamW)",
        medianMs: train.medianMs,
        peakExtraBytes: Math.max(0, rss1 - rss0),
        bytesMoved: bytes,
        baselineMs: tbm,
        note: `${ts(train.medianMs, B * T)}; peak RSS ${(rss1 / 2 ** 30).toFixed(2)} GiB`,
    });
    rows.push({
        kernel: "llama train step",
        size: `${size}, B=${B} T=${T}`,
        impl: "PyTorch same architecture, AdamW",
        medianMs: tbm,
        peakExtraBytes: tb.ok ? (tb.peak_extra_bytes ?? null) : null,
        bytesMoved: bytes,
        baselineMs: null,
        note: tb.ok ? `${ts(tbm, B * T)}, torch ${tb.torch}, ${blasName(tb)}` : tb.error,
    });
    // GEMM efficiency: the scoring forward (every matrix of the model and the LM head, [B*T] rows) against the
    // peak FMA rate probed around each repetition.
    const fwd = await timeWithProbe(
        () => p.logprobs({ tokens: batch.tokens, shape: batch.shape }),
        () => native.measurePeakFlops(5),
        5,
        1,
    );
    const flops = llamaForwardFlops(B, T);
    const peak = median(fwd.probes);
    const rate = flops / (fwd.medianMs / 1e3);
    const share = median(fwd.samplesMs.map((ms, i) => flops / (ms / 1e3) / fwd.probes[i]!));
    rows.push({
        kernel: "llama forward",
        size: `${size}, B=${B} T=${T}`,
        impl: "maporl NativePolicy.logprobs (GEMM efficiency)",
        medianMs: fwd.medianMs,
        peakExtraBytes: null,
        bytesMoved: bytes,
        baselineMs: null,
        note:
            `${(rate / 1e9).toFixed(0)} GFLOP/s = ${(100 * share).toFixed(0)}% of the measured FMA peak ${(peak / 1e9).toFixed(0)} GFLOP/s (${(flops / 1e9).toFixed(0)} GFLOP; ` +
            `probes ${fwd.probes.map((x) => (x / 1e9).toFixed(0)).join(", ")})`,
    });
    await p.dispose();
    // Loading a ~1 GB bf16 checkpoint in a fresh process.
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-load-"));
    try {
        const fileBytes = writeRandomBf16(dir, QWEN05);
        const index = fileURLToPath(new URL("../index.js", import.meta.url));
        // As float32 (every parameter trains), bfloat16 (the file's matrices kept) and int8 (quantized as they load).
        for (const dtype of ["float32", "bfloat16", "int8"]) {
            const script = `const { NativePolicy } = await import(${JSON.stringify(index)}); const t0 = performance.now();
                const p = await NativePolicy.load(${JSON.stringify(dir)}, { tokenizer: null, dtype: "${dtype}" }); const ms = performance.now() - t0;
                console.log(JSON.stringify({ ms, maxRss: process.resourceUsage().maxRSS * 1024, params: p.parameterCount }));`;
            const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
            const out = JSON.parse((r.stdout ?? "").trim().split("\n").pop() || "null") as {
                ms: number;
                maxRss: number;
                params: number;
            } | null;
            ctx.log?.(`  llama: load ${dtype}, ${out ? `${(out.ms / 1e3).toFixed(1)} s` : "failed"}`);
            rows.push({
                kernel: "llama load",
                size: `Qwen2.5-0.5B shape, ${(fileBytes / 1e9).toFixed(2)} GB bf16`,
                impl: `maporl NativePolicy.load, dtype ${dtype} (fresh process)`,
                medianMs: out?.ms ?? null,
                peakExtraBytes: out?.maxRss ?? null,
                bytesMoved: fileBytes,
                baselineMs: null,
                note: out
                    ? `peak RSS ${(out.maxRss / 2 ** 30).toFixed(2)} GiB for ${(out.params / 1e6).toFixed(0)}M parameters (${((out.params * 4) / 2 ** 30).toFixed(2)} GiB in float32)`
                    : (r.stderr ?? "").slice(-300),
            });
        }
    } finally {
        rmSync(dir, { recursive: true, force: true });
    }
    // llama.cpp on the same GGUF files, where node-llama-cpp is installed (llamaCpp.ts)
    rows.push(...benchLlamaCpp(ctx, SMOL, size));
    return rows;
}
