// gguf.ts: a llama.cpp GGUF file as a Llama-family model (NativePolicy.load(file.gguf)). The header is parsed by
// @huggingface/gguf; the metadata becomes the config.json transformers would have (architectures llama, mistral,
// qwen2, qwen3), llama.cpp's tensor names map to transformers' (token_embd -> model.embed_tokens, blk.N.attn_q ->
// model.layers.N.self_attn.q_proj, ...), and each tensor is read from the file on its own: F32, F16 and BF16 as in a
// safetensors file; Q8_0 blocks taken as they are by an int8 base (dtype 'int8'; a q of -128 as -127), widened to float32 otherwise
// (q * d, exact). llama.cpp's converter permutes the rows of a llama model's q and k projections for its rotary
// layout (per head, the halves interleaved); they are put back here. The tokenizer: tokenizer.ggml.* as a byte-level
// BPE or SentencePiece tokenizer.json (ggufTokenizer.ts), or the `tokenizer` option (a directory, an HfTokenizer, or
// null).
import { closeSync, openSync, readSync } from "node:fs";
import { totalmem } from "node:os";

import { gguf } from "@huggingface/gguf";

import { native } from "../native.js";
import { describe } from "../validate.js";
import { llamaLayout, llamaWeightBytes, readHfConfig } from "./hf.js";
import { type OpenedHfModel, resolveHfTokenizer } from "./hfLoad.js";
import { ggufTokenizer } from "./ggufTokenizer.js";
import type { HfLoadOptions as LoadOptions } from "./options.js";

// GGML's tensor types read here, and the bytes of `n` values of each.
const TYPES: Record<number, { name: string; bytes: (n: number) => number }> = {
    0: { name: "F32", bytes: (n) => 4 * n },
    1: { name: "F16", bytes: (n) => 2 * n },
    8: { name: "Q8_0", bytes: (n) => (n / 32) * 34 },
    30: { name: "BF16", bytes: (n) => 2 * n },
};
const ARCHS = ["llama", "mistral", "qwen2", "qwen3"];

// llama.cpp's name of each transformers tensor of one block.
const BLOCK: Record<string, string> = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
};
function ggufName(hf: string): string {
    if (hf === "model.embed_tokens.weight") return "token_embd.weight";
    if (hf === "model.norm.weight") return "output_norm.weight";
    if (hf === "lm_head.weight") return "output.weight";
    const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
    const b = m ? BLOCK[m[2]!] : undefined;
    if (!m || !b) throw new Error(`gguf: internal: no llama.cpp name for ${hf}`);
    return `blk.${m[1]}.${b}`;
}

// The GGUF metadata as the config.json object readHfConfig reads.
function configOf(file: string, md: Record<string, unknown>, vocab: number): Record<string, unknown> {
    const arch = md["general.architecture"];
    if (typeof arch !== "string" || !ARCHS.includes(arch))
        throw new RangeError(
            `NativePolicy.load: ${file}: general.architecture: expected one of ${ARCHS.join(", ")}, got ${describe(arch)}`,
        );
    const get = (k: string, required = true): number | undefined => {
        const v = md[`${arch}.${k}`];
        if (v === undefined && !required) return undefined;
        const x = typeof v === "bigint" ? Number(v) : v;
        if (typeof x !== "number" || !Number.isFinite(x))
            throw new RangeError(`NativePolicy.load: ${file}: ${arch}.${k}: expected a number, got ${describe(v)}`);
        return x;
    };
    const heads = get("attention.head_count")!,
        hidden = get("embedding_length")!;
    const cfg: Record<string, unknown> = {
        model_type: arch,
        vocab_size: get("vocab_size", false) ?? vocab,
        hidden_size: hidden,
        intermediate_size: get("feed_forward_length"),
        num_hidden_layers: get("block_count"),
        num_attention_heads: heads,
        num_key_value_heads: get("attention.head_count_kv", false) ?? heads,
        max_position_embeddings: get("context_length"),
        rms_norm_eps: shortestF32(get("attention.layer_norm_rms_epsilon")!),
        rope_theta: shortestF32(get("rope.freq_base", false) ?? 10000),
        head_dim: get("attention.key_length", false) ?? hidden / heads,
        hidden_act: "silu",
    };
    const scaling = md[`${arch}.rope.scaling.type`];
    if (scaling !== undefined && scaling !== "none") {
        if (scaling !== "linear")
            throw new RangeError(
                `NativePolicy.load: ${file}: ${arch}.rope.scaling.type: '${String(scaling)}' is not read from GGUF in this version (linear is)`,
            );
        cfg.rope_scaling = { type: "linear", factor: get("rope.scaling.factor") };
    }
    return cfg;
}

