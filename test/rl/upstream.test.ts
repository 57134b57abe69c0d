// upstream.test.ts: where maporl says "as verl / as TRL / as OpenRLHF / as MAPoRL's code", the upstream functions,
// transcribed here in float64 from the code read (commits in docs/conventions.md), against maporl: the examples of
// the conventions issue and random cases. Each reference is written from the upstream source, not from maporl.
import { describe, expect, it } from "vitest";

import {
    collaborationBonus,
    gae,
    groupAdvantages,
    influenceRewards,
    policyLoss,
    reinforceReturns,
    tdAdvantages,
    treeReturns,
    type LossAggregation,
} from "../../lib/index.js";
import { rng } from "../helpers/rng.js";

// ---- verl (volcengine/verl, verl/trainer/ppo/core_algos.py and verl/utils/torch_functional.py) ----

const masked_mean = (x: number[], m: number[]) =>
    x.reduce((s, v, i) => s + v * m[i], 0) / (m.reduce((s, v) => s + v, 0) + 1e-8);

// agg_loss(loss_mat, loss_mask, loss_agg_mode) over [B, T] rows.
function verlAggLoss(L: number[], m: number[], B: number, T: number, mode: LossAggregation): number {
    const rows = Array.from({ length: B }, (_, b) => b);
    const rowSum = (b: number) => L.slice(b * T, b * T + T).reduce((s, v, t) => s + v * m[b * T + t], 0);
    const rowLen = (b: number) => m.slice(b * T, b * T + T).reduce((s, v) => s + v, 0);
    if (mode === "token-mean") return masked_mean(L, m);
    if (mode === "seq-mean-token-sum") return rows.reduce((s, b) => s + rowSum(b), 0) / B;
    if (mode === "seq-mean-token-mean") return rows.reduce((s, b) => s + rowSum(b) / (rowLen(b) + 1e-8), 0) / B;
    return rows.reduce((s, b) => s + rowSum(b), 0) / T; // seq-mean-token-sum-norm (loss_scale_factor = T)
}

