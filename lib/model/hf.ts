// hf.ts: Hugging Face model directories for the native engine's Llama family: config.json read into the engine's
// config (llama, mistral, qwen2, qwen3; every unsupported setting an error naming its key), the weights streamed
// tensor by tensor from model.safetensors or its shards (F32, BF16, F16, widened to float32 masters in native
// memory: no float copy of the file in JS), and a directory written back in the same layout (config.json,
// generation_config.json, model.safetensors or shards with model.safetensors.index.json, the tokenizer files).
import { existsSync } from "node:fs";
import { join } from "node:path";

import { MAX_TEXT_FILE_BYTES, readRegularFile, readTextFile } from "../files.js";
import { native, type GptHandle, type NativeLlamaConfig } from "../native.js";
import { writeFileDurable } from "../durable.js";
import { describe } from "../validate.js";
import type { PolicyTokenizer } from "../policy/tokenizer.js";
import { HfTokenizer } from "./hfTokenizer.js";
import {
    readSafetensors,
    readSafetensorsHeader,
    readTensorBytes,
    type TensorHeader,
    writeSafetensors,
} from "./safetensors.js";

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
const IGNORED = /\.rotary_emb\.inv_freq$/;

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

/** The bytes the engine allocates to hold a Llama-family model of `e`: its weights (float32, or bfloat16 matrices
 * with `e.bf16`) and the value head. Gradients and AdamW moments (8 more bytes a trained parameter) come with the
 * first training step; activations and the KV cache with each batch. */
export function llamaWeightBytes(e: LlamaEngineConfig): number {
    let bytes = 4 * (e.dModel + 1);
    for (const t of llamaLayout(e))
        bytes += t.shape.reduce((a, b) => a * b, 1) * (e.bf16 === true && t.shape.length === 2 ? 2 : 4);
    return bytes;
}

/** A weight planned for loading: the engine's tensor `index`, from `file`, as `dtype` (0 F32, 1 BF16, 2 F16). */
export interface PlannedTensor {
    index: number;
    file: string;
    t: TensorHeader;
    dtype: 0 | 1 | 2;
}

/** Writes planned weights into `h` (its tensors in the order the plan was made for). */
export function writeHfWeights(dir: string, h: GptHandle, plan: PlannedTensor[]): void {
    for (const p of plan) native.gptSetTensor(h, p.index, p.dtype, readTensorBytes(join(dir, p.file), p.t));
}

/**
 * Every header of `dir`'s weights checked against the tensors `wanted` (names and shapes, in the engine's order):
 * a missing, extra, misshapen or wrongly-typed tensor, a truncated shard, fails here, before the model is allocated.
 */
