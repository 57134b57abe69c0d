// nativePolicy.ts: the native model engine as a Policy (bindings/model/gpt.cpp): the embedded GPT (native/model/gpt.h),
// or a Hugging Face Llama / Mistral / Qwen2 / Qwen3 directory (native/model/llama.h, loaded by hf.ts, tokenized by
// hfTokenizer.ts with the model's own chat template). Generation decodes with
// the KV cache and draws every token with the `sample` kernel (per-request seeds, the token's position as the
// counter, the processed log-prob returned); training runs forward, a loss from the loss kernels (cross-entropy
// for SFT, or any policy loss), backward and AdamW off the main thread. Calls on one model are serialised.
// Checkpoints are directories: model.safetensors, optimizer.safetensors, config.json, tokenizer.json (a Hugging Face
// model saves as a Hugging Face directory, plus optimizer.safetensors, value_head.safetensors and maporl.json),
// written to a temporary directory that replaces the old one by rename, so a crash never leaves a half-written one.
// A Llama-family model trains and scores through log-probs (gptScore): its LM head runs over row chunks, so no
// [B, T, V] logits exist (a 151,936-token vocabulary).

import { totalmem } from "node:os";
import { join, resolve } from "node:path";

import { type Device, resolveDevice } from "../backend.js";
import { replaceDirDurable, writeFileDurable } from "../durable.js";

import { readTextFile } from "../files.js";
import { native, type GptHandle, type NativeLoraConfig } from "../native.js";
import { fusedPolicyLoss, logprobs } from "../rl/logits.js";
import { type LossOptions, type PolicyLossStats, valueLoss } from "../rl/policyLoss.js";
import { type HfModelInfo, isHfModelDir, loadOptimizer, readHfConfig, writeHfDir, writeOptimizer } from "./hf.js";
import { openHfModel, resolveHfTokenizer } from "./hfLoad.js";
import type { HfTokenizer } from "./hfTokenizer.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";
import {
    describe,
    requireArray,
    requireBoolean,
    requireInteger,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";
import { CharTokenizer, fewestTokens, type PolicyTokenizer } from "../policy/tokenizer.js";
import { policyLoss } from "../rl/policyLoss.js";
import { TemplateError } from "./template.js";
import { nativeChat, withToolCalls } from "../policy/toolText.js";
import {
    type GenerateRequest,
    type Generation,
    type Policy,
    requestMessages,
    requestSampling,
    requestSeed,
    type TokenCallback,
} from "../policy/types.js";
import { type DecodeCall, decodeCalls } from "./nativeDecode.js";
import { type DecodeLease, DecodeTurns } from "./decodeTurns.js";
import {
    fnv1a,
    isAdapterDir,
    loadAdapterTensors,
    type LoraOptions,
    readAdapterConfig,
    readAdapterState,
    resolveLora,
    targetNames,
    writeAdapterDir,
} from "./lora.js";

export interface NativePolicyConfig {
    /** The model's maximum sequence length. */
    contextLength: number;
    layers: number;
    heads: number;
    dModel: number;
    /** MLP hidden size / dModel. Defaults to 4. */
    mlpRatio?: number;
    /** Tie the LM head to the token embedding. Defaults to true. */
    tieEmbeddings?: boolean;
    /** Defaults to CharTokenizer.ascii(). */
    tokenizer?: CharTokenizer;
    /** Initialisation seed. Defaults to 0. */
    seed?: number;
    name?: string;
    /**
     * Where the weights, optimizer state and activations live: 'cpu' (default: bit-identical for any thread count),
     * 'cuda' (a MaporlError MAPORL_ERR_NO_DEVICE without a GPU or a CUDA build), or 'auto' (CUDA when a device is
     * visible). Tokens, logits and their gradients still cross to the host, where sampling and the loss kernels run.
     */
    device?: Device;
    /** The most bytes the model's parameters, gradients and AdamW moments may take (16 bytes a parameter, allocated
     * at creation; gptMemoryBytes): a larger configuration is refused before anything is allocated. Defaults to 80%
     * of the machine's memory (os.totalmem()). */
    maxMemoryBytes?: number;
}

/** The bytes an embedded GPT of `config` with vocabulary `vocab` allocates at creation: its parameters (token and
 * position embeddings, per layer 12 C^2 + 13 C, the final norm, an untied LM head, the value head) in float32, times 4
 * (weights, gradients, AdamW's two moments). Activations and the KV cache come on top, sized by the batch. */
export function gptMemoryBytes(
    config: { contextLength: number; layers: number; dModel: number; mlpRatio?: number; tieEmbeddings?: boolean },
    vocab: number,
): number {
    const C = config.dModel,
        H = (config.mlpRatio ?? 4) * C;
    const perLayer =
        2 * C /* ln_1 */ +
        3 * C * C +
        3 * C /* qkv */ +
        C * C +
        C /* proj */ +
        2 * C /* ln_2 */ +
        C * H +
        H +
        H * C +
        C; /* mlp */
    const params =
        vocab * C +
        config.contextLength * C +
        config.layers * perLayer +
        2 * C +
        (config.tieEmbeddings === false ? vocab * C : 0) +
        C +
        1;
    return 16 * params;
}

export interface TrainBatch {
    /** Input ids [B, T]. */
    tokens: Int32Array;
    /** The id each position should predict [B, T] (the next token). */
    targets: Int32Array;
    /** 1 where a position is trained [B, T]. */
    mask: Uint8Array | Float32Array;
    shape: readonly [number, number];
    /** Per token [B, T] or per sequence [B]; omitted for SFT and 'value'. */
    advantages?: Float32Array;
    /** 'value' only: regression targets [B, T], and the values at rollout time for the clip. */
    returns?: Float32Array;
    oldValues?: Float32Array;
    oldLogp?: Float32Array;
    refLogp?: Float32Array;
}

export interface TrainOptions {
    /** 'sft': cross-entropy (mean over masked tokens); 'value': verl's (clipped) value loss of the value head (see
     * values()) on `returns`; or the policy-loss options of fusedPolicyLoss. */
    loss?: "sft" | "value" | LossOptions;
    /** 'value' only: the value clip around `oldValues` (verl's cliprange_value); null = unclipped. Defaults to null. */
    valueClip?: number | null;
    lr?: number;
    beta1?: number;
    beta2?: number;
    eps?: number;
    weightDecay?: number;
    /** Global gradient-norm clip. Defaults to 1; <= 0 turns it off. */
    maxGradNorm?: number;
    /** Only accumulate gradients (no optimizer step, gradients kept for the next call). Defaults to false. */
    accumulate?: boolean;
    /** Checked before the forward, the loss and the backward: an abort rejects with the gradients untouched (once the
     * backward has run, the step completes). */
    signal?: AbortSignal;
    /** Called after each phase with (phases done, phases in this step): 3 with `accumulate`, else 4. */
    onProgress?: (done: number, total: number) => void;
    /** Llama family: the most bytes of float logits ([B, T, V] x 4) the step keeps from its forward for its backward,
     * instead of recomputing the LM head chunk by chunk (the same result; at the SmolLM2-135M shape, B = 4, T = 256,
     * 201 MB kept saves about 7% of the step). Larger batches recompute, so logits memory stays bounded by the larger
     * of this and one chunk (at most 64 MB). Defaults to 256 MiB (2 ** 28); 0 always recomputes. */
    keepLogitsBytes?: number;
}

export interface TrainResult {
    loss: number;
    /** The gradient norm before clipping (NaN when accumulate). */
    gradNorm: number;
    stats: PolicyLossStats;
    step: number;
}

/** Options of NativePolicy.load. */
export interface LoadOptions {
    /** 'cpu' (default), 'cuda' or 'auto'. A Llama-family model in float32 (and its LoRA adapters) runs on either; a
     * bfloat16 base runs on the CPU in this version ('auto' keeps it there; 'cuda' is an error naming it). */
    device?: Device;
    /** Hugging Face directories: cap the positions below max_position_embeddings (KV-cache and activation memory grow
     * with it). Defaults to min(max_position_embeddings, sliding_window where one applies, 8192). */
    contextLength?: number;
    /** Hugging Face directories: the tokenizer, instead of the directory's tokenizer.json: another directory's path,
     * an HfTokenizer, or null for none (requests then give promptTokenIds; generations carry ids and no text). */
    tokenizer?: string | HfTokenizer | null;
    /** Hugging Face directories: a chat template to use instead of tokenizer_config.json's. */
    chatTemplate?: string;
    /** Hugging Face directories: how the weights are held in memory. 'float32' (default): every parameter trains.
     * 'bfloat16': the matrices (embedding, projections, LM head) stay bfloat16 and frozen, half their memory (widened
     * exactly inside the kernels, so the model computes what its float32 load of a bf16 checkpoint computes): a base
     * for LoRA adapters, or a model that only generates and scores. Its own trainStep, save and clone are errors. */
    dtype?: "float32" | "bfloat16";
    name?: string;
    /** Hugging Face directories: add a LoRA adapter named 'default' (PEFT's name) and return the policy of it (the base
     * frozen; more adapters on the same base with withAdapter). */
    lora?: LoraOptions;
    /** A PEFT adapter directory (adapter_config.json): the base it goes on, a loaded NativePolicy (its model is
     * shared) or a Hugging Face model directory. Defaults to adapter_config.json's base_model_name_or_path when that
     * is a local model directory (as an adapter saved by maporl records it). */
    base?: NativePolicy | string;
    /** Hugging Face directories: the most bytes the weights may take in memory (llamaWeightBytes); a larger model is
     * refused before anything is allocated, with the figure. Defaults to 80% of the machine's memory. */
    maxMemoryBytes?: number;
}

/** Options of save(). */
export interface SaveOptions {
    /** Hugging Face models: the largest weight file; above it model-0000k-of-0000n.safetensors shards with
     * model.safetensors.index.json. Defaults to 5 GB (transformers' save_pretrained default). */
    maxShardBytes?: number;
    /** LoRA adapters: the base_model_name_or_path adapter_config.json records (default: the directory the base was
     * loaded from), e.g. where a base trained after loading was saved. */
    baseModel?: string;
}

// A Hugging Face model's config, where it and its tokenizer files came from.
interface HfState {
    info: HfModelInfo;
    tokenizerDir: string | null;
    sourceDir: string | null;
}

// LoadOptions.dtype: undefined, 'float32' or 'bfloat16'.
function requireDtype(fn: string, dtype: unknown): void {
    if (dtype !== undefined && dtype !== "float32" && dtype !== "bfloat16")
        throw new RangeError(`${fn}: dtype: expected 'float32' or 'bfloat16', got ${describe(dtype)}`);
}

// adapter_config.json's base_model_name_or_path when it names a local model directory, else null.
function adapterBaseModel(dir: string): string | null {
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

const loraOptionsOf = (c: NativeLoraConfig): LoraOptions => ({
    rank: c.rank,
    alpha: c.alpha,
    targets: targetNames(c.targets),
    dropout: c.dropout,
    useRslora: c.useRslora,
});

// The native model and what every policy on it shares (the base and its LoRA adapters' policies): the handle, the
// call queue, the adapters by name, the generate calls waiting to run as one batch, and how many policies are open.
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
        bf16 = false,
    ) {
        this.handle = h;
        this.turns = new DecodeTurns(() => {
            if (!this.handle) throw new Error(`${baseName}: disposed`);
            return this.handle;
        });
        // (a bfloat16 base's parameter set is its float tensors; its count, every tensor's)
        this.baseCount = bf16
            ? native.gptTensors(h).reduce((a, t) => a + t.shape.filter((d) => d > 0).reduce((x, y) => x * y, 1), 0)
            : native.gptParamCount(h);
    }
    free(): void {
        if (this.handle) native.gptFree(this.handle);
        this.handle = null;
    }
}