// compute_policy_loss_gspo: the sequence ratio, clipped, and agg_loss(..., "seq-mean-token-mean") whatever loss_agg_mode.
function verlGspo(
    old: number[],
    lp: number[],
    adv: number[],
    m: number[],
    B: number,
    T: number,
    low: number,
    high: number,
) {
    const pg: number[] = [];
    for (let b = 0; b < B; b++) {
        let n = 0,
            s = 0;
        for (let t = 0; t < T; t++) {
            n += m[b * T + t];
            s += (lp[b * T + t] - old[b * T + t]) * m[b * T + t];
        }
        const seq = s / Math.max(n, 1);
        for (let t = 0; t < T; t++) {
            const r = Math.exp(Math.min(seq, 10.0)),
                a = adv[b * T + t];
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
const back = (a: number[]) => Array.from(f32(a)); // the values maporl sees, as doubles

describe("verl", () => {
    it("GSPO's policy term is seq-mean-token-mean whatever the aggregation (the issue's example: -0.0770, not 0.2658)", () => {
        const logp = [-1, 0, -0.9, -1.2],
            old = [-1.1, 0, -1, -1],
            mask = [1, 0, 1, 1];
        const r = policyLoss(
            {
                logp: f32(logp),
                oldLogp: f32(old),
                advantages: f32([1, -1]),
                mask: Uint8Array.from(mask),
                shape: [2, 2],
            },
            { type: "gspo", aggregation: "token-mean", device: "cpu" },
        );
        const want = verlGspo(back(old), back(logp), [1, 1, -1, -1], mask, 2, 2, 0.2, 0.2);
        expect(want).toBeCloseTo(-0.077, 4);
        expect(r.loss).toBeCloseTo(want, 6);
    });

    it("GSPO with KL and entropy: the policy term as verl's gspo, the KL and entropy terms in the configured mode (random cases)", () => {
        const next = rng(23);
        for (const mode of [
            "token-mean",
            "seq-mean-token-sum",
            "seq-mean-token-mean",
            "seq-mean-token-sum-norm",
        ] as LossAggregation[])
            for (let c = 0; c < 4; c++) {
                const B = 3 + c,
                    T = 5 + 2 * c,
                    n = B * T;
                const mask = Array.from({ length: n }, (_, i) => (i % T === 0 || next() < 0.7 ? 1 : 0)); // every row has a token
                const logp = back(Array.from({ length: n }, () => -3 * next())),
                    old = back(logp.map((x) => x + 0.6 * (next() - 0.5)));
                const ref = back(logp.map((x) => x + (next() - 0.5))),
                    ent = back(Array.from({ length: n }, () => 2 * next()));
                const advRow = back(Array.from({ length: B }, () => 2 * (next() - 0.5)));
                const adv = Array.from({ length: n }, (_, i) => advRow[Math.floor(i / T)]);
                const klCoef = 0.1,
                    entCoef = 0.01;
                const got = policyLoss(
                    {
                        logp: f32(logp),
                        oldLogp: f32(old),
                        advantages: f32(advRow),
                        mask: Uint8Array.from(mask),
                        refLogp: f32(ref),
                        entropy: f32(ent),
                        shape: [B, T],
                    },
                    {
                        type: "gspo",
                        aggregation: mode,
                        kl: { coef: klCoef, estimator: "k3" },
                        entropyCoef: entCoef,
                        clip: { low: 0.2, high: 0.28 },
                        device: "cpu",
                    },
                );
                // dp_actor: pg_loss - entropy_coeff * agg_loss(entropy) + kl_coef * agg_loss(kld), both in loss_agg_mode.
                const want =
                    verlGspo(old, logp, adv, mask, B, T, 0.2, 0.28) -
                    entCoef * verlAggLoss(ent, mask, B, T, mode) +
                    klCoef *
                        verlAggLoss(
                            logp.map((x, i) => k3(x, ref[i])),
                            mask,
                            B,
                            T,
                            mode,
                        );
                expect(Math.abs(got.loss - want), `${mode} case ${c}: ${got.loss} vs ${want}`).toBeLessThan(
                    1e-6 + 1e-5 * Math.abs(want),
                );
            }
    });

    it("REINFORCE reports the unclamped approx KL (ppo_kl), as verl's reinforce loss: logp -30, old 0 gives 30", () => {
        const r = policyLoss(
            { logp: f32([-30]), oldLogp: f32([0]), advantages: f32([1]), mask: Uint8Array.from([1]), shape: [1, 1] },
            { type: "reinforce", device: "cpu" },
        );
        expect(r.stats.approxKl).toBe(30);
        const ppo = policyLoss(
            { logp: f32([-30]), oldLogp: f32([0]), advantages: f32([1]), mask: Uint8Array.from([1]), shape: [1, 1] },
            { device: "cpu" },
        );
        expect(ppo.stats.approxKl).toBe(20); // ppo and cispo: clamped as the ratio is (verl's vanilla loss clamps at 20)
        const next = rng(5);
        const lp = back(Array.from({ length: 40 }, () => -40 * next())),
            old = back(Array.from({ length: 40 }, () => -40 * next()));
        const got = policyLoss(
            {
                logp: f32(lp),
                oldLogp: f32(old),
                advantages: f32(lp.map(() => 1)),
                mask: new Uint8Array(40).fill(1),
                shape: [4, 10],
            },
            { type: "reinforce", device: "cpu" },
        );
        expect(got.stats.approxKl).toBeCloseTo(
            masked_mean(
                old.map((o, i) => o - lp[i]),
                lp.map(() => 1),
            ),
            4,
        );
    });
});

// masked_whiten (torch_functional.py) in float64 (shift_mean): mean = masked_mean; var = masked_var (unbiased:
// * n / (n - 1)); (x - mean) * rsqrt(var + 1e-8). NOTE: masked_mean divides by n + 1e-8; maporl by n (see below).
function verlMaskedWhiten(x: number[], m: number[], exactMean = false) {
    const n = m.reduce((s, v) => s + v, 0),
        mean = exactMean ? x.reduce((s, v, i) => s + v * m[i], 0) / n : masked_mean(x, m);
    const varBiased = masked_mean(
            x.map((v) => (v - mean) ** 2),
            m,
        ),
        variance = (varBiased * n) / (n - 1);
    return x.map((v) => (v - mean) / Math.sqrt(variance + 1e-8));
}

// compute_reinforce_plus_plus_baseline_outcome_advantage: score - group mean, tiled over the response, masked_whiten.
function verlReinforceBaseline(scores: number[], groups: number[], mask: number[], T: number) {
    const mean = new Map<number, number[]>();
    scores.forEach((s, i) => mean.set(groups[i], [...(mean.get(groups[i]) ?? []), s]));
    const centred = scores.map((s, i) => {
        const g = mean.get(groups[i])!;
        return g.length === 1 ? s : s - g.reduce((a, b) => a + b, 0) / g.length;
    });
    const tiled = mask.map((v, k) => centred[Math.floor(k / T)] * v);
    return verlMaskedWhiten(tiled, mask).map((v, k) => v * mask[k]);
}

// OpenRLHF (experience_maker.py, advantage_estimator "reinforce_baseline"): rewards - mean over the prompt's samples,
// returns over the response (gamma 1: the score at every token), then the batch normalisation over the action mask:
// mean, var = masked mean of (x - mean)^2 (biased), rstd = var.clamp(min=1e-8).rsqrt().
function openrlhfReinforceBaseline(scores: number[], groupSize: number, mask: number[], T: number) {
    const centred = scores.map((s, i) => {
        const g = scores.slice(
            Math.floor(i / groupSize) * groupSize,
            Math.floor(i / groupSize) * groupSize + groupSize,
        );
        return s - g.reduce((a, b) => a + b, 0) / g.length;
    });
    const x = mask.map((v, k) => centred[Math.floor(k / T)] * v),
        n = mask.reduce((s, v) => s + v, 0);
    const mean = x.reduce((s, v, k) => s + v * mask[k], 0) / n;
    const variance = x.reduce((s, v, k) => s + (v - mean) ** 2 * mask[k], 0) / n;
    return x.map((v, k) => ((v - mean) / Math.sqrt(Math.max(variance, 1e-8))) * mask[k]);
}

describe("OpenRLHF", () => {
    it("reinforce++-baseline whitens as OpenRLHF does under convention 'openrlhf' (the issue's example), as verl otherwise", () => {
        const scores = f32([1, 0, 1, 1]),
            groups = Int32Array.from([0, 0, 1, 1]),
            mask = Uint8Array.from([1, 1, 1, 1]);
        const o = groupAdvantages(
            { scores, groups },
            { estimator: "reinforce++-baseline", convention: "openrlhf", broadcast: { mask, shape: [4, 1] } },
        );
        expect(Array.from(o).map((v) => +v.toFixed(4))).toEqual([1.4142, -1.4142, 0, 0]);
        const v = groupAdvantages(
            { scores, groups },
            { estimator: "reinforce++-baseline", broadcast: { mask, shape: [4, 1] } },
        );
        expect(Array.from(v).map((x) => +x.toFixed(4))).toEqual([1.2247, -1.2247, 0, 0]);
        expect(Array.from(o)).toEqual(openrlhfReinforceBaseline([1, 0, 1, 1], 2, [1, 1, 1, 1], 1).map(Math.fround));
    });

    it("random batches with token masks: OpenRLHF's and verl's formulas, each under its convention", () => {
        const next = rng(31);
        for (let c = 0; c < 6; c++) {
            const G = 2 + (c % 3),
                P = 3 + c,
                T = 4 + c,
                N = G * P;
            const scores = back(Array.from({ length: N }, () => Math.round(10 * next()) / 4));
            const groups = Array.from({ length: N }, (_, i) => Math.floor(i / G));
            const mask = Array.from({ length: N * T }, (_, k) => (k % T < 1 + Math.floor(next() * T) ? 1 : 0));
            const args = { scores: f32(scores), groups: Int32Array.from(groups) };
            const o = groupAdvantages(args, {
                estimator: "reinforce++-baseline",
                convention: "openrlhf",
                broadcast: { mask: Uint8Array.from(mask), shape: [N, T] },
            });
            const wo = openrlhfReinforceBaseline(scores, G, mask, T);
            o.forEach((x, k) =>
                expect(Math.abs(x - wo[k]), `openrlhf case ${c} at ${k}`).toBeLessThan(2e-6 * (1 + Math.abs(wo[k]))),
            );
            const v = groupAdvantages(args, {
                estimator: "reinforce++-baseline",
                broadcast: { mask: Uint8Array.from(mask), shape: [N, T] },
            });
            const wv = verlReinforceBaseline(scores, groups, mask, T);
            v.forEach((x, k) =>
                expect(Math.abs(x - wv[k]), `verl case ${c} at ${k}`).toBeLessThan(2e-6 * (1 + Math.abs(wv[k]))),
            );
        }
    });

    it("one sample per prompt: OpenRLHF's std of one element is NaN; maporl gives 0 (a documented difference)", () => {
        const o = groupAdvantages(
            { scores: f32([0.5, 1]), groups: Int32Array.from([0, 1]) },
            { estimator: "rloo", convention: "openrlhf" },
        );
        expect(Array.from(o)).toEqual([0, 0]);
    });
});

describe("whitening precision (the float64 two-pass answer)", () => {
    const twoPass = (x: number[]) => {
        const n = x.length,
            mean = x.reduce((s, v) => s + v, 0) / n;
        const variance = ((x.reduce((s, v) => s + (v - mean) ** 2, 0) / (n + 1e-8)) * n) / (n - 1);
        return x.map((v) => (v - mean) / Math.sqrt(variance + 1e-8));
    };

    it("a constant of large magnitude whitens to exactly 0 (it gave rstd 1e4 and -20 on every token)", () => {
        const r = reinforceReturns(
            { rewards: new Float32Array(5).fill(-1e6), mask: new Uint8Array(5).fill(1), shape: [5, 1] },
            { gamma: 1, whiten: true },
        );
        expect(Array.from(r.advantages)).toEqual([0, 0, 0, 0, 0]);
        const g = gae(
            {
                rewards: new Float32Array(5).fill(-1e6),
                values: new Float32Array(5),
                mask: new Uint8Array(5).fill(1),
                shape: [5, 1],
            },
            { whiten: true, device: "cpu" },
        );
        expect(Array.from(g.advantages)).toEqual([0, 0, 0, 0, 0]);
        const s = groupAdvantages(
            { scores: f32([1e6 + 1, 1e6 - 1, 1e6 + 3, 1e6 - 3]), groups: Int32Array.from([0, 1, 2, 3]) },
            { estimator: "reinforce++-baseline" },
        ); // singletons keep their raw scores: the whitening sees mean 1e6
        expect(Array.from(s).map((v) => +v.toFixed(4))).toEqual(twoPass([1, -1, 3, -3]).map((v) => +v.toFixed(4)));
    });

    it("mean / std from 1e3 to 1e7: within float precision of the float64 two-pass whitening", () => {
        const next = rng(77);
        for (const offset of [1e3, 1e5, 1e6, 1e7]) {
            const n = 4096,
                x = back(Array.from({ length: n }, () => offset + 8 * (next() - 0.5)));
            const r = reinforceReturns(
                { rewards: f32(x), mask: new Uint8Array(n).fill(1), shape: [n, 1] },
                { gamma: 1, whiten: true },
            );
            const want = twoPass(x);
            let worst = 0;
            r.advantages.forEach((v, i) => {
                worst = Math.max(worst, Math.abs(v - want[i]));
            });
            expect(worst, `offset ${offset}: worst ${worst}`).toBeLessThan(2e-6); // float rounding of the whitened values
            const mean = Array.from(r.advantages).reduce((s, v) => s + v, 0) / n;
            expect(Math.abs(mean), `offset ${offset}: whitened mean ${mean}`).toBeLessThan(1e-4);
        }
    });
});

// ---- MAPoRL (chanwoo-park-official/MAPoRL, trl/trl/trainer/utils_multi_unified.py: score_rule, bonus_rule) ----
// c[q][t][a]; finished[q] = the consensus turn or -1; an unplayed turn reads as the -1 sentinel.

function mapoBonus(
    c: number[][][],
    T: number,
    A: number,
    finished: number[],
    turn: number,
    agent: number,
    alpha: number[],
): number[] {
    const get = (q: number, t: number, a: number) => (finished[q] !== -1 && t > finished[q] ? -1 : c[q][t][a]);
    const others = (q: number, t: number) => {
        let s = 0;
        for (let a = 0; a < A; a++) if (a !== agent) s += get(q, t, a);
        return s / (A - 1);
    };
    const out = c.map((_, q) => (get(q, turn, agent) === -1 ? -1 : 0));
    if (turn === 0) return out;
    const nudge = (q: number) => {
        if (out[q] === -1) out[q] += 0.001;
    };
    for (let q = 0; q < c.length; q++) {
        const prev = get(q, turn - 1, agent),
            cur = get(q, turn, agent),
            po = A > 1 ? others(q, turn - 1) : 0;
        if (prev > 0.5 && cur < 0.5) {
            if (A > 1) {
                if (po > 0.5) {
                    out[q] -= alpha[1];
                    nudge(q);
                } else if (po < 0.5) {
                    out[q] -= alpha[0];
                    nudge(q);
                }
            } else {
                out[q] -= alpha[1];
                nudge(q);
            }
        }
        if (prev < 0.5 && cur > 0.5) {
            if (A > 1) {
                if (po < 0.5) {
                    out[q] += alpha[1];
                    nudge(q);
                } else if (po > 0.5) {
                    out[q] += alpha[0];
                    nudge(q);
                }
            } else {
                out[q] += alpha[1];
                nudge(q);
            }
        }
    }
    if (turn < T - 1 && A > 1)
        for (let q = 0; q < c.length; q++) {
            const next = others(q, turn + 1),
                cur = get(q, turn, agent),
                co = others(q, turn);
            if (next > 0.5 && co < 0.5) {
                if (cur > 0.5) {
                    out[q] -= alpha[3];
                    nudge(q);
                } else if (cur < 0.5) {
                    out[q] -= alpha[2];
                    nudge(q);
                }
            }
            if (next < 0.5 && co > 0.5) {
                if (cur < 0.5) {
                    out[q] += alpha[3];
                    nudge(q);
                } else if (cur > 0.5) {
                    out[q] += alpha[2];
                    nudge(q);
                }
            }
        }
    return out;
}

function mapoScore(
    rule: string,
    share: string,
    d: number,
    s: number[][][],
    T: number,
    A: number,
    finished: number[],
    turn: number,
    agent: number,
): number[] {
    const get = (q: number, t: number, a: number) => (finished[q] !== -1 && t > finished[q] ? -1 : s[q][t][a]);
    const mean = (q: number, t: number) => {
        let m = 0;
        for (let a = 0; a < A; a++) m += get(q, t, a);
        return m / A;
    };
    return s.map((_, q) => {
        if (rule === "last") return share === "all" ? mean(q, T - 1) : get(q, T - 1, agent);
        if (rule === "current") return share === "all" ? mean(q, turn) : get(q, turn, agent);
        const x = finished[q] === -1 ? T - 1 : finished[q];
        if (turn > x) return -1;
        let D = 0;
        for (let t = turn; t <= x; t++) D += d ** (t - turn);
        if (share === "individual") {
            let v = 0;
            for (let t = turn; t <= x; t++) v += get(q, t, agent) * d ** (t - turn);
            return v / D;
        }
        let future = 0;
        if (turn !== T - 1) {
            if (turn + 1 > x) throw new Error("torch.stack expects a non-empty TensorList"); // the code raises here
            for (let t = turn + 1; t <= x; t++) {
                let m = 0;
                for (let a = 0; a < A; a++) m += d ** (t - turn) * get(q, t, a);
                future += m / A;
            }
        }
        return (get(q, turn, agent) + future) / D;
    });
}

describe("MAPoRL's reference code", () => {
    const make = (Q: number, T: number, A: number, seed: number, scores = false) => {
        const next = rng(seed);
        return Array.from({ length: Q }, () =>
            Array.from({ length: T }, () =>
                Array.from({ length: A }, () => (scores ? Math.round(next() * 8) / 8 : next() < 0.5 ? 1 : 0)),
            ),
        );
    };
    const flat = (c: number[][][]) => Float32Array.from(c.flat(2));

    it("collaborationBonus under signs 'reference-code' is bonus_rule, its -1 guard included (alphas 0.5, 1, 2)", () => {
        let nudged = 0;
        for (const [A, T, seed] of [
            [2, 3, 1],
            [3, 4, 2],
            [4, 3, 3],
            [1, 3, 4],
        ] as const)
            for (const alpha of [
                [0.5, 0.5, 0.5, 0.5],
                [1, 1, 1, 1],
                [2, 1, 0.5, 2],
                [0, 1, 2, 0.5],
            ]) {
                const Q = 40,
                    c = make(Q, T, A, seed + 10 * alpha[0]);
                const got = collaborationBonus(
                    { correct: flat(c), shape: [Q, T, A] },
                    {
                        persuadedCorrectly: alpha[0],
                        correctedAlone: alpha[1],
                        wrongButUseful: alpha[2],
                        persuasive: alpha[3],
                        signs: "reference-code",
                    },
                );
                for (let t = 0; t < T; t++)
                    for (let a = 0; a < A; a++) {
                        const want = mapoBonus(
                            c,
                            T,
                            A,
                            c.map(() => -1),
                            t,
                            a,
                            alpha,
                        );
                        want.forEach((w, q) => {
                            expect(got[(q * T + t) * A + a], `A=${A} T=${T} alpha=${alpha} q=${q} t=${t} a=${a}`).toBe(
                                Math.fround(w),
                            );
                            if (Math.abs(w + 0.999) < 1e-9) nudged++;
                        });
                    }
            }
        expect(nudged).toBeGreaterThan(0); // the guard was exercised
    });

    it("lastTurn: turns after it are NaN and the forward term stops there (the code would read its -1 sentinel as 'the others turned wrong')", () => {
        const c = [
            [
                [1, 0, 1],
                [1, 1, 1],
                [0, 0, 0],
            ],
        ]; // stopped by consensus at turn 1 (everyone right)
        const alpha = [1, 1, 1, 1];
        const got = collaborationBonus(
            { correct: flat(c), shape: [1, 3, 3] },
            {
                persuadedCorrectly: 1,
                correctedAlone: 1,
                wrongButUseful: 1,
                persuasive: 1,
                signs: "reference-code",
                lastTurn: Int32Array.from([1]),
            },
        );
        expect(Array.from(got.subarray(6))).toEqual([NaN, NaN, NaN]);
        expect(got[3 + 1]).toBe(1); // agent 1 went wrong -> right with the others right: +persuadedCorrectly
        // The code at turn 1 for agent 0: the others' turn 2 is unplayed (-1, "wrong") after being right: it adds alpha[2].
        expect(mapoBonus(c, 3, 3, [1], 1, 0, alpha)[0]).toBe(1);
        expect(got[3]).toBe(0);
    });

    it("influenceRewards equals score_rule for every rule when every turn is played", () => {
        for (const [A, T, seed] of [
            [2, 3, 5],
            [3, 4, 6],
            [1, 2, 7],
        ] as const) {
            const Q = 12,
                s = make(Q, T, A, seed, true);
            for (const [rule, mine] of [
                ["discounted_sum", "discounted-sum"],
                ["last", "last"],
                ["current", "current"],
            ] as const)
                for (const share of ["all", "individual"] as const) {
                    const got = influenceRewards(
                        { scores: flat(s), shape: [Q, T, A] },
                        { discount: 0.3, rule: mine, scope: share },
                    );
                    for (let t = 0; t < T; t++)
                        for (let a = 0; a < A; a++)
                            mapoScore(
                                rule,
                                share,
                                0.3,
                                s,
                                T,
                                A,
                                s.map(() => -1),
                                t,
                                a,
                            ).forEach((w, q) =>
                                expect(
                                    Math.abs(got[(q * T + t) * A + a] - w),
                                    `${rule}/${share} q=${q} t=${t} a=${a}`,
                                ).toBeLessThan(1e-6),
                            );
                }
        }
    });

    it("early-stopped questions: 'last' reads the last turn played (the code reads turn T-1: its -1 sentinel), 'discounted-sum' ends there (the code raises)", () => {
        const s = [
            [
                [0.5, 1],
                [1, 1],
                [0, 0],
            ],
        ]; // stopped at turn 1
        const got = influenceRewards(
            { scores: flat(s), shape: [1, 3, 2] },
            { rule: "last", lastTurn: Int32Array.from([1]) },
        );
        expect(Array.from(got.subarray(0, 4))).toEqual([1, 1, 1, 1]);
        expect(mapoScore("last", "all", 0.3, s, 3, 2, [1], 0, 0)).toEqual([-1]);
        const ds = influenceRewards({ scores: flat(s), shape: [1, 3, 2] }, { lastTurn: Int32Array.from([1]) });
        expect(ds[2]).toBe(1); // turn 1 is the last played: its own score
        expect(() => mapoScore("discounted_sum", "all", 0.3, s, 3, 2, [1], 1, 0)).toThrow(/non-empty/);
    });
});

// ---- TRL (huggingface/trl, trl/trainer/grpo_trainer.py, _generate_and_score_completions) ----
// rewards_per_func [N, F], groups of num_generations consecutive completions; torch.std is unbiased.
const tstd = (x: number[]) => {
    const m = x.reduce((a, b) => a + b, 0) / x.length;
    return Math.sqrt(x.reduce((a, b) => a + (b - m) ** 2, 0) / (x.length - 1));
};

function trlGrpo(
    r: number[][],
    w: number[],
    G: number,
    scale: "group" | "batch" | "none",
    agg: "sum_then_normalize" | "normalize_then_sum",
) {
    const N = r.length,
        F = w.length;
    if (agg === "sum_then_normalize") {
        const rewards = r.map((row) => row.reduce((s, v, k) => s + v * w[k], 0));
        const adv: number[] = [];
        for (let g = 0; g < N / G; g++) {
            const grp = rewards.slice(g * G, g * G + G),
                mean = grp.reduce((a, b) => a + b, 0) / G;
            const std = scale === "batch" ? tstd(rewards) : G > 1 ? tstd(grp) : 0;
            for (const x of grp) adv.push(scale === "none" ? x - mean : (x - mean) / (std + 1e-4));
        }
        return adv;
    }
    const rk = r.map((row) => row.slice());
    for (let g = 0; g < N / G; g++)
        for (let k = 0; k < F; k++) {
            const col = r.slice(g * G, g * G + G).map((row) => row[k]),
                mean = col.reduce((a, b) => a + b, 0) / G,
                std = G > 1 ? tstd(col) : 0;
            for (let i = 0; i < G; i++) rk[g * G + i][k] = (col[i] - mean) / (std + 1e-4);
        }
    const rewards = rk.map((row) => row.reduce((s, v, k) => s + v * w[k], 0));
    const mean = rewards.reduce((a, b) => a + b, 0) / N,
        std = tstd(rewards);
    return rewards.map((x) => (x - mean) / (std + 1e-4));
}

const AGGS: ("sum_then_normalize" | "normalize_then_sum")[] = ["sum_then_normalize", "normalize_then_sum"];

describe("TRL", () => {
    it("scale_rewards 'batch' / 'group' / 'none' and multi_objective_aggregation, as GRPOTrainer computes them (random cases)", () => {
        const next = rng(41);
        for (const [G, P, F] of [
            [4, 3, 1],
            [2, 5, 2],
            [8, 2, 3],
            [3, 4, 2],
        ] as const) {
            const N = G * P;
            const r = Array.from({ length: N }, () =>
                back(Array.from({ length: F }, () => Math.round(next() * 20) / 10)),
            );
            const w = back(Array.from({ length: F }, (_, k) => 1 + 0.5 * k));
            for (const scale of ["group", "batch", "none"] as const)
                for (const agg of F > 1 ? AGGS : AGGS.slice(0, 1)) {
                    if (agg === "normalize_then_sum" && scale !== "group") continue; // (TRL ignores scale_rewards there)
                    const got = groupAdvantages(
                        {
                            scores: f32(r.flat()),
                            groups: Int32Array.from({ length: N }, (_, i) => Math.floor(i / G)),
                            shape: [N, F],
                        },
                        {
                            convention: "trl",
                            scaleRewards: scale,
                            multiObjectiveAggregation: agg,
                            rewardWeights: f32(w),
                        },
                    );
                    const want = trlGrpo(r, w, G, scale, agg);
                    got.forEach((x, i) =>
                        expect(
                            Math.abs(x - want[i]),
                            `G=${G} F=${F} ${scale} ${agg} at ${i}: ${x} vs ${want[i]}`,
                        ).toBeLessThan(2e-5 * (1 + Math.abs(want[i]))),
                    );
                }
        }
    });

    it("TRL's options need convention 'trl' and GRPO; a bad weight is named", () => {
        const b = { scores: f32([1, 2, 3, 4]), groups: Int32Array.from([0, 0, 1, 1]) };
        expect(() => groupAdvantages(b, { scaleRewards: "batch" })).toThrow(
            /scaleRewards: TRL's option needs convention 'trl'/,
        );
        const two = { scores: f32([1, 2, 3, 4]), groups: Int32Array.from([0, 0]), shape: [2, 2] as const };
        expect(() => groupAdvantages(two, {})).toThrow(/several reward functions .* need convention 'trl'/);
        expect(() => groupAdvantages(b, { convention: "trl", scaleRewards: "batch", estimator: "rloo" })).toThrow(
            /estimator 'grpo'/,
        );
        expect(() => groupAdvantages(two, { convention: "trl", rewardWeights: f32([1, NaN]) })).toThrow(
            /rewardWeights\[1\]: expected a finite number/,
        );
    });
});

// ---- CoMLRL (OpenMLRL/CoMLRL: comlrl/trainers/magrpo.py at 1665784, actor_critic/maac.py and ac_base.py at 10c5083) ----

// MAGRPOTrainer: a node holds the K joint actions sampled at a state (their rewards) and one child node per joint action
// unless the node terminated (mean reward above the threshold) or is at the last turn. compute_returns: a leaf's
// returns are its rewards; else r_j + gamma * mean(child_j's returns). _compute_advantages per node: mean / raw / max /
// rloo ((R * G - sum) / (G - 1)).
interface CoNode {
    rewards: number[];
    children: CoNode[];
    returns?: number[];
}
function coReturns(n: CoNode, gamma: number): number[] {
    n.returns =
        n.children.length === 0
            ? [...n.rewards]
            : n.rewards.map((r, j) => {
                  const c = coReturns(n.children[j], gamma);
                  return r + gamma * (c.reduce((a, b) => a + b, 0) / c.length);
              });
    return n.returns;
}
function coAdvantages(R: number[], mode: string): number[] {
    const G = R.length,
        sum = R.reduce((a, b) => a + b, 0),
        mean = sum / G;
    if (mode === "mean") return R.map((x) => x - mean);
    if (mode === "raw") return [...R];
    if (mode === "max") return R.map((x) => x - Math.max(...R));
    return G <= 1 ? R.map((x) => x - mean) : R.map((x) => (x * G - sum) / (G - 1));
}

describe("CoMLRL", () => {
    it("treeReturns and MAGRPO's baselines equal MAGRPOTrainer's compute_returns and _compute_advantages (random trees)", () => {
        const next = rng(61);
        for (let c = 0; c < 8; c++) {
            const G = 2 + (c % 3),
                T = 1 + (c % 3),
                gamma = [0.9, 1, 0.5][c % 3],
                threshold = 0.7;
            // Build CoMLRL's node tree and maporl's parent / rewards arrays together (breadth first, as JointRollout lists them).
            const parent: number[] = [],
                rewards: number[] = [],
                nodes: CoNode[] = [];
            const frontier: { node: CoNode; parentIdx: number; depth: number }[] = [];
            const root: CoNode = {
                rewards: Array.from({ length: G }, () => Math.round(next() * 10) / 10),
                children: [],
            };
            frontier.push({ node: root, parentIdx: -1, depth: 0 });
            for (let k = 0; k < frontier.length; k++) {
                const { node, parentIdx, depth } = frontier[k];
                const base = parent.length;
                node.rewards.forEach((r) => {
                    parent.push(parentIdx);
                    rewards.push(r);
                });
                nodes.push(node);
                const mean = node.rewards.reduce((a, b) => a + b, 0) / G;
                if (depth + 1 < T && !(mean > threshold))
                    node.rewards.forEach((_, j) => {
                        const child: CoNode = {
                            rewards: Array.from({ length: G }, () => Math.round(next() * 10) / 10),
                            children: [],
                        };
                        node.children.push(child);
                        frontier.push({ node: child, parentIdx: base + j, depth: depth + 1 });
                    });
            }
            coReturns(root, gamma);
            const wantR = nodes.flatMap((n) => n.returns!);
            for (const [mode, mine] of [
                ["mean", "mean"],
                ["raw", "none"],
                ["max", "max"],
                ["rloo", "rloo"],
            ] as const) {
                const got = treeReturns(
                    { parent: Int32Array.from(parent), rewards: Float32Array.from(rewards) },
                    { gamma, baseline: mine },
                );
                got.returns.forEach((x, i) =>
                    expect(Math.abs(x - wantR[i]), `case ${c} return ${i}`).toBeLessThan(1e-5),
                );
                const wantA = nodes.flatMap((n) => coAdvantages(n.returns!.map(Math.fround), mode));
                got.advantages.forEach((x, i) =>
                    expect(Math.abs(x - wantA[i]), `case ${c} ${mode} advantage ${i}`).toBeLessThan(1e-5),
                );
            }
        }
    });

    it("tdAdvantages equals MAAC's targets and _prepare_advantages (per agent buffer, turn by turn, biased std, floor 1e-6)", () => {
        const next = rng(71);
        for (let c = 0; c < 6; c++) {
            const E = 2 + c,
                gamma = c % 2 ? 1 : 0.9;
            const lengths = Array.from({ length: E }, () => 1 + Math.floor(next() * 3));
            const n = lengths.reduce((a, b) => a + b, 0);
            const r = back(Array.from({ length: n }, () => next())),
                v = back(Array.from({ length: n }, () => next()));
            // _collect_rollouts_multi_turn: target = r_t + discount * old_value(t + 1), r at the last turn; adv = target - old_value.
            const adv: number[] = [],
                turn: number[] = [],
                targets: number[] = [];
            let i0 = 0;
            for (const H of lengths) {
                for (let t = 0; t < H; t++) {
                    const y = t < H - 1 ? r[i0 + t] + gamma * v[i0 + t + 1] : r[i0 + t];
                    targets.push(y);
                    adv.push(y - v[i0 + t]);
                    turn.push(t);
                }
                i0 += H;
            }
            // _process_buffer: the buffer split by turn_idx, _prepare_advantages on each: (adv - mean) / std(unbiased=False).clamp(1e-6) when numel > 1.
            const want = [...adv];
            for (let t = 0; t < 3; t++) {
                const idx = turn.flatMap((u, i) => (u === t ? [i] : []));
                if (idx.length <= 1) continue;
                const m = idx.reduce((a, i) => a + adv[i], 0) / idx.length;
                const sd = Math.max(Math.sqrt(idx.reduce((a, i) => a + (adv[i] - m) ** 2, 0) / idx.length), 1e-6);
                idx.forEach((i) => {
                    want[i] = (adv[i] - m) / sd;
                });
            }
            const got = tdAdvantages({ rewards: f32(r), values: f32(v), lengths: Int32Array.from(lengths) }, { gamma });
            got.targets.forEach((x, i) => expect(Math.abs(x - targets[i])).toBeLessThan(1e-6));
            got.advantages.forEach((x, i) => expect(Math.abs(x - want[i]), `case ${c} at ${i}`).toBeLessThan(1e-4));
        }
    });
});