/** GGUF stores float32 scalars that a converter rounded from the model's decimal config (1e-6 -> 9.99999997e-7);
 * the engine computes with doubles, so the value is read back as the shortest decimal that rounds to the same float32
 * (1e-6), which is what the model's config.json says: the file then computes as its directory, to the bit. */
export function shortestF32(x: number): number {
    if (!Number.isFinite(x) || Math.fround(x) !== x) return x;
    for (let p = 1; p <= 9; p++) {
        const y = Number(x.toPrecision(p));
        if (Math.fround(y) === x) return y;
    }
    return x;
}

/** Opens a GGUF file (NativePolicy.load's GGUF path). */
export async function openGgufModel(file: string, o: LoadOptions): Promise<OpenedHfModel> {
    const fn = "NativePolicy.load";
    let parsed: Awaited<ReturnType<typeof gguf>>;
    try {
        parsed = await gguf(file, { allowLocalFile: true });
    } catch (e) {
        throw new SyntaxError(`${fn}: ${file}: not a readable GGUF file (${(e as Error).message})`);
    }
    if (!parsed.littleEndian)
        throw new RangeError(`${fn}: ${file}: a big-endian GGUF file is not read in this version`);
    const md = parsed.metadata as unknown as Record<string, unknown>;
    const tokens = md["tokenizer.ggml.tokens"];
    const raw = configOf(file, md, Array.isArray(tokens) ? tokens.length : 0);
    const byName = new Map(parsed.tensorInfos.map((t) => [t.name, t]));
    raw.tie_word_embeddings = !byName.has("output.weight");
    const eos = md["tokenizer.ggml.eos_token_id"];
    if (eos !== undefined) raw.eos_token_id = Number(eos);
    const info = readHfConfig(file, raw, o.contextLength);
    if (o.contextLength === undefined) info.engine.context = Math.min(info.engine.context, 8192);
    const tk =
        o.tokenizer === undefined
            ? { tokenizer: ggufTokenizer(file, md, info, o.chatTemplate), tokenizerDir: null }
            : resolveHfTokenizer(fn, null, info, o);
    if (o.dtype === "bfloat16") info.engine.bf16 = true;
    if (o.dtype === "int8") info.engine.int8 = true;
    const layout = llamaLayout(info.engine);
    // Every tensor present, of its shape and a type read here, before anything is allocated.
    const plan = layout.map((t) => {
        const g = byName.get(ggufName(t.name));
        if (!g) throw new Error(`${fn}: ${file}: tensor ${ggufName(t.name)} (${t.name}) missing`);
        const shape = g.shape.map(Number).reverse(); // GGML lists the fastest dimension first
        if (shape.length !== t.shape.length || shape.some((d, i) => d !== t.shape[i]))
            throw new RangeError(
                `${fn}: ${file}: tensor ${g.name}: shape [${shape.join(", ")}], expected [${t.shape.join(", ")}] for ${t.name}`,
            );
        const type = TYPES[g.dtype];
        const n = shape.reduce((a, b) => a * b, 1);
        if (!type || (g.dtype === 8 && shape.at(-1)! % 32 !== 0))
            throw new RangeError(
                `${fn}: ${file}: tensor ${g.name}: GGML type ${g.dtype} is not read in this version (F32, F16, BF16, Q8_0 are)`,
            );
        return { t, g, type: g.dtype, n, bytes: type.bytes(n) };
    });
    // A tensor the model would not use is an error, not dropped: llama.cpp stores llama3 rope scaling as
    // rope_freqs.weight, and a bias the architecture lacks would change the model.
    const used = new Set(plan.map((p) => p.g.name));
    for (const t of parsed.tensorInfos)
        if (!used.has(t.name))
            throw new RangeError(
                `${fn}: ${file}: tensor ${t.name} is not part of a ${info.modelType} model read here` +
                    (t.name === "rope_freqs.weight"
                        ? " (llama3 rope scaling is not read from GGUF in this version)"
                        : ""),
            );
    const need = llamaWeightBytes(info.engine),
        limit = o.maxMemoryBytes ?? Math.floor(totalmem() * 0.8);
    if (need > limit)
        throw new RangeError(
            `${fn}: ${file}: the model's weights take ${(need / 2 ** 30).toFixed(2)} GiB, more than maxMemoryBytes ${(limit / 2 ** 30).toFixed(2)} GiB`,
        );
    const h = native.llamaCreate({ ...info.engine, seed: null });
    const fd = openSync(file, "r");
    try {
        const engine = native.gptTensors(h);
        const index = new Map(engine.map((t, i) => [t.name, i]));
        const permuted = info.modelType === "llama" || info.modelType === "mistral";
        for (const p of plan) {
            const buf = new Uint8Array(p.bytes);
            const at = parsed.tensorDataOffset + p.g.offset;
            for (let done = 0; done < p.bytes;) {
                // (in pieces of at most 1 GiB: one readSync takes less than 2 GiB)
                const got = readSync(fd, buf, done, Math.min(p.bytes - done, 1 << 30), at + BigInt(done));
                if (got === 0)
                    throw new Error(`${fn}: ${file}: tensor ${p.g.name}: the file ends inside its data (truncated)`);
                done += got;
            }
            let data: Uint8Array = buf,
                dtype: 0 | 1 | 2 | 3 = p.type === 0 ? 0 : p.type === 1 ? 2 : p.type === 30 ? 1 : 3;
            if (permuted && /\.self_attn\.[qk]_proj\.weight$/.test(p.t.name)) {
                const heads = p.t.name.includes(".q_proj") ? info.engine.heads : info.engine.kvHeads;
                data = unpermuteRows(data, p.t.shape[0]!, heads, p.bytes / p.t.shape[0]!);
            }
            const i = index.get(p.t.name)!;
            if (dtype === 3 && (o.dtype !== "int8" || engine[i]!.offset >= 0)) {
                // Q8_0 blocks into a float32 (or bfloat16) tensor: widened here, q * d
                data = new Uint8Array(dequantizeQ8(data, p.n, `${fn}: ${file}: tensor ${p.g.name}`).buffer);
                dtype = 0;
            }
            native.gptSetTensor(h, { index: i, dtype, data });
        }
    } catch (e) {
        native.gptFree(h);
        throw e;
    } finally {
        closeSync(fd);
    }
    return { handle: h, info, tokenizer: tk.tokenizer, tokenizerDir: tk.tokenizerDir, name: o.name };
}

