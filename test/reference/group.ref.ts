// group.ref.ts: float64 group-relative advantages written from the formulas (docs/conventions.md, docs/algorithms.md B.3):
// per group, mean and std (unbiased or biased) over the counted members; GRPO (s − mean)/(std + eps); Dr.GRPO
// s − mean; RLOO s − (sum − s)/(n − 1); MAGRPO max s − max, none s; a singleton is treated as mean 0, std 1
// ('raw') or gets 0 ('zero'); NaN scores are excluded and get 0 ('exclude') or propagate; REINFORCE++-baseline
// whitens s − mean over the batch with weights: verl's masked_whiten (unbiased variance, 1 / sqrt(var + 1e-8); fewer
// than 2: variance 0) or OpenRLHF's (biased variance, rsqrt(clamp(var, 1e-8))); the mean exact (verl adds 1e-8 to
// the count, which maporl does not: see docs/conventions.md).
export interface GroupRefOptions {
    baseline: "mean" | "rloo" | "max" | "none";
    scaleByStd: boolean;
    unbiased: boolean;
    eps: number;
    singletonZero: boolean;
    nanExclude: boolean;
    whiten: false | "verl" | "openrlhf";
    weights?: ArrayLike<number>;
}

export function groupReference(scores: ArrayLike<number>, groups: ArrayLike<number>, o: GroupRefOptions): Float64Array {
    const N = scores.length;
    const members = new Map<number, number[]>();
    for (let i = 0; i < N; i++) {
        if (o.nanExclude && Number.isNaN(scores[i])) continue;
        const list = members.get(groups[i]) ?? [];
        list.push(i);
        members.set(groups[i], list);
    }
    const out = new Float64Array(N);
    for (const list of members.values()) {
        const n = list.length;
        const vals = list.map((i) => scores[i]);
        const sum = vals.reduce((a, b) => a + b, 0);
        const mean = sum / n;
        const max = vals.some(Number.isNaN) ? NaN : Math.max(...vals);
        const dev = vals.reduce((a, v) => a + (v - mean) ** 2, 0);
        const std = n > 1 ? Math.sqrt(dev / (o.unbiased ? n - 1 : n)) : 1;
        for (const i of list) {
            const s = scores[i];
            let a: number;
            if (o.baseline === "none") {
                out[i] = s;
                continue;
            }
            if (n === 1) {
                if (o.singletonZero) {
                    out[i] = 0;
                    continue;
                }
                a = s;
            } else if (o.baseline === "rloo") a = s - (sum - s) / (n - 1);
            else if (o.baseline === "max") a = s - max;
            else a = s - mean;
            out[i] = o.scaleByStd ? a / (std + o.eps) : a;
        }
    }
    if (o.whiten) {
        let W = 0,
            S = 0;
        const w = (i: number) => (o.nanExclude && Number.isNaN(scores[i]) ? 0 : o.weights ? o.weights[i] : 1);
        for (let i = 0; i < N; i++) {
            W += w(i);
            S += w(i) * out[i];
        }
        const mean = S / (W || 1);
        let dev = 0;
        for (let i = 0; i < N; i++) dev += w(i) * (out[i] - mean) ** 2;
        const rstd =
            o.whiten === "openrlhf"
                ? 1 / Math.sqrt(Math.max(W > 0 ? dev / W : 0, 1e-8))
                : 1 / Math.sqrt((W >= 2 ? ((dev / (W + 1e-8)) * W) / (W - 1) : 0) + 1e-8);
        for (let i = 0; i < N; i++) out[i] = w(i) === 0 ? 0 : (out[i] - mean) * rstd;
    }
    return out;
}
