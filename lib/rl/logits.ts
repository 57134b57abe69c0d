// logits.ts: log-probs from logits (selective log-softmax, optional entropy) and the fused
// logits -> policy loss -> dlogits kernel. Neither materialises an [N, V] intermediate: log-probs take one
// online pass per row; the fused loss reads each row twice (the second time from cache on the CPU) and writes
// the gradient once, optionally over the logits (`inPlace`). Logits are float32 or bfloat16 (LogitsDtype).
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeFusedPolicyLossCall, type NativeLogprobsCall, type NativeLossStats } from "../native.js";
import { describe, requireArray, requireBoolean, requireDisjoint, requireNumber, requireOptions } from "../validate.js";
import { LOSS_OPTION_KEYS, type LossOptions, lossParams, type PolicyLossStats, statsOf } from "./policyLoss.js";
import { weightAdvantages } from "./rolloutCorrection.js";

/** [N, V] (N tokens), or [B, T, V] (B sequences of T tokens, for per-sequence advantages and seq-mean aggregation). */
export type LogitsShape = readonly [number, number] | readonly [number, number, number];

function requireLogitsShape(fn: string, shape: unknown): { B: number; T: number; V: number } {
    const expected = "[N, V] or [B, T, V] with non-negative integers";
    if (!Array.isArray(shape)) throw new TypeError(`${fn}: shape: expected ${expected}, got ${describe(shape)}`);
    if (shape.length !== 2 && shape.length !== 3)
        throw new RangeError(`${fn}: shape: expected ${expected}, got ${shape.length} dimensions`);
    shape.forEach((d, i) => {
        if (typeof d !== "number") throw new TypeError(`${fn}: shape[${i}]: expected an integer, got ${describe(d)}`);
        if (!Number.isSafeInteger(d) || d < 0)
            throw new RangeError(`${fn}: shape[${i}]: expected a non-negative integer, got ${describe(d)}`);
    });
    const [B, T, V] = shape.length === 3 ? (shape as number[]) : [1, shape[0] as number, shape[1] as number];
    if (B! * T! * V! > 2 ** 32) throw new RangeError(`${fn}: shape: expected at most 2^32 logits, got ${B! * T! * V!}`);
    return { B: B!, T: T!, V: V! };
}

/**
 * How a logits array is read: `'float32'` (a Float32Array, the default) or `'bf16'`: a Uint16Array of bfloat16 bit
 * patterns (the upper halves of float32s, as torch.bfloat16 stores them; e.g. `new Uint16Array(t.view(torch.int16)
 * .numpy().buffer)`). bf16 rows are widened exactly as they are read, so the results are the float32 path's on the
 * widened values, bit for bit, with half the bytes read. A Uint16Array is never guessed to be bf16 (fp16 has the
 * same container): it needs `logitsDtype: 'bf16'`.
 */
export type LogitsDtype = "float32" | "bf16";

function requireLogits(fn: string, logits: unknown, dtype: unknown, n: number): Float32Array | Uint16Array {
    if (dtype !== undefined && dtype !== "float32" && dtype !== "bf16")
        throw new RangeError(`${fn}: logitsDtype: expected 'float32' or 'bf16', got ${describe(dtype)}`);
    if (dtype === "bf16") return requireArray(fn, "logits", logits, [Uint16Array], n);
    if (logits instanceof Uint16Array)
        throw new TypeError(
            `${fn}: logits: expected a Float32Array, or a Uint16Array with logitsDtype: 'bf16' (fp16 is not supported), got a Uint16Array with logitsDtype ${dtype === undefined ? "unset" : "'float32'"}`,
        );
    return requireArray(fn, "logits", logits, [Float32Array], n);
}

export interface LogprobsBatch {
    /** Logits, [N, V] row-major: float32, or bfloat16 bit patterns with `logitsDtype: 'bf16'`. */
    logits: Float32Array | Uint16Array;
    /** Token id per row, [N], each in [0, V). */
    targets: Int32Array;
    shape: readonly [number, number];
}

export interface LogprobsOptions {
    /** Logits are divided by it (as the sampler did). Defaults to 1. */
    temperature?: number;
    /** `'bf16'` for a Uint16Array of bfloat16 logits; defaults to `'float32'`. See {@link LogitsDtype}. */
    logitsDtype?: LogitsDtype;
    /** Also return the entropy of each row's distribution. Defaults to false. */
    entropy?: boolean;
    device?: Device;
    out?: { logp?: Float32Array; entropy?: Float32Array };
}

export interface LogprobsResult {
    /** log softmax(logits / temperature)[target], [N]. */
    logp: Float32Array;
    /** [N], when asked. */
    entropy?: Float32Array;
    device: "cpu" | "cuda";
}

