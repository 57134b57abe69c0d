// hf.ts: Hugging Face model directories for the native engine's Llama family: config.json read into the engine's
// config (llama, mistral, qwen2, qwen3; every unsupported setting an error naming its key) and the engine's tensor
// layout and weight bytes (checked before anything is allocated). The weights themselves: hfWeights.ts.
import { existsSync } from "node:fs";
import { join } from "node:path";

import { readTextFile } from "../files.js";
import { type NativeLlamaConfig } from "../native.js";
import { describe } from "../validate.js";

export const HF_MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3"] as const;
export type HfModelType = (typeof HF_MODEL_TYPES)[number];

/** The engine's config of a Llama-family model (bindings/model/gpt.cpp's llamaCreate). */
export type LlamaEngineConfig = NativeLlamaConfig;

export interface HfModelInfo {
    modelType: HfModelType;
    engine: LlamaEngineConfig;
    /** config.json as read (written back on save with the engine's changes). */
    raw: Record<string, unknown>;
    bosId: number | null;
    /** generation_config.json's eos_token_id (a list or one id), else config.json's. */
    stopIds: number[];
}

const ids = (v: unknown): number[] =>
    (Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]).filter((x): x is number => Number.isInteger(x));

/** config.json (+ generation_config.json) of `dir` as the engine's config. contextLength caps the positions. */
export function readHfConfig(dir: string, raw: Record<string, unknown>, contextLength?: number): HfModelInfo {
    const where = join(dir, "config.json");
    const fail = (key: string, expected: string): never => {
        throw new RangeError(
            `NativePolicy.load: ${where}: ${key}: expected ${expected}, got ${describe(raw[key.split(".")[0]!] === undefined ? undefined : key.includes(".") ? (raw[key.split(".")[0]!] as Record<string, unknown>)[key.split(".")[1]!] : raw[key])}`,
        );
    };
    const mt = raw.model_type;
    if (!HF_MODEL_TYPES.includes(mt as HfModelType))
        fail("model_type", `one of ${HF_MODEL_TYPES.join(", ")} (the architectures this version runs)`);
    const modelType = mt as HfModelType;
    const int = (key: string, lo: number, hi: number, fallback?: number): number => {
        const v = raw[key] ?? fallback;
        if (!Number.isInteger(v) || (v as number) < lo || (v as number) > hi) fail(key, `an integer in [${lo}, ${hi}]`);
        return v as number;
    };
    const num = (key: string, fallback: number, lo: number): number => {
        const v = raw[key] ?? fallback;
        if (typeof v !== "number" || !Number.isFinite(v) || v <= lo) fail(key, `a finite number > ${lo}`);
        return v as number;
    };
    const bool = (key: string, fallback: boolean): boolean => {
        const v = raw[key] ?? fallback;
        if (typeof v !== "boolean") fail(key, "a boolean");
        return v as boolean;
    };
    const act = raw.hidden_act ?? raw.hidden_activation ?? "silu";
    if (act !== "silu") fail("hidden_act", "'silu' (SwiGLU)");
    if (bool("mlp_bias", false)) fail("mlp_bias", "false (MLP biases are not supported)");
    const dModel = int("hidden_size", 1, 65536),
        heads = int("num_attention_heads", 1, 4096);
    const kvHeads = int("num_key_value_heads", 1, heads, heads);
    if (heads % kvHeads !== 0) fail("num_key_value_heads", `a divisor of num_attention_heads (${heads})`);
    if (raw.head_dim === undefined || raw.head_dim === null) {
        if (dModel % heads !== 0)
            fail("hidden_size", `a multiple of num_attention_heads (${heads}) when head_dim is absent`);
    }
    const headDim = raw.head_dim === undefined || raw.head_dim === null ? dModel / heads : int("head_dim", 2, 4096);
    if (headDim % 2 !== 0) fail("head_dim", "an even number (rotary embeddings pair the two halves)");
    let context = int("max_position_embeddings", 1, 1 << 30, 2048);
    // Sliding-window attention is not built: a model that would use it is limited to its window.
    const window = raw.sliding_window;
    const usesWindow = modelType === "mistral" || (modelType !== "llama" && raw.use_sliding_window === true);
    if (usesWindow && window !== null && window !== undefined) {
        if (!Number.isInteger(window) || (window as number) < 1) fail("sliding_window", "an integer >= 1 or null");
        context = Math.min(context, window as number);
    }
    if (contextLength !== undefined) {
        if (!Number.isInteger(contextLength) || contextLength < 1)
            throw new RangeError(
                `NativePolicy.load: contextLength: expected an integer >= 1, got ${describe(contextLength)}`,
            );
        if (contextLength > context)
            throw new RangeError(
                `NativePolicy.load: contextLength: ${contextLength} is beyond the model's ${context} positions` +
                    (usesWindow && window
                        ? ` (sliding_window ${window}: sliding-window attention is not built yet)`
                        : " (max_position_embeddings)"),
            );
        context = contextLength;
    }
    context = Math.min(context, 1 << 20);
    let ropeScaling: 0 | 1 | 2 = 0,
        ropeFactor = 1,
        ropeLow = 1,
        ropeHigh = 4,
        ropeOrig = 8192;
    const rs = raw.rope_scaling;
    if (rs !== undefined && rs !== null) {
        if (typeof rs !== "object" || Array.isArray(rs)) fail("rope_scaling", "an object or null");
        const r = rs as Record<string, unknown>;
        const kind = r.rope_type ?? r.type;
        const factor = () => {
            if (typeof r.factor !== "number" || !(r.factor > 0) || !Number.isFinite(r.factor))
                fail("rope_scaling.factor", "a finite number > 0");
            return r.factor as number;
        };
        if (kind === "default") {
            /* no scaling */
        } else if (kind === "linear") {
            ropeScaling = 1;
            ropeFactor = factor();
        } else if (kind === "llama3") {
            ropeScaling = 2;
            ropeFactor = factor();
            for (const k of ["low_freq_factor", "high_freq_factor", "original_max_position_embeddings"])
                if (typeof r[k] !== "number" || !Number.isFinite(r[k])) fail(`rope_scaling.${k}`, "a number");
            ropeLow = r.low_freq_factor as number;
            ropeHigh = r.high_freq_factor as number;
            ropeOrig = r.original_max_position_embeddings as number;
        } else {
            throw new RangeError(
                `NativePolicy.load: ${where}: rope_scaling.rope_type: expected 'default', 'linear' or 'llama3', got ${describe(kind)} (not supported yet)`,
            );
        }
    }
    const attnBias = bool("attention_bias", false);
    const engine: LlamaEngineConfig = {
        vocab: int("vocab_size", 2, 1 << 24),
        context,
        layers: int("num_hidden_layers", 1, 1024),
        dModel,
        heads,
        kvHeads,
        headDim,
        intermediate: int("intermediate_size", 1, 1 << 20),
        rmsEps: num("rms_norm_eps", 1e-6, 0),
        ropeTheta: num("rope_theta", 10000, 1),
        ropeScaling,
        ropeFactor,
        ropeLowFreqFactor: ropeLow,
        ropeHighFreqFactor: ropeHigh,
        ropeOriginalMaxPosition: ropeOrig,
        qkvBias: modelType === "qwen2" || attnBias,
        oBias: modelType !== "qwen2" && attnBias,
        qkNorm: modelType === "qwen3",
        tieEmbeddings: bool("tie_word_embeddings", false),
    };
    const gp = join(dir, "generation_config.json");
    const gen = existsSync(gp) ? readJsonObject(gp, "generation_config.json") : {};
    const stopIds = ids(gen.eos_token_id).length > 0 ? ids(gen.eos_token_id) : ids(raw.eos_token_id);
    const bos = ids(gen.bos_token_id ?? raw.bos_token_id)[0] ?? null;
    return { modelType, engine, raw, bosId: bos, stopIds };
}

