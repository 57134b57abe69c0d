// policyLoss.ts: the policy losses with their gradients (verl's formulas; native/rl/policy_loss_math.h) and the
// clipped value loss. One native pass computes the loss, d loss / d logp for every token and the statistics.
// Where we differ from verl, on purpose:
//   - masked positions are never read (verl multiplies by the mask, so a NaN there poisons the loss);
//   - 'seq-mean-token-mean' divides by the exact token count (verl adds 1e-8);
//   - `normalizer` replaces verl's global batch info: pass the full batch's token (or sequence) count and
//     micro-batches sum exactly to the full-batch loss and gradient, whatever the split.
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import {
    native,
    type NativeLossParams,
    type NativeLossStats,
    type NativePolicyLossCall,
    type NativeValueLossCall,
} from "../native.js";
import { weightAdvantages } from "./rolloutCorrection.js";
import {
    describe,
    requireArray,
    requireChoice,
    requireDisjoint,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";

export type PolicyLossType = "ppo" | "gspo" | "cispo" | "reinforce";
/** KL estimators (verl's names are accepted too: 'kl' = 'k1', 'mse' = 'k2', 'low_var_kl' = 'k3'). A '+' suffix
 * is the straight-through variant: the value of the estimator with the gradient of k2. */
export type KlEstimator =
    | "k1"
    | "abs"
    | "k2"
    | "k3"
    | "k1+"
    | "abs+"
    | "k2+"
    | "k3+"
    | "kl"
    | "mse"
    | "low_var_kl"
    | "kl+"
    | "mse+"
    | "low_var_kl+";
export type LossAggregation = "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm";

const TYPES: readonly PolicyLossType[] = ["ppo", "gspo", "cispo", "reinforce"];
const AGGS: readonly LossAggregation[] = [
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
];
/** The loss types and aggregations, in the native call's order (config validators read them from here). */
export { TYPES as POLICY_LOSS_TYPES, AGGS as LOSS_AGGREGATIONS };
const KLS: readonly KlEstimator[] = [
    "k1",
    "abs",
    "k2",
    "k3",
    "k1+",
    "abs+",
    "k2+",
    "k3+",
    "kl",
    "mse",
    "low_var_kl",
    "kl+",
    "mse+",
    "low_var_kl+",
];
const KL_CODE: Record<string, number> = { k1: 1, kl: 1, abs: 2, k2: 3, mse: 3, k3: 4, low_var_kl: 4 };

export interface LossOptions {
    /** Defaults to `'ppo'`. */
    type?: PolicyLossType;
    /** Ratio clip: a number for both sides, or `{ low, high }` (clip-higher: DAPO uses high 0.28). Defaults to 0.2.
     * For 'cispo' it bounds the detached importance weight. Unused by 'reinforce'. */
    clip?: number | { low?: number; high?: number };
    /** ppo only: cap the loss of A < 0 tokens at -A*c (verl's clip_ratio_c), c > 1; `null` turns it off. Defaults to 3. */
    dualClip?: number | null;
    /** Clamp of logp - oldLogp before exp: ppo/cispo two-sided (default 20), gspo upper (default 10). */
    logRatioClamp?: number;
    /** KL penalty against `refLogp`, added as coef * agg(kl). Defaults to none. The estimator defaults to 'k3'. */
    kl?: { coef: number; estimator?: KlEstimator } | null;
    /** loss -= entropyCoef * agg(entropy); needs `entropy` per token. Defaults to 0. */
    entropyCoef?: number;
    /** Defaults to 'token-mean' ('seq-mean-token-sum' for reinforce, verl's bypass-mode default). For 'gspo' it weighs
     * the KL and entropy terms only: the policy term is always 'seq-mean-token-mean', as verl's
     * compute_policy_loss_gspo does whatever loss_agg_mode says. */
    aggregation?: LossAggregation;
    /** The global divisor of the aggregation: the full batch's valid-token count (token-mean), valid-sequence count
     * (seq-mean-*), or scale factor (seq-mean-token-sum-norm, default T). Defaults to the local value. */
    normalizer?: number;
    /** gspo only: the full batch's valid-sequence count for its policy term's seq-mean-token-mean (micro-batches then
     * sum exactly). Defaults to `normalizer` when `aggregation` is a seq-mean mode, else the local count. */
    sequenceNormalizer?: number;
    /** Defaults to `'auto'` (CUDA only for at least 2^24 tokens). */
    device?: Device;
}

export interface PolicyLossBatch {
    /** Log-probs of the sampled tokens under the current policy, [B, T]. */
    logp: Float32Array;
    /** Under the policy that sampled them, [B, T]; may be omitted only for 'reinforce' (ratio 1). */
    oldLogp?: Float32Array;
    /** Per token [B, T], or per sequence [B] (broadcast inside the kernel). */
    advantages: Float32Array;
    /** 1 for tokens in the loss, [B, T]. */
    mask: Uint8Array | Float32Array;
    /** Reference-policy log-probs, [B, T], for `kl`. */
    refLogp?: Float32Array;
    /** Entropy per token, [B, T], for `entropyCoef` (summarised in stats when given). */
    entropy?: Float32Array;
    /** Importance weights of a batch another policy sampled, [B, T] (rolloutCorrection's `weights`): they multiply
     * the policy-gradient term per token, as verl's `pg_losses * rollout_is_weights` (not the KL or entropy terms).
     * Finite and >= 0 at unmasked tokens. */
    rolloutIsWeights?: Float32Array;
    shape: readonly [number, number];
}

export interface PolicyLossOptions extends LossOptions {
    /** Buffers to write into instead of allocating ([B, T], not overlapping the inputs). */
    out?: { gradLogp?: Float32Array; gradEntropy?: Float32Array };
}

export interface PolicyLossStats {
    /** agg(policy-gradient term). */
    pgLoss: number;
    /** agg(kl), before kl.coef; 0 without kl. */
    klLoss: number;
    /** agg(entropy), before entropyCoef; 0 without entropy. */
    entropyLoss: number;
    /** Fraction of valid tokens whose clipped term is active (cispo: weight clamped). verl's pg_clipfrac. */
    clipFrac: number;
    /** Fraction whose dual-clip cap is active (ppo, A < 0). verl's pg_clipfrac_lower. */
    clipFracLower: number;
    /** Mean of oldLogp - logp (clamped as the ratio is for ppo and cispo; unclamped for reinforce and gspo, as verl
     * reports them). verl's ppo_kl. */
    approxKl: number;
    /** Mean of the KL estimator's value. */
    klMean: number;
    entropyMean: number;
    /** Mean and max of the ratio (gspo: the sequence ratio of each token). */
    ratioMean: number;
    ratioMax: number;
    /** Valid tokens and sequences (rows with at least one). */
    tokens: number;
    sequences: number;
}

export interface PolicyLossResult {
    /** pgLoss + kl.coef * klLoss - entropyCoef * entropyLoss. */
    loss: number;
    /** d loss / d logp, [B, T]: 0 at masked tokens and wherever a clip is active. */
    gradLogp: Float32Array;
    /** d loss / d entropy, [B, T], when entropy was given. */
    gradEntropy?: Float32Array;
    stats: PolicyLossStats;
    device: "cpu" | "cuda";
}

/** The loss options as the native kernels take them. Shared with fusedPolicyLoss. */
export function lossParams(
    fn: string,
    o: Partial<LossOptions>,
    hasRef: boolean,
    hasEntropy: boolean,
    hasOld: boolean,
): NativeLossParams {
    const type = requireChoice(fn, "type", o.type, TYPES, "ppo");
    let low = 0.2,
        high = 0.2;
    if (typeof o.clip === "number" || o.clip === undefined) {
        low = high = requireNumber(fn, "clip", o.clip, 0.2, 0, 1);
    } else {
        const c = requireOptions<{ low: number; high: number }>(fn, "clip", o.clip, ["low", "high"]);
        low = requireNumber(fn, "clip.low", c.low, 0.2, 0, 1);
        high = requireNumber(fn, "clip.high", c.high, 0.2, 0, Infinity);
    }
    let dual = 0;
    if (type === "ppo" && o.dualClip !== null) {
        dual = requireNumber(fn, "dualClip", o.dualClip, 3, 1, Number.MAX_VALUE);
        if (dual <= 1)
            throw new RangeError(`${fn}: dualClip: expected a number > 1 or null, got ${describe(o.dualClip)}`);
    }
    const clamp = requireNumber(
        fn,
        "logRatioClamp",
        o.logRatioClamp,
        type === "gspo" ? 10 : 20,
        Number.MIN_VALUE,
        Infinity,
    );
    let kl = 0,
        st = 0,
        klCoef = 0;
    if (o.kl !== undefined && o.kl !== null) {
        const k = requireOptions<{ coef: number; estimator: KlEstimator }>(fn, "kl", o.kl, ["coef", "estimator"]);
        if (k.coef === undefined) throw new TypeError(`${fn}: kl.coef: expected a finite number, got undefined`);
        klCoef = requireNumber(fn, "kl.coef", k.coef, 0, -Number.MAX_VALUE, Number.MAX_VALUE);
        const est = requireChoice(fn, "kl.estimator", k.estimator, KLS, "k3");
        st = est.endsWith("+") ? 1 : 0;
        kl = KL_CODE[est.replace("+", "")]!;
        if (!hasRef) throw new TypeError(`${fn}: refLogp: expected Float32Array (required with kl), got undefined`);
    }
    const entropyCoef = requireNumber(fn, "entropyCoef", o.entropyCoef, 0, -Number.MAX_VALUE, Number.MAX_VALUE);
    if (entropyCoef !== 0 && !hasEntropy)
        throw new TypeError(`${fn}: entropy: expected Float32Array (required with entropyCoef), got undefined`);
    if (!hasOld && type !== "reinforce")
        throw new TypeError(
            `${fn}: oldLogp: expected Float32Array (required for ${JSON.stringify(type)}), got undefined`,
        );
    const aggDefault: LossAggregation = type === "reinforce" ? "seq-mean-token-sum" : "token-mean";
    const agg = requireChoice(fn, "aggregation", o.aggregation, AGGS, aggDefault);
    const normalizer =
        o.normalizer === undefined
            ? 0
            : requireNumber(fn, "normalizer", o.normalizer, 0, Number.MIN_VALUE, Number.MAX_VALUE);
    if (o.sequenceNormalizer !== undefined && type !== "gspo")
        throw new RangeError(
            `${fn}: sequenceNormalizer: only for type 'gspo' (its policy term's sequence count), got type ${JSON.stringify(type)}`,
        );
    const seqNormalizer =
        o.sequenceNormalizer === undefined
            ? 0
            : requireNumber(fn, "sequenceNormalizer", o.sequenceNormalizer, 0, Number.MIN_VALUE, Number.MAX_VALUE);
    return {
        type: TYPES.indexOf(type),
        clipLow: low,
        clipHigh: high,
        dualClip: dual,
        logRatioClamp: clamp,
        kl,
        klStraightThrough: st,
        klCoef,
        entropyCoef,
        agg: AGGS.indexOf(agg),
        normalizer,
        seqNormalizer,
    };
}

export const LOSS_OPTION_KEYS = [
    "type",
    "clip",
    "dualClip",
    "logRatioClamp",
    "kl",
    "entropyCoef",
    "aggregation",
    "normalizer",
    "sequenceNormalizer",
    "device",
];

function batchObject(fn: string, x: unknown, what: string): void {
    if (x === null || typeof x !== "object")
        throw new TypeError(`${fn}: batch: expected an object with ${what}, got ${describe(x)}`);
}

function preparePolicy(fn: string, batch: PolicyLossBatch, options: unknown, extra: string[]) {
    batchObject(fn, batch, "logp, oldLogp, advantages, mask and shape");
    const o = requireOptions<PolicyLossOptions>(fn, "options", options, [...LOSS_OPTION_KEYS, "out", ...extra]);
    const [B, T] = requireShape2(fn, batch.shape, ["B", "T"]);
    const n = B * T;
    const logp = requireArray(fn, "logp", batch.logp, [Float32Array], n);
    const oldLogp = batch.oldLogp === undefined ? null : requireArray(fn, "oldLogp", batch.oldLogp, [Float32Array], n);
    const advIn = batch.advantages as unknown;
    let perSeq = advIn instanceof Float32Array && advIn.length === B && B !== n;
    let advantages = requireArray(fn, "advantages", advIn, [Float32Array], perSeq ? B : n);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], n);
    if (batch.rolloutIsWeights !== undefined) {
        advantages = weightAdvantages(fn, advantages, perSeq, batch.rolloutIsWeights, mask, B, T);
        perSeq = false;
    }
    const refLogp = batch.refLogp === undefined ? null : requireArray(fn, "refLogp", batch.refLogp, [Float32Array], n);
    const entropy = batch.entropy === undefined ? null : requireArray(fn, "entropy", batch.entropy, [Float32Array], n);
    const params = lossParams(fn, o, refLogp !== null, entropy !== null, oldLogp !== null);
    const device = resolveDevice(fn, o.device, n, 1 << 24);
    const out = requireOptions<NonNullable<PolicyLossOptions["out"]>>(fn, "out", o.out, ["gradLogp", "gradEntropy"]);
    const gradLogp =
        out.gradLogp === undefined
            ? outputFloat32(n)
            : requireArray(fn, "out.gradLogp", out.gradLogp, [Float32Array], n);
    const gradEntropy =
        entropy === null
            ? null
            : out.gradEntropy === undefined
              ? outputFloat32(n)
              : requireArray(fn, "out.gradEntropy", out.gradEntropy, [Float32Array], n);
    const inputs: Record<string, ArrayBufferView> = { logp, advantages, mask };
    if (oldLogp) inputs.oldLogp = oldLogp;
    if (refLogp) inputs.refLogp = refLogp;
    if (entropy) inputs.entropy = entropy;
    const outs: Record<string, ArrayBufferView> = { "out.gradLogp": gradLogp };
    if (gradEntropy) outs["out.gradEntropy"] = gradEntropy;
    requireDisjoint(fn, outs, { ...inputs, ...outs });
    return {
        args: {
            logp,
            oldLogp,
            advantages,
            advPerSeq: perSeq,
            mask,
            refLogp,
            entropy,
            B,
            T,
            params,
            device: device === "cuda" ? 1 : 0,
            gradLogp,
            gradEntropy,
        } satisfies NativePolicyLossCall,
        finish: (s: NativeStats): PolicyLossResult => ({
            loss: s.loss,
            gradLogp,
            ...(gradEntropy ? { gradEntropy } : {}),
            stats: statsOf(s),
            device,
        }),
    };
}

