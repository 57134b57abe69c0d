// rolloutCorrection.ref.ts: float64 transcription of verl's rollout_corr_helper.py (volcengine/verl at b178a3c,
// 2026-01-29): compute_rollout_correction_weights, compute_rollout_rejection_mask, the metrics of compute_is_metrics
// and compute_offpolicy_metrics that maporl reports, written with plain loops over [B, T] arrays. The two additions
// verl lacks are written from their sources' definitions: 'geometric' (exp of the row's mean log ratio, OpenRLHF's
// seq-mask-tis statistic) and the mask mode (TRL's token_mask / sequence_mask: a weight outside the band becomes 0,
// inside it stays rho; icepop's band [lower, upper]). Independent of the native code.

const SAFETY = 20;
const clamp = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi);

export interface RcRefOptions {
    is: null | "token" | "sequence" | "geometric";
    mode: "truncate" | "mask";
    threshold: number;
    lower: number;
    batchNormalize: boolean;
    /** verl's options with their parsed (lower, upper); lower is read for k1 only. */
    rs: { option: string; lower: number; upper: number }[];
}

export function rolloutCorrectionReference(
    old: ArrayLike<number>,
    roll: ArrayLike<number>,
    mask: ArrayLike<number>,
    B: number,
    T: number,
    o: RcRefOptions,
) {
    const n = B * T;
    const lr = new Float64Array(n);
    for (let i = 0; i < n; i++) lr[i] = mask[i] === 1 ? old[i] - roll[i] : 0;
    const on = (i: number) => mask[i] === 1;
    const len = new Array<number>(B).fill(0);
    for (let i = 0; i < n; i++) if (on(i)) len[Math.floor(i / T)]++;
    const tokens = len.reduce((a, b) => a + b, 0);
    const rows = [...Array(B).keys()].filter((b) => len[b] > 0);
    const rowSum = (f: (i: number) => number, b: number) => {
        let s = 0;
        for (let t = 0; t < T; t++) if (on(b * T + t)) s += f(b * T + t);
        return s;
    };
    const tokenMean = (f: (i: number) => number) => {
        let s = 0;
        for (let i = 0; i < n; i++) if (on(i)) s += f(i);
        return s / tokens;
    };
    // --- weights: compute_rollout_correction_weights (rho before truncation, then clamp(max=threshold)) ---
    const rho = new Float64Array(n);
    if (o.is) {
        for (let b = 0; b < B; b++) {
            const sum = rowSum((i) => lr[i], b);
            for (let t = 0; t < T; t++) {
                const i = b * T + t;
                if (!on(i)) continue;
                rho[i] =
                    o.is === "token"
                        ? Math.exp(clamp(lr[i], -SAFETY, SAFETY))
                        : o.is === "sequence"
                          ? Math.exp(clamp(sum, -SAFETY, SAFETY))
                          : Math.exp(clamp(sum / len[b], -SAFETY, SAFETY));
            }
        }
    }
    const weights = new Float64Array(n);
    for (let i = 0; i < n; i++) {
        if (!on(i) || !o.is) continue;
        weights[i] =
            o.mode === "truncate"
                ? Math.min(rho[i], o.threshold)
                : rho[i] > o.threshold || rho[i] < o.lower
                  ? 0
                  : rho[i];
    }
    let normFactor = 1;
    if (o.is && o.batchNormalize) {
        const mean =
            o.is === "token"
                ? tokenMean((i) => weights[i])
                : rows.reduce((s, b) => s + rowSum((i) => weights[i], b) / len[b], 0) / rows.length;
        if (mean > 1e-8) {
            normFactor = mean;
            for (let i = 0; i < n; i++) weights[i] /= mean;
        }
    }
    // --- rejection: compute_rollout_rejection_mask (every option must pass) ---
    const keep = new Float64Array(n);
    for (let i = 0; i < n; i++) keep[i] = on(i) ? 1 : 0;
    const ls = (i: number) => clamp(lr[i], -SAFETY, SAFETY);
    const kOf = (k: string, i: number) =>
        k === "k1" ? -ls(i) : k === "k2" ? 0.5 * ls(i) ** 2 : Math.exp(ls(i)) - 1 - ls(i);
    for (const c of o.rs) {
        const [level, k] = c.option.startsWith("token")
            ? ["token", c.option.slice(6)]
            : [c.option.slice(4, c.option.lastIndexOf("_")), c.option.slice(-2)];
        const pass = (v: number) => (k === "k1" ? v >= Math.log(c.lower) && v <= Math.log(c.upper) : v <= c.upper);
        for (let b = 0; b < B; b++) {
            let seqStat = 0;
            if (level === "sum") seqStat = rowSum((i) => kOf(k, i), b);
            else if (level === "mean") seqStat = len[b] ? rowSum((i) => kOf(k, i), b) / len[b] : 0;
            else if (level === "max") {
                seqStat = -Infinity;
                for (let t = 0; t < T; t++) if (on(b * T + t)) seqStat = Math.max(seqStat, kOf(k, b * T + t));
                if (seqStat === -Infinity) seqStat = 0;
            }
            for (let t = 0; t < T; t++) {
                const i = b * T + t;
                if (!on(i)) continue;
                if (!pass(level === "token" ? kOf(k, i) : seqStat)) keep[i] = 0;
            }
        }
    }
    // --- metrics ---
    const lo = 1 / o.threshold;
    const token = o.is === "token";
    const stats = {
        tokens,
        sequences: rows.length,
        isMean: o.is ? tokenMean((i) => rho[i]) : 0,
        isFractionHigh: !o.is
            ? 0
            : token
              ? tokenMean((i) => (rho[i] > o.threshold ? 1 : 0))
              : rows.filter((b) => rho[b * T + firstOn(b)] > o.threshold).length / rows.length,
        isFractionLow: !o.is
            ? 0
            : token
              ? tokenMean((i) => (rho[i] < lo ? 1 : 0))
              : rows.filter((b) => rho[b * T + firstOn(b)] < lo).length / rows.length,
        isEss: o.is
            ? (() => {
                  const m = tokenMean((i) => clamp(rho[i], lo, o.threshold));
                  return 1 / tokenMean((i) => (clamp(rho[i], lo, o.threshold) / (m + 1e-8)) ** 2);
              })()
            : 0,
        batchNormFactor: normFactor,
        rsMaskedFraction: tokenMean((i) => 1 - keep[i]),
        rsSeqMaskedFraction: rows.filter((b) => rowSum((i) => 1 - keep[i], b) > 0).length / rows.length,
        kl: tokenMean((i) => roll[i] - old[i]),
        k3Kl: tokenMean((i) => Math.exp(lr[i]) - lr[i] - 1), // verl: unclamped (equal while |lr| <= 20)
        chi2Token: tokenMean((i) => Math.exp(ls(i)) ** 2) - 1,
        chi2Seq:
            rows.reduce(
                (s, b) =>
                    s +
                    Math.exp(
                        2 *
                            clamp(
                                rowSum((i) => lr[i], b),
                                -SAFETY,
                                SAFETY,
                            ),
                    ),
                0,
            ) /
                rows.length -
            1,
        trainingPpl: rows.reduce((s, b) => s + Math.exp(-rowSum((i) => old[i], b) / len[b]), 0) / rows.length,
        rolloutPpl: rows.reduce((s, b) => s + Math.exp(-rowSum((i) => roll[i], b) / len[b]), 0) / rows.length,
        logPplDiff:
            rows.reduce((s, b) => s + (rowSum((i) => roll[i], b) - rowSum((i) => old[i], b)) / len[b], 0) / rows.length,
    };
    function firstOn(b: number) {
        for (let t = 0; t < T; t++) if (on(b * T + t)) return t;
        return 0;
    }
    return { weights, keep, stats };
}