/** A KV cache larger than this is freed after its batch; smaller ones are kept for the next. */
const CACHE_KEEP_BYTES = 64 << 20;

const TRAIN_OPTION_KEYS = [
    "loss",
    "valueClip",
    "lr",
    "beta1",
    "beta2",
    "eps",
    "weightDecay",
    "maxGradNorm",
    "accumulate",
    "signal",
    "onProgress",
    "keepLogitsBytes",
];

const requireInt = (what: string, x: unknown, lo: number, hi: number) =>
    requireInteger("NativePolicy", what, x, lo, hi);

export class NativePolicy implements Policy {
    readonly name: string;
    readonly tokenizer: PolicyTokenizer;
    /** The GPT's config; for a Hugging Face model its shape in the same terms (mlpRatio = intermediate_size /
     * hidden_size, rounded), the whole config being `hfConfig`. */
    readonly config: Required<Omit<NativePolicyConfig, "tokenizer" | "name" | "device" | "maxMemoryBytes">>;
    /** 'gpt' (the embedded model) or 'llama' (a Hugging Face llama / mistral / qwen2 / qwen3 model). */
    readonly family: "gpt" | "llama";
    /** The LoRA adapter this policy runs (null: the model itself, or the base of its adapters: the reference model). */
    get adapter(): string | null {
        return this.adapterName;
    }
    private adapterName: string | null;
    private disposing: Promise<void> | null = null;
    private readonly hf: HfState | null;
    private readonly core: ModelCore;
    private adapterId: number;
    private disposed = false;
    private readonly V: number;
    private needZero = true;