// llama.cpp's converter reorders each head's rows [0 .. hd/2), [hd/2 .. hd) as (0, hd/2), (1, hd/2 + 1), ...: row
// 2i + j of the file is row j * hd/2 + i of transformers' matrix.
function unpermuteRows(data: Uint8Array, rows: number, heads: number, rowBytes: number): Uint8Array {
    const hd = rows / heads,
        out = new Uint8Array(data.length);
    for (let h = 0; h < heads; h++)
        for (let i = 0; i < hd / 2; i++)
            for (let j = 0; j < 2; j++) {
                const from = h * hd + 2 * i + j,
                    to = h * hd + j * (hd / 2) + i;
                out.set(data.subarray(from * rowBytes, (from + 1) * rowBytes), to * rowBytes);
            }
    return out;
}

// Q8_0 blocks (a little-endian half d, 32 int8 q) as float32 values q * d.
function dequantizeQ8(data: Uint8Array, n: number, what: string): Float32Array {
    const out = new Float32Array(n),
        view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    for (let b = 0; b < n / 32; b++) {
        const d = half(view.getUint16(34 * b, true));
        if (!Number.isFinite(d)) throw new RangeError(`${what}: block ${b}'s scale is not finite`);
        for (let i = 0; i < 32; i++) out[32 * b + i] = view.getInt8(34 * b + 2 + i) * d;
    }
    return out;
}
function half(h: number): number {
    const s = h & 0x8000 ? -1 : 1,
        e = (h >> 10) & 31,
        m = h & 1023;
    if (e === 0) return s * m * 2 ** -24;
    if (e === 31) return m ? NaN : s * Infinity;
    return s * (1 + m / 1024) * 2 ** (e - 15);
}
