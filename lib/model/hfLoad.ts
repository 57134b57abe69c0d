// hfLoad.ts: opening a Hugging Face model directory for NativePolicy: its tokenizer (the directory's tokenizer.json,
// another directory's, an HfTokenizer, or none), the engine's model with every weight streamed in (hf.ts), and what
// a maporl save added beside it (value_head.safetensors, optimizer.safetensors, maporl.json). A failure frees the
// model: nothing is left half-loaded.
import { existsSync } from "node:fs";
import { totalmem } from "node:os";
import { join } from "node:path";

import { native, type GptHandle } from "../native.js";
import { describe, requireInteger, requireOptions } from "../validate.js";
import { requireDtype } from "./core.js";
import { type HfModelInfo, llamaLayout, llamaWeightBytes, readHfConfig, readJsonObject } from "./hf.js";
import { type HfSavedState, loadOptimizer, loadValueHead, planHfWeights, writeHfWeights } from "./hfWeights.js";
import { HfTokenizer, IdsOnlyTokenizer } from "./hfTokenizer.js";
import type { HfLoadOptions as LoadOptions } from "./options.js";
import type { PolicyTokenizer } from "../policy/tokenizer.js";

/** A loaded Hugging Face model: the engine's handle (owned by the caller), its config and tokenizer. */
export interface OpenedHfModel {
    handle: GptHandle;
    info: HfModelInfo;
    tokenizer: PolicyTokenizer;
    /** Where the tokenizer's files came from (copied on save), or null. */
    tokenizerDir: string | null;
    /** maporl.json's name, or options.name. */
    name: string | undefined;
}

/** The tokenizer of a Hugging Face model: options.tokenizer (a directory, an HfTokenizer or null), else `dir`'s. */
export function resolveHfTokenizer(
    fn: string,
    dir: string | null,
    info: HfModelInfo,
    o: Pick<LoadOptions, "tokenizer" | "chatTemplate">,
): { tokenizer: PolicyTokenizer; tokenizerDir: string | null } {
    const tk = o.tokenizer;
    const tkOptions = {
        vocabSize: info.engine.vocab,
        stopIds: info.stopIds,
        ...(o.chatTemplate !== undefined ? { chatTemplate: o.chatTemplate } : {}),
    };
    if (tk === null) return { tokenizer: new IdsOnlyTokenizer(info.engine.vocab, info.stopIds), tokenizerDir: null };
    if (tk instanceof HfTokenizer) {
        if (tk.tokenizerSize > info.engine.vocab)
            throw new RangeError(
                `${fn}: tokenizer: it has ids up to ${tk.tokenizerSize - 1}, the model's vocab_size is ${info.engine.vocab}`,
            );
        return { tokenizer: tk, tokenizerDir: null };
    }
    if ((tk === undefined && dir !== null) || typeof tk === "string") {
        const from = tk ?? dir!;
        if (!existsSync(join(from, "tokenizer.json")))
            throw new Error(
                `${fn}: ${join(from, "tokenizer.json")}: missing (a model directory needs its tokenizer; pass tokenizer: null to load the weights alone)`,
            );
        try {
            return { tokenizer: HfTokenizer.fromDir(from, tkOptions), tokenizerDir: from };
        } catch (e) {
            throw new (e instanceof SyntaxError ? SyntaxError : Error)(`${fn}: ${(e as Error).message}`);
        }
    }
    throw new TypeError(`${fn}: tokenizer: expected a directory path, an HfTokenizer or null, got ${describe(tk)}`);
}

