// native.ts: loads the addon (bindings/loader.cjs) and declares its raw interface. Internal: the public API
// validates every argument before calling in here.
import { createRequire } from "node:module";

import { MaporlError } from "./errors.js";
import type { RolloutCorrectionStats } from "./rl/rolloutCorrectionStats.js";

/** Raw mask arrays accepted by the kernels. */
export type MaskArray = Uint8Array | Float32Array;

/** The output pool's state: bytes cached for reuse, bytes handed out and alive, and how requests were met. */
export interface OutputPoolStats {
    limitBytes: number;
    cachedBytes: number;
    outstandingBytes: number;
    /** Requests met by a cached block. */
    hits: number;
    /** Requests met by a new block. */
    misses: number;
    /** Requests over the limit (or refused by the runtime), met by a plain allocation instead. */
    refused: number;
}

export interface NativeDeviceInfo {
    index: number;
    name: string;
    totalMemory: number;
    computeCapability: string;
    multiprocessors: number;
}

export interface NativeBackendInfo {
    version: string;
    threads: number;
    simd: string;
    matmulPrecision: "highest" | "high";
    cuda: { compiled: boolean; devices: NativeDeviceInfo[] };
}

/** Loss parameters as bindings/rl/policy_loss.cpp reads them (enums as their C values). */
export interface NativeLossParams {
    type: number;
    clipLow: number;
    clipHigh: number;
    dualClip: number;
    logRatioClamp: number;
    kl: number;
    klStraightThrough: number;
    klCoef: number;
    entropyCoef: number;
    agg: number;
    normalizer: number;
    seqNormalizer: number;
}

export interface NativeLossStats {
    loss: number;
    pgLoss: number;
    klLoss: number;
    entropyLoss: number;
    clipFrac: number;
    clipFracLower: number;
    approxKl: number;
    klMean: number;
    entropyMean: number;
    ratioMean: number;
    ratioMax: number;
    tokens: number;
    sequences: number;
}

export interface NativeRolloutCorrectionParams {
    is: number;
    isMode: number;
    isThreshold: number;
    isThresholdLower: number;
    batchNormalize: number;
    /** (option, lower, upper) triples. */
    rs: number[];
}

type RolloutCorrectionArgs = [
    oldLogp: Float32Array,
    rolloutLogp: Float32Array,
    mask: MaskArray,
    B: number,
    T: number,
    params: NativeRolloutCorrectionParams,
    device: 0 | 1,
    weights: Float32Array | null,
    keep: Float32Array | null,
];

export interface NativeValueStats {
    loss: number;
    clipFrac: number;
    valueMean: number;
    tokens: number;
}

type F32 = Float32Array;
type PolicyLossArgs = [
    logp: F32,
    oldLogp: F32 | null,
    advantages: F32,
    advPerSeq: boolean,
    mask: MaskArray,
    refLogp: F32 | null,
    entropy: F32 | null,
    B: number,
    T: number,
    params: NativeLossParams,
    device: 0 | 1,
    gradLogp: F32 | null,
    gradEntropy: F32 | null,
];
type ValueLossArgs = [
    values: F32,
    oldValues: F32 | null,
    returns: F32,
    mask: MaskArray,
    B: number,
    T: number,
    clip: number,
    agg: number,
    normalizer: number,
    device: 0 | 1,
    gradValues: F32 | null,
];
type LogprobsArgs = [
    logits: F32 | Uint16Array,
    targets: Int32Array,
    N: number,
    V: number,
    temperature: number,
    device: 0 | 1,
    logp: F32,
    entropy: F32 | null,
];
type FusedArgs = [
    logits: F32 | Uint16Array,
    targets: Int32Array,
    oldLogp: F32 | null,
    advantages: F32,
    advPerSeq: boolean,
    mask: MaskArray,
    refLogp: F32 | null,
    B: number,
    T: number,
    V: number,
    temperature: number,
    params: NativeLossParams,
    device: 0 | 1,
    gradLogits: F32,
    logp: F32 | null,
    entropy: F32 | null,
    gradLogp: F32 | null,
];

