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
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { type Device, resolveDevice } from "../backend.js";
import { fsyncDir, writeFileDurable } from "../durable.js";
import { MaporlError } from "../errors.js";
import { native, type GptHandle } from "../native.js";
import { fusedPolicyLoss, logprobs } from "../rl/logits.js";
import { type LossOptions, type PolicyLossStats, valueLoss } from "../rl/policyLoss.js";
import { sample } from "../rl/sampling.js";
import { type HfModelInfo, isHfModelDir, readHfConfig, writeHfDir } from "./hf.js";
import { openHfModel, resolveHfTokenizer } from "./hfLoad.js";
import type { HfTokenizer } from "./hfTokenizer.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";
import { describe, requireArray, requireBoolean, requireInteger, requireNumber, requireOptions, requireShape2 } from "../validate.js";
import { CharTokenizer, type PolicyTokenizer } from "./tokenizer.js";
import { policyLoss } from "../rl/policyLoss.js";
import { type GenerateRequest, type Generation, type Policy, requestMessages, requestSampling, requestSeed } from "./types.js";

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
}

export interface TrainResult {
    loss: number;
    /** The gradient norm before clipping (NaN when accumulate). */
    gradNorm: number;
    stats: PolicyLossStats;
    step: number;
}

// Where the earliest stop string starts in `text`, looking only at matches that end past `before` (the text
// already searched); -1 if none.
function firstStop(text: string, stop: readonly string[], before: number): number {
    let at = -1;
    for (const x of stop) {
        const i = text.indexOf(x, Math.max(0, before - x.length + 1));
        if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    return at;
}

/** Options of NativePolicy.load. */
export interface LoadOptions {
    /** 'cpu' (default), 'cuda' or 'auto'. The Llama family runs on the CPU in this version. */
    device?: Device;
    /** Hugging Face directories: cap the positions below max_position_embeddings (KV-cache and activation memory grow
     * with it). Defaults to min(max_position_embeddings, sliding_window where one applies, 8192). */
    contextLength?: number;
    /** Hugging Face directories: the tokenizer, instead of the directory's tokenizer.json: another directory's path,
     * an HfTokenizer, or null for none (requests then give promptTokenIds; generations carry ids and no text). */
    tokenizer?: string | HfTokenizer | null;
    /** Hugging Face directories: a chat template to use instead of tokenizer_config.json's. */
    chatTemplate?: string;
    name?: string;
}

/** Options of save(). */
export interface SaveOptions {
    /** Hugging Face models: the largest weight file; above it model-0000k-of-0000n.safetensors shards with
     * model.safetensors.index.json. Defaults to 5 GB (transformers' save_pretrained default). */
    maxShardBytes?: number;
}

// A Hugging Face model's config and where its tokenizer files came from.
interface HfState { info: HfModelInfo; tokenizerDir: string | null }

const TRAIN_OPTION_KEYS = ["loss", "valueClip", "lr", "beta1", "beta2", "eps", "weightDecay", "maxGradNorm", "accumulate", "signal", "onProgress"];

const requireInt = (what: string, x: unknown, lo: number, hi: number) => requireInteger("NativePolicy", what, x, lo, hi);

export class NativePolicy implements Policy {
    readonly name: string;
    readonly tokenizer: PolicyTokenizer;
    /** The GPT's config; for a Hugging Face model its shape in the same terms (mlpRatio = intermediate_size /
     * hidden_size, rounded), the whole config being `hfConfig`. */
    readonly config: Required<Omit<NativePolicyConfig, "tokenizer" | "name" | "device">>;
    /** 'gpt' (the embedded model) or 'llama' (a Hugging Face llama / mistral / qwen2 / qwen3 model). */
    readonly family: "gpt" | "llama";
    private readonly hf: HfState | null;
    private handle: GptHandle | null;
    private queue: Promise<unknown> = Promise.resolve();
    private readonly V: number;
    private needZero = true;

    private constructor(config: NativePolicyConfig, handle?: GptHandle, hf?: { state: HfState; tokenizer: PolicyTokenizer }) {
        this.family = hf ? "llama" : "gpt";
        this.hf = hf?.state ?? null;
        this.tokenizer = hf?.tokenizer ?? config.tokenizer ?? CharTokenizer.ascii();
        if (hf) {
            const e = hf.state.info.engine;
            this.config = { contextLength: e.context, layers: e.layers, heads: e.heads, dModel: e.dModel, mlpRatio: Math.max(1, Math.round(e.intermediate / e.dModel)),
                tieEmbeddings: e.tieEmbeddings, seed: 0 };
            this.V = e.vocab;
            this.name = config.name ?? `${hf.state.info.modelType}-${e.layers}x${e.dModel}`;
            this.handle = handle!;
            return;
        }
        this.config = {
            contextLength: requireInt("contextLength", config.contextLength, 1, 65536), layers: requireInt("layers", config.layers, 1, 256),
            heads: requireInt("heads", config.heads, 1, 65536), dModel: requireInt("dModel", config.dModel, 1, 65536),
            mlpRatio: requireInt("mlpRatio", config.mlpRatio ?? 4, 1, 16), tieEmbeddings: config.tieEmbeddings ?? true,
            seed: requireInt("seed", config.seed ?? 0, 0, Number.MAX_SAFE_INTEGER),
        };
        this.V = this.tokenizer.vocabSize;
        if (config.name !== undefined && typeof config.name !== "string") throw new TypeError(`NativePolicy: name: expected a string, got ${describe(config.name)}`);
        this.name = config.name ?? `native-gpt-${this.config.layers}x${this.config.dModel}`;
        this.handle = handle ?? native.gptCreate({ vocab: this.V, context: this.config.contextLength, layers: this.config.layers,
            heads: this.config.heads, dModel: this.config.dModel, mlpRatio: this.config.mlpRatio, tieEmbeddings: this.config.tieEmbeddings },
        this.config.seed);
    }

    /** A freshly initialised model (on `config.device`). */
    static async create(config: NativePolicyConfig): Promise<NativePolicy> {
        if (config === null || typeof config !== "object") throw new TypeError("NativePolicy.create: config: expected an object");
        return new NativePolicy(config).placed("NativePolicy.create", config.device);
    }

    // Moves a new model to `device`, freeing it if that fails (the caller never sees a half-made policy).
    private placed(fn: string, device: unknown): NativePolicy {
        const d = resolveDevice(fn, device ?? "cpu", 1, 0);
        try {
            // 'auto' keeps a Llama-family model on the CPU (its CUDA kernels are not built yet); 'cuda' says so.
            if (d === "cuda" && !(this.family === "llama" && device === "auto")) native.gptSetDevice(this.h(), 1);
        } catch (e) {
            native.gptFree(this.h());
            this.handle = null;
            throw e;
        }
        return this;
    }

    get parameterCount(): number { return native.gptParamCount(this.h()); }

    /** The embedded GPT's CharTokenizer (`what` needs one: a Hugging Face model has none, and the error says so). */
    charTokenizer(what: string): CharTokenizer {
        if (this.tokenizer instanceof CharTokenizer) return this.tokenizer;
        throw new Error(`${this.name}: ${what} run on the embedded GPT in this version (this is a ${this.hf?.info.modelType ?? "non-GPT"} model)`);
    }

    /** A Hugging Face model's config.json as loaded (null for the embedded GPT). */
    get hfConfig(): Readonly<Record<string, unknown>> | null { return this.hf?.info.raw ?? null; }

    /** Where the model lives now. */
    get device(): "cpu" | "cuda" { return native.gptGetDevice(this.h()) === 1 ? "cuda" : "cpu"; }

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
        if (!this.handle) throw new Error(`${this.name}: the model was disposed`);
        return this.handle;
    }

    // Runs calls on this model one at a time.
    private serial<T>(fn: () => Promise<T>): Promise<T> {
        const run = this.queue.then(fn, fn);
        this.queue = run.catch(() => undefined);
        return run;
    }

    /**
     * Batched generation with the KV cache: every request decodes in one batch whatever its prompt length (a row reads
     * its prompt while longer prompts are still being read, and samples from the step after its last prompt token),
     * so the tokens are the same as decoding each request alone. onProgress(done, total) counts finished requests.
     */
    async generate(requests: GenerateRequest[], options: { signal?: AbortSignal; onProgress?: (done: number, total: number) => void } = {}): Promise<Generation[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        const prompts = requests.map((r, i) => this.promptOf(r, i));
        const sampling = requests.map((r, i) => requestSampling(this.name, r, i));
        const seeds = requests.map((r, i) => requestSeed(this.name, r, i));
        prompts.forEach((p, i) => {
            if (p.length >= this.config.contextLength)
                throw new RangeError(`${this.name}: requests[${i}]: the prompt is ${p.length} tokens, the context is ${this.config.contextLength}`);
        });
        if (options.onProgress !== undefined && typeof options.onProgress !== "function")
            throw new TypeError(`${this.name}: onProgress: expected a function, got ${describe(options.onProgress)}`);
        if (requests.length === 0) return [];
        return this.serial(async () => {
            const t0 = performance.now();
            const gens = await this.decodeBatch(prompts, sampling, seeds, options);
            const ms = performance.now() - t0;
            return gens.map((g) => ({ ...g, latencyMs: ms }));
        });
    }

    // A request's prompt ids: promptTokenIds as given, else its messages in the model's chat format.
    private promptOf(r: GenerateRequest, i: number): number[] {
        const ids = (r as { promptTokenIds?: unknown } | null)?.promptTokenIds;
        if (ids === undefined) {
            const messages = requestMessages(this.name, r, i);
            try { return this.tokenizer.encodeChat(messages); } catch (e) { throw new (e instanceof TypeError ? TypeError : Error)(`${this.name}: requests[${i}]: ${(e as Error).message}`); }
        }
        if (!Array.isArray(ids) || ids.length === 0 || !ids.every((x) => Number.isInteger(x) && x >= 0 && x < this.V))
            throw new TypeError(`${this.name}: requests[${i}].promptTokenIds: expected a non-empty array of token ids in [0, ${this.V}), got ${describe(ids)}`);
        return [...(ids as number[])];
    }

    private async decodeBatch(prompts: number[][], reqs: ReturnType<typeof requestSampling>[], seeds: bigint[],
        options: { signal?: AbortSignal; onProgress?: (done: number, total: number) => void }): Promise<Generation[]> {
        const B = prompts.length, V = this.V, h = this.h(), ctx = this.config.contextLength, signal = options.signal;
        const lens = prompts.map((p) => p.length);
        // A row generates at most min(maxTokens, context - prompt) tokens (at least the prompt's next-token slot).
        const limit = reqs.map((r, b) => Math.min(r.maxTokens ?? 64, ctx - lens[b]!));
        const total = Math.max(...lens.map((l, b) => l + Math.max(1, limit[b]!)));
        native.gptCacheReset(h, B, total);
        const logits = new Float32Array(B * V), cur = new Int32Array(B);
        const temperature = Float32Array.from(reqs, (r) => r.temperature ?? 1);
        const topK = Int32Array.from(reqs, (r) => Math.max(0, r.topK ?? 0));  // vLLM's -1 = off = our 0
        const topP = Float32Array.from(reqs, (r) => r.topP ?? 1);
        const seed = BigUint64Array.from(seeds);
        const toks: number[][] = reqs.map(() => []), lps: number[][] = reqs.map(() => []);
        // Stop strings: the text so far per row, and where the first stop string begins once one has appeared.
        const texts = reqs.map(() => ""), cut: number[] = reqs.map(() => -1);
        const finished: string[] = limit.map((l) => (l > 0 ? "" : "length"));  // maxTokens 0: nothing to generate
        let done = finished.filter((f) => f).length;
        for (let pos = 0; pos < total && done < B; pos++) {
            signal?.throwIfAborted();
            for (let b = 0; b < B; b++) cur[b] = pos < lens[b]! ? prompts[b]![pos]! : finished[b] ? this.tokenizer.pad : toks[b]!.at(-1)!;
            await native.gptDecodeAsync(h, cur, pos, logits, null);
            if (!lens.some((l, b) => !finished[b] && pos >= l - 1)) continue;  // every live row is still reading its prompt
            // The token at position pos + 1 (the sampler's counter, as when each request decodes alone).
            const s = sample({ logits, shape: [B, V] }, { temperature, topK, topP, seed, position: new BigInt64Array(B).fill(BigInt(pos + 1)),
                rawLogprobs: false, device: "cpu" });
            // A row the sampler rejects (its logits hold NaN or +Inf: non-finite weights or activations) fails the call,
            // naming the requests; its token, -1, is never fed on.
            const invalid: number[] = [];
            for (let b = 0; b < B; b++) if (!finished[b] && pos >= lens[b]! - 1 && !s.valid[b]) invalid.push(b);
            if (invalid.length > 0)
                throw new MaporlError(`${this.name}.generate: requests[${invalid.join(", ")}]: the logits for completion token ${pos + 2 - lens[invalid[0]!]!} ` +
                    `hold NaN or +Inf (the model's weights or activations are not finite), so no token can be sampled`, "MAPORL_ERR_INTERNAL");
            for (let b = 0; b < B; b++) {
                if (finished[b] || pos < lens[b]! - 1) continue;
                const t = s.tokens[b]!;
                if (this.tokenizer.isStop(t)) finished[b] = "stop";
                else {
                    toks[b]!.push(t);
                    lps[b]!.push(s.logprobs[b]!);
                    const stop = reqs[b]!.stop;
                    if (stop) {
                        const before = texts[b]!.length;
                        texts[b] = this.tokenizer.decode(toks[b]!);  // whole: a byte-level token may complete a character
                        cut[b] = firstStop(texts[b]!, stop, before);
                    }
                    if (cut[b]! >= 0) finished[b] = "stop";
                    else if (toks[b]!.length >= limit[b]!) finished[b] = "length";
                }
                if (finished[b]) options.onProgress?.(++done, B);
            }
        }
        return reqs.map((_, b) => ({ text: cut[b]! >= 0 ? texts[b]!.slice(0, cut[b]) : this.tokenizer.decode(toks[b]!), tokens: toks[b]!, logprobs: lps[b]!,
            finishReason: finished[b] || "length", usage: { promptTokens: lens[b]!, completionTokens: toks[b]!.length }, latencyMs: 0 }));
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
            if (this.family === "llama") {  // the LM head in row chunks: never [B, T, V] logits
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
        if (batch === null || typeof batch !== "object") throw new TypeError(`${where}: batch: expected an object with tokens and shape, got ${describe(batch)}`);
        const [B, T] = requireShape2(where, batch.shape, ["B", "T"]);
        if (!(T >= 1 && T <= this.config.contextLength)) throw new RangeError(`${where}: shape[1] (T): expected 1..${this.config.contextLength}, got ${T}`);
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
        if (o.loss !== undefined && o.loss !== "sft" && o.loss !== "value" && (o.loss === null || typeof o.loss !== "object" || Array.isArray(o.loss)))
            throw new (typeof o.loss === "string" ? RangeError : TypeError)(`${fn}: loss: expected 'sft', 'value' or policy-loss options, got ${describe(o.loss)}`);
        const lr = requireNumber(fn, "lr", o.lr, 3e-4, 0, Number.MAX_VALUE);
        const beta1 = requireNumber(fn, "beta1", o.beta1, 0.9, 0, 1), beta2 = requireNumber(fn, "beta2", o.beta2, 0.95, 0, 1);
        if (beta1 === 1 || beta2 === 1) throw new RangeError(`${fn}: ${beta1 === 1 ? "beta1" : "beta2"}: expected a number in [0, 1), got 1`);
        const eps = requireNumber(fn, "eps", o.eps, 1e-8, Number.MIN_VALUE, Number.MAX_VALUE);
        const weightDecay = requireNumber(fn, "weightDecay", o.weightDecay, 0, 0, Number.MAX_VALUE);
        const maxGradNorm = requireNumber(fn, "maxGradNorm", o.maxGradNorm, 1, -Number.MAX_VALUE, Number.MAX_VALUE);
        const accumulate = requireBoolean(fn, "accumulate", o.accumulate, false);
        if (o.valueClip !== undefined && o.valueClip !== null) requireNumber(fn, "valueClip", o.valueClip, 0, Number.MIN_VALUE, Number.MAX_VALUE);
        if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError(`${fn}: signal: expected an AbortSignal, got ${describe(o.signal)}`);
        if (!(batch.targets instanceof Int32Array) || batch.targets.length !== B * T) throw new TypeError(`${fn}: targets: expected Int32Array of ${B * T} elements`);
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
            const phase = (done: number) => { o.onProgress?.(done, phases); };
            o.signal?.throwIfAborted();
            const isValue = loss === "value";
            if (this.family === "llama" && !isValue) {
                const r = await this.scoredLoss(batch, loss, o.signal, phase);
                return this.finishStep(h, r, accumulate, [lr, beta1, beta2, eps, weightDecay, maxGradNorm], phase);
            }
            const logits = isValue ? null : new Float32Array(B * T * this.V), values = isValue ? new Float32Array(B * T) : null;
            await native.gptForwardAsync(h, batch.tokens, B, T, logits, values);
            phase(1);
            o.signal?.throwIfAborted();
            const sft = loss === "sft";
            const r = isValue ? this.valueGrad(values!, batch, o.valueClip ?? null) : fusedPolicyLoss({ logits: logits!, targets: batch.targets, mask: batch.mask, shape: [B, T, this.V],
                advantages: sft ? new Float32Array(B * T).fill(1) : batch.advantages!, ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}),
                ...(batch.refLogp ? { refLogp: batch.refLogp } : {}) },
            sft ? { type: "reinforce", aggregation: "token-mean", inPlace: true, device: "cpu" } : { ...loss, inPlace: true, device: "cpu" });
            phase(2);
            o.signal?.throwIfAborted();
            if (this.needZero) native.gptZeroGrad(h);
            await native.gptBackwardAsync(h, "gradValues" in r ? null : r.gradLogits, "gradValues" in r ? r.gradValues : null);
            phase(3);
            return this.finishStep(h, r, accumulate, [lr, beta1, beta2, eps, weightDecay, maxGradNorm], phase);
        });
    }

    // The optimizer step after a backward (or, with accumulate, the gradients kept for the next call).
    private async finishStep(h: GptHandle, r: { loss: number; stats: PolicyLossStats }, accumulate: boolean,
        adam: [number, number, number, number, number, number], phase: (done: number) => void): Promise<TrainResult> {
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
    // into the gradients, recomputing each chunk's logits. The same loss and gradient as the fused kernel on the
    // full logits, without them.
    private async scoredLoss(batch: TrainBatch, loss: "sft" | LossOptions, signal: AbortSignal | undefined,
        phase: (done: number) => void): Promise<{ loss: number; stats: PolicyLossStats }> {
        const [B, T] = batch.shape, N = B * T, h = this.h();
        const logp = new Float32Array(N), entropy = new Float32Array(N);
        await native.gptScoreAsync(h, batch.tokens, batch.targets, B, T, 1, 0, logp, entropy, null);
        phase(1);
        signal?.throwIfAborted();
        const sft = loss === "sft";
        const r = policyLoss({ logp, mask: batch.mask, shape: [B, T], entropy, advantages: sft ? new Float32Array(N).fill(1) : batch.advantages!,
            ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}), ...(batch.refLogp ? { refLogp: batch.refLogp } : {}) },
        sft ? { type: "reinforce", aggregation: "token-mean", device: "cpu" } : { ...loss, device: "cpu" });
        phase(2);
        signal?.throwIfAborted();
        if (this.needZero) native.gptZeroGrad(h);
        await native.gptScoreBackwardAsync(h, r.gradLogp, r.gradEntropy ?? null, null);
        phase(3);
        return r;
    }

    // verl's (clipped) value loss on the value head's outputs, and its gradient w.r.t. them.
    private valueGrad(values: Float32Array, batch: TrainBatch, clip: number | null): { loss: number; gradValues: Float32Array; stats: PolicyLossStats } {
        const [B, T] = batch.shape;
        const r = valueLoss({ values, returns: batch.returns!, mask: batch.mask, shape: [B, T], ...(batch.oldValues ? { oldValues: batch.oldValues } : {}) },
            { clip, device: "cpu" });
        let sequences = 0;
        for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) if (batch.mask[b * T + t]) { sequences++; break; }
        const stats: PolicyLossStats = { pgLoss: r.loss, klLoss: 0, entropyLoss: 0, clipFrac: r.stats.clipFrac, clipFracLower: 0, approxKl: 0,
            klMean: 0, entropyMean: 0, ratioMean: 1, ratioMax: 1, tokens: r.stats.tokens, sequences };
        return { loss: r.loss, gradValues: r.gradValues, stats };
    }

    /** A copy with the same weights (and tokenizer) on the same device: e.g. the frozen reference policy. Optimizer
     * state is not copied. */
    async clone(name?: string): Promise<NativePolicy> {
        return this.serial(async () => {
            const cname = name ?? `${this.name}-clone`;
            const c = this.hf ? new NativePolicy({ name: cname } as NativePolicyConfig, native.llamaCreate(this.hf.info.engine, 0), { state: this.hf, tokenizer: this.tokenizer })
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
        const o = requireOptions<SaveOptions>(`${this.name}.save`, "options", options, ["maxShardBytes"]);
        const maxShardBytes = requireNumber(`${this.name}.save`, "maxShardBytes", o.maxShardBytes, 5e9, 1, Number.MAX_SAFE_INTEGER);
        return this.serial(async () => {
            const h = this.h(), n = this.parameterCount, step = native.gptGetStep(h);
            const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
            mkdirSync(tmp, { recursive: true });
            const all = (which: 0 | 1 | 2) => { const a = new Float32Array(n); native.gptGet(h, which, a); return a; };
            const optimizer = () => writeSafetensors(join(tmp, "optimizer.safetensors"), [{ name: "m", shape: [n], data: all(1) }, { name: "v", shape: [n], data: all(2) }]);
            try {
                if (this.hf) {
                    writeHfDir(tmp, h, this.hf.info, { format: "maporl-hf", version: 1, name: this.name, step, contextLength: this.config.contextLength },
                        this.tokenizer, this.hf.tokenizerDir, maxShardBytes);
                    if (step > 0) optimizer();  // (an untrained model's moments are zero: not allocated, not written)
                } else {
                    const p = all(0);
                    const tensors = native.gptTensors(h);
                    writeSafetensors(join(tmp, "model.safetensors"), tensors.map((t) => ({ name: t.name, shape: t.shape,
                        data: p.subarray(t.offset, t.offset + t.shape.reduce((a, b) => a * b, 1)) })), { format: "pt" });
                    optimizer();
                    writeFileDurable(join(tmp, "tokenizer.json"), JSON.stringify(this.charTokenizer("save").toJSON()));
                    writeFileDurable(join(tmp, "config.json"), JSON.stringify({ format: "maporl-gpt", version: 1, name: this.name, ...this.config,
                        vocab: this.V, step }, null, 2));
                }
                fsyncDir(tmp);
            } catch (e) {
                rmSync(tmp, { recursive: true, force: true });
                throw e;
            }
            const old = `${dir}.old-${process.pid}-${Date.now()}`;
            if (existsSync(dir)) renameSync(dir, old);
            renameSync(tmp, dir);
            fsyncDir(join(dir, ".."));
            rmSync(old, { recursive: true, force: true });
        });
    }

    /** Loads a checkpoint directory written by save(), or a Hugging Face model directory (a config.json with
     * model_type: llama, mistral, qwen2 or qwen3; model.safetensors or its shards in F32, BF16 or F16; tokenizer.json
     * and tokenizer_config.json's chat template). Checkpoints do not record a device: `options.device`, default 'cpu'.
     * A bad directory fails before any weight is written, naming the file, key or tensor. */
    static async load(dir: string, options: LoadOptions = {}): Promise<NativePolicy> {
        if (typeof dir !== "string" || dir.length === 0) throw new TypeError(`NativePolicy.load: dir: expected a directory path, got ${describe(dir)}`);
        const o = requireOptions<LoadOptions>("NativePolicy.load", "options", options, ["device", "contextLength", "tokenizer", "chatTemplate", "name"]);
        if (isHfModelDir(dir)) return NativePolicy.loadHf(dir, o);
        for (const k of ["contextLength", "tokenizer", "chatTemplate"] as const)
            if (o[k] !== undefined) throw new RangeError(`NativePolicy.load: ${k}: only for Hugging Face directories (${join(dir, "config.json")} has no model_type)`);
        const read = (f: string) => {
            try { return readFileSync(join(dir, f), "utf8"); } catch { throw new Error(`NativePolicy.load: ${join(dir, f)}: missing (not a checkpoint directory?)`); }
        };
        // A bad file is named in the error, whatever its fault (not JSON, a bad field).
        const within = <T>(f: string, fn: () => T): T => {
            try { return fn(); } catch (e) {
                if ((e instanceof SyntaxError || e instanceof TypeError || e instanceof RangeError) && !e.message.startsWith("NativePolicy.load:"))
                    throw new (e.constructor as new (m: string) => Error)(`NativePolicy.load: ${join(dir, f)}: ${e.message}`);
                throw e;
            }
        };
        const json = (f: string): Record<string, unknown> => {
            const text = read(f);
            const v = within(f, () => { try { return JSON.parse(text) as unknown; } catch { throw new SyntaxError("not JSON (corrupted?)"); } });
            if (v === null || typeof v !== "object" || Array.isArray(v)) throw new SyntaxError(`NativePolicy.load: ${join(dir, f)}: expected a JSON object`);
            return v as Record<string, unknown>;
        };
        const cfg = json("config.json");
        if (cfg.format !== "maporl-gpt" || cfg.version !== 1) throw new SyntaxError(`NativePolicy.load: ${join(dir, "config.json")}: not a maporl-gpt checkpoint (version 1)`);
        const tokenizer = within("tokenizer.json", () => CharTokenizer.fromJSON(json("tokenizer.json") as never));
        const policy = within("config.json", () => new NativePolicy({ contextLength: cfg.contextLength as number, layers: cfg.layers as number,
            heads: cfg.heads as number, dModel: cfg.dModel as number, mlpRatio: cfg.mlpRatio as number, tieEmbeddings: cfg.tieEmbeddings as boolean,
            seed: cfg.seed as number, tokenizer, name: cfg.name as string }));
        const h = policy.h(), n = policy.parameterCount;
        const model = readSafetensors(join(dir, "model.safetensors"));
        const byName = new Map(model.tensors.map((t) => [t.name, t]));
        const p = new Float32Array(n);
        for (const t of native.gptTensors(h)) {
            const src = byName.get(t.name);
            const size = t.shape.reduce((a, b) => a * b, 1);
            if (!src || src.data.length !== size) throw new SyntaxError(`NativePolicy.load: ${dir}/model.safetensors: tensor ${t.name} missing or of the wrong size`);
            p.set(src.data, t.offset);
        }
        native.gptSet(h, 0, p);
        const opt = readSafetensors(join(dir, "optimizer.safetensors"));
        for (const [which, name] of [[1, "m"], [2, "v"]] as const) {
            const t = opt.tensors.find((x) => x.name === name);
            if (!t || t.data.length !== n) throw new SyntaxError(`NativePolicy.load: ${dir}/optimizer.safetensors: ${name} missing or of the wrong size`);
            native.gptSet(h, which, t.data);
        }
        native.gptSetStep(h, requireInt("config.json step", cfg.step, 0, Number.MAX_SAFE_INTEGER));
        return policy.placed("NativePolicy.load", options.device);
    }

    /**
     * A randomly initialised model of a Hugging Face architecture from its config.json object (transformers'
     * from_config): matrices normal(0, 0.02), norms 1, biases 0. `tokenizer` is a directory with tokenizer.json, an
     * HfTokenizer, or null. save() writes it as a Hugging Face directory.
     */
    static async fromConfig(hfConfig: Record<string, unknown>, options: Omit<LoadOptions, "tokenizer"> & { tokenizer: string | HfTokenizer | null; seed?: number }): Promise<NativePolicy> {
        const fn = "NativePolicy.fromConfig";
        if (hfConfig === null || typeof hfConfig !== "object" || Array.isArray(hfConfig)) throw new TypeError(`${fn}: hfConfig: expected a config.json object, got ${describe(hfConfig)}`);
        const o = requireOptions<LoadOptions & { seed?: number }>(fn, "options", options, ["device", "contextLength", "tokenizer", "chatTemplate", "name", "seed"]);
        const seed = requireInt("seed", o.seed ?? 0, 0, Number.MAX_SAFE_INTEGER);
        const info = readHfConfig("(hfConfig)", { ...hfConfig }, o.contextLength);
        if (o.contextLength === undefined) info.engine.context = Math.min(info.engine.context, 8192);
        const { tokenizer, tokenizerDir } = resolveHfTokenizer(fn, null, info, o);
        const h = native.llamaCreate(info.engine, seed);
        return new NativePolicy({ name: o.name } as NativePolicyConfig, h, { state: { info, tokenizerDir }, tokenizer }).placed(fn, o.device);
    }

    private static loadHf(dir: string, o: LoadOptions): NativePolicy {
        const m = openHfModel(dir, o);
        return new NativePolicy({ name: m.name } as NativePolicyConfig, m.handle, { state: { info: m.info, tokenizerDir: m.tokenizerDir }, tokenizer: m.tokenizer })
            .placed("NativePolicy.load", o.device);
    }

    /** Frees the native model after the calls in flight. */
    async dispose(): Promise<void> {
        await this.queue;
        if (this.handle) native.gptFree(this.handle);
        this.handle = null;
    }

    async [Symbol.asyncDispose](): Promise<void> { await this.dispose(); }
}
