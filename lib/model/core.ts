// core.ts: the native model and what every policy on it shares (ModelCore), and the view of a NativePolicy that
// the engine's modules (generate.ts, trainStep.ts, persist.ts, adapters.ts) work on (EngineView).
import { totalmem } from "node:os";

import { native, type GptHandle, type NativeLoraConfig } from "../native.js";
import type { CharTokenizer, PolicyTokenizer } from "../policy/tokenizer.js";
import { describe, requireInteger } from "../validate.js";
import { DecodeTurns } from "./decodeTurns.js";
import type { HfModelInfo } from "./hf.js";
import { type LoraOptions, targetNames } from "./lora.js";
import type { DecodeCall } from "./nativeDecode.js";
import { gptMemoryBytes, type NativePolicyConfig } from "./options.js";

/** @internal A Hugging Face model's config, where it and its tokenizer files came from. */
export interface HfState {
    info: HfModelInfo;
    tokenizerDir: string | null;
    sourceDir: string | null;
}

/** The shape of a NativePolicy's model in the embedded GPT's terms (a Hugging Face model: mlpRatio = intermediate_size /
 * hidden_size, rounded; seed 0). */
export type ModelShape = Required<Omit<NativePolicyConfig, "tokenizer" | "name" | "device" | "maxMemoryBytes">>;

/** LoadOptions.dtype: undefined, 'float32', 'bfloat16' or 'int8'. */
export function requireDtype(fn: string, dtype: unknown): void {
    if (dtype !== undefined && dtype !== "float32" && dtype !== "bfloat16" && dtype !== "int8")
        throw new RangeError(`${fn}: dtype: expected 'float32', 'bfloat16' or 'int8', got ${describe(dtype)}`);
}

/** An adapter's native config as LoraOptions. */
export const loraOptionsOf = (c: NativeLoraConfig): LoraOptions => ({
    rank: c.rank,
    alpha: c.alpha,
    targets: targetNames(c.targets),
    dropout: c.dropout,
    useRslora: c.useRslora,
});

/** @internal The native model and what every policy on it shares (the base and its LoRA adapters' policies): the
 * handle, the call queue, the adapters by name, the generate calls waiting to run as one batch, and how many
 * policies are open. */
export // call queue, the adapters by name, the generate calls waiting to run as one batch, and how many policies are open.
class ModelCore {
    handle: GptHandle | null;
    queue: Promise<unknown> = Promise.resolve();
    readonly adapters = new Map<string, number>();
    openBatch: DecodeCall[] | null = null;
    /** Generation batches running at once, taking turns (decodeTurns.ts). */
    readonly turns: DecodeTurns;
    /** The open batch's rows and the positions its longest row can reach (its KV cache: rows x positions). */
    openRows = 0;
    openLen = 0;
    /** The KV cache one generation batch may take; a call that alone needs more is refused, and calls that would
     * together start a new batch. Defaults to 25% of the machine's memory. */
    maxCacheBytes = Math.floor(totalmem() / 4);
    views = 1;
    readonly baseCount: number;
    constructor(
        h: GptHandle,
        readonly baseName: string,
        frozen = false,
    ) {
        this.handle = h;
        this.turns = new DecodeTurns(() => {
            if (!this.handle) throw new Error(`${baseName}: disposed`);
            return this.handle;
        });
        // (a frozen bfloat16 / int8 base's parameter set is its float tensors; its count, every tensor's)
        this.baseCount = frozen
            ? native.gptTensors(h).reduce((a, t) => a + t.shape.filter((d) => d > 0).reduce((x, y) => x * y, 1), 0)
            : native.gptParamCount(h);
    }
    free(): void {
        if (this.handle) native.gptFree(this.handle);
        this.handle = null;
    }
}

/** A KV cache larger than this is freed after its batch; smaller ones are kept for the next. */
export const CACHE_KEEP_BYTES = 64 << 20;

