// ggufWrite.ts (bench): a GGUF v3 file of a llama-architecture shape with random weights, so that llama.cpp and the
// native engine read the same bits (bench llama's llama.cpp rows). Metadata serialized by @huggingface/gguf
// (serializeGgufMetadata); the tensor infos and data after it as the GGUF specification lays them out (ggml's
// docs/gguf.md): names as llama.cpp's converter writes them (token_embd, blk.N.attn_q, ...; the head tied to the
// embedding, so no output.weight), dimensions fastest first, data aligned to 32 bytes. Matrices in F32, BF16 or Q8_0
// (blocks of 32: a half scale d = max|x| / 127, q = round(x / d)); norms in F32, as the converter keeps them. The
// tokenizer is the 256 byte-level tokens, unused fillers up to the vocabulary, and an end-of-text control token
// last: enough for llama.cpp to load the file; the benchmark feeds token ids.
import { closeSync, openSync, writeSync } from "node:fs";

import { GGUFValueType, serializeGgufMetadata } from "@huggingface/gguf";

import { trainByteBpe } from "../model/bpe.js";
import { lcg } from "../random.js";

export type GgufKind = "f32" | "bf16" | "q8_0";
const GGML_TYPE: Record<GgufKind, number> = { f32: 0, bf16: 30, q8_0: 8 };

export interface LlamaShape {
    vocab_size: number;
    hidden_size: number;
    intermediate_size: number;
    num_hidden_layers: number;
    num_attention_heads: number;
    num_key_value_heads: number;
    max_position_embeddings: number;
    rms_norm_eps: number;
    rope_theta: number;
}

/** A small llama shape (2 layers, hidden 64, GQA 4/2, 320 ids): the bench's check file, the writer's tests. */
export const SMALL_LLAMA: LlamaShape = {
    vocab_size: 320,
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 512,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
};

/** float32 -> IEEE half, round to nearest even (finite inputs below 65504). */
export function toHalf(x: number): number {
    const f = new Float32Array([x]),
        u = new Uint32Array(f.buffer)[0]!;
    const sign = (u >>> 16) & 0x8000,
        exp = (u >>> 23) & 0xff,
        man = u & 0x7fffff;
    const e = exp - 127 + 15;
    if (exp === 0 || e < -10) return sign; // zero, float32 subnormals, below half's subnormals
    if (e <= 0) {
        // a half subnormal: the mantissa with its implicit bit, shifted right by 14 - e
        const m = man | 0x800000,
            shift = 14 - e;
        const half = m >>> shift,
            rest = m & ((1 << shift) - 1),
            mid = 1 << (shift - 1);
        return sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
    }
    const half = (e << 10) | (man >>> 13),
        rest = man & 0x1fff;
    return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0)); // (a carry into the exponent is right)
}

/** The bytes of `x` as `kind` (the row length a multiple of 32 for Q8_0). */
function encode(x: Float32Array, kind: GgufKind): Uint8Array {
    if (kind === "f32") return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
    if (kind === "bf16") {
        const u = new Uint32Array(x.buffer, x.byteOffset, x.length),
            out = new Uint16Array(x.length);
        for (let i = 0; i < x.length; i++) out[i] = (u[i]! + 0x7fff + ((u[i]! >>> 16) & 1)) >>> 16;
        return new Uint8Array(out.buffer);
    }
    const out = new Uint8Array((x.length / 32) * 34),
        q = new Int8Array(out.buffer);
    for (let b = 0; b < x.length / 32; b++) {
        let amax = 0;
        for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[b * 32 + i]!));
        const d = Math.fround(amax / 127),
            inv = d > 0 ? 1 / d : 0,
            h = toHalf(d);
        out[b * 34] = h & 0xff;
        out[b * 34 + 1] = h >>> 8;
        for (let i = 0; i < 32; i++) q[b * 34 + 2 + i] = Math.round(x[b * 32 + i]! * inv);
    }
    return out;
}

/** Writes `path`: shape `cfg`, matrices as `kind`, weights uniform with standard deviation `std` from `seed`; with
 * `eos` false, the file names no end-of-sequence token (generation runs to its maxTokens in any engine). */