    private constructor(
        config: NativePolicyConfig,
        handle?: GptHandle,
        hf?: { state: HfState; tokenizer: PolicyTokenizer },
        share?: { core: ModelCore; adapter: string | null; id: number },
    ) {
        this.adapterName = share?.adapter ?? null;
        this.adapterId = share?.id ?? -1;
        this.family = hf ? "llama" : "gpt";
        this.hf = hf?.state ?? null;
        this.tokenizer = hf?.tokenizer ?? config.tokenizer ?? CharTokenizer.ascii();
        if (hf) {
            const e = hf.state.info.engine;
            this.config = {
                contextLength: e.context,
                layers: e.layers,
                heads: e.heads,
                dModel: e.dModel,
                mlpRatio: Math.max(1, Math.round(e.intermediate / e.dModel)),
                tieEmbeddings: e.tieEmbeddings,
                seed: 0,
            };
            this.V = e.vocab;
            this.name = config.name ?? `${hf.state.info.modelType}-${e.layers}x${e.dModel}`;
            this.core = share?.core ?? new ModelCore(handle!, this.name, e.bf16 === true);
            return;
        }
        this.config = {
            contextLength: requireInt("contextLength", config.contextLength, 1, 65536),
            layers: requireInt("layers", config.layers, 1, 256),
            heads: requireInt("heads", config.heads, 1, 65536),
            dModel: requireInt("dModel", config.dModel, 1, 65536),
            mlpRatio: requireInt("mlpRatio", config.mlpRatio ?? 4, 1, 16),
            tieEmbeddings: config.tieEmbeddings ?? true,
            seed: requireInt("seed", config.seed ?? 0, 0, Number.MAX_SAFE_INTEGER),
        };
        this.V = this.tokenizer.vocabSize;
        if (handle === undefined) {
            // each field is within its bounds; their product must fit too
            const limit = config.maxMemoryBytes ?? Math.floor(totalmem() * 0.8);
            if (typeof limit !== "number" || !(limit > 0))
                throw new RangeError(
                    `NativePolicy: maxMemoryBytes: expected a number > 0, got ${describe(config.maxMemoryBytes)}`,
                );
            const need = gptMemoryBytes(this.config, this.V),
                gib = (x: number) => `${(x / 2 ** 30).toFixed(2)} GiB`;
            if (need > limit)
                throw new RangeError(
                    `NativePolicy: this configuration needs ${gib(need)} for its parameters, gradients and AdamW moments ` +
                        `(contextLength ${this.config.contextLength}, layers ${this.config.layers}, dModel ${this.config.dModel}, mlpRatio ${this.config.mlpRatio}, ` +
                        `vocab ${this.V}), more than maxMemoryBytes ${gib(limit)}${config.maxMemoryBytes === undefined ? " (80% of this machine's memory)" : ""}`,
                );
        }
        if (config.name !== undefined && typeof config.name !== "string")
            throw new TypeError(`NativePolicy: name: expected a string, got ${describe(config.name)}`);
        this.name = config.name ?? `native-gpt-${this.config.layers}x${this.config.dModel}`;
        this.core = new ModelCore(
            handle ??
                native.gptCreate(
                    {
                        vocab: this.V,
                        context: this.config.contextLength,
                        layers: this.config.layers,
                        heads: this.config.heads,
                        dModel: this.config.dModel,
                        mlpRatio: this.config.mlpRatio,
                        tieEmbeddings: this.config.tieEmbeddings,
                    },
                    this.config.seed,
                ),
            this.name,
        );
    }

    /** A freshly initialised model (on `config.device`). */
    static async create(config: NativePolicyConfig): Promise<NativePolicy> {
        if (config === null || typeof config !== "object")
            throw new TypeError("NativePolicy.create: config: expected an object");
        return new NativePolicy(config).placed("NativePolicy.create", config.device);
    }

    // Moves a new model to `device`, freeing it if that fails (the caller never sees a half-made policy). 'auto' keeps
    // a bfloat16 base on the CPU (where it runs in this version); 'cuda' says so, naming it.
    private placed(fn: string, device: unknown): NativePolicy {
        const d = resolveDevice(fn, device ?? "cpu", 1, 0);
        try {
            const cpuOnly = this.family === "llama" && this.dtype === "bfloat16";
            if (d === "cuda" && !(cpuOnly && device === "auto")) native.gptSetDevice(this.h(), 1);
        } catch (e) {
            this.core.free();
            throw e;
        }
        return this;
    }

    /** How the model's matrices are held: 'bfloat16' for a frozen bf16 base (LoadOptions.dtype), else 'float32'. */
    get dtype(): "float32" | "bfloat16" {
        return this.hf?.info.engine.bf16 === true ? "bfloat16" : "float32";
    }

    // A bfloat16 base cannot be read back as float32 parameters: `what` is refused with the way out.
    private requireFloatBase(what: string): void {
        if (this.adapterId < 0 && this.dtype === "bfloat16")
            throw new Error(
                `${this.name}.${what}: the model's matrices are bfloat16 in memory (loaded with dtype 'bfloat16', frozen); ` +
                    `${what} an adapter of it (withAdapter), or load the model with dtype 'float32'`,
            );
    }

    /** The trainable parameters: the adapter's (A, B and its value head) for an adapter's policy, else the model's
     * (for a bfloat16 base, every tensor's count). */
    /** Bytes of KV cache per token of one row: keys and values, float32, of every layer. */
    get kvBytesPerToken(): number {
        const e = this.hf?.info.engine;
        return e ? e.layers * e.kvHeads * e.headDim * 2 * 4 : this.config.layers * this.config.dModel * 2 * 4;
    }

    /** Bytes of the KV cache the model holds now, between generations (rows x positions x kvBytesPerToken; caches
     * of batches running beside it not counted): 0 after a batch whose cache passed 64 MiB, which gives it back. */
    get kvCacheBytes(): number {
        const c = native.gptCacheInfo(this.h());
        return c.batch * c.maxLen * this.kvBytesPerToken;
    }

    /** The KV cache one generation batch may take (shared by every adapter of a base). A generate call that alone
     * needs more is refused with a RangeError naming the figure; calls that together would need more run as separate
     * batches. Defaults to 25% of the machine's memory. */
    get maxCacheBytes(): number {
        return this.core.maxCacheBytes;
    }
    set maxCacheBytes(bytes: number) {
        if (typeof bytes !== "number" || !(bytes >= 1) || !Number.isFinite(bytes))
            throw new RangeError(`${this.name}: maxCacheBytes: expected a number >= 1, got ${describe(bytes)}`);
        this.core.maxCacheBytes = bytes;
    }

    get parameterCount(): number {
        return this.adapterId >= 0 ? native.loraInfo(this.h(), this.adapterId).count : this.core.baseCount;
    }

    /** The embedded GPT's CharTokenizer (`what` needs one: a Hugging Face model has none, and the error says so). */
    charTokenizer(what: string): CharTokenizer {
        if (this.tokenizer instanceof CharTokenizer) return this.tokenizer;
        throw new Error(
            `${this.name}: ${what} run on the embedded GPT in this version (this is a ${this.hf?.info.modelType ?? "non-GPT"} model)`,
        );
    }

    /** A Hugging Face model's config.json as loaded (null for the embedded GPT). */
    get hfConfig(): Readonly<Record<string, unknown>> | null {
        return this.hf?.info.raw ?? null;
    }

    /** Where the model lives now. */
    get device(): "cpu" | "cuda" {
        return native.gptGetDevice(this.h()) === 1 ? "cuda" : "cpu";
    }

    /**
     * Moves the model (weights, AdamW moments, accumulated gradients) to `device` after the calls in flight. A failed
     * move (no GPU) rejects and leaves the model where it was. The KV cache and the last forward are dropped.
     */
    async to(device: Device): Promise<this> {
        const d = resolveDevice(`${this.name}.to`, device, 1, 0);
        return this.serial(async () => {
            native.gptSetDevice(this.h(), d === "cuda" ? 1 : 0);
            return this;
        });
    }

    private h(): GptHandle {
        if (this.disposed || !this.core.handle) throw new Error(`${this.name}: the model was disposed`);
        return this.core.handle;
    }

    // Runs calls on the model one at a time (every policy on one base shares the queue), each with this policy's
    // adapter selected. A call queued after a generate closes the batch that generate opened.
    private serial<T>(fn: () => Promise<T>): Promise<T> {
        this.core.openBatch = null;
        const turns = this.core.turns;
        turns.waitingSerial++; // no new batch joins running ones while this waits
        let counted = true;
        const uncount = () => {
            if (counted) {
                counted = false;
                turns.waitingSerial--;
            }
        };
        const run = this.enqueue(() => {
            uncount();
            return fn();
        });
        run.catch(uncount);
        return run;
    }