function prepareLogprobs(fn: string, batch: LogprobsBatch, options: unknown, extra: string[]) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with logits, targets and shape, got ${describe(batch)}`);
    const o = requireOptions<LogprobsOptions>(fn, "options", options, [
        "temperature",
        "logitsDtype",
        "entropy",
        "device",
        "out",
        ...extra,
    ]);
    if (!Array.isArray(batch.shape) || batch.shape.length !== 2)
        throw new RangeError(`${fn}: shape: expected [N, V], got ${describe(batch.shape)}`);
    const { T: N, V } = requireLogitsShape(fn, batch.shape);
    const logits = requireLogits(fn, batch.logits, o.logitsDtype, N * V);
    const targets = requireArray(fn, "targets", batch.targets, [Int32Array], N);
    const temperature = requireNumber(fn, "temperature", o.temperature, 1, Number.MIN_VALUE, Number.MAX_VALUE);
    const wantEntropy = requireBoolean(fn, "entropy", o.entropy, false);
    const device = resolveDevice(fn, o.device, N * V, 1 << 26);
    const out = requireOptions<NonNullable<LogprobsOptions["out"]>>(fn, "out", o.out, ["logp", "entropy"]);
    const logp = out.logp === undefined ? outputFloat32(N) : requireArray(fn, "out.logp", out.logp, [Float32Array], N);
    const entropy = !wantEntropy
        ? null
        : out.entropy === undefined
          ? outputFloat32(N)
          : requireArray(fn, "out.entropy", out.entropy, [Float32Array], N);
    const outs: Record<string, ArrayBufferView> = { "out.logp": logp };
    if (entropy) outs["out.entropy"] = entropy;
    requireDisjoint(fn, outs, { logits, targets, ...outs });
    return {
        args: {
            logits,
            targets,
            N,
            V,
            temperature,
            device: device === "cuda" ? 1 : 0,
            logp,
            entropy,
        } satisfies NativeLogprobsCall,
        result: { logp, ...(entropy ? { entropy } : {}), device },
    };
}

/** Selective log-softmax: the log-prob of each row's target token (and optionally the row entropy) in one pass. */
export function logprobs(batch: LogprobsBatch, options?: LogprobsOptions): LogprobsResult {
    const c = prepareLogprobs("logprobs", batch, options, []);
    native.logprobs(c.args);
    return c.result;
}

/** {@link logprobs} off the main thread. */
export async function logprobsAsync(
    batch: LogprobsBatch,
    options?: LogprobsOptions & { signal?: AbortSignal },
): Promise<LogprobsResult> {
    const c = prepareLogprobs("logprobsAsync", batch, options, ["signal"]);
    await withSignal(() => native.logprobsAsync(c.args), options?.signal);
    return c.result;
}

export interface FusedBatch {
    /** Logits, one row per token: [N, V] or [B, T, V]; float32, or bfloat16 bit patterns with `logitsDtype: 'bf16'`. */
    logits: Float32Array | Uint16Array;
    /** Sampled token per row, [N]; not read at masked rows. */
    targets: Int32Array;
    /** Log-probs under the sampling policy, [N]; may be omitted only for 'reinforce'. */
    oldLogp?: Float32Array;
    /** Per token [N], or per sequence [B] with a [B, T, V] shape. */
    advantages: Float32Array;
    mask: Uint8Array | Float32Array;
    refLogp?: Float32Array;
    /** Importance weights of the policy-gradient term, [N] (PolicyLossBatch.rolloutIsWeights). */
    rolloutIsWeights?: Float32Array;
    /** [N, V] is one sequence of N tokens (so seq-mean aggregations treat it as one sequence); [B, T, V] is B of T. */
    shape: LogitsShape;
}

export interface FusedOptions extends LossOptions {
    /** Logits are divided by it before the softmax. Defaults to 1. */
    temperature?: number;
    /** Write the gradient over `logits` (no [N, V] allocation at all; float32 logits only). Defaults to false. */
    inPlace?: boolean;
    /** `'bf16'` for a Uint16Array of bfloat16 logits (the gradient is float32); defaults to `'float32'`. */
    logitsDtype?: LogitsDtype;
    out?: { gradLogits?: Float32Array; logp?: Float32Array; entropy?: Float32Array; gradLogp?: Float32Array };
}

export interface FusedResult {
    loss: number;
    /** d loss / d logits, [N, V]: (1[v = y] - p_v) * dlogp / temperature, plus the entropy term; 0 rows where masked.
     * The `logits` array itself with `inPlace`. */
    gradLogits: Float32Array;
    /** log-prob of each target under the current logits, [N] (0 where masked). */
    logp: Float32Array;
    /** entropy of each row, [N] (0 where masked). */
    entropy: Float32Array;
    /** d loss / d logp, [N]. */
    gradLogp: Float32Array;
    stats: PolicyLossStats;
    device: "cpu" | "cuda";
}

function prepareFused(fn: string, batch: FusedBatch, options: unknown, extra: string[]) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(
            `${fn}: batch: expected an object with logits, targets, oldLogp, advantages, mask and shape, got ${describe(batch)}`,
        );
    const o = requireOptions<FusedOptions>(fn, "options", options, [
        ...LOSS_OPTION_KEYS,
        "temperature",
        "inPlace",
        "logitsDtype",
        "out",
        ...extra,
    ]);
    const { B, T, V } = requireLogitsShape(fn, batch.shape);
    const N = B * T;
    const logits = requireLogits(fn, batch.logits, o.logitsDtype, N * V);
    const targets = requireArray(fn, "targets", batch.targets, [Int32Array], N);
    const oldLogp = batch.oldLogp === undefined ? null : requireArray(fn, "oldLogp", batch.oldLogp, [Float32Array], N);
    const advIn = batch.advantages as unknown;
    let perSeq = advIn instanceof Float32Array && advIn.length === B && B !== N;
    let advantages = requireArray(fn, "advantages", advIn, [Float32Array], perSeq ? B : N);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], N);
    if (batch.rolloutIsWeights !== undefined) {
        advantages = weightAdvantages(fn, advantages, perSeq, batch.rolloutIsWeights, mask, B, T);
        perSeq = false;
    }
    const refLogp = batch.refLogp === undefined ? null : requireArray(fn, "refLogp", batch.refLogp, [Float32Array], N);
    const params = lossParams(fn, o, refLogp !== null, true, oldLogp !== null);
    const temperature = requireNumber(fn, "temperature", o.temperature, 1, Number.MIN_VALUE, Number.MAX_VALUE);
    const inPlace = requireBoolean(fn, "inPlace", o.inPlace, false);
    const device = resolveDevice(fn, o.device, N * V, 1 << 26);
    const out = requireOptions<NonNullable<FusedOptions["out"]>>(fn, "out", o.out, [
        "gradLogits",
        "logp",
        "entropy",
        "gradLogp",
    ]);
    if (inPlace && out.gradLogits !== undefined)
        throw new RangeError(`${fn}: out.gradLogits: expected undefined with inPlace, got ${describe(out.gradLogits)}`);
    if (inPlace && logits instanceof Uint16Array)
        throw new RangeError(
            `${fn}: inPlace: expected false with logitsDtype 'bf16' (the gradient is float32, twice the logits' bytes), got true`,
        );
    const gradLogits = inPlace
        ? (logits as Float32Array)
        : out.gradLogits === undefined
          ? outputFloat32(N * V)
          : requireArray(fn, "out.gradLogits", out.gradLogits, [Float32Array], N * V);
    const logp = out.logp === undefined ? outputFloat32(N) : requireArray(fn, "out.logp", out.logp, [Float32Array], N);
    const entropy =
        out.entropy === undefined ? outputFloat32(N) : requireArray(fn, "out.entropy", out.entropy, [Float32Array], N);
    const gradLogp =
        out.gradLogp === undefined
            ? outputFloat32(N)
            : requireArray(fn, "out.gradLogp", out.gradLogp, [Float32Array], N);
    const inputs: Record<string, ArrayBufferView> = { targets, advantages, mask };
    if (oldLogp) inputs.oldLogp = oldLogp;
    if (refLogp) inputs.refLogp = refLogp;
    const outs: Record<string, ArrayBufferView> = {
        "out.logp": logp,
        "out.entropy": entropy,
        "out.gradLogp": gradLogp,
    };
    if (!inPlace) outs["out.gradLogits"] = gradLogits;
    requireDisjoint(fn, outs, { ...inputs, ...outs, ...(inPlace ? {} : { logits }) });
    return {
        args: {
            logits,
            targets,
            oldLogp,
            advantages,
            advPerSeq: perSeq,
            mask,
            refLogp,
            B,
            T,
            V,
            temperature,
            params,
            device: device === "cuda" ? 1 : 0,
            gradLogits,
            logp,
            entropy,
            gradLogp,
        } satisfies NativeFusedPolicyLossCall,
        finish: (s: NativeLossStats): FusedResult => ({
            loss: s.loss,
            gradLogits,
            logp,
            entropy,
            gradLogp,
            stats: statsOf(s),
            device,
        }),
    };
}

/**
 * The policy loss from logits with its gradient w.r.t. the logits, fused: the same loss options as
 * {@link policyLoss}; equals logprobs + policyLoss composed by the chain rule, without [N, V] temporaries.
 */
export function fusedPolicyLoss(batch: FusedBatch, options?: FusedOptions): FusedResult {
    const c = prepareFused("fusedPolicyLoss", batch, options, []);
    return c.finish(native.fusedPolicyLoss(c.args));
}

/** {@link fusedPolicyLoss} off the main thread. */
export async function fusedPolicyLossAsync(
    batch: FusedBatch,
    options?: FusedOptions & { signal?: AbortSignal },
): Promise<FusedResult> {
    const c = prepareFused("fusedPolicyLossAsync", batch, options, ["signal"]);
    return c.finish(await withSignal(() => native.fusedPolicyLossAsync(c.args), options?.signal));
}
