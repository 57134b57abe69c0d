// hfWeights.ts: a Hugging Face directory's weights for the native engine: every shard's header planned against the
// engine's tensors before anything is allocated, the tensors streamed into native memory (F32, BF16, F16), and the
// directory written back (config.json, generation_config.json, model.safetensors or shards with
// model.safetensors.index.json, the tokenizer files, maporl's value head and optimizer state).
import { existsSync } from "node:fs";
import { join } from "node:path";

import { MAX_TEXT_FILE_BYTES, readRegularFile } from "../files.js";
import { native, type GptHandle } from "../native.js";
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
import { type HfModelInfo, IGNORED, readJsonObject } from "./hf.js";

/** A weight planned for loading: the engine's tensor `index`, from `file`, as `dtype` (0 F32, 1 BF16, 2 F16). */
export interface PlannedTensor {
    index: number;
    file: string;
    t: TensorHeader;
    dtype: 0 | 1 | 2;
}

/** Writes planned weights into `h` (its tensors in the order the plan was made for). */
export function writeHfWeights(dir: string, h: GptHandle, plan: PlannedTensor[]): void {
    for (const p of plan)
        native.gptSetTensor(h, { index: p.index, dtype: p.dtype, data: readTensorBytes(join(dir, p.file), p.t) });
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
        native.gptSetTensor(h, {
            index: k,
            dtype: 0,
            data: new Uint8Array(src.data.buffer, src.data.byteOffset, src.data.byteLength),
        });
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
        native.gptSet(h, { which, input: x.data });
    }
}

/** optimizer.safetensors of `h`'s parameter set into `path` (the moments read back from native memory). */
export function writeOptimizer(path: string, h: GptHandle): void {
    const n = native.gptParamCount(h);
    const all = (which: 1 | 2) => {
        const a = new Float32Array(n);
        native.gptGet(h, { which, out: a });
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
    native.gptGet(h, { which: 0, out: params });
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