type NativeStats = NativeLossStats;

export function statsOf(s: NativeStats): PolicyLossStats {
    return {
        pgLoss: s.pgLoss,
        klLoss: s.klLoss,
        entropyLoss: s.entropyLoss,
        clipFrac: s.clipFrac,
        clipFracLower: s.clipFracLower,
        approxKl: s.approxKl,
        klMean: s.klMean,
        entropyMean: s.entropyMean,
        ratioMean: s.ratioMean,
        ratioMax: s.ratioMax,
        tokens: s.tokens,
        sequences: s.sequences,
    };
}

/**
 * Policy loss and its gradient w.r.t. the log-probs over a [B, T] batch: verl's compute_policy_loss_vanilla
 * ('ppo', with clip-higher and dual clip), gspo, cispo, or REINFORCE (-A * logp, the MAGRPO / CoLLM actor loss),
 * plus an optional KL penalty and entropy bonus, aggregated as verl's agg_loss.
 */
export function policyLoss(batch: PolicyLossBatch, options?: PolicyLossOptions): PolicyLossResult {
    const c = preparePolicy("policyLoss", batch, options, []);
    return c.finish(native.policyLoss(c.args));
}

/** {@link policyLoss} off the main thread. */
export async function policyLossAsync(
    batch: PolicyLossBatch,
    options?: PolicyLossOptions & { signal?: AbortSignal },
): Promise<PolicyLossResult> {
    const c = preparePolicy("policyLossAsync", batch, options, ["signal"]);
    return c.finish(await withSignal(() => native.policyLossAsync(c.args), options?.signal));
}