/** Opens the model directory `dir` (NativePolicy.load's Hugging Face path). */
export function openHfModel(dir: string, o: LoadOptions): OpenedHfModel {
    const fn = "NativePolicy.load";
    const raw = readJsonObject(join(dir, "config.json"), "a model directory needs config.json");
    const savedPath = join(dir, "maporl.json");
    const saved = existsSync(savedPath)
        ? (readJsonObject(savedPath, "maporl's state") as unknown as HfSavedState)
        : null;
    if (
        saved &&
        (saved.format !== "maporl-hf" ||
            saved.version !== 1 ||
            !Number.isInteger(saved.step) ||
            saved.step < 0 ||
            !Number.isInteger(saved.contextLength))
    )
        throw new SyntaxError(
            `${fn}: ${savedPath}: expected {format: 'maporl-hf', version: 1, step, contextLength, name}`,
        );
    const info = readHfConfig(dir, raw, o.contextLength ?? saved?.contextLength);
    if (o.contextLength === undefined && !saved) info.engine.context = Math.min(info.engine.context, 8192);
    const { tokenizer, tokenizerDir } = resolveHfTokenizer(fn, dir, info, o);
    // bfloat16: the matrices stay bf16 (a file's F32 / F16 rounded to nearest even); int8: quantized as they load
    if (o.dtype === "bfloat16") info.engine.bf16 = true;
    if (o.dtype === "int8") info.engine.int8 = true;
    // Every header against the config, and the memory against the limit, before anything is allocated.
    const layout = llamaLayout(info.engine);
    const plan = planHfWeights(dir, layout, info.engine.tieEmbeddings);
    const need = llamaWeightBytes(info.engine),
        limit = o.maxMemoryBytes ?? Math.floor(totalmem() * 0.8);
    if (typeof limit !== "number" || !(limit > 0))
        throw new RangeError(`${fn}: maxMemoryBytes: expected a number > 0, got ${describe(o.maxMemoryBytes)}`);
    if (need > limit)
        throw new RangeError(
            `${fn}: ${dir}: the model's weights take ${(need / 2 ** 30).toFixed(2)} GiB (${info.engine.layers} layers, hidden ${info.engine.dModel}, ` +
                `intermediate ${info.engine.intermediate}, vocab ${info.engine.vocab}, ${info.engine.bf16 ? "bfloat16 matrices" : info.engine.int8 ? "int8 matrices" : "float32"}), more than maxMemoryBytes ` +
                `${(limit / 2 ** 30).toFixed(2)} GiB${o.maxMemoryBytes === undefined ? " (80% of this machine's memory)" : ""}`,
        );
    const h = native.llamaCreate({ ...info.engine, seed: null });
    try {
        const made = native.gptTensors(h).filter((w) => !w.name.startsWith("value_head."));
        if (made.length !== layout.length || made.some((w, i) => w.name !== layout[i]!.name))
            throw new Error(
                `${fn}: internal: the engine's tensors differ from llamaLayout's (${made.length} vs ${layout.length})`,
            );
        writeHfWeights(dir, h, plan);
        const head = join(dir, "value_head.safetensors");
        if (existsSync(head)) loadValueHead(fn, head, h);
        const opt = join(dir, "optimizer.safetensors");
        const frozen = o.dtype === "bfloat16" || o.dtype === "int8"; // (a frozen base does not train)
        if (saved && existsSync(opt) && !frozen) loadOptimizer(fn, opt, h);
        if (saved) native.gptSetStep(h, saved.step);
    } catch (e) {
        native.gptFree(h);
        throw e;
    }
    const name = o.name ?? (saved && typeof saved.name === "string" ? saved.name : undefined);
    return { handle: h, info, tokenizer, tokenizerDir, name };
}

/** A randomly initialised model of a Hugging Face architecture from its config.json object (NativePolicy.fromConfig):
 * the options checked, the tokenizer resolved, the engine created from `options.seed`. */
export function createHfModel(
    fn: string,
    hfConfig: Record<string, unknown>,
    options: Omit<LoadOptions, "tokenizer"> & { tokenizer: string | HfTokenizer | null; seed?: number },
): OpenedHfModel {
    if (hfConfig === null || typeof hfConfig !== "object" || Array.isArray(hfConfig))
        throw new TypeError(`${fn}: hfConfig: expected a config.json object, got ${describe(hfConfig)}`);
    const o = requireOptions<LoadOptions & { seed?: number }>(fn, "options", options, [
        "device",
        "contextLength",
        "tokenizer",
        "chatTemplate",
        "name",
        "seed",
        "lora",
        "dtype",
    ]);
    requireDtype(fn, o.dtype);
    const seed = requireInteger("NativePolicy", "seed", o.seed ?? 0, 0, Number.MAX_SAFE_INTEGER);
    const info = readHfConfig("(hfConfig)", { ...hfConfig }, o.contextLength);
    if (o.contextLength === undefined) info.engine.context = Math.min(info.engine.context, 8192);
    const { tokenizer, tokenizerDir } = resolveHfTokenizer(fn, null, info, o);
    if (o.dtype === "bfloat16") info.engine.bf16 = true;
    if (o.dtype === "int8") info.engine.int8 = true;
    return { handle: native.llamaCreate({ ...info.engine, seed }), info, tokenizer, tokenizerDir, name: o.name };
}