    private enqueue<T>(fn: () => Promise<T>): Promise<T> {
        const go = () => {
            this.select();
            return fn();
        };
        const run = this.core.queue.then(go, go);
        this.core.queue = run.catch(() => undefined);
        return run;
    }

    private select(): void {
        if (this.family !== "llama") return;
        if (this.adapterName !== null && this.core.adapters.get(this.adapterName) !== this.adapterId)
            throw new Error(`${this.name}: adapter '${this.adapter}' was merged or deleted`);
        native.loraSelect(this.h(), this.adapterId);
    }

    /**
     * Batched generation with the KV cache: every request decodes in one batch whatever its prompt length (the Llama
     * family prefills every prompt through the GEMM, then each row decodes its own position; the GPT family reads a
     * prompt while longer ones are still being read), so the tokens are the same as decoding each request alone (in
     * batches of up to 8 rows). onProgress(done, total) counts finished requests.
     */
    async generate(
        requests: GenerateRequest[],
        options: {
            signal?: AbortSignal;
            onProgress?: (done: number, total: number) => void;
            onToken?: TokenCallback;
        } = {},
    ): Promise<Generation[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        const prompts = requests.map((r, i) => this.promptOf(r, i));
        const sampling = requests.map((r, i) => requestSampling(this.name, r, i));
        const seeds = requests.map((r, i) => requestSeed(this.name, r, i));
        prompts.forEach((p, i) => {
            if (p.length === 0)
                throw new RangeError(
                    `${this.name}: requests[${i}]: the prompt encodes to no tokens (nothing to condition the first token on)`,
                );
            if (p.length >= this.config.contextLength)
                throw new RangeError(
                    `${this.name}: requests[${i}]: the prompt is ${p.length} tokens, the context is ${this.config.contextLength}`,
                );
        });
        for (const k of ["onProgress", "onToken"] as const)
            if (options[k] !== undefined && typeof options[k] !== "function")
                throw new TypeError(`${this.name}: ${k}: expected a function, got ${describe(options[k])}`);
        if (requests.length === 0) return [];
        this.h();
        // The KV cache this call needs alone (its rows x the positions its longest row can reach, as decodeCalls sizes
        // it), checked against maxCacheBytes before anything is allocated.
        const rows = prompts.length,
            len = Math.max(
                ...prompts.map(
                    (p, i) =>
                        p.length +
                        Math.max(1, Math.min(sampling[i]!.maxTokens ?? 64, this.config.contextLength - p.length)),
                ),
            );
        if (rows * len * this.kvBytesPerToken > this.core.maxCacheBytes) {
            const mib = (x: number) => `${(x / 2 ** 20).toFixed(1)} MiB`;
            throw new RangeError(
                `${this.name}: this generation needs a KV cache of ${mib(rows * len * this.kvBytesPerToken)} (${rows} rows x ${len} positions), ` +
                    `more than maxCacheBytes ${mib(this.core.maxCacheBytes)}: fewer rows, fewer max tokens, or a larger maxCacheBytes (maporl serve --max-cache-bytes)`,
            );
        }
        // Calls made before the batch starts (on this policy, or on other adapters of its base) join it: one decode
        // step serves every adapter, as vLLM's multi-LoRA batching does.
        const withTools = requests.map((r) => r.tools !== undefined && r.tools.length > 0);
        const done = (gs: Generation[]) =>
            gs.map((g, i) => (withTools[i] ? withToolCalls(g, `call-${seeds[i]}-${i}`) : g));
        return new Promise<Generation[]>((resolveAll, reject) => {
            const resolve = (gs: Generation[]) => resolveAll(done(gs));
            const call: DecodeCall = {
                name: this.name,
                prompts,
                sampling,
                seeds,
                adapter: this.family === "llama" ? this.adapterId : null,
                ...(options.signal ? { signal: options.signal } : {}),
                ...(options.onProgress ? { onProgress: options.onProgress } : {}),
                ...(options.onToken ? { onToken: options.onToken } : {}),
                resolve,
                reject,
            };
            const core = this.core,
                open = core.openBatch,
                per = this.kvBytesPerToken;
            if (open && (core.openRows + rows) * Math.max(core.openLen, len) * per <= core.maxCacheBytes) {
                open.push(call);
                core.openRows += rows;
                core.openLen = Math.max(core.openLen, len);
                return;
            }
            const batch = [call];
            core.openBatch = batch;
            core.openRows = rows;
            core.openLen = len;
            // The batch decodes on its own KV cache; a large one goes back when it ends (a server holds none sized for
            // its largest request while idle), a small one is kept for the next batch.
            let big = true;
            const close = () => {
                const bytes = core.openBatch === batch ? core.openRows * core.openLen * per : Infinity;
                if (core.openBatch === batch) core.openBatch = null;
                big = bytes > CACHE_KEEP_BYTES;
            };
            const run = async (lease: DecodeLease, joined: boolean) => {
                try {
                    // A batch joining running ones stays open until its first turn (a step of the others), so that
                    // requests arriving meanwhile decode with it as one batch rather than each beside the rest.
                    if (joined) await lease.run(() => undefined);
                    close();
                    await decodeCalls(
                        this.h(),
                        this.tokenizer,
                        this.V,
                        this.config.contextLength,
                        batch,
                        this.family === "llama",
                        lease,
                    );
                } catch (e) {
                    for (const c of batch) c.reject(e);
                }
            };
            const prepare = () => this.select();
            if (core.turns.canJoin()) {
                // Decoding is under way: this batch starts beside it and they take turns, so that it does not wait for
                // the longest request.
                void core.turns.join(
                    (lease) => run(lease, true),
                    prepare,
                    () => big,
                );
                return;
            }
            this.enqueue(() =>
                core.turns.session(
                    (lease) => run(lease, false),
                    prepare,
                    () => big,
                ),
            ).catch((e: unknown) => {
                for (const c of batch) c.reject(e);
            });
        });
    }

    // A request's prompt ids: promptTokenIds as given, else its messages in the model's chat format.
    private promptOf(r: GenerateRequest, i: number): number[] {
        const ids = (r as { promptTokenIds?: unknown } | null)?.promptTokenIds;
        if (ids === undefined) {
            const messages = nativeChat(requestMessages(this.name, r, i), r.tools);
            // A prompt far past the context is refused before it is tokenized (a 1 MiB prompt held the event loop ~1 s).
            const least = fewestTokens(
                this.tokenizer,
                messages.reduce((a, m) => a + m.content.length, 0),
            );
            if (least >= this.config.contextLength)
                throw new RangeError(
                    `${this.name}: requests[${i}]: the prompt is at least ${least} tokens, the context is ${this.config.contextLength}`,
                );
            try {
                return this.tokenizer.encodeChat(messages);
            } catch (e) {
                const kind =
                    e instanceof TypeError
                        ? TypeError
                        : e instanceof RangeError
                          ? RangeError
                          : e instanceof TemplateError
                            ? TemplateError
                            : Error;
                throw new kind(`${this.name}: requests[${i}]: ${(e as Error).message}`);
            }
        }
        if (!Array.isArray(ids) || ids.length === 0 || !ids.every((x) => Number.isInteger(x) && x >= 0 && x < this.V))
            throw new TypeError(
                `${this.name}: requests[${i}].promptTokenIds: expected a non-empty array of token ids in [0, ${this.V}), got ${describe(ids)}`,
            );
        return [...(ids as number[])];
    }