export function planHfWeights(
    dir: string,
    wanted: { name: string; shape: number[] }[],
    tied: boolean,
): PlannedTensor[] {
    const files: string[] = [];
    const indexPath = join(dir, "model.safetensors.index.json");
    let weightMap: Record<string, string> | null = null;
    if (existsSync(indexPath)) {
        const idx = readJsonObject(indexPath, "model.safetensors.index.json");
        if (!idx.weight_map || typeof idx.weight_map !== "object")
            throw new SyntaxError(`NativePolicy.load: ${indexPath}: weight_map: expected an object`);
        weightMap = idx.weight_map as Record<string, string>;
        for (const f of new Set(Object.values(weightMap))) {
            if (typeof f !== "string" || f.includes("/") || f.includes("\\"))
                throw new SyntaxError(
                    `NativePolicy.load: ${indexPath}: weight_map: a shard name ${describe(f)} is not a file name`,
                );
            files.push(f);
        }
    } else if (existsSync(join(dir, "model.safetensors"))) {
        files.push("model.safetensors");
    } else {
        throw new Error(
            `NativePolicy.load: ${dir}: no model.safetensors or model.safetensors.index.json (.bin checkpoints are not read: convert them to safetensors)`,
        );
    }
    const found = new Map<string, { file: string; t: TensorHeader }>();
    for (const f of files) {
        const path = join(dir, f);
        let header;
        try {
            header = readSafetensorsHeader(path);
        } catch (e) {
            throw new (e instanceof SyntaxError ? SyntaxError : Error)(`NativePolicy.load: ${(e as Error).message}`);
        }
        for (const t of header.tensors) {
            if (found.has(t.name))
                throw new SyntaxError(
                    `NativePolicy.load: ${path}: tensor ${t.name} also appears in ${found.get(t.name)!.file}`,
                );
            if (weightMap && weightMap[t.name] !== f && !IGNORED.test(t.name))
                throw new SyntaxError(
                    `NativePolicy.load: ${path}: tensor ${t.name} is not mapped to this shard by model.safetensors.index.json`,
                );
            found.set(t.name, { file: f, t });
        }
    }
    const plan: PlannedTensor[] = [];
    const names = new Set<string>();
    wanted.forEach((w, index) => {
        names.add(w.name);
        const e = found.get(w.name);
        if (!e) throw new SyntaxError(`NativePolicy.load: ${dir}: tensor ${w.name} is missing from the checkpoint`);
        const shape = w.shape;
        if (e.t.shape.join(",") !== shape.join(","))
            throw new SyntaxError(
                `NativePolicy.load: ${join(dir, e.file)}: tensor ${w.name}: shape [${e.t.shape}], expected [${shape}] (from config.json)`,
            );
        const dtype = ({ F32: 0, BF16: 1, F16: 2 } as Record<string, 0 | 1 | 2>)[e.t.dtype];
        if (dtype === undefined)
            throw new SyntaxError(
                `NativePolicy.load: ${join(dir, e.file)}: tensor ${w.name}: dtype ${e.t.dtype}, expected F32, BF16 or F16`,
            );
        plan.push({ index, file: e.file, t: e.t, dtype });
    });
    for (const name of found.keys())
        if (!names.has(name) && !IGNORED.test(name) && !(tied && name === "lm_head.weight"))
            throw new SyntaxError(
                `NativePolicy.load: ${join(dir, found.get(name)!.file)}: tensor ${name} is not part of this architecture (config.json's settings?)`,
            );
    if (weightMap)
        for (const name of Object.keys(weightMap))
            if (!found.has(name))
                throw new SyntaxError(
                    `NativePolicy.load: ${indexPath}: tensor ${name} is mapped to ${weightMap[name]} but not in it`,
                );
    return plan;
}

/** The tensors of `h`'s parameter set (the model, or its selected adapter) as views into `params`, its flat copy;
 * the value head's apart (value_head.safetensors, not a transformers or PEFT tensor). */
export function tensorViews(
    h: GptHandle,
    params: Float32Array,
): {
    weights: { name: string; shape: number[]; data: Float32Array }[];
    valueHead: { name: string; shape: number[]; data: Float32Array }[];
} {
    const all = native.gptTensors(h).map((t) => {
        const shape = t.shape.filter((d) => d > 0);
        return { name: t.name, shape, data: params.subarray(t.offset, t.offset + shape.reduce((a, b) => a * b, 1)) };
    });
    return {
        weights: all.filter((t) => !t.name.startsWith("value_head.")),
        valueHead: all.filter((t) => t.name.startsWith("value_head.")),
    };
}

/** value_head.safetensors at `path` into `h`'s value head (either size wrong or missing: an error naming it). */
export function loadValueHead(fn: string, path: string, h: GptHandle): void {
    const t = readSafetensors(path).tensors;
    const all = native.gptTensors(h);
    for (const name of ["value_head.weight", "value_head.bias"]) {
        const src = t.find((x) => x.name === name),
            k = all.findIndex((x) => x.name === name);
        const size = all[k]!.shape.filter((d) => d > 0).reduce((a, b) => a * b, 1);
        if (!src || !(src.data instanceof Float32Array) || src.data.length !== size)
            throw new SyntaxError(
                `${fn}: ${path}: ${name} missing or of the wrong size or dtype (expected ${size} F32 values)`,
            );
        native.gptSetTensor(h, k, 0, new Uint8Array(src.data.buffer, src.data.byteOffset, src.data.byteLength));
    }
}

/** optimizer.safetensors at `path` (AdamW's m and v over the whole parameter set) into `h`'s moments. */
export function loadOptimizer(fn: string, path: string, h: GptHandle): void {
    const n = native.gptParamCount(h),
        t = readSafetensors(path).tensors;
    for (const [which, name] of [
        [1, "m"],
        [2, "v"],
    ] as const) {
        const x = t.find((y) => y.name === name);
        if (!x || !(x.data instanceof Float32Array) || x.data.length !== n)
            throw new SyntaxError(
                `${fn}: ${path}: ${name} missing or of the wrong size or dtype (expected ${n} F32 values)`,
            );
        native.gptSet(h, which, x.data);
    }
}

