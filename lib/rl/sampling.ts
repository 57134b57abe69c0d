// sampling.ts: batched token sampling with per-row temperature / top-k / top-p / min-p and counter-based seeds
// (native/sampling/sampling.cpp), and the log-probs of given tokens under the same processed distribution, for the
// trainer's behaviour log-probs. Conventions:
//   - the order of the vocabulary is the logit, then the lower index (a total order, so ties are exact);
//   - top-k keeps the k first; top-p keeps a token while the mass ranked before it is < p (vLLM's rule);
//     min-p keeps p_i >= minP * p_max; filterOrder 'top-k-first' applies top-p to the renormalised top-k set,
//     'joint' requires both on the full distribution (FlashInfer's two modes);
//   - the token is the Gumbel-max argmax of logits / temperature + Gumbel noise from Philox4x32-10 keyed by
//     (seed, position, index): the same token for the same row and parameters whatever the batch, order,
//     thread count or SIMD level; temperature 0 is greedy (first argmax, log-prob 0), and so is a temperature
//     below 2^-126 (subnormal) or a row whose max logit / temperature overflows float32 (e.g. 3e38 at 0.7): the
//     exact tempered softmax is then a point mass on the maxima (vLLM samples greedily below 1e-5; here 1e-30
//     still shares the draws among tied maxima). A row of finite logits is always valid. Keys are x + noise in
//     float32, so where an ulp of x outgrows the noise (|x| past ~1e7) ties between near-equal x go to the lower
//     index;
//   - a row with NaN or +Infinity, or only -Infinity, gets valid 0, token -1 and NaN log-probs.
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeSampleCall, type NativeSampleLogprobsCall, type NativeSampleParams } from "../native.js";
import {
    describe,
    requireArray,
    requireBoolean,
    requireChoice,
    requireDisjoint,
    requireOptions,
    requireShape2,
} from "../validate.js";

export type FilterOrder = "top-k-first" | "joint";

export interface SampleOptions {
    /** >= 0; 0 = greedy. A number or one per row. Defaults to 1. */
    temperature?: number | Float32Array;
    /** Integer >= 0; 0 or >= V = off. Defaults to 0. */
    topK?: number | Int32Array;
    /** In [0, 1]; 0 or 1 = off. Defaults to 1. */
    topP?: number | Float32Array;
    /** In [0, 1]; 0 = off. Defaults to 0. */
    minP?: number | Float32Array;
    /** The Philox key: an integer in [0, 2^64) (number or bigint), or one per row (BigUint64Array). Defaults to 0. */
    seed?: number | bigint | BigUint64Array;
    /** The Philox counter, e.g. the token's position in its sequence: a number / bigint, or one per row
     * (BigInt64Array or Int32Array). Defaults to 0. */
    position?: number | bigint | BigInt64Array | Int32Array;
    /** Defaults to 'top-k-first'. */
    filterOrder?: FilterOrder;
    /** Also return the log-probs under the raw softmax (costs a second exp per logit when temperature != 1).
     * Defaults to true. */
    rawLogprobs?: boolean;
    /** Defaults to 'auto' (CUDA only for at least 2^26 logits). */
    device?: Device;
    out?: { tokens?: Int32Array; logprobs?: Float32Array; rawLogprobs?: Float32Array; valid?: Uint8Array };
}

export interface SampleResult {
    /** [B]; -1 for an invalid row. */
    tokens: Int32Array;
    /** log-prob of the token under the distribution sampled from (temperature and filters, renormalised): the
     * behaviour log-prob a trainer needs. The processed logits are logits / temperature rounded to float32 (as
     * vLLM's `logits.div_(temperature)`); the log-prob of those floats is computed in double. [B] */
    logprobs: Float32Array;
    /** log-prob under the plain softmax of the raw logits, [B] (absent with rawLogprobs: false). */
    rawLogprobs?: Float32Array;
    /** 1 for a valid row, [B]. */
    valid: Uint8Array;
    device: "cpu" | "cuda";
}

export interface SampleBatch {
    /** Float32 logits, [B, V] row-major. */
    logits: Float32Array;
    shape: readonly [number, number];
}

const U64 = 2n ** 64n;

function perRow<A extends Float32Array | Int32Array>(
    fn: string,
    name: string,
    x: unknown,
    B: number,
    ctor: { new (n: number): A; name: string },
    fallback: number,
    check: (v: number) => boolean,
    expected: string,
): number | A {
    if (x === undefined) return fallback;
    if (typeof x === "number") {
        if (!check(x)) throw new RangeError(`${fn}: ${name}: expected ${expected}, got ${describe(x)}`);
        return x;
    }
    const arr = requireArray(fn, name, x, [ctor as unknown as Float32ArrayConstructor], B) as unknown as A;
    for (let b = 0; b < B; b++)
        if (!check(arr[b]!))
            throw new RangeError(`${fn}: ${name}[${b}]: expected ${expected}, got ${describe(arr[b])}`);
    return arr;
}