/** Sampling parameters as bindings/sampling/sampling.cpp reads them: scalars or per-row typed arrays. */
export interface NativeSampleParams {
    temperature: number | Float32Array;
    topK: number | Int32Array;
    topP: number | Float32Array;
    minP: number | Float32Array;
    seed: bigint | BigUint64Array;
    position: bigint | BigInt64Array;
    filterOrder: 0 | 1;
}
type SampleArgs = [
    logits: F32,
    B: number,
    V: number,
    params: NativeSampleParams,
    device: 0 | 1,
    tokens: Int32Array,
    logprobs: F32 | null,
    rawLogprobs: F32 | null,
    valid: Uint8Array | null,
];
type SampleLogprobsArgs = [
    logits: F32,
    B: number,
    V: number,
    params: NativeSampleParams,
    device: 0 | 1,
    tokens: Int32Array,
    logprobs: F32,
    rawLogprobs: F32 | null,
];

/** An embedded-GPT model handle (bindings/model/gpt.cpp). */
export type GptHandle = { readonly __gpt: unique symbol };
/** A LoRA adapter's config (maporl_lora_config): targets are MAPORL_LORA_* bits (q_proj 1 ... down_proj 64). */
export interface NativeLoraConfig {
    rank: number;
    alpha: number;
    targets: number;
    dropout: number;
    useRslora: boolean;
}

/** The Llama family's engine config (bindings/model/gpt.cpp's llamaCreate; lib/model/hf.ts builds it from config.json). */
export interface NativeLlamaConfig {
    vocab: number;
    context: number;
    layers: number;
    dModel: number;
    heads: number;
    kvHeads: number;
    headDim: number;
    intermediate: number;
    rmsEps: number;
    ropeTheta: number;
    ropeScaling: 0 | 1 | 2;
    ropeFactor: number;
    ropeLowFreqFactor: number;
    ropeHighFreqFactor: number;
    ropeOriginalMaxPosition: number;
    qkvBias: boolean;
    oBias: boolean;
    qkNorm: boolean;
    tieEmbeddings: boolean;
    /** The matrices stored as bfloat16 and frozen (LoRA adapters on them train). */
    bf16?: boolean;
    /** The matrices stored as int8 (Q8_0 blocks; bfloat16 where a row is not a multiple of 32 long) and frozen. */
    int8?: boolean;
}
export interface NativeGptConfig {
    vocab: number;
    context: number;
    layers: number;
    heads: number;
    dModel: number;
    mlpRatio: number;
    tieEmbeddings: boolean;
}