/** optimizer.safetensors of `h`'s parameter set into `path` (the moments read back from native memory). */
export function writeOptimizer(path: string, h: GptHandle): void {
    const n = native.gptParamCount(h);
    const all = (which: 1 | 2) => {
        const a = new Float32Array(n);
        native.gptGet(h, which, a);
        return a;
    };
    writeSafetensors(path, [
        { name: "m", shape: [n], data: all(1) },
        { name: "v", shape: [n], data: all(2) },
    ]);
}

/**
 * Writes the model's weights to `dir` as Hugging Face expects them: float32, one model.safetensors, or shards
 * model-0000k-of-0000n.safetensors with model.safetensors.index.json above `maxShardBytes`. The value head goes to
 * value_head.safetensors (not a transformers tensor).
 */
export function saveHfWeights(dir: string, h: GptHandle, params: Float32Array, maxShardBytes: number): void {
    const { weights: model, valueHead } = tensorViews(h, params);
    writeSafetensors(join(dir, "value_head.safetensors"), valueHead, { format: "pt" });
    const shards: (typeof model)[] = [[]];
    let bytes = 0;
    for (const t of model) {
        const b = 4 * t.data.length;
        if (bytes > 0 && bytes + b > maxShardBytes) {
            shards.push([]);
            bytes = 0;
        }
        shards.at(-1)!.push(t);
        bytes += b;
    }
    if (shards.length === 1) {
        writeSafetensors(join(dir, "model.safetensors"), model, { format: "pt" });
        return;
    }
    const n = shards.length,
        pad = (k: number) => String(k).padStart(5, "0");
    const weightMap: Record<string, string> = {};
    shards.forEach((s, k) => {
        const f = `model-${pad(k + 1)}-of-${pad(n)}.safetensors`;
        writeSafetensors(join(dir, f), s, { format: "pt" });
        for (const t of s) weightMap[t.name] = f;
    });
    const total = model.reduce((a, t) => a + 4 * t.data.length, 0);
    writeFileDurable(
        join(dir, "model.safetensors.index.json"),
        JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2),
    );
}

/** Writes `tokenizer`'s files into `to` (tokenizer.json and tokenizer_config.json from memory), and copies the other
 * tokenizer files of `from` that exist (special_tokens_map.json, vocab.json, merges.txt, ...). */
export function writeTokenizerFiles(tokenizer: PolicyTokenizer, from: string | null, to: string): void {
    if (tokenizer instanceof HfTokenizer) {
        writeFileDurable(join(to, "tokenizer.json"), JSON.stringify(tokenizer.files.tokenizerJson));
        writeFileDurable(join(to, "tokenizer_config.json"), JSON.stringify(tokenizer.files.tokenizerConfig, null, 2));
    }
    if (from === null) return;
    for (const f of [
        "special_tokens_map.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "chat_template.jinja",
        "added_tokens.json",
    ])
        if (existsSync(join(from, f)))
            writeFileDurable(join(to, f), readRegularFile(join(from, f), MAX_TEXT_FILE_BYTES, f)); // (a FIFO there is refused, not waited on)
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

/** The files maporl adds to a Hugging Face directory it saves: its own state (step, name, context) beside the model. */
export interface HfSavedState {
    format: "maporl-hf";
    version: 1;
    name: string;
    step: number;
    contextLength: number;
}

/**
 * Writes a Hugging Face directory into `dir` (an empty temporary directory): config.json (the source's, with
 * torch_dtype float32 and the engine's values), generation_config.json, the weights (sharded above
 * `maxShardBytes`), the tokenizer's files, value_head.safetensors and maporl.json.
 */
export function writeHfDir(
    dir: string,
    h: GptHandle,
    info: HfModelInfo,
    state: HfSavedState,
    tokenizer: PolicyTokenizer,
    tokenizerDir: string | null,
    maxShardBytes: number,
): void {
    const params = new Float32Array(native.gptParamCount(h));
    native.gptGet(h, 0, params);
    saveHfWeights(dir, h, params, maxShardBytes);
    const raw = { ...info.raw, torch_dtype: "float32" };
    writeFileDurable(join(dir, "config.json"), JSON.stringify(raw, null, 2));
    const gen: Record<string, unknown> = {
        bos_token_id: info.bosId ?? undefined,
        eos_token_id: info.stopIds.length === 1 ? info.stopIds[0] : info.stopIds,
    };
    writeFileDurable(join(dir, "generation_config.json"), JSON.stringify(gen, null, 2));
    writeTokenizerFiles(tokenizer, tokenizerDir, dir);
    writeFileDurable(join(dir, "maporl.json"), JSON.stringify(state, null, 2));
}
