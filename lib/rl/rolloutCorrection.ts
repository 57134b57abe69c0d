// rolloutCorrection.ts: the rollout/trainer mismatch correction (native/rl/rollout_correction.h). When the policy that
// sampled a batch (a vLLM / SGLang / maporl serve endpoint in bf16, an adapter a version behind, a quantized engine)
// is not the policy the trainer scores, the policy gradient is taken under the wrong measure. verl's
// rollout_corr_helper.py corrects it with importance weights rho = pi_old / pi_rollout per token or per sequence,
// truncated (TIS) or masked (MIS, icepop), and with rejection criteria on the k1 / k2 / k3 divergences; the options
// keep verl's names (camelCase). The weights multiply the policy-gradient term (PolicyLossBatch.rolloutIsWeights);
// the keep-mask multiplies the loss's mask. Where we differ from verl, on purpose:
//   - `rolloutIs: 'geometric'` (exp of the mean log ratio, OpenRLHF's seq-mask-tis statistic) and
//     `rolloutIsMode: 'mask'` (TRL's token_mask / sequence_mask, icepop with a lower bound) beside verl's truncation;
//   - the mismatch k3 and chi^2 read the log ratio clamped to [-20, 20] as the weights do (verl's k3_kl reads it
//     unclamped and overflows to Inf past ~88); sequence statistics average over rows with a valid token only.
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeRolloutCorrectionCall, type NativeRolloutCorrectionParams } from "../native.js";
import type { RolloutCorrectionStats } from "./rolloutCorrectionStats.js";

export type { RolloutCorrectionStats };
import { describe, requireArray, requireChoice, requireNumber, requireOptions, requireShape2 } from "../validate.js";

export type RolloutIsLevel = "token" | "sequence" | "geometric";
export type RolloutIsMode = "truncate" | "mask";
/** verl's rejection-sampling options. */
export type RolloutRsOption =
    | "token_k1"
    | "token_k2"
    | "token_k3"
    | "seq_sum_k1"
    | "seq_sum_k2"
    | "seq_sum_k3"
    | "seq_mean_k1"
    | "seq_mean_k2"
    | "seq_mean_k3"
    | "seq_max_k2"
    | "seq_max_k3";
/** Named settings from the literature; explicit options override a preset's values.
 * 'tis': token weights truncated at 2 (verl's rollout_is: token). 'mis': token weights zeroed above 2 (TRL's
 * token_mask). 'icepop': token weights zeroed outside [0.5, 5] (IcePop's band). 'seq-tis': the sequence's product
 * truncated at 2 (verl's rollout_is: sequence). 'geo-mis': the geometric mean ratio, sequences outside [0.5, 2]
 * zeroed. */
export type RolloutCorrectionPreset = "tis" | "mis" | "icepop" | "seq-tis" | "geo-mis";

export const RS_OPTIONS: readonly RolloutRsOption[] = [
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
];
const LEVELS: readonly RolloutIsLevel[] = ["token", "sequence", "geometric"];
const MODES: readonly RolloutIsMode[] = ["truncate", "mask"];
export const ROLLOUT_PRESETS: Record<RolloutCorrectionPreset, RolloutCorrectionOptions> = {
    tis: { rolloutIs: "token", rolloutIsMode: "truncate", rolloutIsThreshold: 2 },
    mis: { rolloutIs: "token", rolloutIsMode: "mask", rolloutIsThreshold: 2 },
    icepop: { rolloutIs: "token", rolloutIsMode: "mask", rolloutIsThreshold: 5, rolloutIsThresholdLower: 0.5 },
    "seq-tis": { rolloutIs: "sequence", rolloutIsMode: "truncate", rolloutIsThreshold: 2 },
    "geo-mis": { rolloutIs: "geometric", rolloutIsMode: "mask", rolloutIsThreshold: 2, rolloutIsThresholdLower: 0.5 },
};

