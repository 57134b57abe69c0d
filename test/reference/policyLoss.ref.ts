// policyLoss.ref.ts: float64 references written from verl's formulas (docs/conventions.md), token by
// token with plain loops: the per-token loss, its derivative w.r.t. logp (derived by hand from the formula,
// autograd conventions: a clamp passes the gradient inside its closed range, max/min to the branch taken),
// the aggregation, and the statistics. Independent of the native code.

export interface RefOptions {
    type: "ppo" | "gspo" | "cispo" | "reinforce";
    clipLow: number;
    clipHigh: number;
    dualClip: number | null;
    logRatioClamp: number;
    kl: null | { coef: number; estimator: "k1" | "abs" | "k2" | "k3"; straightThrough: boolean };
    entropyCoef: number;
    aggregation: "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm";
    normalizer: number | null;
    /** gspo: the policy term's sequence count (verl aggregates it as seq-mean-token-mean whatever the mode). */
    sequenceNormalizer?: number | null;
}

export interface RefBatch {
    logp: ArrayLike<number>;
    oldLogp: ArrayLike<number> | null;
    advantages: ArrayLike<number>; // [B, T] or [B]
    mask: ArrayLike<number>;
    refLogp: ArrayLike<number> | null;
    entropy: ArrayLike<number> | null;
    /** verl's rollout_is_weights: pg_losses * w after every clip (rolloutCorrection.ref.ts makes them). */
    isWeights?: ArrayLike<number> | null;
    B: number;
    T: number;
}

const clamp = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi);

