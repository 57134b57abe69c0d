// gae.ts: generalized advantage estimation, verl's compute_gae_advantage_return on native kernels.
// Differences from verl, on purpose: outputs at masked positions are 0 (verl leaves the carried value
// there), NaN/Inf at masked positions are never read (verl multiplies by the mask, so they leak), and
// whitening with fewer than 2 valid tokens uses variance 0 (verl raises).
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeGaeCall } from "../native.js";
import {
    requireArray,
    requireBoolean,
    requireDisjoint,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";

export interface GaeBatch {
    /** Per-token rewards, [B, T]. */
    rewards: Float32Array;
    /** Critic values V(s_t), [B, T]. */
    values: Float32Array;
    /** 1 where the token is trainable (response tokens), 0 for padding or tool observations, [B, T]. */
    mask: Uint8Array | Float32Array;
    /** Shape [B, T]: rows (sequences) and steps (tokens). */
    shape: readonly [number, number];
}

export interface GaeOptions {
    /** Discount factor in [0, 1]. Defaults to `1`. */
    gamma?: number;
    /** GAE λ in [0, 1]. Defaults to `0.95`. */
    lambda?: number;
    /** Whiten the advantages over all unmasked tokens of the batch (unbiased variance, eps 1e-8). Defaults to `false`. */
    whiten?: boolean;
    /** `'cpu'`, `'cuda'` or `'auto'` (CUDA only for batches of at least 2^24 tokens). Defaults to `'auto'`. */
    device?: Device;
    /**
     * Buffers to write the results into instead of allocating ([B, T] Float32Array each, not overlapping the
     * inputs or each other). Reusing them across calls skips the allocation and first-touch page faults,
     * which at 1M tokens cost several times the kernel itself. Defaults to new buffers.
     */
    out?: { advantages?: Float32Array; returns?: Float32Array };
}

export interface GaeAsyncOptions extends GaeOptions {
    /** Rejects the promise with `signal.reason` when aborted. */
    signal?: AbortSignal;
}

export interface GaeResult {
    /** [B, T]; 0 at masked positions. Whitened when `whiten` is set. */
    advantages: Float32Array;
    /** advantages + values before whitening, [B, T]; 0 at masked positions. */
    returns: Float32Array;
    /** Where the kernel ran. */
    device: "cpu" | "cuda";
}

const OPTION_KEYS = ["gamma", "lambda", "whiten", "device", "out"] as const;
const AUTO_CUDA_TOKENS = 1 << 24; // below this the host<->device copies cost more than the CPU kernel

/** The addon's arguments with the device by name (the result reports it). */
type GaeCall = Omit<NativeGaeCall, "device"> & { device: "cpu" | "cuda" };

function prepare(fn: string, batch: GaeBatch, options: unknown, extraKeys: readonly string[]): GaeCall {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(
            `${fn}: batch: expected an object with rewards, values, mask and shape, got ${typeof batch}`,
        );
    const o = requireOptions<GaeOptions>(fn, "options", options, [...OPTION_KEYS, ...extraKeys]);
    const [B, T] = requireShape2(fn, batch.shape, ["B", "T"]);
    const n = B * T;
    const rewards = requireArray(fn, "rewards", batch.rewards, [Float32Array], n);
    const values = requireArray(fn, "values", batch.values, [Float32Array], n);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], n);
    const out = requireOptions<NonNullable<GaeOptions["out"]>>(fn, "out", o.out, ["advantages", "returns"]);
    const advantages =
        out.advantages === undefined
            ? outputFloat32(n) // the kernel writes every element
            : requireArray(fn, "out.advantages", out.advantages, [Float32Array], n);
    const returns =
        out.returns === undefined ? outputFloat32(n) : requireArray(fn, "out.returns", out.returns, [Float32Array], n);
    requireDisjoint(
        fn,
        { "out.advantages": advantages, "out.returns": returns },
        { rewards, values, mask, "out.advantages": advantages },
    );
    return {
        rewards,
        values,
        mask,
        advantages,
        returns,
        B,
        T,
        gamma: requireNumber(fn, "gamma", o.gamma, 1, 0, 1),
        lambda: requireNumber(fn, "lambda", o.lambda, 0.95, 0, 1),
        whiten: requireBoolean(fn, "whiten", o.whiten, false),
        device: resolveDevice(fn, o.device, n, AUTO_CUDA_TOKENS),
    };
}

function args(c: GaeCall): NativeGaeCall {
    return {
        rewards: c.rewards,
        values: c.values,
        mask: c.mask,
        B: c.B,
        T: c.T,
        gamma: c.gamma,
        lambda: c.lambda,
        whiten: c.whiten,
        device: c.device === "cuda" ? 1 : 0,
        advantages: c.advantages,
        returns: c.returns,
    };
}

/**
 * GAE over a [B, T] batch: each row is scanned from the end with bootstrap 0, skipping masked positions
 * (the carried next value and advantage pass through them), and returns = advantages + values.
 * @throws TypeError / RangeError on bad arguments, MaporlError (`MAPORL_ERR_INVALID_ARG`) on a mask value
 * other than 0 or 1, MaporlError (`MAPORL_ERR_NO_DEVICE`) for `device: 'cuda'` without a GPU.
 */
export function gae(batch: GaeBatch, options?: GaeOptions): GaeResult {
    const c = prepare("gae", batch, options, []);
    native.gae(args(c));
    return { advantages: c.advantages, returns: c.returns, device: c.device };
}

/** {@link gae} off the main thread (the native pool does the work; inputs are not copied). */
export async function gaeAsync(batch: GaeBatch, options?: GaeAsyncOptions): Promise<GaeResult> {
    const c = prepare("gaeAsync", batch, options, ["signal"]);
    await withSignal(() => native.gaeAsync(args(c)), options?.signal);
    return { advantages: c.advantages, returns: c.returns, device: c.device };
}
