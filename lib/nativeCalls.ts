// nativeCalls.ts: what the addon's calls take, typed once. A call of more than one argument (besides a model handle)
// takes one object whose fields are named here; the addon declares the same fields (bindings/core/args.h's CallSpec)
// and reads them by name, and bindCalls() makes the function TypeScript calls with the object.
/** Raw mask arrays accepted by the kernels. */
export type MaskArray = Uint8Array | Float32Array;
type F32 = Float32Array;
/** Where a kernel runs: 0 = CPU, 1 = CUDA. */
export type NativeDevice = 0 | 1;

/** gae's arguments (bindings/rl/gae.cpp): one object per call, read by these names. Outputs are the caller's. */
export interface NativeGaeCall {
    rewards: F32;
    values: F32;
    mask: MaskArray;
    B: number;
    T: number;
    gamma: number;
    lambda: number;
    whiten: boolean;
    device: NativeDevice;
    advantages: F32;
    returns: F32;
}
/** reinforceReturns' arguments (bindings/rl/gae.cpp). */
export interface NativeReturnsCall {
    rewards: F32;
    mask: MaskArray;
    B: number;
    T: number;
    gamma: number;
    whiten: boolean;
    device: NativeDevice;
    returns: F32;
    advantages: F32;
}
/** groupAdvantages' arguments (bindings/rl/group_advantages.cpp): baseline and whiten as their C values. */
export interface NativeGroupCall {
    scores: F32;
    groups: Int32Array;
    weights: F32 | null;
    N: number;
    baseline: 0 | 1 | 2 | 3;
    scaleByStd: boolean;
    stdUnbiased: boolean;
    eps: number;
    singletonZero: boolean;
    nanExclude: boolean;
    /** 0 off, 1 verl's, 2 OpenRLHF's. */
    whiten: 0 | 1 | 2;
    device: NativeDevice;
    out: F32;
}
/** broadcastRows' arguments: values [N] to every unmasked token of out [N, T]. */
export interface NativeBroadcastCall {
    values: F32;
    mask: MaskArray;
    N: number;
    T: number;
    device: NativeDevice;
    out: F32;
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

export interface NativeRolloutCorrectionParams {
    is: number;
    isMode: number;
    isThreshold: number;
    isThresholdLower: number;
    batchNormalize: number;
    /** (option, lower, upper) triples. */
    rs: number[];
}

/** rolloutCorrection's arguments (bindings/rl/rollout_correction.cpp). */
export interface NativeRolloutCorrectionCall {
    oldLogp: F32;
    rolloutLogp: F32;
    mask: MaskArray;
    B: number;
    T: number;
    params: NativeRolloutCorrectionParams;
    device: NativeDevice;
    weights: F32 | null;
    keep: F32 | null;
}

/** policyLoss's arguments (bindings/rl/policy_loss.cpp). */
export interface NativePolicyLossCall {
    logp: F32;
    oldLogp: F32 | null;
    advantages: F32;
    advPerSeq: boolean;
    mask: MaskArray;
    refLogp: F32 | null;
    entropy: F32 | null;
    B: number;
    T: number;
    params: NativeLossParams;
    device: NativeDevice;
    gradLogp: F32 | null;
    gradEntropy: F32 | null;
}
/** valueLoss's arguments (agg and normalizer as their C values). */
export interface NativeValueLossCall {
    values: F32;
    oldValues: F32 | null;
    returns: F32;
    mask: MaskArray;
    B: number;
    T: number;
    clip: number;
    agg: number;
    normalizer: number;
    device: NativeDevice;
    gradValues: F32 | null;
}
/** logprobs' arguments: logits [N, V] float32 or bfloat16 bit patterns (Uint16Array). */
export interface NativeLogprobsCall {
    logits: F32 | Uint16Array;
    targets: Int32Array;
    N: number;
    V: number;
    temperature: number;
    device: NativeDevice;
    logp: F32;
    entropy: F32 | null;
}
/** fusedPolicyLoss's arguments. */
export interface NativeFusedPolicyLossCall {
    logits: F32 | Uint16Array;
    targets: Int32Array;
    oldLogp: F32 | null;
    advantages: F32;
    advPerSeq: boolean;
    mask: MaskArray;
    refLogp: F32 | null;
    B: number;
    T: number;
    V: number;
    temperature: number;
    params: NativeLossParams;
    device: NativeDevice;
    gradLogits: F32;
    logp: F32 | null;
    entropy: F32 | null;
    gradLogp: F32 | null;
}

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
/** sample's arguments (bindings/sampling/sampling.cpp). */
export interface NativeSampleCall {
    logits: F32;
    B: number;
    V: number;
    params: NativeSampleParams;
    device: NativeDevice;
    tokens: Int32Array;
    logprobs: F32 | null;
    rawLogprobs: F32 | null;
    valid: Uint8Array | null;
}
/** sampleLogprobs' arguments: the log-probabilities of given tokens under the sampling distribution. */
export interface NativeSampleLogprobsCall {
    logits: F32;
    B: number;
    V: number;
    params: NativeSampleParams;
    device: NativeDevice;
    tokens: Int32Array;
    logprobs: F32;
    rawLogprobs: F32 | null;
}

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

/** gptScore's arguments: log-probabilities (and entropies, values) of targets [B, T] after tokens [B, T]. */
export interface NativeGptScoreCall {
    tokens: Int32Array;
    targets: Int32Array;
    B: number;
    T: number;
    temperature: number;
    /** Rows of logits held at once (0: the model's choice). */
    chunk: number;
    logp: F32;
    entropy: F32 | null;
    values: F32 | null;
}
/** gptScoreBackward's arguments, each [B * T] of the last gptScore. */
export interface NativeGptScoreBackwardCall {
    gradLogp: F32 | null;
    gradEntropy: F32 | null;
    dvalues: F32 | null;
}
export interface NativeGptForwardCall {
    tokens: Int32Array;
    B: number;
    T: number;
    logits: F32 | null;
    values: F32 | null;
}
/** gptBackward's arguments, in the last forward's shape. */
export interface NativeGptBackwardCall {
    dlogits: F32 | null;
    dvalues: F32 | null;
}
/** gptStep's AdamW settings; the step returns the gradient norm before clipping. */
export interface NativeAdamWCall {
    lr: number;
    beta1: number;
    beta2: number;
    eps: number;
    weightDecay: number;
    maxGradNorm: number;
}
/** gptDecode's arguments: one token per cache row, every row at position pos. */
export interface NativeGptDecodeCall {
    tokens: Int32Array;
    pos: number;
    logits: F32 | null;
    values: F32 | null;
}
/** gptPrefillAsync's arguments (Llama family): cache row b at positions 0 .. lens[b] - 1 from tokens [batch, P]. */
export interface NativeGptPrefillCall {
    tokens: Int32Array;
    lens: Int32Array;
    P: number;
}
/** gptDecodeRowsAsync's arguments (Llama family): one decode step with row b at position pos[b]. */
export interface NativeGptDecodeRowsCall {
    tokens: Int32Array;
    pos: Int32Array;
    logits: F32 | null;
    values: F32 | null;
}
/** gptSetTensor's arguments: dtype 0 float32, 1 bfloat16, 2 float16, 3 Q8_0 blocks; data the raw little-endian bytes. */
export interface NativeSetTensorCall {
    index: number;
    dtype: 0 | 1 | 2 | 3;
    data: Uint8Array;
}
/** Which parameter buffer gptGet / gptSet address: 0 weights, 1 gradients, 2 AdamW moments. */
export type NativeParamBuffer = 0 | 1 | 2;

/** A call of named arguments as the addon exports it (bindings/core/args.h's CallSpec). */
interface CallSpec {
    fields: string[];
    handle: boolean;
}
type RawFunction = (...args: unknown[]) => unknown;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The function TypeScript calls with one object for the addon's `name`, which takes the object's fields as its
 * arguments in the order of `spec` (after the model handle when it takes one). Compiled once per call so that each
 * field is one plain property read: Node-API 8 has no fast property read from C++ (about 230 ns a field measured,
 * which at 13 fields would triple a small kernel call).
 */
function packer(name: string, raw: RawFunction, spec: CallSpec): RawFunction {
    if (!IDENTIFIER.test(name) || !spec.fields.every((f) => IDENTIFIER.test(f)))
        throw new Error(`maporl: the addon's call ${JSON.stringify(name)} declares a field that is not an identifier`);
    const message = JSON.stringify(`${name}: expected one object of named arguments`);
    const params = spec.handle ? "h, c" : "c";
    const args = [...(spec.handle ? ["h"] : []), ...spec.fields.map((f) => `c.${f}`)].join(", ");

    const make = new Function(
        "raw",
        `return function ${name}(${params}) {\n` +
            `    if (c === null || typeof c !== "object") throw new TypeError(${message});\n` +
            `    return raw(${args});\n};`,
    ) as (raw: RawFunction) => RawFunction;
    return make(raw);
}

/** The addon with its calls of named arguments (listed in addon.calls) wrapped to take one object; the rest as is. */
export function bindCalls(addon: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = { ...addon };
    for (const [name, spec] of Object.entries(callSpecs(addon)))
        out[name] = packer(name, addon[name] as RawFunction, spec);
    return out;
}

function callSpecs(addon: Record<string, unknown>): Record<string, CallSpec> {
    return (addon.calls ?? {}) as Record<string, CallSpec>;
}

/** The field lists of the addon's calls of named arguments, by call (for tests and tools). */
export function callFields(addon: Record<string, unknown>): Record<string, readonly string[]> {
    return Object.fromEntries(Object.entries(callSpecs(addon)).map(([k, v]) => [k, [...v.fields]]));
}
