// offPolicy.test.ts: the controlled experiment of rollout correction. A policy over 3-token sequences (4 ids, one
// softmax per position, parameters theta [3, 4]) is trained on sequences that a behaviour policy sampled at
// temperature 1.2 (softmax(theta / 1.2)), with a reward that couples the positions. The exact on-policy gradient of
// E_pi[R] comes from enumerating all 64 sequences in float64; each estimator's expectation under the behaviour
// policy is enumerated too (its exact bias), and Monte-Carlo runs through the kernels (rolloutCorrection ->
// policyLoss -> d loss / d logp, chained to theta by hand) over 8 seeds check that the kernels compute that
// estimator. The figures are printed (docs/training.md quotes them).
import { describe, expect, it } from "vitest";

import { policyLoss, rolloutCorrection, type RolloutCorrectionOptions } from "../../lib/index.js";
import { rng } from "../helpers/rng.js";

const L = 3,
    V = 4,
    TEMP = 1.2,
    BASELINE = 0.8;
const theta = (() => {
    const r = rng(2024);
    return Array.from({ length: L }, () => Array.from({ length: V }, () => 3 * (2 * r() - 1)));
})();
const softmax = (z: number[], t: number) => {
    const m = Math.max(...z.map((v) => v / t));
    const e = z.map((v) => Math.exp(v / t - m));
    const s = e.reduce((a, b) => a + b, 0);
    return e.map((v) => v / s);
};
const pi = theta.map((z) => softmax(z, 1));
const mu = theta.map((z) => softmax(z, TEMP));
// The reward couples the positions (so a token's weight alone cannot correct for the others' measure).
const reward = (y: number[]) => (y[0] === 1 ? 1 : 0) + (y[1] === y[0] ? 1 : 0) + 0.5 * (y[2] === 3 ? 1 : 0);
const all: number[][] = [];
for (let a = 0; a < V; a++) for (let b = 0; b < V; b++) for (let c = 0; c < V; c++) all.push([a, b, c]);
const prob = (p: number[][], y: number[]) => y.reduce((s, v, l) => s * p[l][v], 1);

type Weighting = "none" | "token" | "sequence";
/** d log pi(y_l) / d theta[l][v] summed with per-token weights c_l: the [L * V] vector sum_l c_l (e_{y_l} - pi_l). */
function scoreGrad(y: number[], c: number[]): number[] {
    const g = new Array<number>(L * V).fill(0);
    for (let l = 0; l < L; l++) for (let v = 0; v < V; v++) g[l * V + v] += c[l] * ((y[l] === v ? 1 : 0) - pi[l][v]);
    return g;
}
const add = (a: number[], b: number[], s = 1) => a.map((v, i) => v + s * b[i]);
const norm = (a: number[]) => Math.sqrt(a.reduce((s, v) => s + v * v, 0));

/** The exact expectation under the behaviour policy of each estimator's gradient of E[R] (float64 enumeration). */
function expected(w: Weighting): number[] {
    let g = new Array<number>(L * V).fill(0);
    for (const y of all) {
        const q = prob(mu, y),
            A = reward(y) - BASELINE;
        const rho = y.map((v, l) => pi[l][v] / mu[l][v]);
        const seq = rho.reduce((a, b) => a * b, 1);
        const c = rho.map((r) => A * (w === "none" ? 1 : w === "token" ? r : seq));
        g = add(g, scoreGrad(y, c), q);
    }
    return g;
}