export interface RolloutCorrectionOptions {
    /** A named setting (see RolloutCorrectionPreset); the other keys override its values. */
    preset?: RolloutCorrectionPreset;
    /** IS weight level; null or absent: no weights. */
    rolloutIs?: RolloutIsLevel | null;
    /** 'truncate' (default): w = min(rho, threshold). 'mask': w = rho inside [thresholdLower, threshold], else 0. */
    rolloutIsMode?: RolloutIsMode;
    /** Defaults to 2 (verl's rollout_is_threshold). */
    rolloutIsThreshold?: number;
    /** The mask mode's lower bound, in [0, threshold). Defaults to 0. */
    rolloutIsThresholdLower?: number;
    /** Divide the weights by their batch mean (token level: over tokens; else over sequences). Defaults to false. */
    rolloutIsBatchNormalize?: boolean;
    /** Rejection criteria, all of which a token must pass: verl's names, as a list or comma-separated. */
    rolloutRs?: RolloutRsOption | RolloutRsOption[] | string | null;
    /** One per criterion, or one for all, as verl takes them: a number (an upper bound; for k1 options the ratio
     * bound u, with lower 1/u), "lower_upper" strings for k1, a comma-separated string, or [lower, upper] pairs. */
    rolloutRsThreshold?: number | string | (number | string | readonly [number, number])[];
    /** Defaults to 'auto' (CUDA only for at least 2^24 tokens). */
    device?: Device;
}

export interface RolloutCorrectionBatch {
    /** The trainer's log-probs of the sampled ids (verl's old_log_probs), [B, T]. */
    oldLogp: Float32Array;
    /** The sampler's (Generation.logprobs; verl's rollout_log_probs), [B, T]. */
    rolloutLogp: Float32Array;
    mask: Uint8Array | Float32Array;
    shape: readonly [number, number];
}

export interface RolloutCorrectionResult {
    /** The IS weights, [B, T] (0 at masked positions); absent without rolloutIs. */
    weights?: Float32Array;
    /** mask * keep as floats, [B, T]: the loss's mask after rejection (the input mask's values without rolloutRs). */
    mask: Float32Array;
    stats: RolloutCorrectionStats;
    device: "cpu" | "cuda";
}

const OPTION_KEYS = [
    "preset",
    "rolloutIs",
    "rolloutIsMode",
    "rolloutIsThreshold",
    "rolloutIsThresholdLower",
    "rolloutIsBatchNormalize",
    "rolloutRs",
    "rolloutRsThreshold",
    "device",
];

/** Whether these options ask for any correction (weights or rejection). */
export function correctionEnabled(o: RolloutCorrectionOptions | null | undefined): boolean {
    if (!o) return false;
    return o.preset !== undefined || (o.rolloutIs ?? null) !== null || (o.rolloutRs ?? null) !== null;
}

function requiredNumber(fn: string, name: string, x: unknown, min: number, max: number): number {
    if (x === undefined || (typeof x === "number" && Number.isNaN(x)))
        throw new TypeError(`${fn}: ${name}: expected a number in [${min}, ${max}], got ${describe(x)}`);
    return requireNumber(fn, name, x, 0, min, max);
}

function parseThreshold(fn: string, opt: RolloutRsOption, spec: unknown, i: number): [number, number] {
    const name = `rolloutRsThreshold[${i}]`;
    const k1 = opt.endsWith("k1");
    let lower: number, upper: number;
    if (Array.isArray(spec)) {
        if (!k1)
            throw new RangeError(`${fn}: ${name}: a [lower, upper] pair is for k1 options only, got one for ${opt}`);
        lower = requiredNumber(fn, `${name}[0]`, spec[0], Number.MIN_VALUE, Number.MAX_VALUE);
        upper = requiredNumber(fn, `${name}[1]`, spec[1], Number.MIN_VALUE, Number.MAX_VALUE);
    } else if (typeof spec === "string" && spec.includes("_")) {
        if (!k1)
            throw new RangeError(
                `${fn}: ${name}: "lower_upper" is for k1 options only, got ${describe(spec)} for ${opt}`,
            );
        const [a, b] = spec.split("_", 2);
        lower = requiredNumber(fn, `${name} lower`, Number(a), Number.MIN_VALUE, Number.MAX_VALUE);
        upper = requiredNumber(fn, `${name} upper`, Number(b), Number.MIN_VALUE, Number.MAX_VALUE);
    } else {
        const v = typeof spec === "string" && spec.trim() !== "" ? Number(spec) : spec;
        upper = requiredNumber(fn, name, v, Number.MIN_VALUE, Number.MAX_VALUE);
        lower = k1 ? 1 / upper : 0;
    }
    if (k1 && !(lower < upper))
        throw new RangeError(`${fn}: ${name}: expected lower < upper for ${opt}, got ${lower}_${upper}`);
    return [lower, upper];
}

