// nativePolicy.ts: the native model engine as a Policy (bindings/model/gpt.cpp): the embedded GPT (native/model/gpt.h)
// or a Hugging Face Llama / Mistral / Qwen2 / Qwen3 directory (native/model/llama.h; hfLoad.ts, hfTokenizer.ts). This
// file holds the policy's handle, placement, call queue and construction; the work is in its modules:
// generate.ts (batched decoding with the KV cache), trainStep.ts (logprobs, values, training steps), persist.ts
// (checkpoints), adapters.ts (LoRA on a shared base), options.ts, core.ts (ModelCore, EngineView). Calls on one model
// are serialised.
import { join, resolve } from "node:path";

import { type Device, resolveDevice } from "../backend.js";
import { native, type GptHandle } from "../native.js";
import { CharTokenizer, type PolicyTokenizer } from "../policy/tokenizer.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";
import { describe, requireOptions } from "../validate.js";
import * as adapters from "./adapters.js";
import {
    checkGptMemory,
    createGpt,
    gptShape,
    type HfState,
    hfShape,
    ModelCore,
    type ModelShape,
    requireDtype,
} from "./core.js";
import { generate, type GenerateOptions } from "./generate.js";
import { isHfModelDir } from "./hf.js";
import { openGgufModel } from "./gguf.js";
import { createHfModel, type OpenedHfModel, openHfModel } from "./hfLoad.js";
import type { HfTokenizer } from "./hfTokenizer.js";
import { isAdapterDir, type LoraOptions } from "./lora.js";
import {
    type HfLoadOptions,
    type NativePolicyConfig,
    type SaveOptions,
    type TrainBatch,
    type TrainOptions,
    type TrainResult,
} from "./options.js";
import { adapterBaseModel, loadGptWeights, readGptCheckpoint, save, withinFile } from "./persist.js";
import { logprobs, trainStep, values } from "./trainStep.js";

/** Options of NativePolicy.load. */
export interface LoadOptions extends HfLoadOptions {
    /** A PEFT adapter directory (adapter_config.json): the base it goes on, a loaded NativePolicy (its model is
     * shared) or a Hugging Face model directory. Defaults to adapter_config.json's base_model_name_or_path when that
     * is a local model directory (as an adapter saved by maporl records it). */
    base?: NativePolicy | string;
}

