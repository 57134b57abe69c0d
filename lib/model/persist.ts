// persist.ts: NativePolicy's checkpoints: save (a maporl-gpt directory, a Hugging Face directory, or a PEFT
// adapter directory, each replacing the old one atomically) and reading an embedded GPT's checkpoint back.
import { join } from "node:path";

import { replaceDirDurable, writeFileDurable } from "../durable.js";
import { readTextFile } from "../files.js";
import { native } from "../native.js";
import { CharTokenizer } from "../policy/tokenizer.js";
import { describe, requireInteger, requireNumber, requireOptions } from "../validate.js";
import type { EngineView } from "./core.js";
import { isHfModelDir } from "./hf.js";
import { loadOptimizer, writeHfDir, writeOptimizer } from "./hfWeights.js";
import { writeAdapterDir } from "./lora.js";
import type { NativePolicyConfig, SaveOptions } from "./options.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";

/** Writes the checkpoint directory `dir` (replacing it atomically). A Hugging Face model writes a Hugging Face
 * directory (config.json, generation_config.json, float32 weights, the tokenizer files) that transformers and vLLM
 * load as it is, plus maporl's value_head.safetensors, maporl.json and, once trained, optimizer.safetensors. */
export async function save(self: EngineView, dir: string, options: SaveOptions = {}): Promise<void> {
    const o = requireOptions<SaveOptions>(`${self.name}.save`, "options", options, ["maxShardBytes", "baseModel"]);
    const maxShardBytes = requireNumber(
        `${self.name}.save`,
        "maxShardBytes",
        o.maxShardBytes,
        5e9,
        1,
        Number.MAX_SAFE_INTEGER,
    );
    if (o.baseModel !== undefined && (typeof o.baseModel !== "string" || o.baseModel === "" || self.adapter === null))
        throw new TypeError(
            `${self.name}.save: baseModel: expected a non-empty string, for an adapter's policy, got ${describe(o.baseModel)}${self.adapter === null ? " (this policy runs no adapter)" : ""}`,
        );
    self.requireFloatBase("save");
    return self.serial(async () => {
        const h = self.h(),
            n = self.parameterCount,
            step = native.gptGetStep(h);
        if (self.adapter !== null)
            return replaceDirDurable(dir, (tmp) =>
                writeAdapterDir(tmp, h, self.adapterId, o.baseModel ?? self.hf?.sourceDir ?? null, {
                    format: "maporl-lora",
                    version: 1,
                    name: self.adapter!,
                    step,
                    seed: native.loraInfo(h, self.adapterId).seed,
                }),
            );
        return replaceDirDurable(dir, (tmp) => {
            const optimizer = () => writeOptimizer(join(tmp, "optimizer.safetensors"), h);
            if (self.hf) {
                writeHfDir(
                    tmp,
                    h,
                    self.hf.info,
                    {
                        format: "maporl-hf",
                        version: 1,
                        name: self.name,
                        step,
                        contextLength: self.config.contextLength,
                    },
                    self.tokenizer,
                    self.hf.tokenizerDir,
                    maxShardBytes,
                );
                if (step > 0) optimizer(); // (an untrained model's moments are zero: not allocated, not written)
            } else {
                const p = new Float32Array(n);
                native.gptGet(h, { which: 0, out: p });
                const tensors = native.gptTensors(h);
                writeSafetensors(
                    join(tmp, "model.safetensors"),
                    tensors.map((t) => ({
                        name: t.name,
                        shape: t.shape,
                        data: p.subarray(t.offset, t.offset + t.shape.reduce((a, b) => a * b, 1)),
                    })),
                    { format: "pt" },
                );
                optimizer();
                writeFileDurable(join(tmp, "tokenizer.json"), JSON.stringify(self.charTokenizer("save").toJSON()));
                writeFileDurable(
                    join(tmp, "config.json"),
                    JSON.stringify(
                        { format: "maporl-gpt", version: 1, name: self.name, ...self.config, vocab: self.V, step },
                        null,
                        2,
                    ),
                );
            }
        });
    });
}

/** Runs `fn`, naming `dir`/`f` in a SyntaxError, TypeError or RangeError it throws (a bad file is named in the error,
 * whatever its fault: not JSON, a bad field). */