    /** log p(tokens[b, t + 1] | tokens[b, <= t]) at temperature 1, [B, T] (0 at the last position). */
    async logprobs(batch: { tokens: Int32Array; shape: readonly [number, number] }): Promise<Float32Array> {
        const [B, T] = this.checkBatch("logprobs", batch);
        return this.serial(async () => {
            // Position t is scored against token t + 1; the last position of a row against itself, then zeroed.
            const targets = new Int32Array(B * T);
            for (let b = 0; b < B; b++)
                for (let t = 0; t < T; t++) targets[b * T + t] = batch.tokens[b * T + Math.min(t + 1, T - 1)]!;
            let out: Float32Array;
            if (this.family === "llama") {
                // the LM head in row chunks: never [B, T, V] logits
                out = new Float32Array(B * T);
                await native.gptScoreAsync(this.h(), batch.tokens, targets, B, T, 1, 0, out, null, null);
            } else {
                const logits = new Float32Array(B * T * this.V);
                await native.gptForwardAsync(this.h(), batch.tokens, B, T, logits, null);
                out = logprobs({ logits, targets, shape: [B * T, this.V] }, { device: "cpu" }).logp;
            }
            for (let b = 0; b < B; b++) out[b * T + T - 1] = 0;
            return out;
        });
    }

    /**
     * The scalar value head on the final hidden state, V[b, t] for the state after tokens[b, <= t], [B, T]. A critic
     * is a NativePolicy trained with `loss: 'value'` (the trainers keep critics separate from the actors, as
     * MAPoRL's value adapters and CoMLRL's separate critics are).
     */
    async values(batch: { tokens: Int32Array; shape: readonly [number, number] }): Promise<Float32Array> {
        const [B, T] = this.checkBatch("values", batch);
        return this.serial(async () => {
            const values = new Float32Array(B * T);
            await native.gptForwardAsync(this.h(), batch.tokens, B, T, null, values);
            return values;
        });
    }

    // The batch object, its shape [B, T] (T within the context) and its tokens; returns [B, T].
    private checkBatch(fn: string, batch: { tokens: Int32Array; shape: readonly [number, number] }): [number, number] {
        const where = `${this.name}.${fn}`;
        if (batch === null || typeof batch !== "object")
            throw new TypeError(`${where}: batch: expected an object with tokens and shape, got ${describe(batch)}`);
        const [B, T] = requireShape2(where, batch.shape, ["B", "T"]);
        if (!(T >= 1 && T <= this.config.contextLength))
            throw new RangeError(`${where}: shape[1] (T): expected 1..${this.config.contextLength}, got ${T}`);
        requireArray(where, "tokens", batch.tokens, [Int32Array], B * T);
        return [B, T];
    }