// Tensors written by older exporters that transformers ignores on load.
export const IGNORED = /\.rotary_emb\.inv_freq$/;

/** The tensors (transformers' names and shapes, in the engine's order) of a Llama-family model of `e`, without
 * allocating it: native/model/llama.cpp's make_layout, less the value head (test: equal to gptTensors of every
 * fixture). */
export function llamaLayout(e: LlamaEngineConfig): { name: string; shape: number[] }[] {
    const C = e.dModel,
        QC = e.heads * e.headDim,
        KC = e.kvHeads * e.headDim,
        I = e.intermediate,
        out: { name: string; shape: number[] }[] = [];
    const add = (name: string, ...shape: number[]) => out.push({ name, shape });
    add("model.embed_tokens.weight", e.vocab, C);
    for (let l = 0; l < e.layers; l++) {
        const p = `model.layers.${l}.`;
        add(`${p}input_layernorm.weight`, C);
        add(`${p}self_attn.q_proj.weight`, QC, C);
        if (e.qkvBias) add(`${p}self_attn.q_proj.bias`, QC);
        add(`${p}self_attn.k_proj.weight`, KC, C);
        if (e.qkvBias) add(`${p}self_attn.k_proj.bias`, KC);
        add(`${p}self_attn.v_proj.weight`, KC, C);
        if (e.qkvBias) add(`${p}self_attn.v_proj.bias`, KC);
        add(`${p}self_attn.o_proj.weight`, C, QC);
        if (e.oBias) add(`${p}self_attn.o_proj.bias`, C);
        if (e.qkNorm) {
            add(`${p}self_attn.q_norm.weight`, e.headDim);
            add(`${p}self_attn.k_norm.weight`, e.headDim);
        }
        add(`${p}post_attention_layernorm.weight`, C);
        add(`${p}mlp.gate_proj.weight`, I, C);
        add(`${p}mlp.up_proj.weight`, I, C);
        add(`${p}mlp.down_proj.weight`, C, I);
    }
    add("model.norm.weight", C);
    if (!e.tieEmbeddings) add("lm_head.weight", e.vocab, C);
    return out;
}

