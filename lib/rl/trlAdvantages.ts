// trlAdvantages.ts: TRL's GRPO advantages where they leave the per-group kernel (groupAdvantages.ts): scale_rewards
// 'batch' (the std of the whole batch, the mean still per group) and several reward functions combined by
// multi_objective_aggregation ('sum_then_normalize': the weighted sum, then GRPO; 'normalize_then_sum': each function
// normalised per group, the weighted sum, then normalised over the batch). Float64 in TS: the work is O(N * F).
// Formulas: TRL's GRPOTrainer._generate_and_score_completions (docs/conventions.md names the commit read).
// NaN is a reward function that did not score a completion: nansum over functions, nanmean / nanstd within a group
// (TRL's); a completion no function scored gets 0.
import { pushTo } from "../collections.js";

export type ScaleRewards = "group" | "batch" | "none";
export type MultiObjectiveAggregation = "sum_then_normalize" | "normalize_then_sum";

const EPS = 1e-4; // TRL's constant in both aggregations

// Unbiased std of the finite values (TRL's nanstd: Bessel's correction); 0 for fewer than 2.
function nanstd(xs: number[]): number {
    const v = xs.filter((x) => !Number.isNaN(x));
    if (v.length < 2) return 0;
    const m = v.reduce((a, b) => a + b, 0) / v.length;
    return Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (v.length - 1));
}
function nanmean(xs: number[]): number {
    const v = xs.filter((x) => !Number.isNaN(x));
    return v.length === 0 ? NaN : v.reduce((a, b) => a + b, 0) / v.length;
}

/** scores: [N, F] row-major (F reward functions), weights [F]; groups [N]. Returns [N]. */
export function trlAdvantages(
    scores: Float32Array,
    F: number,
    groups: Int32Array,
    weights: Float32Array,
    scale: ScaleRewards,
    aggregation: MultiObjectiveAggregation,
): Float32Array {
    const N = groups.length;
    const members = new Map<number, number[]>();
    for (let i = 0; i < N; i++) pushTo(members, groups[i]!, i);
    const at = (i: number, k: number) => scores[i * F + k]!;
    const unscored = (i: number) => {
        for (let k = 0; k < F; k++) if (!Number.isNaN(at(i, k))) return false;
        return true;
    };
    const out = new Float32Array(N);
    if (aggregation === "sum_then_normalize") {
        const r = Array.from({ length: N }, (_, i) => {
            if (unscored(i)) return NaN;
            let s = 0;
            for (let k = 0; k < F; k++) if (!Number.isNaN(at(i, k))) s += weights[k]! * at(i, k);
            return s;
        });
        const batchStd = nanstd(r);
        for (const list of members.values()) {
            const g = list.map((i) => r[i]!),
                mean = nanmean(g),
                std = scale === "batch" ? batchStd : nanstd(g);
            for (const i of list) {
                const a = r[i]! - mean;
                out[i] = Number.isNaN(a) ? 0 : scale === "none" ? a : a / (std + EPS);
            }
        }
        return out;
    }
    // normalize_then_sum: each function normalised within its group, summed with the weights, normalised over the batch.
    const z = new Float64Array(N * F);
    for (const list of members.values())
        for (let k = 0; k < F; k++) {
            const g = list.map((i) => at(i, k)),
                mean = nanmean(g),
                std = nanstd(g);
            for (const i of list) z[i * F + k] = (at(i, k) - mean) / (std + EPS);
        }
    const r = Array.from({ length: N }, (_, i) => {
        if (unscored(i)) return NaN;
        let s = 0;
        for (let k = 0; k < F; k++) if (!Number.isNaN(z[i * F + k]!)) s += weights[k]! * z[i * F + k]!;
        return s;
    });
    const mean = nanmean(r),
        std = nanstd(r);
    for (let i = 0; i < N; i++) out[i] = Number.isNaN(r[i]!) ? 0 : (r[i]! - mean) / (std + EPS);
    return out;
}
