// options.ts: the options and results of NativePolicy (its config, load, save and train steps) and the embedded
// GPT's memory formula.
import type { Device } from "../backend.js";
import type { LossOptions, PolicyLossStats } from "../rl/policyLoss.js";
import type { CharTokenizer } from "../policy/tokenizer.js";
import type { HfTokenizer } from "./hfTokenizer.js";
import type { LoraOptions } from "./lora.js";

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
    /** Importance weights of the policy-gradient term [B, T] (rolloutCorrection's `weights`, for rows another policy
     * sampled); policy losses only. */
    rolloutIsWeights?: Float32Array;
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

/** Options of NativePolicy.load (LoadOptions) but `base`: what loading a model directory takes. */
export interface HfLoadOptions {
    /** 'cpu' (default), 'cuda' or 'auto'. A Llama-family model and its LoRA adapters run on either, in every dtype: a
     * bfloat16 or int8 base is uploaded as it is held (frozen; its adapters train on the device). */
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
     * for LoRA adapters, or a model that only generates and scores. Its own trainStep, save and clone are errors.
     * 'int8': the same with the matrices quantized when loading to llama.cpp's Q8_0 (blocks of 32 int8 values and a
     * float16 scale: 34 bytes per 32 weights, about 0.53x bfloat16; a matrix whose rows are not a multiple of 32 long
     * stays bfloat16), computed W8A8 as llama.cpp computes Q8_0 (each activation row quantized per block of 32 too,
     * integer dot products; docs/models.md states the log-prob differences against float32). QLoRA's idea: LoRA adapters
     * train in float32 on the frozen quantized base, and save in the PEFT layout, loadable on the float base. */
    dtype?: "float32" | "bfloat16" | "int8";
    name?: string;
    /** Hugging Face directories: add a LoRA adapter named 'default' (PEFT's name) and return the policy of it (the base
     * frozen; more adapters on the same base with withAdapter). */
    lora?: LoraOptions;
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
