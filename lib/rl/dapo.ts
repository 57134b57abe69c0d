// dapo.ts: DAPO's length shaping and group filter (arXiv 2503.14476, §3.2 and §3.4; verl's DAPO recipe).
//   - Soft overlong punishment: with L_max = maxTokens and a buffer L_cache = `buffer`, an answer of |y| tokens gets
//     0 when |y| <= L_max - L_cache and ((L_max - L_cache) - |y|) / L_cache beyond it (-1 at L_max), times
//     `penaltyFactor`: verl's min(-exceed_len / overlong_buffer.len * penalty_factor, 0), which does not clamp below
//     -penaltyFactor (a length past L_max does not happen when the sampler stops at maxTokens);
//   - Dynamic sampling: a group whose rewards are all equal gives every member a zero group-relative advantage (no
//     signal); it is dropped and more groups are sampled, verl's algorithm.filter_groups.
import { describe, requireNumber } from "../validate.js";

export interface OverlongOptions {
    /** The largest answer the sampler produces (L_max). */
    maxTokens: number;
    /** The buffer before L_max where the penalty grows linearly (L_cache, verl's overlong_buffer.len); 0 = off. */
    buffer: number;
    /** verl's overlong_buffer.penalty_factor. Defaults to 1. */
    penaltyFactor?: number;
}

/** The soft overlong penalty (<= 0) of an answer of `length` tokens. */
export function overlongPenalty(length: number, o: OverlongOptions): number {
    const fn = "overlongPenalty";
    const maxTokens = requireNumber(fn, "maxTokens", o.maxTokens, 0, 1, Number.MAX_SAFE_INTEGER);
    const buffer = requireNumber(fn, "buffer", o.buffer, 0, 0, maxTokens);
    const factor = requireNumber(fn, "penaltyFactor", o.penaltyFactor, 1, 0, Number.MAX_VALUE);
    if (!(length >= 0 && Number.isFinite(length)))
        throw new RangeError(`${fn}: length: expected a finite number >= 0, got ${describe(length)}`);
    if (buffer === 0) return 0;
    const exceed = length - (maxTokens - buffer);
    return exceed <= 0 ? 0 : (-exceed / buffer) * factor;
}

/** Whether a group's rewards carry a signal for group-relative advantages: not all equal (NaNs are equal here). */
export function groupHasSignal(rewards: ArrayLike<number>): boolean {
    const r0 = rewards[0]!;
    for (let i = 1; i < rewards.length; i++) {
        const r = rewards[i]!;
        if (r !== r0 && !(Number.isNaN(r) && Number.isNaN(r0))) return true;
    }
    return false;
}