    /**
     * One training step: forward, the loss's gradient w.r.t. the logits from the fused kernel (SFT = cross-entropy),
     * backward, global-norm clip and AdamW. With `accumulate`, gradients add up over calls until a step.
     */
    async trainStep(batch: TrainBatch, options: TrainOptions = {}): Promise<TrainResult> {
        const [B, T] = this.checkBatch("trainStep", batch);
        const fn = `${this.name}.trainStep`;
        const o = requireOptions<TrainOptions>(fn, "options", options, TRAIN_OPTION_KEYS);
        if (
            o.loss !== undefined &&
            o.loss !== "sft" &&
            o.loss !== "value" &&
            (o.loss === null || typeof o.loss !== "object" || Array.isArray(o.loss))
        )
            throw new (typeof o.loss === "string" ? RangeError : TypeError)(
                `${fn}: loss: expected 'sft', 'value' or policy-loss options, got ${describe(o.loss)}`,
            );
        const lr = requireNumber(fn, "lr", o.lr, 3e-4, 0, Number.MAX_VALUE);
        const beta1 = requireNumber(fn, "beta1", o.beta1, 0.9, 0, 1),
            beta2 = requireNumber(fn, "beta2", o.beta2, 0.95, 0, 1);
        if (beta1 === 1 || beta2 === 1)
            throw new RangeError(`${fn}: ${beta1 === 1 ? "beta1" : "beta2"}: expected a number in [0, 1), got 1`);
        const eps = requireNumber(fn, "eps", o.eps, 1e-8, Number.MIN_VALUE, Number.MAX_VALUE);
        const weightDecay = requireNumber(fn, "weightDecay", o.weightDecay, 0, 0, Number.MAX_VALUE);
        const maxGradNorm = requireNumber(fn, "maxGradNorm", o.maxGradNorm, 1, -Number.MAX_VALUE, Number.MAX_VALUE);
        const accumulate = requireBoolean(fn, "accumulate", o.accumulate, false);
        const keepLogitsBytes =
            o.keepLogitsBytes === undefined
                ? 2 ** 28
                : requireInteger(fn, "keepLogitsBytes", o.keepLogitsBytes, 0, 2 ** 40);
        if (o.valueClip !== undefined && o.valueClip !== null)
            requireNumber(fn, "valueClip", o.valueClip, 0, Number.MIN_VALUE, Number.MAX_VALUE);
        if (o.signal !== undefined && !(o.signal instanceof AbortSignal))
            throw new TypeError(`${fn}: signal: expected an AbortSignal, got ${describe(o.signal)}`);
        if (!(batch.targets instanceof Int32Array) || batch.targets.length !== B * T)
            throw new TypeError(`${fn}: targets: expected Int32Array of ${B * T} elements`);
        const loss = o.loss ?? "sft";
        if (loss === "value") {
            if (!(batch.returns instanceof Float32Array) || batch.returns.length !== B * T)
                throw new TypeError(`${fn}: returns: expected a Float32Array of ${B * T} elements for loss 'value'`);
        } else if (loss !== "sft" && !(batch.advantages instanceof Float32Array))
            throw new TypeError(`${fn}: advantages: expected a Float32Array ([B] or [B, T]) for a policy loss`);
        if (o.onProgress !== undefined && typeof o.onProgress !== "function")
            throw new TypeError(`${fn}: onProgress: expected a function, got ${describe(o.onProgress)}`);
        return this.serial(async () => {
            const h = this.h();
            const phases = accumulate ? 3 : 4;
            const phase = (done: number) => {
                o.onProgress?.(done, phases);
            };
            o.signal?.throwIfAborted();
            const isValue = loss === "value";
            if (this.family === "llama" && !isValue) {
                const r = await this.scoredLoss(batch, loss, keepLogitsBytes, o.signal, phase);
                return this.finishStep(h, r, accumulate, [lr, beta1, beta2, eps, weightDecay, maxGradNorm], phase);
            }
            const logits = isValue ? null : new Float32Array(B * T * this.V),
                values = isValue ? new Float32Array(B * T) : null;
            if (this.family === "llama") native.gptSetTraining(h, true);
            try {
                await native.gptForwardAsync(h, batch.tokens, B, T, logits, values);
            } finally {
                if (this.family === "llama") native.gptSetTraining(h, false);
            }
            phase(1);
            o.signal?.throwIfAborted();
            const sft = loss === "sft";
            const r = isValue
                ? this.valueGrad(values!, batch, o.valueClip ?? null)
                : fusedPolicyLoss(
                      {
                          logits: logits!,
                          targets: batch.targets,
                          mask: batch.mask,
                          shape: [B, T, this.V],
                          advantages: sft ? new Float32Array(B * T).fill(1) : batch.advantages!,
                          ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}),
                          ...(batch.refLogp ? { refLogp: batch.refLogp } : {}),
                      },
                      sft
                          ? { type: "reinforce", aggregation: "token-mean", inPlace: true, device: "cpu" }
                          : { ...loss, inPlace: true, device: "cpu" },
                  );
            phase(2);
            o.signal?.throwIfAborted();
            if (this.needZero) native.gptZeroGrad(h);
            await native.gptBackwardAsync(
                h,
                "gradValues" in r ? null : r.gradLogits,
                "gradValues" in r ? r.gradValues : null,
            );
            phase(3);
            return this.finishStep(h, r, accumulate, [lr, beta1, beta2, eps, weightDecay, maxGradNorm], phase);
        });
    }

    // The optimizer step after a backward (or, with accumulate, the gradients kept for the next call).
    private async finishStep(
        h: GptHandle,
        r: { loss: number; stats: PolicyLossStats },
        accumulate: boolean,
        adam: [number, number, number, number, number, number],
        phase: (done: number) => void,
    ): Promise<TrainResult> {
        if (accumulate) {
            this.needZero = false;
            return { loss: r.loss, gradNorm: NaN, stats: r.stats, step: native.gptGetStep(h) };
        }
        const gradNorm = await native.gptStepAsync(h, ...adam);
        this.needZero = true;
        phase(4);
        return { loss: r.loss, gradNorm, stats: r.stats, step: native.gptGetStep(h) };
    }

    // A Llama-family step through log-probs: the forward scores the targets (log-prob and entropy per token, the LM
    // head in row chunks), the policy loss runs on those [B, T] values (SFT = REINFORCE with advantage 1 and
    // token-mean, which is the mean cross-entropy), and the backward turns d loss / d logp and d loss / d entropy
    // into the gradients, recomputing each chunk's logits (or reusing the forward's, when they fit keepLogitsBytes).
    // The same loss and gradient as the fused kernel on the full logits, without them.
    private async scoredLoss(
        batch: TrainBatch,
        loss: "sft" | LossOptions,
        keepLogitsBytes: number,
        signal: AbortSignal | undefined,
        phase: (done: number) => void,
    ): Promise<{ loss: number; stats: PolicyLossStats }> {
        const [B, T] = batch.shape,
            N = B * T,
            h = this.h();
        const logp = new Float32Array(N),
            entropy = new Float32Array(N);
        native.gptSetScoreKeep(h, keepLogitsBytes);
        native.gptSetTraining(h, true); // (the adapter's dropout; the rest of the model has none; the logits kept)
        try {
            await native.gptScoreAsync(h, batch.tokens, batch.targets, B, T, 1, 0, logp, entropy, null);
        } finally {
            native.gptSetTraining(h, false);
        }
        phase(1);
        signal?.throwIfAborted();
        const sft = loss === "sft";
        const r = policyLoss(
            {
                logp,
                mask: batch.mask,
                shape: [B, T],
                entropy,
                advantages: sft ? new Float32Array(N).fill(1) : batch.advantages!,
                ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}),
                ...(batch.refLogp ? { refLogp: batch.refLogp } : {}),
            },
            sft ? { type: "reinforce", aggregation: "token-mean", device: "cpu" } : { ...loss, device: "cpu" },
        );
        phase(2);
        signal?.throwIfAborted();
        if (this.needZero) native.gptZeroGrad(h);
        await native.gptScoreBackwardAsync(h, r.gradLogp, r.gradEntropy ?? null, null);
        phase(3);
        return r;
    }

    // verl's (clipped) value loss on the value head's outputs, and its gradient w.r.t. them.
    private valueGrad(
        values: Float32Array,
        batch: TrainBatch,
        clip: number | null,
    ): { loss: number; gradValues: Float32Array; stats: PolicyLossStats } {
        const [B, T] = batch.shape;
        const r = valueLoss(
            {
                values,
                returns: batch.returns!,
                mask: batch.mask,
                shape: [B, T],
                ...(batch.oldValues ? { oldValues: batch.oldValues } : {}),
            },
            { clip, device: "cpu" },
        );
        let sequences = 0;
        for (let b = 0; b < B; b++)
            for (let t = 0; t < T; t++)
                if (batch.mask[b * T + t]) {
                    sequences++;
                    break;
                }
        const stats: PolicyLossStats = {
            pgLoss: r.loss,
            klLoss: 0,
            entropyLoss: 0,
            clipFrac: r.stats.clipFrac,
            clipFracLower: 0,
            approxKl: 0,
            klMean: 0,
            entropyMean: 0,
            ratioMean: 1,
            ratioMax: 1,
            tokens: r.stats.tokens,
            sequences,
        };
        return { loss: r.loss, gradValues: r.gradValues, stats };
    }

    /** A copy with the same weights (and tokenizer) on the same device: e.g. the frozen reference policy. Optimizer
     * state is not copied. */
    async clone(name?: string): Promise<NativePolicy> {
        if (this.adapter !== null) return this.cloneAdapter(name ?? `${this.adapter}-clone`);
        this.requireFloatBase("clone");
        return this.serial(async () => {
            const cname = name ?? `${this.name}-clone`;
            const c = this.hf
                ? new NativePolicy({ name: cname } as NativePolicyConfig, native.llamaCreate(this.hf.info.engine, 0), {
                      state: this.hf,
                      tokenizer: this.tokenizer,
                  })
                : new NativePolicy({ ...this.config, tokenizer: this.charTokenizer("clone"), name: cname });
            const p = new Float32Array(this.parameterCount);
            native.gptGet(this.h(), 0, p);
            native.gptSet(c.h(), 0, p);
            return c.placed(`${this.name}.clone`, this.device);
        });
    }

    /** Writes the checkpoint directory `dir` (replacing it atomically). A Hugging Face model writes a Hugging Face
     * directory (config.json, generation_config.json, float32 weights, the tokenizer files) that transformers and vLLM
     * load as it is, plus maporl's value_head.safetensors, maporl.json and, once trained, optimizer.safetensors. */
    async save(dir: string, options: SaveOptions = {}): Promise<void> {
        const o = requireOptions<SaveOptions>(`${this.name}.save`, "options", options, ["maxShardBytes", "baseModel"]);
        const maxShardBytes = requireNumber(
            `${this.name}.save`,
            "maxShardBytes",
            o.maxShardBytes,
            5e9,
            1,
            Number.MAX_SAFE_INTEGER,
        );
        if (
            o.baseModel !== undefined &&
            (typeof o.baseModel !== "string" || o.baseModel === "" || this.adapter === null)
        )
            throw new TypeError(
                `${this.name}.save: baseModel: expected a non-empty string, for an adapter's policy, got ${describe(o.baseModel)}${this.adapter === null ? " (this policy runs no adapter)" : ""}`,
            );
        this.requireFloatBase("save");
        return this.serial(async () => {
            const h = this.h(),
                n = this.parameterCount,
                step = native.gptGetStep(h);
            if (this.adapter !== null)
                return replaceDirDurable(dir, (tmp) =>
                    writeAdapterDir(tmp, h, this.adapterId, o.baseModel ?? this.hf?.sourceDir ?? null, {
                        format: "maporl-lora",
                        version: 1,
                        name: this.adapter!,
                        step,
                        seed: native.loraInfo(h, this.adapterId).seed,
                    }),
                );
            return replaceDirDurable(dir, (tmp) => {
                const optimizer = () => writeOptimizer(join(tmp, "optimizer.safetensors"), h);
                if (this.hf) {
                    writeHfDir(
                        tmp,
                        h,
                        this.hf.info,
                        {
                            format: "maporl-hf",
                            version: 1,
                            name: this.name,
                            step,
                            contextLength: this.config.contextLength,
                        },
                        this.tokenizer,
                        this.hf.tokenizerDir,
                        maxShardBytes,
                    );
                    if (step > 0) optimizer(); // (an untrained model's moments are zero: not allocated, not written)
                } else {
                    const p = new Float32Array(n);
                    native.gptGet(h, 0, p);
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
                    writeFileDurable(join(tmp, "tokenizer.json"), JSON.stringify(this.charTokenizer("save").toJSON()));
                    writeFileDurable(
                        join(tmp, "config.json"),
                        JSON.stringify(
                            { format: "maporl-gpt", version: 1, name: this.name, ...this.config, vocab: this.V, step },
                            null,
                            2,
                        ),
                    );
                }
            });
        });
    }

    /** Loads a checkpoint directory written by save(), or a Hugging Face model directory (a config.json with
     * model_type: llama, mistral, qwen2 or qwen3; model.safetensors or its shards in F32, BF16 or F16; tokenizer.json
     * and tokenizer_config.json's chat template). Checkpoints do not record a device: `options.device`, default 'cpu'.
     * A bad directory fails before any weight is written, naming the file, key or tensor. */
    static async load(dir: string, options: LoadOptions = {}): Promise<NativePolicy> {
        if (typeof dir !== "string" || dir.length === 0)
            throw new TypeError(`NativePolicy.load: dir: expected a directory path, got ${describe(dir)}`);
        const o = requireOptions<LoadOptions>("NativePolicy.load", "options", options, [
            "device",
            "contextLength",
            "tokenizer",
            "chatTemplate",
            "name",
            "lora",
            "base",
            "dtype",
            "maxMemoryBytes",
        ]);
        requireDtype("NativePolicy.load", o.dtype);
        if (isAdapterDir(dir)) return NativePolicy.loadOnBase(dir, o);
        if (o.base !== undefined)
            throw new RangeError(
                `NativePolicy.load: base: only for a PEFT adapter directory (${join(dir, "adapter_config.json")} is missing)`,
            );
        if (isHfModelDir(dir)) return NativePolicy.withLora(NativePolicy.loadHf(dir, o), o.lora);
        for (const k of ["contextLength", "tokenizer", "chatTemplate", "lora", "dtype"] as const)
            if (o[k] !== undefined)
                throw new RangeError(
                    `NativePolicy.load: ${k}: only for Hugging Face directories (${join(dir, "config.json")} has no model_type)`,
                );
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
        // A bad file is named in the error, whatever its fault (not JSON, a bad field).
        const within = <T>(f: string, fn: () => T): T => {
            try {
                return fn();
            } catch (e) {
                if (
                    (e instanceof SyntaxError || e instanceof TypeError || e instanceof RangeError) &&
                    !e.message.startsWith("NativePolicy.load:")
                )
                    throw new (e.constructor as new (m: string) => Error)(
                        `NativePolicy.load: ${join(dir, f)}: ${e.message}`,
                    );
                throw e;
            }
        };
        const json = (f: string): Record<string, unknown> => {
            const text = read(f);
            const v = within(f, () => {
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
        const tokenizer = within("tokenizer.json", () => CharTokenizer.fromJSON(json("tokenizer.json") as never));
        const policy = within(
            "config.json",
            () =>
                new NativePolicy({
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
                }),
        );
        const h = policy.h(),
            n = policy.parameterCount;
        const model = readSafetensors(join(dir, "model.safetensors"));
        const byName = new Map(model.tensors.map((t) => [t.name, t]));
        const p = new Float32Array(n);
        for (const t of native.gptTensors(h)) {
            const src = byName.get(t.name);
            const size = t.shape.reduce((a, b) => a * b, 1);
            if (!src || !(src.data instanceof Float32Array) || src.data.length !== size)
                throw new SyntaxError(
                    `NativePolicy.load: ${dir}/model.safetensors: tensor ${t.name} missing or of the wrong size or dtype`,
                );
            p.set(src.data, t.offset);
        }
        native.gptSet(h, 0, p);
        loadOptimizer("NativePolicy.load", join(dir, "optimizer.safetensors"), h);
        native.gptSetStep(h, requireInt("config.json step", cfg.step, 0, Number.MAX_SAFE_INTEGER));
        return policy.placed("NativePolicy.load", options.device);
    }

    /**
     * A randomly initialised model of a Hugging Face architecture from its config.json object (transformers'
     * from_config): matrices normal(0, 0.02), norms 1, biases 0. `tokenizer` is a directory with tokenizer.json, an
     * HfTokenizer, or null. save() writes it as a Hugging Face directory.
     */
    static async fromConfig(
        hfConfig: Record<string, unknown>,
        options: Omit<LoadOptions, "tokenizer"> & { tokenizer: string | HfTokenizer | null; seed?: number },
    ): Promise<NativePolicy> {
        const fn = "NativePolicy.fromConfig";
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
        const seed = requireInt("seed", o.seed ?? 0, 0, Number.MAX_SAFE_INTEGER);
        const info = readHfConfig("(hfConfig)", { ...hfConfig }, o.contextLength);
        if (o.contextLength === undefined) info.engine.context = Math.min(info.engine.context, 8192);
        const { tokenizer, tokenizerDir } = resolveHfTokenizer(fn, null, info, o);
        if (o.dtype === "bfloat16") info.engine.bf16 = true;
        const h = native.llamaCreate(info.engine, seed);
        return NativePolicy.withLora(
            new NativePolicy({ name: o.name } as NativePolicyConfig, h, {
                state: { info, tokenizerDir, sourceDir: null },
                tokenizer,
            }).placed(fn, o.device),
            o.lora,
        );
    }

    private static loadHf(dir: string, o: LoadOptions): NativePolicy {
        const m = openHfModel(dir, o);
        return new NativePolicy({ name: m.name } as NativePolicyConfig, m.handle, {
            state: { info: m.info, tokenizerDir: m.tokenizerDir, sourceDir: resolve(dir) },
            tokenizer: m.tokenizer,
        }).placed("NativePolicy.load", o.device);
    }

    // options.lora: the policy of a new adapter 'default' on `base` (whose own policy is released).
    private static async withLora(base: NativePolicy, lora: LoraOptions | undefined): Promise<NativePolicy> {
        if (lora === undefined) return base;
        try {
            return await base.withAdapter("default", lora);
        } finally {
            await base.dispose();
        }
    }

    // A PEFT adapter directory on options.base (a policy whose model it joins, or a model directory to load).
    private static async loadOnBase(dir: string, o: LoadOptions): Promise<NativePolicy> {
        const fn = "NativePolicy.load";
        if (o.lora !== undefined)
            throw new RangeError(
                `${fn}: lora: not for an adapter directory (${dir} is one: its adapter_config.json gives the settings)`,
            );
        if (o.base instanceof NativePolicy)
            return o.base.loadAdapter(dir, o.name !== undefined ? { name: o.name } : {});
        // Without options.base: adapter_config.json's base_model_name_or_path, when it is a local model directory.
        const named = o.base === undefined ? adapterBaseModel(dir) : null;
        if (typeof o.base !== "string" && named === null)
            throw new TypeError(
                `${fn}: base: expected the base model of the adapter in ${dir} (a NativePolicy or a model directory; its ` +
                    `base_model_name_or_path is not a local model directory), got ${describe(o.base)}`,
            );
        const { name, ...rest } = o,
            base = o.base ?? named!;
        delete rest.base;
        const b = await NativePolicy.load(base, rest);
        try {
            return await b.loadAdapter(dir, name !== undefined ? { name } : {});
        } finally {
            await b.dispose();
        }
    }

    /** The names of the LoRA adapters on this policy's base. */
    get adapters(): string[] {
        return [...this.core.adapters.keys()];
    }

    /**
     * The policy of LoRA adapter `name` on this policy's base, sharing its memory (a few MB per adapter; switching is
     * free): the existing adapter of that name, or a new one with `lora` (default: this policy's adapter's settings,
     * else LoraOptions' defaults). Only the adapter trains (its A, B and value head; the base is frozen). null: the
     * base alone, as the reference model for KL (no copy). generate calls on several adapters of one base made
     * together run as one batch.
     */
    async withAdapter(name: string | null, lora?: LoraOptions): Promise<NativePolicy> {
        const fn = `${this.name}.withAdapter`;
        if (this.family !== "llama")
            throw new Error(`${fn}: LoRA adapters need a Hugging Face (Llama-family) model; this is the embedded GPT`);
        if (name !== null && (typeof name !== "string" || name.length === 0))
            throw new TypeError(`${fn}: name: expected a non-empty string or null, got ${describe(name)}`);
        if (name === null && lora !== undefined) throw new RangeError(`${fn}: lora: not for the base (name null)`);
        return this.serial(async () => {
            if (name === null) return this.view(null, -1);
            const h = this.h();
            let id = this.core.adapters.get(name);
            if (id !== undefined && lora !== undefined)
                throw new RangeError(`${fn}: lora: adapter '${name}' exists (the options are for a new one)`);
            if (id === undefined) {
                const c = resolveLora(
                    fn,
                    lora ?? (this.adapterId >= 0 ? loraOptionsOf(native.loraInfo(h, this.adapterId)) : undefined),
                    name,
                );
                id = native.loraAdd(h, c, c.seed);
                this.core.adapters.set(name, id);
            }
            return this.view(name, id);
        });
    }

    // A policy on this one's model running `adapter` (id; null / -1: the base).
    private view(adapter: string | null, id: number): NativePolicy {
        const v = new NativePolicy(
            { name: adapter ?? this.core.baseName } as NativePolicyConfig,
            undefined,
            { state: this.hf!, tokenizer: this.tokenizer },
            { core: this.core, adapter, id },
        );
        this.core.views++;
        return v;
    }

    // clone() of an adapter's policy: a new adapter `name` on the same base with a copy of this one's parameters.
    private async cloneAdapter(name: string): Promise<NativePolicy> {
        return this.serial(async () => {
            const h = this.h();
            if (this.core.adapters.has(name))
                throw new RangeError(`${this.name}.clone: name: adapter '${name}' exists`);
            const p = new Float32Array(this.parameterCount);
            native.gptGet(h, 0, p);
            const c = native.loraInfo(h, this.adapterId);
            const id = native.loraAdd(h, c, fnv1a(name));
            native.loraSelect(h, id);
            native.gptSet(h, 0, p);
            this.core.adapters.set(name, id);
            return this.view(name, id);
        });
    }

    /** Loads a PEFT adapter directory (adapter_config.json, adapter_model.safetensors in F32 / BF16 / F16; maporl's
     * value head, optimizer state and step when saved by maporl) as a new adapter on this policy's base. Its name:
     * options.name, else the one maporl saved, else 'default'. A bad directory adds nothing. */
    async loadAdapter(dir: string, options: { name?: string } = {}): Promise<NativePolicy> {
        const fn = `${this.name}.loadAdapter`;
        if (this.family !== "llama")
            throw new Error(`${fn}: LoRA adapters need a Hugging Face (Llama-family) model; this is the embedded GPT`);
        const o = requireOptions<{ name?: string }>(fn, "options", options, ["name"]);
        if (o.name !== undefined && (typeof o.name !== "string" || o.name.length === 0))
            throw new TypeError(`${fn}: name: expected a non-empty string, got ${describe(o.name)}`);
        const c = readAdapterConfig(fn, dir),
            state = readAdapterState(fn, dir);
        const name = o.name ?? state?.name ?? "default";
        return this.serial(async () => {
            if (this.core.adapters.has(name))
                throw new RangeError(`${fn}: adapter '${name}' exists on this base (pass options.name)`);
            // The saved seed keeps the dropout masks of a resumed run; a PEFT adapter from elsewhere gets its name's.
            const h = this.h(),
                id = native.loraAdd(h, c, state?.seed ?? fnv1a(name));
            try {
                native.loraSelect(h, id);
                loadAdapterTensors(fn, dir, h, state);
                this.core.adapters.set(name, id);
                return this.view(name, id);
            } catch (e) {
                native.loraRemove(h, id);
                throw e;
            }
        });
    }

    /** Writes this adapter as a PEFT adapter directory (as save() does for an adapter's policy). */
    async saveAdapter(dir: string): Promise<void> {
        if (this.adapterName === null)
            throw new Error(`${this.name}.saveAdapter: this policy runs no adapter (the base: use save())`);
        return this.save(dir);
    }

    /** PEFT's merge_and_unload for this adapter: W += (alpha / r) B A in the shared base (every policy on it sees the
     * merged weights), the adapter removed; this policy then runs the merged base, and save() writes a plain model. */
    async mergeAdapter(): Promise<this> {
        if (this.adapterName === null) throw new Error(`${this.name}.mergeAdapter: this policy runs no adapter`);
        return this.serial(async () => {
            native.loraMerge(this.h(), this.adapterId);
            this.core.adapters.delete(this.adapterName!);
            this.adapterName = null;
            this.adapterId = -1;
            return this;
        });
    }

    /** Removes adapter `name` from the base (its policies then fail their calls). */
    async deleteAdapter(name: string): Promise<void> {
        return this.serial(async () => {
            const id = this.core.adapters.get(name);
            if (id === undefined)
                throw new RangeError(
                    `${this.name}.deleteAdapter: name: no adapter '${String(name)}' (adapters: ${this.adapters.join(", ") || "none"})`,
                );
            native.loraRemove(this.h(), id);
            this.core.adapters.delete(name);
        });
    }

    /** Releases this policy after the calls in flight; the native model is freed with the last policy on it. */
    async dispose(): Promise<void> {
        this.disposing ??= (async () => {
            await this.core.queue;
            this.disposed = true;
            if (--this.core.views === 0) this.core.free();
        })();
        return this.disposing;
    }

    async [Symbol.asyncDispose](): Promise<void> {
        await this.dispose();
    }
}