export function writeRandomGguf(path: string, cfg: LlamaShape, kind: GgufKind, seed = 0, std = 0.02, eos = true): void {
    const H = cfg.hidden_size,
        I = cfg.intermediate_size,
        hd = H / cfg.num_attention_heads,
        KV = cfg.num_key_value_heads * hd;
    // [name, dims fastest first, matrix?]
    const tensors: [string, number[], boolean][] = [["token_embd.weight", [H, cfg.vocab_size], true]];
    for (let l = 0; l < cfg.num_hidden_layers; l++)
        tensors.push(
            [`blk.${l}.attn_norm.weight`, [H], false],
            [`blk.${l}.attn_q.weight`, [H, H], true],
            [`blk.${l}.attn_k.weight`, [H, KV], true],
            [`blk.${l}.attn_v.weight`, [H, KV], true],
            [`blk.${l}.attn_output.weight`, [H, H], true],
            [`blk.${l}.ffn_norm.weight`, [H], false],
            [`blk.${l}.ffn_gate.weight`, [H, I], true],
            [`blk.${l}.ffn_up.weight`, [H, I], true],
            [`blk.${l}.ffn_down.weight`, [I, H], true],
        );
    tensors.push(["output_norm.weight", [H], false]);
    const bytesOf = (n: number, matrix: boolean) =>
        !matrix || kind === "f32" ? 4 * n : kind === "bf16" ? 2 * n : (n / 32) * 34;
    const pad = (n: number) => Math.ceil(n / 32) * 32;

    const alphabet = Object.keys(trainByteBpe([], 256).vocab);
    const tokens = [...alphabet];
    while (tokens.length < cfg.vocab_size - 1) tokens.push(`<unused_${tokens.length}>`);
    tokens.push("<|endoftext|>");
    const str = (value: string) => ({ value, type: GGUFValueType.STRING as const });
    const u32 = (value: number) => ({ value, type: GGUFValueType.UINT32 as const });
    const f32 = (value: number) => ({ value, type: GGUFValueType.FLOAT32 as const });
    const md = {
        version: { value: 3 as const, type: GGUFValueType.UINT32 as const },
        tensor_count: { value: BigInt(tensors.length), type: GGUFValueType.UINT64 as const },
        kv_count: { value: 0n, type: GGUFValueType.UINT64 as const },
        "general.architecture": str("llama"),
        "general.name": str("maporl-bench-random"),
        "llama.context_length": u32(cfg.max_position_embeddings),
        "llama.embedding_length": u32(H),
        "llama.block_count": u32(cfg.num_hidden_layers),
        "llama.feed_forward_length": u32(I),
        "llama.attention.head_count": u32(cfg.num_attention_heads),
        "llama.attention.head_count_kv": u32(cfg.num_key_value_heads),
        "llama.attention.layer_norm_rms_epsilon": f32(cfg.rms_norm_eps),
        "llama.rope.freq_base": f32(cfg.rope_theta),
        "llama.rope.dimension_count": u32(hd),
        "llama.vocab_size": u32(cfg.vocab_size),
        "general.file_type": u32(kind === "f32" ? 0 : kind === "bf16" ? 32 : 7),
        "tokenizer.ggml.model": str("gpt2"),
        "tokenizer.ggml.pre": str("gpt-2"),
        "tokenizer.ggml.tokens": { value: tokens, type: GGUFValueType.ARRAY, subType: GGUFValueType.STRING },
        "tokenizer.ggml.token_type": {
            value: tokens.map((_, i) => (i < 256 ? 1 : i === tokens.length - 1 ? 3 : 5)),
            type: GGUFValueType.ARRAY,
            subType: GGUFValueType.INT32,
        },
        "tokenizer.ggml.merges": { value: [] as string[], type: GGUFValueType.ARRAY, subType: GGUFValueType.STRING },
        ...(eos ? { "tokenizer.ggml.eos_token_id": u32(tokens.length - 1) } : {}),
    };
    md.kv_count.value = BigInt(Object.keys(md).length - 3);
    const head = serializeGgufMetadata(md as Parameters<typeof serializeGgufMetadata>[0], { alignment: 1 });
    // tensor infos: name, n_dims, dims (u64 each), type, offset into the data section
    const infos: Buffer[] = [];
    let offset = 0;
    for (const [name, dims, matrix] of tensors) {
        const n = dims.reduce((a, b) => a * b, 1);
        const b = Buffer.alloc(8 + Buffer.byteLength(name) + 4 + 8 * dims.length + 4 + 8);
        let o = b.writeBigUInt64LE(BigInt(Buffer.byteLength(name)), 0);
        o += b.write(name, o);
        o = b.writeUInt32LE(dims.length, o);
        for (const d of dims) o = b.writeBigUInt64LE(BigInt(d), o);
        o = b.writeUInt32LE(matrix ? GGML_TYPE[kind] : 0, o);
        b.writeBigUInt64LE(BigInt(offset), o);
        infos.push(b);
        offset += pad(bytesOf(n, matrix));
    }
    const fd = openSync(path, "w");
    try {
        let at = writeSync(fd, head);
        for (const b of infos) at += writeSync(fd, b);
        writeSync(fd, new Uint8Array(pad(at) - at)); // the data section starts aligned
        const next = lcg(seed),
            a = std * Math.sqrt(3);
        for (const [, dims, matrix] of tensors) {
            const n = dims.reduce((x, y) => x * y, 1);
            const x = new Float32Array(n);
            if (matrix) for (let i = 0; i < n; i++) x[i] = (2 * next() - 1) * a;
            else x.fill(1); // RMSNorm weights
            const bytes = encode(x, matrix ? kind : "f32");
            writeSync(fd, bytes);
            writeSync(fd, new Uint8Array(pad(bytes.length) - bytes.length));
        }
    } finally {
        closeSync(fd);
    }
}