export class NativePolicy implements Policy {
    readonly name: string;
    readonly tokenizer: PolicyTokenizer;
    /** The GPT's config; for a Hugging Face model its shape in the same terms (mlpRatio = intermediate_size /
     * hidden_size, rounded), the whole config being `hfConfig`. */
    readonly config: ModelShape;
    /** 'gpt' (the embedded model) or 'llama' (a Hugging Face llama / mistral / qwen2 / qwen3 model). */
    readonly family: "gpt" | "llama";
    /** The LoRA adapter this policy runs (null: the model itself, or the base of its adapters: the reference model). */
    get adapter(): string | null {
        return this.adapterName;
    }
    /** @internal */
    adapterName: string | null;
    private disposing: Promise<void> | null = null;
    /** @internal */
    readonly hf: HfState | null;
    /** @internal */
    readonly core: ModelCore;
    /** @internal */
    adapterId: number;
    private disposed = false;
    /** @internal */
    readonly V: number;
    /** @internal */
    needZero = true;

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
            this.config = hfShape(e);
            this.V = e.vocab;
            this.name = config.name ?? `${hf.state.info.modelType}-${e.layers}x${e.dModel}`;
            this.core = share?.core ?? new ModelCore(handle!, this.name, e.bf16 === true || e.int8 === true);
            return;
        }
        this.config = gptShape(config);
        this.V = this.tokenizer.vocabSize;
        if (handle === undefined) checkGptMemory(this.config, this.V, config.maxMemoryBytes);
        if (config.name !== undefined && typeof config.name !== "string")
            throw new TypeError(`NativePolicy: name: expected a string, got ${describe(config.name)}`);
        this.name = config.name ?? `native-gpt-${this.config.layers}x${this.config.dModel}`;
        this.core = new ModelCore(handle ?? createGpt(this.config, this.V), this.name);
    }

    /** A freshly initialised model (on `config.device`). */
    static async create(config: NativePolicyConfig): Promise<NativePolicy> {
        if (config === null || typeof config !== "object")
            throw new TypeError("NativePolicy.create: config: expected an object");
        return new NativePolicy(config).placed("NativePolicy.create", config.device);
    }

    // Moves a new model to `device`, freeing it if that fails (the caller never sees a half-made policy).
    /** @internal */
    placed(fn: string, device: unknown): NativePolicy {
        const d = resolveDevice(fn, device ?? "cpu", 1, 0);
        try {
            if (d === "cuda") native.gptSetDevice(this.h(), 1);
        } catch (e) {
            this.core.free();
            throw e;
        }
        return this;
    }

    /** How the model's matrices are held: 'bfloat16' or 'int8' for a frozen base (LoadOptions.dtype), else 'float32'. */
    get dtype(): "float32" | "bfloat16" | "int8" {
        const e = this.hf?.info.engine;
        return e?.int8 === true ? "int8" : e?.bf16 === true ? "bfloat16" : "float32";
    }

    // A bfloat16 or int8 base cannot be read back as float32 parameters: `what` is refused with the way out.
    /** @internal */
    requireFloatBase(what: string): void {
        if (this.adapterId < 0 && this.dtype !== "float32")
            throw new Error(
                `${this.name}.${what}: the model's matrices are ${this.dtype} in memory (loaded with dtype '${this.dtype}', frozen); ` +
                    `${what} an adapter of it (withAdapter), or load the model with dtype 'float32'`,
            );
    }

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

    /** The trainable parameters: the adapter's (A, B and its value head) for an adapter's policy, else the model's
     * (for a bfloat16 or int8 base, every tensor's count). */
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

    /** @internal */
    h(): GptHandle {
        if (this.disposed || !this.core.handle) throw new Error(`${this.name}: the model was disposed`);
        return this.core.handle;
    }

    // Runs calls on the model one at a time (every policy on one base shares the queue), each with this policy's
    // adapter selected. A call queued after a generate closes the batch that generate opened.
    /** @internal */
    serial<T>(fn: () => Promise<T>): Promise<T> {
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

    /** @internal */
    enqueue<T>(fn: () => Promise<T>): Promise<T> {
        const go = () => {
            this.select();
            return fn();
        };
        const run = this.core.queue.then(go, go);
        this.core.queue = run.catch(() => undefined);
        return run;
    }

    /** @internal */
    select(): void {
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
    async generate(requests: GenerateRequest[], options: GenerateOptions = {}): Promise<Generation[]> {
        return generate(this, requests, options);
    }

    /** log p(tokens[b, t + 1] | tokens[b, <= t]) at temperature 1, [B, T] (0 at the last position). */
    async logprobs(batch: { tokens: Int32Array; shape: readonly [number, number] }): Promise<Float32Array> {
        return logprobs(this, batch);
    }

    /**
     * The scalar value head on the final hidden state, V[b, t] for the state after tokens[b, <= t], [B, T]. A critic
     * is a NativePolicy trained with `loss: 'value'` (the trainers keep critics separate from the actors, as
     * MAPoRL's value adapters and CoMLRL's separate critics are).
     */
    async values(batch: { tokens: Int32Array; shape: readonly [number, number] }): Promise<Float32Array> {
        return values(this, batch);
    }

    /**
     * One training step: forward, the loss's gradient w.r.t. the logits from the fused kernel (SFT = cross-entropy),
     * backward, global-norm clip and AdamW. With `accumulate`, gradients add up over calls until a step.
     */
    async trainStep(batch: TrainBatch, options: TrainOptions = {}): Promise<TrainResult> {
        return trainStep(this, batch, options);
    }

    /** A copy with the same weights (and tokenizer) on the same device: e.g. the frozen reference policy. Optimizer
     * state is not copied. */
    async clone(name?: string): Promise<NativePolicy> {
        if (this.adapter !== null) return this.cloneAdapter(name ?? `${this.adapter}-clone`);
        this.requireFloatBase("clone");
        return this.serial(async () => {
            const cname = name ?? `${this.name}-clone`;
            const c = this.hf
                ? new NativePolicy(
                      { name: cname } as NativePolicyConfig,
                      native.llamaCreate({ ...this.hf.info.engine, seed: 0 }),
                      {
                          state: this.hf,
                          tokenizer: this.tokenizer,
                      },
                  )
                : new NativePolicy({ ...this.config, tokenizer: this.charTokenizer("clone"), name: cname });
            const p = new Float32Array(this.parameterCount);
            native.gptGet(this.h(), { which: 0, out: p });
            native.gptSet(c.h(), { which: 0, input: p });
            return c.placed(`${this.name}.clone`, this.device);
        });
    }

    /** Writes the checkpoint directory `dir` (replacing it atomically). A Hugging Face model writes a Hugging Face
     * directory (config.json, generation_config.json, float32 weights, the tokenizer files) that transformers and vLLM
     * load as it is, plus maporl's value_head.safetensors, maporl.json and, once trained, optimizer.safetensors. */
    async save(dir: string, options: SaveOptions = {}): Promise<void> {
        return save(this, dir, options);
    }

    /** Loads a checkpoint directory written by save(), a Hugging Face model directory (a config.json with
     * model_type: llama, mistral, qwen2 or qwen3; model.safetensors or its shards in F32, BF16 or F16; tokenizer.json
     * and tokenizer_config.json's chat template), or a llama.cpp GGUF file of those architectures (`*.gguf`: F32,
     * F16, BF16, Q8_0; its byte-level BPE tokenizer and chat template). Checkpoints do not record a device: `options.device`, default 'cpu'.
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
        if (dir.endsWith(".gguf") && o.base === undefined)
            return NativePolicy.withLora(NativePolicy.opened(await openGgufModel(dir, o), dir, o), o.lora);
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
        const { config, step } = readGptCheckpoint(dir, o);
        const policy = withinFile(dir, "config.json", () => new NativePolicy(config));
        loadGptWeights(policy, dir, step);
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
        const fn = "NativePolicy.fromConfig",
            m = createHfModel(fn, hfConfig, options);
        return NativePolicy.withLora(
            new NativePolicy({ name: m.name } as NativePolicyConfig, m.handle, {
                state: { info: m.info, tokenizerDir: m.tokenizerDir, sourceDir: null },
                tokenizer: m.tokenizer,
            }).placed(fn, options.device),
            options.lora,
        );
    }

    private static loadHf(dir: string, o: LoadOptions): NativePolicy {
        return NativePolicy.opened(openHfModel(dir, o), dir, o);
    }

    // The policy of a model opened from `source` (a Hugging Face directory or a GGUF file), placed on o.device.
    private static opened(m: OpenedHfModel, source: string, o: LoadOptions): NativePolicy {
        return new NativePolicy({ name: m.name } as NativePolicyConfig, m.handle, {
            state: { info: m.info, tokenizerDir: m.tokenizerDir, sourceDir: resolve(source) },
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
        return adapters.withAdapter(this, name, lora);
    }

    /** @internal A policy on this one's model running `adapter` (id; null / -1: the base). */
    view(adapter: string | null, id: number): NativePolicy {
        const v = new NativePolicy(
            { name: adapter ?? this.core.baseName } as NativePolicyConfig,
            undefined,
            { state: this.hf!, tokenizer: this.tokenizer },
            { core: this.core, adapter, id },
        );
        this.core.views++;
        return v;
    }

    private async cloneAdapter(name: string): Promise<NativePolicy> {
        return adapters.cloneAdapter(this, name);
    }

    /** Loads a PEFT adapter directory (adapter_config.json, adapter_model.safetensors in F32 / BF16 / F16; maporl's
     * value head, optimizer state and step when saved by maporl) as a new adapter on this policy's base. Its name:
     * options.name, else the one maporl saved, else 'default'. A bad directory adds nothing. */
    async loadAdapter(dir: string, options: { name?: string } = {}): Promise<NativePolicy> {
        return adapters.loadAdapter(this, dir, options);
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
        await adapters.mergeAdapter(this);
        return this;
    }

    /** Removes adapter `name` from the base (its policies then fail their calls). */
    async deleteAdapter(name: string): Promise<void> {
        return adapters.deleteAdapter(this, name);
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