export function policyLossReference(x: RefBatch, o: RefOptions) {
    const { B, T } = x;
    const perSeq = x.advantages.length === B && B !== B * T;
    const A = (b: number, t: number) => (perSeq ? x.advantages[b] : x.advantages[b * T + t]);
    const on = (i: number) => x.mask[i] === 1;
    const len = new Array<number>(B).fill(0);
    for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) len[b] += on(b * T + t) ? 1 : 0;
    const tokens = len.reduce((s, v) => s + v, 0),
        seqs = len.filter((v) => v > 0).length;
    const weight = (b: number) => {
        if (len[b] === 0) return 0;
        const n = o.normalizer;
        switch (o.aggregation) {
            case "token-mean":
                return 1 / (n ?? tokens);
            case "seq-mean-token-sum":
                return 1 / (n ?? seqs);
            case "seq-mean-token-mean":
                return 1 / ((n ?? seqs) * len[b]);
            default:
                return 1 / (n ?? T);
        }
    };
    // verl's compute_policy_loss_gspo: agg_loss(pg_losses, mask, "seq-mean-token-mean") whatever loss_agg_mode is; the
    // KL and entropy terms take loss_agg_mode (dp_actor's agg_loss calls).
    const seqAgg = o.aggregation === "seq-mean-token-sum" || o.aggregation === "seq-mean-token-mean";
    const pgWeight = (b: number) =>
        o.type !== "gspo"
            ? weight(b)
            : len[b] === 0
              ? 0
              : 1 / ((o.sequenceNormalizer ?? (seqAgg ? o.normalizer : null) ?? seqs) * len[b]);
    const lo = 1 - o.clipLow,
        hi = 1 + o.clipHigh,
        C = o.logRatioClamp;
    const grad = new Float64Array(B * T),
        gradEnt = new Float64Array(B * T),
        gradScale = new Float64Array(B * T);
    let pg = 0,
        kl = 0,
        ent = 0,
        nclip = 0,
        nlow = 0,
        nkl = 0,
        klv = 0,
        entv = 0,
        rsum = 0,
        rmax = -Infinity;
    for (let b = 0; b < B; b++) {
        let seqMean = 0;
        if (o.type === "gspo" && len[b] > 0) {
            for (let t = 0; t < T; t++) if (on(b * T + t)) seqMean += x.logp[b * T + t] - x.oldLogp![b * T + t];
            seqMean /= len[b];
        }
        const w = weight(b),
            wp = pgWeight(b);
        for (let t = 0; t < T; t++) {
            const i = b * T + t;
            if (!on(i)) continue;
            const lp = x.logp[i],
                old = x.oldLogp ? x.oldLogp[i] : lp,
                a = A(b, t);
            let L: number,
                dL: number,
                ratio: number,
                negKl: number,
                clipped = false,
                lower = false;
            if (o.type === "gspo") {
                const s = Math.min(seqMean, C);
                ratio = Math.exp(s);
                const l1 = -a * ratio,
                    l2 = -a * clamp(ratio, lo, hi);
                clipped = l2 > l1;
                L = Math.max(l1, l2);
                dL = clipped || seqMean > C ? 0 : -a * ratio; // d/dlogp of exp(logp - sg(logp) + sg(mean)) is the ratio
                negKl = old - lp;
            } else {
                const raw = lp - old,
                    d = clamp(raw, -C, C);
                ratio = Math.exp(d);
                negKl = o.type === "reinforce" ? -raw : -d; // verl's reinforce reports the unclamped ppo_kl
                if (o.type === "ppo") {
                    const l1 = -a * ratio,
                        l2 = -a * clamp(ratio, lo, hi);
                    clipped = l2 > l1;
                    L = Math.max(l1, l2);
                    dL = clipped || raw < -C || raw > C ? 0 : -a * ratio;
                    if (o.dualClip !== null && a < 0) {
                        const l3 = -a * o.dualClip;
                        if (L > l3) {
                            L = l3;
                            dL = 0;
                            lower = true;
                        }
                    }
                } else if (o.type === "cispo") {
                    const wIs = clamp(ratio, lo, hi);
                    clipped = wIs !== ratio;
                    L = -wIs * a * lp;
                    dL = -wIs * a;
                } else {
                    L = -a * lp;
                    dL = -a;
                }
            }
            if (x.isWeights) {
                L *= x.isWeights[i];
                dL *= x.isWeights[i];
            }
            let k = 0,
                dk = 0;
            if (o.kl) {
                const d = lp - x.refLogp![i];
                if (o.kl.estimator === "k1") {
                    k = d;
                    dk = 1;
                } else if (o.kl.estimator === "abs") {
                    k = Math.abs(d);
                    dk = Math.sign(d);
                } else if (o.kl.estimator === "k2") {
                    k = 0.5 * d * d;
                    dk = d;
                } else {
                    const e = -d,
                        ec = clamp(e, -20, 20),
                        v = Math.exp(ec) - ec - 1;
                    k = clamp(v, -10, 10);
                    dk = e < -20 || e > 20 || v < -10 || v > 10 ? 0 : 1 - Math.exp(ec);
                }
                if (o.kl.straightThrough) dk = d;
            }
            const H = x.entropy ? x.entropy[i] : 0;
            grad[i] = wp * dL + w * (o.kl ? o.kl.coef * dk : 0);
            gradScale[i] = wp * Math.abs(dL) + w * (o.kl ? Math.abs(o.kl.coef * dk) : 0); // the size of what was summed
            gradEnt[i] = -o.entropyCoef * w;
            pg += wp * L;
            kl += w * k;
            ent += w * H;
            nclip += clipped ? 1 : 0;
            nlow += lower ? 1 : 0;
            nkl += negKl;
            klv += k;
            entv += H;
            rsum += ratio;
            rmax = Math.max(rmax, ratio);
        }
    }
    const inv = tokens > 0 ? 1 / tokens : 0;
    return {
        loss: pg + (o.kl ? o.kl.coef * kl : 0) - o.entropyCoef * ent,
        grad,
        gradEnt,
        gradScale,
        stats: {
            pgLoss: pg,
            klLoss: kl,
            entropyLoss: ent,
            clipFrac: nclip * inv,
            clipFracLower: nlow * inv,
            approxKl: nkl * inv,
            klMean: klv * inv,
            entropyMean: entv * inv,
            ratioMean: rsum * inv,
            ratioMax: rmax,
            tokens,
            sequences: seqs,
        },
    };
}

/** log softmax(z / temp)[y] and the entropy, in float64 with the two-pass formula. */
export function logprobsReference(z: ArrayLike<number>, V: number, n: number, y: number, temp: number) {
    let m = -Infinity;
    for (let v = 0; v < V; v++) m = Math.max(m, z[n * V + v] / temp);
    let s = 0,
        tt = 0;
    for (let v = 0; v < V; v++) {
        const q = z[n * V + v] / temp - m,
            e = Math.exp(q);
        s += e;
        if (e > 0) tt += e * q;
    }
    return { logp: z[n * V + y] / temp - m - Math.log(s), entropy: Math.log(s) - tt / s, lse: m + Math.log(s) };
}