/** The options as the native kernel takes them (validated; every error names the option). */
export function rolloutCorrectionParams(
    fn: string,
    options: unknown,
): NativeRolloutCorrectionParams & { device?: Device } {
    const given = requireOptions<RolloutCorrectionOptions>(fn, "options", options, OPTION_KEYS);
    const preset =
        given.preset === undefined
            ? {}
            : ROLLOUT_PRESETS[
                  requireChoice(
                      fn,
                      "preset",
                      given.preset,
                      Object.keys(ROLLOUT_PRESETS) as RolloutCorrectionPreset[],
                      "tis",
                  )
              ];
    const o: RolloutCorrectionOptions = { ...preset };
    for (const [k, v] of Object.entries(given)) if (v !== undefined) (o as Record<string, unknown>)[k] = v;
    const level =
        o.rolloutIs === null || o.rolloutIs === undefined
            ? null
            : requireChoice(fn, "rolloutIs", o.rolloutIs, LEVELS, "token");
    const mode = requireChoice(fn, "rolloutIsMode", o.rolloutIsMode, MODES, "truncate");
    const threshold = requireNumber(
        fn,
        "rolloutIsThreshold",
        o.rolloutIsThreshold,
        2,
        Number.MIN_VALUE,
        Number.MAX_VALUE,
    );
    const lower = requireNumber(fn, "rolloutIsThresholdLower", o.rolloutIsThresholdLower, 0, 0, Number.MAX_VALUE);
    if (lower >= threshold)
        throw new RangeError(
            `${fn}: rolloutIsThresholdLower: expected a number in [0, rolloutIsThreshold = ${threshold}), got ${lower}`,
        );
    if (o.rolloutIsBatchNormalize !== undefined && typeof o.rolloutIsBatchNormalize !== "boolean")
        throw new TypeError(
            `${fn}: rolloutIsBatchNormalize: expected a boolean, got ${describe(o.rolloutIsBatchNormalize)}`,
        );
    let names: string[] = [];
    if (o.rolloutRs !== null && o.rolloutRs !== undefined) {
        const raw = Array.isArray(o.rolloutRs)
            ? o.rolloutRs
            : typeof o.rolloutRs === "string"
              ? o.rolloutRs.split(",")
              : null;
        if (raw === null)
            throw new TypeError(
                `${fn}: rolloutRs: expected an option name, a list or a comma-separated string, got ${describe(o.rolloutRs)}`,
            );
        names = [
            ...new Set(raw.map((s) => (typeof s === "string" ? s.trim() : s)).filter((s) => s !== "")),
        ] as string[];
        names.forEach((s, i) => requireChoice(fn, `rolloutRs[${i}]`, s, RS_OPTIONS, "token_k1"));
        if (names.length === 0)
            throw new RangeError(`${fn}: rolloutRs: expected at least one option, got ${describe(o.rolloutRs)}`);
        if (names.length > 4) throw new RangeError(`${fn}: rolloutRs: expected at most 4 options, got ${names.length}`);
    }
    const rs: number[] = [];
    if (names.length) {
        const t = o.rolloutRsThreshold;
        if (t === undefined || t === null)
            throw new TypeError(
                `${fn}: rolloutRsThreshold: expected a threshold (required with rolloutRs), got ${describe(t)}`,
            );
        const specs = Array.isArray(t)
            ? [...t]
            : typeof t === "string"
              ? t
                    .split(",")
                    .map((s) => s.trim())
                    .filter((s) => s)
              : [t];
        if (specs.length === 0)
            throw new TypeError(
                `${fn}: rolloutRsThreshold: expected a threshold (required with rolloutRs), got ${describe(t)}`,
            );
        if (specs.length !== 1 && specs.length !== names.length)
            throw new RangeError(
                `${fn}: rolloutRsThreshold: expected one threshold or ${names.length} (one per rolloutRs option), got ${specs.length}`,
            );
        names.forEach((name, i) => {
            const [lo, up] = parseThreshold(fn, name as RolloutRsOption, specs.length === 1 ? specs[0] : specs[i], i);
            rs.push(RS_OPTIONS.indexOf(name as RolloutRsOption) + 1, lo, up);
        });
    }
    return {
        is: level === null ? 0 : LEVELS.indexOf(level) + 1,
        isMode: MODES.indexOf(mode),
        isThreshold: threshold,
        isThresholdLower: lower,
        batchNormalize: o.rolloutIsBatchNormalize ? 1 : 0,
        rs,
        ...(o.device !== undefined ? { device: o.device } : {}),
    };
}