export interface ValueLossBatch {
    /** Value predictions, [B, T]. */
    values: Float32Array;
    /** Predictions of the value model that produced `returns` (for the clip), [B, T]. */
    oldValues?: Float32Array;
    returns: Float32Array;
    mask: Uint8Array | Float32Array;
    shape: readonly [number, number];
}

export interface ValueLossOptions {
    /** verl's cliprange_value: v is clipped to oldValues +- clip. Defaults to 0.5; `null` for the unclipped loss. */
    clip?: number | null;
    /** Defaults to 'token-mean'. */
    aggregation?: LossAggregation;
    normalizer?: number;
    device?: Device;
    out?: { gradValues?: Float32Array };
}

export interface ValueLossResult {
    /** 0.5 * agg(max((v - R)^2, (clip(v) - R)^2)), verl's compute_value_loss. */
    loss: number;
    /** d loss / d values, [B, T]. */
    gradValues: Float32Array;
    stats: { clipFrac: number; valueMean: number; tokens: number };
    device: "cpu" | "cuda";
}

function prepareValue(fn: string, batch: ValueLossBatch, options: unknown, extra: string[]) {
    batchObject(fn, batch, "values, returns, mask and shape");
    const o = requireOptions<ValueLossOptions>(fn, "options", options, [
        "clip",
        "aggregation",
        "normalizer",
        "device",
        "out",
        ...extra,
    ]);
    const [B, T] = requireShape2(fn, batch.shape, ["B", "T"]);
    const n = B * T;
    const values = requireArray(fn, "values", batch.values, [Float32Array], n);
    const returns = requireArray(fn, "returns", batch.returns, [Float32Array], n);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], n);
    const clip = o.clip === null ? 0 : requireNumber(fn, "clip", o.clip, 0.5, Number.MIN_VALUE, Number.MAX_VALUE);
    const oldValues =
        batch.oldValues === undefined ? null : requireArray(fn, "oldValues", batch.oldValues, [Float32Array], n);
    if (clip > 0 && !oldValues)
        throw new TypeError(`${fn}: oldValues: expected Float32Array (required unless clip is null), got undefined`);
    const agg = requireChoice(fn, "aggregation", o.aggregation, AGGS, "token-mean");
    const normalizer =
        o.normalizer === undefined
            ? 0
            : requireNumber(fn, "normalizer", o.normalizer, 0, Number.MIN_VALUE, Number.MAX_VALUE);
    const device = resolveDevice(fn, o.device, n, 1 << 24);
    const out = requireOptions<NonNullable<ValueLossOptions["out"]>>(fn, "out", o.out, ["gradValues"]);
    const gradValues =
        out.gradValues === undefined
            ? outputFloat32(n)
            : requireArray(fn, "out.gradValues", out.gradValues, [Float32Array], n);
    const inputs: Record<string, ArrayBufferView> = { values, returns, mask, "out.gradValues": gradValues };
    if (oldValues) inputs.oldValues = oldValues;
    requireDisjoint(fn, { "out.gradValues": gradValues }, inputs);
    return {
        args: {
            values,
            oldValues,
            returns,
            mask,
            B,
            T,
            clip,
            agg: AGGS.indexOf(agg),
            normalizer,
            device: device === "cuda" ? 1 : 0,
            gradValues,
        } satisfies NativeValueLossCall,
        finish: (s: ReturnType<typeof native.valueLoss>): ValueLossResult => ({
            loss: s.loss,
            gradValues,
            stats: { clipFrac: s.clipFrac, valueMean: s.valueMean, tokens: s.tokens },
            device,
        }),
    };
}

/** Clipped value loss (verl's compute_value_loss) and its gradient w.r.t. the values. */
export function valueLoss(batch: ValueLossBatch, options?: ValueLossOptions): ValueLossResult {
    const c = prepareValue("valueLoss", batch, options, []);
    return c.finish(native.valueLoss(c.args));
}

/** {@link valueLoss} off the main thread. */
export async function valueLossAsync(
    batch: ValueLossBatch,
    options?: ValueLossOptions & { signal?: AbortSignal },
): Promise<ValueLossResult> {
    const c = prepareValue("valueLossAsync", batch, options, ["signal"]);
    return c.finish(await withSignal(() => native.valueLossAsync(c.args), options?.signal));
}