/** The bytes the engine allocates to hold a Llama-family model of `e`: its weights (float32; bfloat16 matrices with
 * `e.bf16`; with `e.int8`, 34 bytes per 32 values of a matrix whose rows are a multiple of 32 long, its rows padded
 * to a multiple of 16, bfloat16 for the others) and the value head. Gradients and AdamW moments (8 more bytes a trained parameter) come with the first
 * training step; activations and the KV cache with each batch. */
export function llamaWeightBytes(e: LlamaEngineConfig): number {
    let bytes = 4 * (e.dModel + 1);
    for (const t of llamaLayout(e)) {
        const n = t.shape.reduce((a, b) => a * b, 1);
        if (t.shape.length !== 2 || (e.bf16 !== true && e.int8 !== true)) bytes += 4 * n;
        else if (e.int8 === true && t.shape[1]! % 32 === 0)
            bytes += ((Math.ceil(t.shape[0]! / 16) * 16 * t.shape[1]!) / 32) * 34; // rows padded to 16 (q8.h)
        else bytes += 2 * n;
    }
    return bytes;
}

/** Whether `dir` looks like a Hugging Face model directory (a config.json with model_type). */
export function isHfModelDir(dir: string): boolean {
    try {
        const raw = JSON.parse(readTextFile(join(dir, "config.json"), "config.json")) as unknown;
        return raw !== null && typeof raw === "object" && "model_type" in raw;
    } catch {
        return false;
    }
}

/** config.json of a model directory, as an object (errors name the file). */
export function readJsonObject(path: string, what: string): Record<string, unknown> {
    let text: string;
    try {
        text = readTextFile(path, what);
    } catch (e) {
        const m = (e as Error).message;
        throw new (e instanceof RangeError ? RangeError : Error)(
            `NativePolicy.load: ${m.includes(": missing (") ? `${path}: missing (${what})` : m}`,
        );
    }
    let v: unknown;
    try {
        v = JSON.parse(text);
    } catch {
        throw new SyntaxError(`NativePolicy.load: ${path}: not JSON (truncated or corrupted?)`);
    }
    if (v === null || typeof v !== "object" || Array.isArray(v))
        throw new SyntaxError(`NativePolicy.load: ${path}: expected a JSON object`);
    return v as Record<string, unknown>;
}
