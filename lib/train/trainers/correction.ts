// correction.ts: the trainers' rollout correction. When a packed batch carries the sampler's log-probs
// (PackedBatch.rolloutLogp) and the trainer's log-probs of the same ids are at hand, the mismatch is measured
// (rolloutCorrection's k3 and chi^2), and, when the job's `rolloutCorrection` asks for it, corrected: the IS weights
// multiply the policy-gradient term and the rejection mask replaces the batch's mask (verl's decoupled mode: the
// trainer's old log-probs against the rollout's).
import { rolloutCorrectionAsync, type RolloutCorrectionOptions } from "../../rl/rolloutCorrection.js";
import type { PackedBatch } from "./rollout.js";

/** The job's `rolloutCorrection` block (config.ts): verl's keys, 'none' / '' for off. */
export interface CorrectionConfig {
    rolloutIs: "none" | "token" | "sequence" | "geometric";
    rolloutIsMode: "truncate" | "mask";
    rolloutIsThreshold: number;
    rolloutIsThresholdLower: number;
    rolloutIsBatchNormalize: boolean;
    /** Comma-separated verl options ('' for none). */
    rolloutRs: string;
    /** verl's threshold syntax ('' when rolloutRs is ''). */
    rolloutRsThreshold: string;
}

/** The options rolloutCorrection takes, or null when the block corrects nothing. */
export function correctionOptions(c: CorrectionConfig | undefined): RolloutCorrectionOptions | null {
    if (!c || (c.rolloutIs === "none" && c.rolloutRs.trim() === "")) return null;
    return {
        ...(c.rolloutIs !== "none" ? { rolloutIs: c.rolloutIs } : {}),
        rolloutIsMode: c.rolloutIsMode,
        rolloutIsThreshold: c.rolloutIsThreshold,
        rolloutIsThresholdLower: c.rolloutIsThresholdLower,
        rolloutIsBatchNormalize: c.rolloutIsBatchNormalize,
        ...(c.rolloutRs.trim() !== "" ? { rolloutRs: c.rolloutRs, rolloutRsThreshold: c.rolloutRsThreshold } : {}),
        device: "cpu",
    };
}

/** Per-agent mismatch figures, added to AgentStats (metrics.jsonl's agents[i]). */
export interface MismatchStats {
    /** k3 estimate of KL(rollout || trainer) over the trained tokens. */
    mismatchK3: number;
    /** mean of the raw IS weight pi_old / pi_rollout (1 when the sampler is the trainer). */
    isMean?: number;
    /** tokens whose IS weight truncation or masking changed, and tokens rejection removed. */
    isCorrectedFraction?: number;
    rsMaskedFraction?: number;
}

/**
 * The correction of one batch: null when the batch has no rollout log-probs. `oldLogp` is the trainer's log-probs
 * of the batch. Returns what the train step takes (the mask, and the weights when the options ask for them) and
 * the batch's figures.
 */
export async function correctBatch(
    b: PackedBatch,
    oldLogp: Float32Array,
    options: RolloutCorrectionOptions | null,
): Promise<{ mask: Float32Array; rolloutIsWeights?: Float32Array; stats: MismatchStats } | null> {
    if (!b.rolloutLogp) return null;
    const r = await rolloutCorrectionAsync(
        { oldLogp, rolloutLogp: b.rolloutLogp, mask: b.mask, shape: b.shape },
        options ?? { device: "cpu" },
    );
    const stats: MismatchStats = { mismatchK3: r.stats.k3Kl };
    if (options) {
        if (r.weights) {
            stats.isMean = r.stats.isMean;
            stats.isCorrectedFraction = r.stats.isCorrectedFraction;
        }
        if (options.rolloutRs) stats.rsMaskedFraction = r.stats.rsMaskedFraction;
    }
    return {
        mask: options ? r.mask : b.mask,
        ...(options && r.weights ? { rolloutIsWeights: r.weights } : {}),
        stats,
    };
}

/** Adds one batch's figures into an agent's running sums (divided by the batches at the end: meanMismatch). */
export function addMismatch(into: Partial<MismatchStats> & { mismatchBatches?: number }, s: MismatchStats): void {
    into.mismatchBatches = (into.mismatchBatches ?? 0) + 1;
    for (const k of ["mismatchK3", "isMean", "isCorrectedFraction", "rsMaskedFraction"] as const)
        if (s[k] !== undefined) into[k] = (into[k] ?? 0) + s[k];
}

/** The means of what addMismatch summed; the count is removed. */
export function meanMismatch(into: Partial<MismatchStats> & { mismatchBatches?: number }): void {
    const n = into.mismatchBatches;
    if (!n) return;
    for (const k of ["mismatchK3", "isMean", "isCorrectedFraction", "rsMaskedFraction"] as const)
        if (into[k] !== undefined) into[k] = into[k] / n;
    delete into.mismatchBatches;
}
