// makeModel.ts: a Hugging Face model directory written without a download (`maporl make-model`): config.json,
// generation_config.json, model.safetensors with random weights (matrices normal(0, 0.02) as transformers
// initialises them, norms 1, biases 0; written tensor by tensor, no model in memory), and a byte-level BPE tokenizer
// learned from the shipped GSM8K questions and answers (tokenizer.json, tokenizer_config.json with a ChatML chat
// template, eos <|im_end|>). Every `--model DIR` command runs on it as on a downloaded model of that shape.
import {
    closeSync,
    existsSync,
    mkdirSync,
    openSync,
    readdirSync,
    readFileSync,
    rmSync,
    writeFileSync,
    writeSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { describe } from "../validate.js";
import { mulberry32 } from "../random.js";
import { trainByteBpe, tokenizerJson } from "./bpe.js";
import { llamaLayout, readHfConfig } from "./hf.js";

/** The shapes make-model writes: a tiny llama for tests and first runs, and two real models' architectures. */
export const MODEL_SHAPES = {
    tiny: {
        model_type: "llama",
        hidden_size: 64,
        intermediate_size: 192,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        max_position_embeddings: 2048,
        rms_norm_eps: 1e-5,
        rope_theta: 10000,
        tie_word_embeddings: true,
    },
    "smollm2-135m": {
        model_type: "llama",
        vocab_size: 49152,
        hidden_size: 576,
        intermediate_size: 1536,
        num_hidden_layers: 30,
        num_attention_heads: 9,
        num_key_value_heads: 3,
        max_position_embeddings: 8192,
        rms_norm_eps: 1e-5,
        rope_theta: 100000,
        tie_word_embeddings: true,
    },
    "qwen2.5-0.5b": {
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
    },
} as const;
export type ModelShapeName = keyof typeof MODEL_SHAPES;

export interface MakeModelOptions {
    /** 'tiny' (default: 2 layers, hidden 64, vocab 1024), 'smollm2-135m' or 'qwen2.5-0.5b'. */
    shape?: ModelShapeName;
    /** The weights' dtype in the file: 'float32' (default) or 'bfloat16'. */
    dtype?: "float32" | "bfloat16";
    /** The weights' seed (default 0). */
    seed?: number;
}

export interface MadeModel {
    dir: string;
    shape: ModelShapeName;
    /** Parameters in model.safetensors. */
    parameters: number;
    /** The tokenizer's ids (BPE tokens and the three special tokens); config.json's vocab_size is at least this. */
    tokenizerSize: number;
    bytes: number;
}

const SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const TOKENIZER_SIZE = 1024;
const CHAT_TEMPLATE =
    "{%- for message in messages %}" +
    "{%- if loop.first and message['role'] != 'system' %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}" +
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}" +
    "{%- endfor %}" +
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// The GSM8K questions and answers shipped with the package (the tokenizer's training text).
function gsm8kTexts(): string[] {
    const file = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "test", "fixtures", "gsm8k", "train.jsonl");
    return readFileSync(file, "utf8")
        .trim()
        .split("\n")
        .flatMap((l) => {
            const x = JSON.parse(l) as { question: string; answer: string };
            return [x.question, x.answer];
        });
}

/** Writes the tokenizer files of make-model into `dir`; returns the number of ids. */
export function writeTokenizer(dir: string): number {
    const bpe = trainByteBpe(gsm8kTexts(), TOKENIZER_SIZE - SPECIAL.length);
    const base = Object.keys(bpe.vocab).length,
        size = base + SPECIAL.length;
    const added = SPECIAL.map((content, i) => ({ id: base + i, content, special: true }));
    writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tokenizerJson(bpe, added)));
    const decoder: Record<string, unknown> = {};
    for (const t of added)
        decoder[String(t.id)] = {
            content: t.content,
            lstrip: false,
            normalized: false,
            rstrip: false,
            single_word: false,
            special: t.special,
        };
    writeFileSync(
        join(dir, "tokenizer_config.json"),
        JSON.stringify(
            {
                add_prefix_space: false,
                added_tokens_decoder: decoder,
                bos_token: null,
                eos_token: "<|im_end|>",
                pad_token: "<|endoftext|>",
                unk_token: null,
                model_max_length: 32768,
                tokenizer_class: "PreTrainedTokenizerFast",
                clean_up_tokenization_spaces: false,
                chat_template: CHAT_TEMPLATE,
            },
            null,
            1,
        ),
    );
    return size;
}

/** Writes model.safetensors for the architecture of `config` (a config.json object): random weights from `seed`,
 * tensor by tensor. Returns the file's bytes and the parameters. */