export function withinFile<T>(dir: string, f: string, fn: () => T): T {
    try {
        return fn();
    } catch (e) {
        if (
            (e instanceof SyntaxError || e instanceof TypeError || e instanceof RangeError) &&
            !e.message.startsWith("NativePolicy.load:")
        )
            throw new (e.constructor as new (m: string) => Error)(`NativePolicy.load: ${join(dir, f)}: ${e.message}`);
        throw e;
    }
}

/** An embedded GPT checkpoint's config.json and tokenizer.json (checked; the weights come with loadGptWeights). */
export function readGptCheckpoint(
    dir: string,
    o: { maxMemoryBytes?: number },
): { config: NativePolicyConfig; step: number } {
    const read = (f: string) => {
        try {
            return readTextFile(join(dir, f), f);
        } catch (e) {
            const m = (e as Error).message;
            throw new Error(
                `NativePolicy.load: ${m.includes(": missing (") ? `${join(dir, f)}: missing (not a checkpoint directory?)` : m}`,
            );
        }
    };
    const json = (f: string): Record<string, unknown> => {
        const text = read(f);
        const v = withinFile(dir, f, () => {
            try {
                return JSON.parse(text) as unknown;
            } catch {
                throw new SyntaxError("not JSON (corrupted?)");
            }
        });
        if (v === null || typeof v !== "object" || Array.isArray(v))
            throw new SyntaxError(`NativePolicy.load: ${join(dir, f)}: expected a JSON object`);
        return v as Record<string, unknown>;
    };
    const cfg = json("config.json");
    if (cfg.format !== "maporl-gpt" || cfg.version !== 1)
        throw new SyntaxError(
            `NativePolicy.load: ${join(dir, "config.json")}: not a maporl-gpt checkpoint (version 1)`,
        );
    const tokenizer = withinFile(dir, "tokenizer.json", () => CharTokenizer.fromJSON(json("tokenizer.json") as never));
    return {
        config: {
            ...(o.maxMemoryBytes !== undefined ? { maxMemoryBytes: o.maxMemoryBytes } : {}),
            contextLength: cfg.contextLength as number,
            layers: cfg.layers as number,
            heads: cfg.heads as number,
            dModel: cfg.dModel as number,
            mlpRatio: cfg.mlpRatio as number,
            tieEmbeddings: cfg.tieEmbeddings as boolean,
            seed: cfg.seed as number,
            tokenizer,
            name: cfg.name as string,
        },
        step: cfg.step as number,
    };
}

/** An embedded GPT checkpoint's weights, optimizer state and step into the model of `p` (just created from its
 * config.json). */
export function loadGptWeights(p: EngineView, dir: string, step: number): void {
    const h = p.h(),
        n = p.parameterCount;
    const model = readSafetensors(join(dir, "model.safetensors"));
    const byName = new Map(model.tensors.map((t) => [t.name, t]));
    const params = new Float32Array(n);
    for (const t of native.gptTensors(h)) {
        const src = byName.get(t.name);
        const size = t.shape.reduce((a, b) => a * b, 1);
        if (!src || !(src.data instanceof Float32Array) || src.data.length !== size)
            throw new SyntaxError(
                `NativePolicy.load: ${dir}/model.safetensors: tensor ${t.name} missing or of the wrong size or dtype`,
            );
        params.set(src.data, t.offset);
    }
    native.gptSet(h, { which: 0, input: params });
    loadOptimizer("NativePolicy.load", join(dir, "optimizer.safetensors"), h);
    native.gptSetStep(h, requireInteger("NativePolicy", "config.json step", step, 0, Number.MAX_SAFE_INTEGER));
}

/** adapter_config.json's base_model_name_or_path when it names a local model directory, else null. */
export function adapterBaseModel(dir: string): string | null {
    try {
        const b = (
            JSON.parse(readTextFile(join(dir, "adapter_config.json"), "adapter_config.json")) as {
                base_model_name_or_path?: unknown;
            }
        ).base_model_name_or_path;
        return typeof b === "string" && isHfModelDir(b) ? b : null;
    } catch {
        return null;
    }
}