function prepare(fn: string, batch: RolloutCorrectionBatch, options: unknown) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(
            `${fn}: batch: expected an object with oldLogp, rolloutLogp, mask and shape, got ${describe(batch)}`,
        );
    const { device: dev, ...params } = rolloutCorrectionParams(fn, options ?? {});
    const [B, T] = requireShape2(fn, batch.shape, ["B", "T"]);
    const n = B * T;
    const oldLogp = requireArray(fn, "oldLogp", batch.oldLogp, [Float32Array], n);
    const rolloutLogp = requireArray(fn, "rolloutLogp", batch.rolloutLogp, [Float32Array], n);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], n);
    const device = resolveDevice(fn, dev, n, 1 << 24);
    const weights = params.is !== 0 ? outputFloat32(n) : null;
    const keep = params.rs.length ? outputFloat32(n) : null;
    return {
        args: {
            oldLogp,
            rolloutLogp,
            mask,
            B,
            T,
            params,
            device: device === "cuda" ? 1 : 0,
            weights,
            keep,
        } satisfies NativeRolloutCorrectionCall,
        finish: (stats: RolloutCorrectionStats): RolloutCorrectionResult => {
            let m: Float32Array;
            if (keep) m = keep;
            else {
                m = new Float32Array(n);
                for (let i = 0; i < n; i++) m[i] = mask[i]!;
            }
            return { ...(weights ? { weights } : {}), mask: m, stats, device };
        },
    };
}

/**
 * Importance weights and a rejection mask for a batch that another policy sampled (verl's
 * compute_rollout_correction_and_rejection_mask). Pass `weights` as PolicyLossBatch.rolloutIsWeights and `mask` as
 * the loss's mask. Throws naming the option or array on bad input; a mask value other than 0 / 1 is an error.
 */
export function rolloutCorrection(
    batch: RolloutCorrectionBatch,
    options?: RolloutCorrectionOptions,
): RolloutCorrectionResult {
    const p = prepare("rolloutCorrection", batch, options);
    return p.finish(native.rolloutCorrection(p.args));
}

/** rolloutCorrection on the libuv pool (the inputs must not be detached or resized meanwhile). */
export async function rolloutCorrectionAsync(
    batch: RolloutCorrectionBatch,
    options?: RolloutCorrectionOptions & { signal?: AbortSignal },
): Promise<RolloutCorrectionResult> {
    const { signal, ...rest } = options ?? {};
    const p = prepare("rolloutCorrectionAsync", batch, rest);
    return p.finish(await withSignal(() => native.rolloutCorrectionAsync(p.args), signal));
}

/** Per-token advantages times the IS weights (the weighted policy-gradient term, as verl's pg_losses *
 * rollout_is_weights: every loss type's term is linear in A, and the weights are >= 0 and detached). */
export function weightAdvantages(
    fn: string,
    advantages: Float32Array,
    perSeq: boolean,
    weights: unknown,
    mask: ArrayLike<number>,
    B: number,
    T: number,
): Float32Array {
    const w = requireArray(fn, "rolloutIsWeights", weights, [Float32Array], B * T);
    const out = new Float32Array(B * T);
    for (let b = 0; b < B; b++)
        for (let t = 0; t < T; t++) {
            const i = b * T + t;
            if (mask[i] === 0) continue;
            const x = w[i]!;
            if (!(x >= 0 && x <= Number.MAX_VALUE))
                throw new RangeError(
                    `${fn}: rolloutIsWeights[${i}]: expected a finite number >= 0, got ${describe(x)}`,
                );
            out[i] = (perSeq ? advantages[b]! : advantages[i]!) * x;
        }
    return out;
}