function params(fn: string, o: Partial<SampleOptions>, B: number): NativeSampleParams {
    const temperature = perRow(
        fn,
        "temperature",
        o.temperature,
        B,
        Float32Array,
        1,
        (v) => v >= 0 && Number.isFinite(v),
        "a finite number >= 0 (0: greedy)",
    );
    const topK = perRow(
        fn,
        "topK",
        o.topK,
        B,
        Int32Array,
        0,
        (v) => Number.isInteger(v) && v >= 0 && v <= 2 ** 31 - 1,
        "an integer >= 0 (0: off)",
    );
    const topP = perRow(
        fn,
        "topP",
        o.topP,
        B,
        Float32Array,
        1,
        (v) => v >= 0 && v <= 1,
        "a number in [0, 1] (0 or 1: off)",
    );
    const minP = perRow(fn, "minP", o.minP, B, Float32Array, 0, (v) => v >= 0 && v <= 1, "a number in [0, 1] (0: off)");
    let seed: bigint | BigUint64Array;
    if (o.seed === undefined) seed = 0n;
    else if (typeof o.seed === "number" || typeof o.seed === "bigint") {
        const s = typeof o.seed === "number" ? (Number.isSafeInteger(o.seed) ? BigInt(o.seed) : -1n) : o.seed;
        if (s < 0n || s >= U64)
            throw new RangeError(`${fn}: seed: expected an integer in [0, 2^64), got ${describe(o.seed)}`);
        seed = s;
    } else if (o.seed instanceof BigUint64Array) {
        if (o.seed.length !== B)
            throw new RangeError(
                `${fn}: seed: expected BigUint64Array of ${B} elements, got ${o.seed.length} elements`,
            );
        seed = o.seed;
    } else
        throw new TypeError(
            `${fn}: seed: expected a number, bigint or BigUint64Array of ${B} elements, got ${describe(o.seed)}`,
        );
    let position: bigint | BigInt64Array;
    if (o.position === undefined) position = 0n;
    else if (typeof o.position === "number" || typeof o.position === "bigint") {
        const v =
            typeof o.position === "number"
                ? Number.isSafeInteger(o.position)
                    ? BigInt(o.position)
                    : null
                : o.position;
        if (v === null || v < -(2n ** 63n) || v >= 2n ** 63n)
            throw new RangeError(`${fn}: position: expected an integer, got ${describe(o.position)}`);
        position = v;
    } else if (o.position instanceof BigInt64Array || o.position instanceof Int32Array) {
        if (o.position.length !== B)
            throw new RangeError(
                `${fn}: position: expected ${o.position.constructor.name} of ${B} elements, got ${o.position.length} elements`,
            );
        position = o.position instanceof BigInt64Array ? o.position : BigInt64Array.from(o.position, (v) => BigInt(v));
    } else
        throw new TypeError(
            `${fn}: position: expected a number, bigint, BigInt64Array or Int32Array of ${B} elements, got ${describe(o.position)}`,
        );
    const filterOrder =
        requireChoice(fn, "filterOrder", o.filterOrder, ["top-k-first", "joint"] as const, "top-k-first") === "joint"
            ? 1
            : 0;
    return { temperature, topK, topP, minP, seed, position, filterOrder };
}

const OPTION_KEYS = ["temperature", "topK", "topP", "minP", "seed", "position", "filterOrder", "device"];