/** The addon's functions (bindings/*.cpp). Device: 0 = CPU, 1 = CUDA. */
export interface NativeBinding {
    backendInfo(): NativeBackendInfo;
    setThreads(n: number): number;
    setSimd(level: string): string;
    setMatmulPrecision(precision: "highest" | "high"): void;
    measureCopyBandwidth(bytes: number, reps: number): number;
    measureReadBandwidth(bytes: number, reps: number): number;
    /** Peak float FMA rate (FLOP/s) of the active SIMD level on every pool thread (the GEMM efficiency's denominator). */
    measurePeakFlops(reps: number): number;
    adviseHugePages(array: ArrayBufferView): boolean;
    /** An external ArrayBuffer of exactly `bytes` from the output pool, or undefined (over its bound, or refused). */
    outputBuffer(bytes: number): ArrayBuffer | undefined;
    outputPoolStats(): OutputPoolStats;
    setOutputPool(limitBytes: number): OutputPoolStats;
    setErrorClass(ctor: typeof MaporlError): void;
    gae(
        rewards: Float32Array,
        values: Float32Array,
        mask: MaskArray,
        B: number,
        T: number,
        gamma: number,
        lambda: number,
        whiten: boolean,
        device: 0 | 1,
        advantages: Float32Array,
        returns: Float32Array,
    ): void;
    groupAdvantages(
        scores: Float32Array,
        groups: Int32Array,
        weights: Float32Array | null,
        N: number,
        baseline: 0 | 1 | 2 | 3,
        scaleByStd: boolean,
        stdUnbiased: boolean,
        eps: number,
        singletonZero: boolean,
        nanExclude: boolean,
        whiten: 0 | 1 | 2,
        device: 0 | 1,
        out: Float32Array,
    ): void;
    groupAdvantagesAsync(
        scores: Float32Array,
        groups: Int32Array,
        weights: Float32Array | null,
        N: number,
        baseline: 0 | 1 | 2 | 3,
        scaleByStd: boolean,
        stdUnbiased: boolean,
        eps: number,
        singletonZero: boolean,
        nanExclude: boolean,
        whiten: 0 | 1 | 2,
        device: 0 | 1,
        out: Float32Array,
    ): Promise<void>;
    broadcastRows(values: Float32Array, mask: MaskArray, N: number, T: number, device: 0 | 1, out: Float32Array): void;
    reinforceReturns(
        rewards: Float32Array,
        mask: MaskArray,
        B: number,
        T: number,
        gamma: number,
        whiten: boolean,
        device: 0 | 1,
        returns: Float32Array,
        advantages: Float32Array,
    ): void;
    reinforceReturnsAsync(
        rewards: Float32Array,
        mask: MaskArray,
        B: number,
        T: number,
        gamma: number,
        whiten: boolean,
        device: 0 | 1,
        returns: Float32Array,
        advantages: Float32Array,
    ): Promise<void>;
    policyLoss(...args: PolicyLossArgs): NativeLossStats;
    policyLossAsync(...args: PolicyLossArgs): Promise<NativeLossStats>;
    rolloutCorrection(...args: RolloutCorrectionArgs): RolloutCorrectionStats;
    rolloutCorrectionAsync(...args: RolloutCorrectionArgs): Promise<RolloutCorrectionStats>;
    valueLoss(...args: ValueLossArgs): NativeValueStats;
    valueLossAsync(...args: ValueLossArgs): Promise<NativeValueStats>;
    logprobs(...args: LogprobsArgs): void;
    logprobsAsync(...args: LogprobsArgs): Promise<void>;
    fusedPolicyLoss(...args: FusedArgs): NativeLossStats;
    fusedPolicyLossAsync(...args: FusedArgs): Promise<NativeLossStats>;
    sample(...args: SampleArgs): void;
    sampleAsync(...args: SampleArgs): Promise<void>;
    sampleLogprobs(...args: SampleLogprobsArgs): void;
    sampleLogprobsAsync(...args: SampleLogprobsArgs): Promise<void>;
    gptCreate(config: NativeGptConfig, seed: number): GptHandle;
    gptFree(h: GptHandle): void;
    /** seed null: every parameter 0 (a loader writes them). */
    llamaCreate(config: NativeLlamaConfig, seed: number | null): GptHandle;
    gptSetTensor(h: GptHandle, index: number, dtype: 0 | 1 | 2 | 3, data: Uint8Array): void;
    gptScore(
        h: GptHandle,
        tokens: Int32Array,
        targets: Int32Array,
        B: number,
        T: number,
        temperature: number,
        chunk: number,
        logp: F32,
        entropy: F32 | null,
        values: F32 | null,
    ): void;
    gptScoreAsync(
        h: GptHandle,
        tokens: Int32Array,
        targets: Int32Array,
        B: number,
        T: number,
        temperature: number,
        chunk: number,
        logp: F32,
        entropy: F32 | null,
        values: F32 | null,
    ): Promise<void>;
    gptScoreBackward(h: GptHandle, gradLogp: F32 | null, gradEntropy: F32 | null, dvalues: F32 | null): void;
    gptScoreBackwardAsync(
        h: GptHandle,
        gradLogp: F32 | null,
        gradEntropy: F32 | null,
        dvalues: F32 | null,
    ): Promise<void>;
    /** LoRA adapters (bindings/model/lora.cpp): while one is selected, the parameter calls (gptTensors, gptParamCount,
     * gptGet / gptSet, gptSetTensor, steps) address its parameters and every forward runs base + adapter. */
    loraAdd(h: GptHandle, config: NativeLoraConfig, seed: number): number;
    loraRemove(h: GptHandle, id: number): void;
    loraSelect(h: GptHandle, id: number): void;
    loraSelected(h: GptHandle): number;
    loraInfo(h: GptHandle, id: number): NativeLoraConfig & { count: number; seed: number };
    loraMerge(h: GptHandle, id: number): void;
    loraCacheRows(h: GptHandle, ids: number[]): void;
    gptSetTraining(h: GptHandle, training: boolean): void;
    gptSetScoreKeep(h: GptHandle, bytes: number): void;
    gptTensors(h: GptHandle): { name: string; shape: number[]; offset: number }[];
    gptParamCount(h: GptHandle): number;
    gptGet(h: GptHandle, which: 0 | 1 | 2, out: F32): void;
    gptSet(h: GptHandle, which: 0 | 1 | 2, input: F32): void;
    gptGetStep(h: GptHandle): number;
    gptSetStep(h: GptHandle, step: number): void;
    gptForward(h: GptHandle, tokens: Int32Array, B: number, T: number, logits: F32 | null, values: F32 | null): void;
    gptForwardAsync(
        h: GptHandle,
        tokens: Int32Array,
        B: number,
        T: number,
        logits: F32 | null,
        values: F32 | null,
    ): Promise<void>;
    gptBackward(h: GptHandle, dlogits: F32 | null, dvalues: F32 | null): void;
    gptBackwardAsync(h: GptHandle, dlogits: F32 | null, dvalues: F32 | null): Promise<void>;
    gptZeroGrad(h: GptHandle): void;
    gptStep(
        h: GptHandle,
        lr: number,
        beta1: number,
        beta2: number,
        eps: number,
        weightDecay: number,
        maxGradNorm: number,
    ): number;
    gptStepAsync(
        h: GptHandle,
        lr: number,
        beta1: number,
        beta2: number,
        eps: number,
        weightDecay: number,
        maxGradNorm: number,
    ): Promise<number>;
    gptCacheReset(h: GptHandle, batch: number, maxLen: number): void;
    /** Frees the KV cache's memory (gptCacheReset again before decoding). */
    gptCacheRelease(h: GptHandle): void;
    /** Exchanges the KV cache with stored slot `slot` (CPU models): batches that take turns keep their own caches. */
    gptCacheSwap(h: GptHandle, slot: number): void;
    /** The live KV cache's rows and positions (0, 0 when none). */
    gptCacheInfo(h: GptHandle): { batch: number; maxLen: number };
    gptDecode(h: GptHandle, tokens: Int32Array, pos: number, logits: F32 | null, values: F32 | null): void;
    gptDecodeAsync(
        h: GptHandle,
        tokens: Int32Array,
        pos: number,
        logits: F32 | null,
        values: F32 | null,
    ): Promise<void>;
    /** Llama family: fills cache row b at positions 0 .. lens[b] - 1 from tokens [batch, P] through the GEMM. */
    gptPrefillAsync(h: GptHandle, tokens: Int32Array, lens: Int32Array, P: number): Promise<void>;
    /** Llama family: one decode step with row b at position pos[b]. */
    gptDecodeRowsAsync(
        h: GptHandle,
        tokens: Int32Array,
        pos: Int32Array,
        logits: F32 | null,
        values: F32 | null,
    ): Promise<void>;
    /** 0 = CPU, 1 = CUDA (MaporlError MAPORL_ERR_NO_DEVICE without a GPU; the model then stays on the CPU). */
    /** 2: a Llama-family model onto the CPU emulation of its CUDA model (tests of the device path without a GPU). */
    gptSetDevice(h: GptHandle, device: 0 | 1 | 2): void;
    gptGetDevice(h: GptHandle): 0 | 1;
    gaeAsync(
        rewards: Float32Array,
        values: Float32Array,
        mask: MaskArray,
        B: number,
        T: number,
        gamma: number,
        lambda: number,
        whiten: boolean,
        device: 0 | 1,
        advantages: Float32Array,
        returns: Float32Array,
    ): Promise<void>;
}

const require = createRequire(import.meta.url);

function load(): NativeBinding {
    try {
        return require("../bindings/loader.cjs") as NativeBinding;
    } catch (e) {
        const reason = e instanceof Error ? e.message : String(e);
        throw new Error(
            `maporl: the native addon could not be loaded (${reason}). ` +
                "Build it with `npm rebuild maporl` (CPU) or `MAPORL_CUDA=1 npm rebuild maporl` (CUDA).",
        );
    }
}

export const native: NativeBinding = load();
native.setErrorClass(MaporlError);
