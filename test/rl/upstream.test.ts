// upstream.test.ts: where maporl says "as verl / as TRL / as OpenRLHF / as MAPoRL's code", the upstream functions,
// transcribed here in float64 from the code read (commits in docs/conventions.md), against maporl: the examples of
// the conventions issue and random cases. Each reference is written from the upstream source, not from maporl.
import { describe, expect, it } from "vitest";

import { groupAdvantages, policyLoss, type LossAggregation } from "../../lib/index.js";
import { rng } from "../helpers/rng.js";

// ---- verl (volcengine/verl, verl/trainer/ppo/core_algos.py and verl/utils/torch_functional.py) ----

const masked_mean = (x: number[], m: number[]) => x.reduce((s, v, i) => s + v * m[i]!, 0) / (m.reduce((s, v) => s + v, 0) + 1e-8);

// agg_loss(loss_mat, loss_mask, loss_agg_mode) over [B, T] rows.
function verlAggLoss(L: number[], m: number[], B: number, T: number, mode: LossAggregation): number {
    const rows = Array.from({ length: B }, (_, b) => b);
    const rowSum = (b: number) => L.slice(b * T, b * T + T).reduce((s, v, t) => s + v * m[b * T + t]!, 0);
    const rowLen = (b: number) => m.slice(b * T, b * T + T).reduce((s, v) => s + v, 0);
    if (mode === "token-mean") return masked_mean(L, m);
    if (mode === "seq-mean-token-sum") return rows.reduce((s, b) => s + rowSum(b), 0) / B;
    if (mode === "seq-mean-token-mean") return rows.reduce((s, b) => s + rowSum(b) / (rowLen(b) + 1e-8), 0) / B;
    return rows.reduce((s, b) => s + rowSum(b), 0) / T;  // seq-mean-token-sum-norm (loss_scale_factor = T)
}

// compute_policy_loss_gspo: the sequence ratio, clipped, and agg_loss(..., "seq-mean-token-mean") whatever loss_agg_mode.
function verlGspo(old: number[], lp: number[], adv: number[], m: number[], B: number, T: number, low: number, high: number) {
    const pg: number[] = [];
    for (let b = 0; b < B; b++) {
        let n = 0, s = 0;
        for (let t = 0; t < T; t++) { n += m[b * T + t]!; s += (lp[b * T + t]! - old[b * T + t]!) * m[b * T + t]!; }
        const seq = s / Math.max(n, 1);
        for (let t = 0; t < T; t++) {
            const r = Math.exp(Math.min(seq, 10.0)), a = adv[b * T + t]!;
            pg.push(Math.max(-a * r, -a * Math.min(Math.max(r, 1 - low), 1 + high)));
        }
    }
    return verlAggLoss(pg, m, B, T, "seq-mean-token-mean");
}

// kl_penalty(..., "low_var_kl") (k3, clamped as verl does).
const k3 = (lp: number, ref: number) => {
    const kl = Math.min(Math.max(ref - lp, -20), 20);
    return Math.min(Math.max(Math.exp(kl) - kl - 1, -10), 10);
};

const f32 = (a: number[]) => Float32Array.from(a);
const back = (a: number[]) => Array.from(f32(a));  // the values maporl sees, as doubles

describe("verl", () => {
    it("GSPO's policy term is seq-mean-token-mean whatever the aggregation (the issue's example: -0.0770, not 0.2658)", () => {
        const logp = [-1, 0, -0.9, -1.2], old = [-1.1, 0, -1, -1], mask = [1, 0, 1, 1];
        const r = policyLoss({ logp: f32(logp), oldLogp: f32(old), advantages: f32([1, -1]), mask: Uint8Array.from(mask), shape: [2, 2] },
            { type: "gspo", aggregation: "token-mean", device: "cpu" });
        const want = verlGspo(back(old), back(logp), [1, 1, -1, -1], mask, 2, 2, 0.2, 0.2);
        expect(want).toBeCloseTo(-0.0770, 4);
        expect(r.loss).toBeCloseTo(want, 6);
    });

    it("GSPO with KL and entropy: the policy term as verl's gspo, the KL and entropy terms in the configured mode (random cases)", () => {
        const next = rng(23);
        for (const mode of ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] as LossAggregation[])
            for (let c = 0; c < 4; c++) {
                const B = 3 + c, T = 5 + 2 * c, n = B * T;
                const mask = Array.from({ length: n }, (_, i) => (i % T === 0 || next() < 0.7 ? 1 : 0));  // every row has a token
                const logp = back(Array.from({ length: n }, () => -3 * next())), old = back(logp.map((x) => x + 0.6 * (next() - 0.5)));
                const ref = back(logp.map((x) => x + (next() - 0.5))), ent = back(Array.from({ length: n }, () => 2 * next()));
                const advRow = back(Array.from({ length: B }, () => 2 * (next() - 0.5)));
                const adv = Array.from({ length: n }, (_, i) => advRow[Math.floor(i / T)]!);
                const klCoef = 0.1, entCoef = 0.01;
                const got = policyLoss({ logp: f32(logp), oldLogp: f32(old), advantages: f32(advRow), mask: Uint8Array.from(mask), refLogp: f32(ref),
                    entropy: f32(ent), shape: [B, T] }, { type: "gspo", aggregation: mode, kl: { coef: klCoef, estimator: "k3" }, entropyCoef: entCoef,
                    clip: { low: 0.2, high: 0.28 }, device: "cpu" });
                // dp_actor: pg_loss - entropy_coeff * agg_loss(entropy) + kl_coef * agg_loss(kld), both in loss_agg_mode.
                const want = verlGspo(old, logp, adv, mask, B, T, 0.2, 0.28) - entCoef * verlAggLoss(ent, mask, B, T, mode)
                    + klCoef * verlAggLoss(logp.map((x, i) => k3(x, ref[i]!)), mask, B, T, mode);
                expect(Math.abs(got.loss - want), `${mode} case ${c}: ${got.loss} vs ${want}`).toBeLessThan(1e-6 + 1e-5 * Math.abs(want));
            }
    });

    it("REINFORCE reports the unclamped approx KL (ppo_kl), as verl's reinforce loss: logp -30, old 0 gives 30", () => {
        const r = policyLoss({ logp: f32([-30]), oldLogp: f32([0]), advantages: f32([1]), mask: Uint8Array.from([1]), shape: [1, 1] },
            { type: "reinforce", device: "cpu" });
        expect(r.stats.approxKl).toBe(30);
        const ppo = policyLoss({ logp: f32([-30]), oldLogp: f32([0]), advantages: f32([1]), mask: Uint8Array.from([1]), shape: [1, 1] }, { device: "cpu" });
        expect(ppo.stats.approxKl).toBe(20);  // ppo and cispo: clamped as the ratio is (verl's vanilla loss clamps at 20)
        const next = rng(5);
        const lp = back(Array.from({ length: 40 }, () => -40 * next())), old = back(Array.from({ length: 40 }, () => -40 * next()));
        const got = policyLoss({ logp: f32(lp), oldLogp: f32(old), advantages: f32(lp.map(() => 1)), mask: new Uint8Array(40).fill(1), shape: [4, 10] },
            { type: "reinforce", device: "cpu" });
        expect(got.stats.approxKl).toBeCloseTo(masked_mean(old.map((o, i) => o - lp[i]!), lp.map(() => 1)), 4);
    });
});

void groupAdvantages;