function prepareSample(fn: string, batch: SampleBatch, options: unknown, extra: string[]) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with logits and shape, got ${describe(batch)}`);
    const o = requireOptions<SampleOptions>(fn, "options", options, [...OPTION_KEYS, "rawLogprobs", "out", ...extra]);
    const [B, V] = requireShape2(fn, batch.shape, ["B", "V"]);
    if (B > 0 && V < 1) throw new RangeError(`${fn}: shape[1] (V): expected >= 1, got ${V}`);
    const logits = requireArray(fn, "logits", batch.logits, [Float32Array], B * V);
    const p = params(fn, o, B);
    const wantRaw = requireBoolean(fn, "rawLogprobs", o.rawLogprobs, true);
    const device = resolveDevice(fn, o.device, B * V, 1 << 26);
    const out = requireOptions<NonNullable<SampleOptions["out"]>>(fn, "out", o.out, [
        "tokens",
        "logprobs",
        "rawLogprobs",
        "valid",
    ]);
    const tokens =
        out.tokens === undefined ? new Int32Array(B) : requireArray(fn, "out.tokens", out.tokens, [Int32Array], B);
    const logprobs =
        out.logprobs === undefined
            ? outputFloat32(B)
            : requireArray(fn, "out.logprobs", out.logprobs, [Float32Array], B);
    const raw = !wantRaw
        ? null
        : out.rawLogprobs === undefined
          ? outputFloat32(B)
          : requireArray(fn, "out.rawLogprobs", out.rawLogprobs, [Float32Array], B);
    const valid =
        out.valid === undefined ? new Uint8Array(B) : requireArray(fn, "out.valid", out.valid, [Uint8Array], B);
    const outs: Record<string, ArrayBufferView> = {
        "out.tokens": tokens,
        "out.logprobs": logprobs,
        "out.valid": valid,
    };
    if (raw) outs["out.rawLogprobs"] = raw;
    requireDisjoint(fn, outs, { logits, ...outs });
    return {
        args: {
            logits,
            B,
            V,
            params: p,
            device: device === "cuda" ? 1 : 0,
            tokens,
            logprobs,
            rawLogprobs: raw,
            valid,
        } satisfies NativeSampleCall,
        result: { tokens, logprobs, ...(raw ? { rawLogprobs: raw } : {}), valid, device },
    };
}

/**
 * Samples one token per row of [B, V] logits with per-row temperature / top-k / top-p / min-p, in a pass over
 * each row without sorting the vocabulary, and returns the token's log-probs under the processed and the raw
 * distribution. Deterministic in (row, options, seed, position).
 */
export function sample(batch: SampleBatch, options?: SampleOptions): SampleResult {
    const c = prepareSample("sample", batch, options, []);
    native.sample(c.args);
    return c.result;
}

/** {@link sample} off the main thread. */
export async function sampleAsync(
    batch: SampleBatch,
    options?: SampleOptions & { signal?: AbortSignal },
): Promise<SampleResult> {
    const c = prepareSample("sampleAsync", batch, options, ["signal"]);
    await withSignal(() => native.sampleAsync(c.args), options?.signal);
    return c.result;
}

export interface TokensBatch extends SampleBatch {
    /** One token id per row, [B], in [0, V). */
    tokens: Int32Array;
}

export interface LogprobsOfTokensResult {
    /** Under the processed distribution (the sampler's): -Infinity outside the support; NaN for an invalid row. */
    logprobs: Float32Array;
    rawLogprobs?: Float32Array;
    device: "cpu" | "cuda";
}

function prepareGiven(fn: string, batch: TokensBatch, options: unknown, extra: string[]) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with logits, tokens and shape, got ${describe(batch)}`);
    const o = requireOptions<SampleOptions>(fn, "options", options, [...OPTION_KEYS, "rawLogprobs", "out", ...extra]);
    const [B, V] = requireShape2(fn, batch.shape, ["B", "V"]);
    const logits = requireArray(fn, "logits", batch.logits, [Float32Array], B * V);
    const tokens = requireArray(fn, "tokens", batch.tokens, [Int32Array], B);
    for (let b = 0; b < B; b++)
        if (!(tokens[b]! >= 0 && tokens[b]! < V))
            throw new RangeError(`${fn}: tokens[${b}]: expected a token id in [0, ${V}), got ${tokens[b]}`);
    const p = params(fn, o, B);
    const wantRaw = requireBoolean(fn, "rawLogprobs", o.rawLogprobs, true);
    const device = resolveDevice(fn, o.device, B * V, 1 << 26);
    const out = requireOptions<{ logprobs: Float32Array; rawLogprobs: Float32Array }>(fn, "out", o.out, [
        "logprobs",
        "rawLogprobs",
    ]);
    const logprobs =
        out.logprobs === undefined
            ? outputFloat32(B)
            : requireArray(fn, "out.logprobs", out.logprobs, [Float32Array], B);
    const raw = !wantRaw
        ? null
        : out.rawLogprobs === undefined
          ? outputFloat32(B)
          : requireArray(fn, "out.rawLogprobs", out.rawLogprobs, [Float32Array], B);
    const outs: Record<string, ArrayBufferView> = { "out.logprobs": logprobs };
    if (raw) outs["out.rawLogprobs"] = raw;
    requireDisjoint(fn, outs, { logits, tokens, ...outs });
    return {
        args: {
            logits,
            B,
            V,
            params: p,
            device: device === "cuda" ? 1 : 0,
            tokens,
            logprobs,
            rawLogprobs: raw,
        } satisfies NativeSampleLogprobsCall,
        result: { logprobs, ...(raw ? { rawLogprobs: raw } : {}), device },
    };
}

/** Log-probs of given tokens under the distribution {@link sample} draws from with the same options. */
export function logprobsOfTokens(
    batch: TokensBatch,
    options?: Omit<SampleOptions, "seed" | "position">,
): LogprobsOfTokensResult {
    const c = prepareGiven("logprobsOfTokens", batch, options, []);
    native.sampleLogprobs(c.args);
    return c.result;
}

/** {@link logprobsOfTokens} off the main thread. */
export async function logprobsOfTokensAsync(
    batch: TokensBatch,
    options?: Omit<SampleOptions, "seed" | "position"> & { signal?: AbortSignal },
): Promise<LogprobsOfTokensResult> {
    const c = prepareGiven("logprobsOfTokensAsync", batch, options, ["signal"]);
    await withSignal(() => native.sampleLogprobsAsync(c.args), options?.signal);
    return c.result;
}