export function writeRandomWeights(
    dir: string,
    config: Record<string, unknown>,
    dtype: "float32" | "bfloat16",
    seed: number,
): { bytes: number; parameters: number } {
    const layout = llamaLayout(readHfConfig(dir, { ...config }).engine);
    const width = dtype === "bfloat16" ? 2 : 4;
    const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
    let off = 0,
        parameters = 0;
    for (const t of layout) {
        const n = t.shape.reduce((a, b) => a * b, 1);
        header[t.name] = {
            dtype: dtype === "bfloat16" ? "BF16" : "F32",
            shape: t.shape,
            data_offsets: [off, off + width * n],
        };
        off += width * n;
        parameters += n;
    }
    let json = JSON.stringify(header);
    json = json.padEnd(Math.ceil(json.length / 8) * 8, " ");
    const path = join(dir, "model.safetensors");
    const fd = openSync(path, "w");
    try {
        const len = Buffer.alloc(8);
        len.writeBigUInt64LE(BigInt(json.length));
        writeSync(fd, len);
        writeSync(fd, Buffer.from(json));
        const next = mulberry32(seed);
        const chunk = new Float32Array(1 << 20),
            bits = new Uint32Array(chunk.buffer),
            half = new Uint16Array(chunk.length);
        for (const t of layout) {
            const n = t.shape.reduce((a, b) => a * b, 1);
            const fill = t.shape.length === 2 ? null : t.name.endsWith("norm.weight") ? 1 : 0;
            for (let done = 0; done < n;) {
                const m = Math.min(chunk.length, n - done);
                for (let i = 0; i < m; i += 2) {
                    // Box-Muller: two normal values per pair of uniforms (scaled to transformers' 0.02)
                    const r = Math.sqrt(-2 * Math.log(1 - next())) * 0.02,
                        a = 2 * Math.PI * next();
                    chunk[i] = fill ?? r * Math.cos(a);
                    if (i + 1 < m) chunk[i + 1] = fill ?? r * Math.sin(a);
                }
                if (width === 2) {
                    for (let i = 0; i < m; i++) {
                        const u = bits[i]!; // to nearest even
                        half[i] = (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
                    }
                    writeSync(fd, new Uint8Array(half.buffer, 0, 2 * m));
                } else writeSync(fd, new Uint8Array(chunk.buffer, 0, 4 * m));
                done += m;
            }
        }
    } finally {
        closeSync(fd);
    }
    return { bytes: 8 + json.length + off, parameters };
}

/** Writes a Hugging Face model directory at `dir` (which must not exist or be empty): see the file's comment. On an
 * error nothing is left behind. */
export function makeModel(dir: string, options: MakeModelOptions = {}): MadeModel {
    const fn = "makeModel";
    if (typeof dir !== "string" || dir === "") throw new TypeError(`${fn}: dir: expected a path, got ${describe(dir)}`);
    const shape = options.shape ?? "tiny";
    if (!Object.hasOwn(MODEL_SHAPES, shape))
        throw new RangeError(
            `${fn}: shape: expected one of ${Object.keys(MODEL_SHAPES).join(", ")}, got ${describe(options.shape)}`,
        );
    const dtype = options.dtype ?? "float32";
    if (dtype !== "float32" && dtype !== "bfloat16")
        throw new RangeError(`${fn}: dtype: expected 'float32' or 'bfloat16', got ${describe(options.dtype)}`);
    const seed = options.seed ?? 0;
    if (!Number.isSafeInteger(seed) || seed < 0)
        throw new RangeError(`${fn}: seed: expected an integer >= 0, got ${describe(options.seed)}`);
    const existed = existsSync(dir);
    if (existed && readdirSync(dir).length > 0)
        throw new Error(`${fn}: ${dir} exists and is not empty: give a new directory (nothing was written)`);
    mkdirSync(dir, { recursive: true });
    try {
        const tokenizerSize = writeTokenizer(dir);
        const eos = tokenizerSize - 1; // <|im_end|>
        const base: Record<string, unknown> = MODEL_SHAPES[shape];
        const config: Record<string, unknown> = {
            architectures: [base.model_type === "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"],
            ...base,
            vocab_size: Math.max(Number(base.vocab_size ?? 0), tokenizerSize),
            hidden_act: "silu",
            bos_token_id: null,
            eos_token_id: eos,
            pad_token_id: eos - 2,
            torch_dtype: dtype,
        };
        writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 1));
        writeFileSync(
            join(dir, "generation_config.json"),
            JSON.stringify({ eos_token_id: eos, pad_token_id: eos - 2 }),
        );
        const w = writeRandomWeights(dir, config, dtype, seed);
        return { dir, shape, parameters: w.parameters, tokenizerSize, bytes: w.bytes };
    } catch (e) {
        if (existed) for (const f of readdirSync(dir)) rmSync(join(dir, f), { recursive: true, force: true });
        else rmSync(dir, { recursive: true, force: true });
        throw e;
    }
}