/** @internal What the engine's modules use of a NativePolicy (P: the policy type a view of it returns). */
export interface EngineView<P = unknown> {
    readonly name: string;
    readonly tokenizer: PolicyTokenizer;
    readonly config: ModelShape;
    readonly family: "gpt" | "llama";
    readonly adapter: string | null;
    readonly adapters: string[];
    readonly core: ModelCore;
    readonly hf: HfState | null;
    /** The vocabulary size. */
    readonly V: number;
    adapterId: number;
    adapterName: string | null;
    /** Gradients must be zeroed before the next backward (false while accumulating). */
    needZero: boolean;
    readonly kvBytesPerToken: number;
    readonly parameterCount: number;
    h(): GptHandle;
    serial<T>(fn: () => Promise<T>): Promise<T>;
    enqueue<T>(fn: () => Promise<T>): Promise<T>;
    select(): void;
    requireFloatBase(what: string): void;
    charTokenizer(what: string): CharTokenizer;
    view(adapter: string | null, id: number): P;
    save(dir: string): Promise<void>;
}

const requireInt = (what: string, x: unknown, lo: number, hi: number) =>
    requireInteger("NativePolicy", what, x, lo, hi);

/** An embedded GPT's shape from its config, each field checked. */
export function gptShape(config: NativePolicyConfig): ModelShape {
    return {
        contextLength: requireInt("contextLength", config.contextLength, 1, 65536),
        layers: requireInt("layers", config.layers, 1, 256),
        heads: requireInt("heads", config.heads, 1, 65536),
        dModel: requireInt("dModel", config.dModel, 1, 65536),
        mlpRatio: requireInt("mlpRatio", config.mlpRatio ?? 4, 1, 16),
        tieEmbeddings: config.tieEmbeddings ?? true,
        seed: requireInt("seed", config.seed ?? 0, 0, Number.MAX_SAFE_INTEGER),
    };
}

/** A Hugging Face model's shape in the embedded GPT's terms (mlpRatio = intermediate_size / hidden_size, rounded). */
export function hfShape(e: HfModelInfo["engine"]): ModelShape {
    return {
        contextLength: e.context,
        layers: e.layers,
        heads: e.heads,
        dModel: e.dModel,
        mlpRatio: Math.max(1, Math.round(e.intermediate / e.dModel)),
        tieEmbeddings: e.tieEmbeddings,
        seed: 0,
    };
}

/** Refuses an embedded GPT whose parameters, gradients and AdamW moments (gptMemoryBytes) pass `maxMemoryBytes`
 * (default 80% of the machine's memory) before anything is allocated: each field is within its bounds, their
 * product must fit too. */
export function checkGptMemory(shape: ModelShape, V: number, maxMemoryBytes: number | undefined): void {
    const limit = maxMemoryBytes ?? Math.floor(totalmem() * 0.8);
    if (typeof limit !== "number" || !(limit > 0))
        throw new RangeError(`NativePolicy: maxMemoryBytes: expected a number > 0, got ${describe(maxMemoryBytes)}`);
    const need = gptMemoryBytes(shape, V),
        gib = (x: number) => `${(x / 2 ** 30).toFixed(2)} GiB`;
    if (need > limit)
        throw new RangeError(
            `NativePolicy: this configuration needs ${gib(need)} for its parameters, gradients and AdamW moments ` +
                `(contextLength ${shape.contextLength}, layers ${shape.layers}, dModel ${shape.dModel}, mlpRatio ${shape.mlpRatio}, ` +
                `vocab ${V}), more than maxMemoryBytes ${gib(limit)}${maxMemoryBytes === undefined ? " (80% of this machine's memory)" : ""}`,
        );
}

/** A new embedded GPT of `shape` and vocabulary `V`, initialised from shape.seed. */
export function createGpt(shape: ModelShape, V: number): GptHandle {
    return native.gptCreate({
        ...{
            vocab: V,
            context: shape.contextLength,
            layers: shape.layers,
            heads: shape.heads,
            dModel: shape.dModel,
            mlpRatio: shape.mlpRatio,
            tieEmbeddings: shape.tieEmbeddings,
        },
        seed: shape.seed,
    });
}
