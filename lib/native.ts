// native.ts: loads the addon (bindings/loader.cjs) and declares its interface; the argument types of its calls are in
// nativeCalls.ts. Internal: the public API validates every argument before calling in here.
import { createRequire } from "node:module";

import { MaporlError } from "./errors.js";
import {
    bindCalls,
    callFields,
    type GptHandle,
    type NativeAdamWCall,
    type NativeBroadcastCall,
    type NativeFusedPolicyLossCall,
    type NativeGaeCall,
    type NativeGptBackwardCall,
    type NativeGptConfig,
    type NativeGptDecodeCall,
    type NativeGptDecodeRowsCall,
    type NativeGptForwardCall,
    type NativeGptPrefillCall,
    type NativeGptScoreBackwardCall,
    type NativeGptScoreCall,
    type NativeGroupCall,
    type NativeLlamaConfig,
    type NativeLogprobsCall,
    type NativeLoraConfig,
    type NativeParamBuffer,
    type NativePolicyLossCall,
    type NativeReturnsCall,
    type NativeRolloutCorrectionCall,
    type NativeSampleCall,
    type NativeSampleLogprobsCall,
    type NativeSetTensorCall,
    type NativeValueLossCall,
} from "./nativeCalls.js";
import type { RolloutCorrectionStats } from "./rl/rolloutCorrectionStats.js";

export type * from "./nativeCalls.js";

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

export interface NativeValueStats {
    loss: number;
    clipFrac: number;
    valueMean: number;
    tokens: number;
}

/**
 * The addon's functions (bindings/*.cpp). Besides a model handle, a call takes one value, or one object of named
 * fields typed in nativeCalls.ts (the names bindings/ reads; an error names the call and the field); the measurement
 * helpers' (bytes, reps) aside.
 */
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
    gae(call: NativeGaeCall): void;
    gaeAsync(call: NativeGaeCall): Promise<void>;
    reinforceReturns(call: NativeReturnsCall): void;
    reinforceReturnsAsync(call: NativeReturnsCall): Promise<void>;
    groupAdvantages(call: NativeGroupCall): void;
    groupAdvantagesAsync(call: NativeGroupCall): Promise<void>;
    broadcastRows(call: NativeBroadcastCall): void;
    policyLoss(call: NativePolicyLossCall): NativeLossStats;
    policyLossAsync(call: NativePolicyLossCall): Promise<NativeLossStats>;
    rolloutCorrection(call: NativeRolloutCorrectionCall): RolloutCorrectionStats;
    rolloutCorrectionAsync(call: NativeRolloutCorrectionCall): Promise<RolloutCorrectionStats>;
    valueLoss(call: NativeValueLossCall): NativeValueStats;
    valueLossAsync(call: NativeValueLossCall): Promise<NativeValueStats>;
    logprobs(call: NativeLogprobsCall): void;
    logprobsAsync(call: NativeLogprobsCall): Promise<void>;
    fusedPolicyLoss(call: NativeFusedPolicyLossCall): NativeLossStats;
    fusedPolicyLossAsync(call: NativeFusedPolicyLossCall): Promise<NativeLossStats>;
    sample(call: NativeSampleCall): void;
    sampleAsync(call: NativeSampleCall): Promise<void>;
    sampleLogprobs(call: NativeSampleLogprobsCall): void;
    sampleLogprobsAsync(call: NativeSampleLogprobsCall): Promise<void>;
    gptCreate(config: NativeGptConfig & { seed: number }): GptHandle;
    gptFree(h: GptHandle): void;
    /** seed null: every parameter 0 (a loader writes them). */
    llamaCreate(config: NativeLlamaConfig & { seed: number | null }): GptHandle;
    gptSetTensor(h: GptHandle, call: NativeSetTensorCall): void;
    gptScore(h: GptHandle, call: NativeGptScoreCall): void;
    gptScoreAsync(h: GptHandle, call: NativeGptScoreCall): Promise<void>;
    gptScoreBackward(h: GptHandle, call: NativeGptScoreBackwardCall): void;
    gptScoreBackwardAsync(h: GptHandle, call: NativeGptScoreBackwardCall): Promise<void>;
    /** LoRA adapters (bindings/model/lora.cpp): while one is selected, the parameter calls (gptTensors, gptParamCount,
     * gptGet / gptSet, gptSetTensor, steps) address its parameters and every forward runs base + adapter. */
    loraAdd(h: GptHandle, config: NativeLoraConfig & { seed: number }): number;
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
    gptGet(h: GptHandle, call: { which: NativeParamBuffer; out: Float32Array }): void;
    gptSet(h: GptHandle, call: { which: NativeParamBuffer; input: Float32Array }): void;
    gptGetStep(h: GptHandle): number;
    gptSetStep(h: GptHandle, step: number): void;
    gptForward(h: GptHandle, call: NativeGptForwardCall): void;
    gptForwardAsync(h: GptHandle, call: NativeGptForwardCall): Promise<void>;
    gptBackward(h: GptHandle, call: NativeGptBackwardCall): void;
    gptBackwardAsync(h: GptHandle, call: NativeGptBackwardCall): Promise<void>;
    gptZeroGrad(h: GptHandle): void;
    gptStep(h: GptHandle, call: NativeAdamWCall): number;
    gptStepAsync(h: GptHandle, call: NativeAdamWCall): Promise<number>;
    gptCacheReset(h: GptHandle, call: { batch: number; maxLen: number }): void;
    /** Frees the KV cache's memory (gptCacheReset again before decoding). */
    gptCacheRelease(h: GptHandle): void;
    /** Exchanges the KV cache with stored slot `slot` (CPU models): batches that take turns keep their own caches. */
    gptCacheSwap(h: GptHandle, slot: number): void;
    /** The live KV cache's rows and positions (0, 0 when none). */
    gptCacheInfo(h: GptHandle): { batch: number; maxLen: number };
    gptDecode(h: GptHandle, call: NativeGptDecodeCall): void;
    gptDecodeAsync(h: GptHandle, call: NativeGptDecodeCall): Promise<void>;
    gptPrefillAsync(h: GptHandle, call: NativeGptPrefillCall): Promise<void>;
    gptDecodeRowsAsync(h: GptHandle, call: NativeGptDecodeRowsCall): Promise<void>;
    /** 0 = CPU, 1 = CUDA (MaporlError MAPORL_ERR_NO_DEVICE without a GPU; the model then stays on the CPU);
     * 2: a Llama-family model onto the CPU emulation of its CUDA model (tests of the device path without a GPU). */
    gptSetDevice(h: GptHandle, device: 0 | 1 | 2): void;
    gptGetDevice(h: GptHandle): 0 | 1;
}

const require = createRequire(import.meta.url);

/** The field lists of the addon's calls of named arguments, by call (for tests and tools). */
export function nativeCallFields(): Record<string, readonly string[]> {
    return callFields(rawAddon);
}

function load(): Record<string, unknown> {
    try {
        return require("../bindings/loader.cjs") as Record<string, unknown>;
    } catch (e) {
        const reason = e instanceof Error ? e.message : String(e);
        throw new Error(
            `maporl: the native addon could not be loaded (${reason}). ` +
                "Build it with `npm rebuild maporl` (CPU) or `MAPORL_CUDA=1 npm rebuild maporl` (CUDA).",
        );
    }
}

const rawAddon = load();
export const native = bindCalls(rawAddon) as unknown as NativeBinding;
native.setErrorClass(MaporlError);
