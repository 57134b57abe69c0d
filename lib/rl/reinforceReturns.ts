// reinforceReturns.ts: REINFORCE++ discounted returns (verl's reinforce_plus_plus) on the native scan kernel.
// Differences from verl, on purpose: outputs at masked positions are 0, and nothing at a masked position
// (NaN included) crosses it (verl's `running * mask` lets a NaN through as NaN * 0).
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeReturnsCall } from "../native.js";
import {
    requireArray,
    requireBoolean,
    requireDisjoint,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";

export interface ReturnsBatch {
    /** Per-token rewards, [B, T] (e.g. the score at the last token minus a KL penalty). */
    rewards: Float32Array;
    /** 1 for response tokens, [B, T]; a 0 resets the running return. */
    mask: Uint8Array | Float32Array;
    shape: readonly [number, number];
}

export interface ReturnsOptions {
    /** Discount in [0, 1]. Defaults to `1`. */
    gamma?: number;
    /** Whiten the advantages over all unmasked tokens (verl's masked_whiten). Defaults to `true`. */
    whiten?: boolean;
    /** Defaults to `'auto'` (CUDA only for at least 2^24 tokens). */
    device?: Device;
    /** Buffers to write into instead of allocating ([B, T] each, not overlapping the inputs or each other), as for gae. */
    out?: { returns?: Float32Array; advantages?: Float32Array };
}

export interface ReturnsResult {
    /** G_t = r_t + gamma * G_{t+1}, reset at masked positions; 0 there. [B, T] */
    returns: Float32Array;
    /** The returns, whitened when `whiten`. [B, T] */
    advantages: Float32Array;
    device: "cpu" | "cuda";
}

function prepare(fn: string, batch: ReturnsBatch, options: unknown, extra: string[]) {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with rewards, mask and shape, got ${typeof batch}`);
    const o = requireOptions<ReturnsOptions>(fn, "options", options, ["gamma", "whiten", "device", "out", ...extra]);
    const [B, T] = requireShape2(fn, batch.shape, ["B", "T"]);
    const n = B * T;
    const rewards = requireArray(fn, "rewards", batch.rewards, [Float32Array], n);
    const mask = requireArray(fn, "mask", batch.mask, [Uint8Array, Float32Array], n);
    const gamma = requireNumber(fn, "gamma", o.gamma, 1, 0, 1);
    const whiten = requireBoolean(fn, "whiten", o.whiten, true);
    const device = resolveDevice(fn, o.device, n, 1 << 24);
    const out = requireOptions<NonNullable<ReturnsOptions["out"]>>(fn, "out", o.out, ["returns", "advantages"]);
    const returns =
        out.returns === undefined ? outputFloat32(n) : requireArray(fn, "out.returns", out.returns, [Float32Array], n);
    const advantages =
        out.advantages === undefined
            ? outputFloat32(n) // the kernel writes every element
            : requireArray(fn, "out.advantages", out.advantages, [Float32Array], n);
    requireDisjoint(
        fn,
        { "out.returns": returns, "out.advantages": advantages },
        { rewards, mask, "out.returns": returns },
    );
    return {
        args: {
            rewards,
            mask,
            B,
            T,
            gamma,
            whiten,
            device: device === "cuda" ? 1 : 0,
            returns,
            advantages,
        } satisfies NativeReturnsCall,
        result: { returns, advantages, device },
    };
}

/**
 * REINFORCE++ returns over a [B, T] batch, verl's reinforce_plus_plus: G_t = r_t + gamma * G_{t+1} from the end of
 * each row, reset to 0 at masked positions; advantages = masked-whitened returns.
 */
export function reinforceReturns(batch: ReturnsBatch, options?: ReturnsOptions): ReturnsResult {
    const c = prepare("reinforceReturns", batch, options, []);
    native.reinforceReturns(c.args);
    return c.result;
}

/** {@link reinforceReturns} off the main thread. */
export async function reinforceReturnsAsync(
    batch: ReturnsBatch,
    options?: ReturnsOptions & { signal?: AbortSignal },
): Promise<ReturnsResult> {
    const c = prepare("reinforceReturnsAsync", batch, options, ["signal"]);
    await withSignal(() => native.reinforceReturnsAsync(c.args), options?.signal);
    return c.result;
}
