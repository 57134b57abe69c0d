// rolloutCorrectionStats.ts: the statistics maporl_rollout_correction returns (its own file: lib/native.ts types the
// binding with it, and lib/rl/rolloutCorrection.ts imports lib/native.ts).

/** The batch statistics (verl's rollout_corr/* metrics, camelCase; maporl.h's maporl_rollout_correction_stats):
 * isMean / isMax / isMin of the raw weight rho = pi_old / pi_rollout over valid tokens; isStd and isEss of rho clamped
 * to [1/threshold, threshold]; isFractionHigh / Low (rho above threshold, below 1/threshold: of tokens at token level,
 * else of sequences); isCorrectedFraction (tokens whose weight truncation or masking changed); batchNormFactor;
 * rsMaskedFraction / rsSeqMaskedFraction (tokens the rejection removed, sequences with one); kl = mean(rollout - old)
 * and k3Kl = mean(exp(lr) - 1 - lr), lr = old - rollout (KL(pi_rollout || pi_old) on the rollout's samples);
 * chi2Token, chi2Seq; trainingPpl, rolloutPpl, logPplDiff, logPplAbsDiff (means over sequences). */
export interface RolloutCorrectionStats {
    tokens: number;
    sequences: number;
    isMean: number;
    isMax: number;
    isMin: number;
    isStd: number;
    isEss: number;
    isFractionHigh: number;
    isFractionLow: number;
    isCorrectedFraction: number;
    batchNormFactor: number;
    rsMaskedFraction: number;
    rsSeqMaskedFraction: number;
    kl: number;
    k3Kl: number;
    chi2Token: number;
    chi2Seq: number;
    trainingPpl: number;
    rolloutPpl: number;
    logPplDiff: number;
    logPplAbsDiff: number;
}