/** One Monte-Carlo estimate through the kernels: N sequences from the behaviour policy. */
function estimate(w: Weighting, seed: number, N: number): number[] {
    const r = rng(seed);
    const ys: number[][] = [];
    const logp = new Float32Array(N * L),
        rollout = new Float32Array(N * L),
        adv = new Float32Array(N);
    for (let n = 0; n < N; n++) {
        const y = mu.map((p) => {
            let u = r(),
                v = 0;
            while (v < V - 1 && u >= p[v]) u -= p[v++];
            return v;
        });
        ys.push(y);
        y.forEach((v, l) => {
            logp[n * L + l] = Math.log(pi[l][v]);
            rollout[n * L + l] = Math.log(mu[l][v]);
        });
        adv[n] = reward(y) - BASELINE;
    }
    const mask = new Uint8Array(N * L).fill(1);
    const options: RolloutCorrectionOptions | null = w === "none" ? null : { rolloutIs: w, rolloutIsThreshold: 1e6 }; // untruncated: the unbiased estimators
    const weights = options
        ? rolloutCorrection({ oldLogp: logp, rolloutLogp: rollout, mask, shape: [N, L] }, options).weights!
        : undefined;
    // logp = oldLogp (the trainer's policy is the one the weights target; the ratio is 1), sum over tokens, mean
    // over sequences: d loss / d logp = -w A / N per token.
    const { gradLogp } = policyLoss(
        {
            logp,
            oldLogp: logp,
            advantages: adv,
            mask,
            ...(weights ? { rolloutIsWeights: weights } : {}),
            shape: [N, L],
        },
        { type: "ppo", aggregation: "seq-mean-token-sum" },
    );
    let g = new Array<number>(L * V).fill(0);
    ys.forEach((y, n) => {
        g = add(
            g,
            scoreGrad(
                y,
                y.map((_, l) => -gradLogp[n * L + l]),
            ),
        );
    });
    return g; // the gradient of E[R] (= - d loss / d theta)
}

describe("rollout correction: a controlled off-policy experiment", () => {
    it("sequence-level IS recovers the on-policy gradient from temperature-1.2 samples; no correction is biased", () => {
        const truth = expected("none").map(() => 0);
        for (const y of all) {
            const A = reward(y) - BASELINE;
            const g = scoreGrad(
                y,
                y.map(() => A),
            );
            for (let i = 0; i < g.length; i++) truth[i] += prob(pi, y) * g[i];
        }
        const scale = norm(truth);
        const bias = {
            none: norm(add(expected("none"), truth, -1)) / scale,
            token: norm(add(expected("token"), truth, -1)) / scale,
            sequence: norm(add(expected("sequence"), truth, -1)) / scale,
        };
        // Monte-Carlo through the kernels, 8 seeds x 16000 sequences: mean estimate vs its exact expectation and vs
        // the truth.
        const seeds = 8,
            N = 16000;
        const mc: Record<Weighting, { err: number; vsExpectation: number }> = {} as never;
        for (const w of ["none", "token", "sequence"] as Weighting[]) {
            let mean = truth.map(() => 0);
            for (let s = 0; s < seeds; s++) mean = add(mean, estimate(w, 100 + s, N), 1 / seeds);
            mc[w] = {
                err: norm(add(mean, truth, -1)) / scale,
                vsExpectation: norm(add(mean, expected(w), -1)) / scale,
            };
        }
        console.log(
            `off-policy gradient (behaviour T=${TEMP}, |truth| ${scale.toFixed(4)}): exact relative bias none ` +
                `${bias.none.toFixed(4)}, token IS ${bias.token.toFixed(4)}, sequence IS ${bias.sequence.toExponential(1)}; ` +
                `Monte-Carlo (${seeds} x ${N}) relative error none ${mc.none.err.toFixed(4)}, token ${mc.token.err.toFixed(4)}, ` +
                `sequence ${mc.sequence.err.toFixed(4)}`,
        );
        expect(bias.sequence).toBeLessThan(1e-12); // unbiased, exactly
        expect(bias.none).toBeGreaterThan(0.05); // the mismatch this experiment creates is not small
        expect(bias.token).toBeLessThan(bias.none); // token IS corrects part of it
        expect(bias.token).toBeGreaterThan(1e-3); // ... but not all: the reward couples the positions
        // The kernels compute these estimators: every Monte-Carlo mean is near its exact expectation ...
        for (const w of ["none", "token", "sequence"] as Weighting[]) expect(mc[w].vsExpectation, w).toBeLessThan(0.02);
        // ... so the corrected one is near the on-policy gradient and the uncorrected one is not.
        expect(mc.sequence.err).toBeLessThan(0.02);
        expect(mc.none.err).toBeGreaterThan(bias.none - 0.02);
    });
});
