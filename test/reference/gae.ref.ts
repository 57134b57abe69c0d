// gae.ref.ts: float64 plain-loop GAE, written from verl's compute_gae_advantage_return: reverse scan,
// masked positions skipped (carries pass through), bootstrap 0, returns = A + V, optional masked whitening
// (mean over valid tokens, unbiased variance, eps 1e-8). Outputs are 0 at masked positions (our convention).
export interface GaeRef {
    advantages: Float64Array;
    returns: Float64Array;
    /** Per-element error scales for comparing float32 results: float32 rounding is relative to the size of the
     * terms that were added, not to the result (returns = A + V can cancel; whitening shifts by the mean and
     * multiplies by rstd). With S the GAE recursion run on absolute values (the size of all terms summed into
     * A): advantagesScale = S, or (S + |mean|) * rstd when whitened; returnsScale = S + |V|. */
    advantagesScale: Float64Array;
    returnsScale: Float64Array;
}

export function gaeReference(
    rewards: ArrayLike<number>,
    values: ArrayLike<number>,
    mask: ArrayLike<number>,
    B: number,
    T: number,
    gamma: number,
    lambda: number,
    whiten: boolean,
): GaeRef {
    const A = new Float64Array(B * T),
        R = new Float64Array(B * T);
    // S: the same recursion on absolute values, the size of everything summed into A (for error bounds).
    const S = new Float64Array(B * T);
    for (let b = 0; b < B; b++) {
        let nextValue = 0,
            lastGae = 0,
            lastS = 0;
        for (let t = T - 1; t >= 0; t--) {
            const i = b * T + t;
            if (mask[i] !== 1) continue;
            const delta = rewards[i] + gamma * nextValue - values[i];
            lastGae = delta + gamma * lambda * lastGae;
            lastS = Math.abs(rewards[i]) + gamma * Math.abs(nextValue) + Math.abs(values[i]) + gamma * lambda * lastS;
            nextValue = values[i]!;
            A[i] = lastGae;
            R[i] = lastGae + values[i];
            S[i] = lastS;
        }
    }
    const advantagesScale = new Float64Array(B * T),
        returnsScale = new Float64Array(B * T);
    for (let i = 0; i < B * T; i++) {
        advantagesScale[i] = S[i]!;
        returnsScale[i] = S[i] + (mask[i] === 1 ? Math.abs(values[i]) : 0);
    }
    if (whiten) {
        let n = 0,
            sum = 0;
        for (let i = 0; i < B * T; i++)
            if (mask[i] === 1) {
                n++;
                sum += A[i];
            }
        if (n > 0) {
            const mean = sum / n; // exact (verl divides by n + 1e-8: docs/conventions.md); n < 2: verl raises, we whiten to 0
            let dev = 0;
            for (let i = 0; i < B * T; i++) if (mask[i] === 1) dev += (A[i] - mean) ** 2;
            const variance = n >= 2 ? ((dev / (n + 1e-8)) * n) / (n - 1) : 0;
            const rstd = 1 / Math.sqrt(variance + 1e-8);
            for (let i = 0; i < B * T; i++) advantagesScale[i] = (advantagesScale[i] + Math.abs(mean)) * rstd;
            for (let i = 0; i < B * T; i++) if (mask[i] === 1) A[i] = (A[i] - mean) * rstd;
        }
    }
    return { advantages: A, returns: R, advantagesScale, returnsScale };
}
