// toy.ts: the collaborate-or-act-alone game of MAPoRL §2 (docs/algorithms.md A.8), learned by tabular softmax
// policies through the package's own kernels: `sample` draws the actions, `reinforceReturns` the returns-to-go,
// `groupAdvantages` the per-turn mean baseline, `fusedPolicyLoss` (REINFORCE + entropy bonus) the gradient.
//
// The payoff model (the paper's exact T-turn model was not retrievable; this one gives Observation 1 exactly):
//   each turn t an agent plays C (collaborate) or D (act alone). D pays R_ind at t. C pays R_col at t, and if at
//   least `threshold` = C(q) partners also played C at t, the synergy R_syn - R_ind is added one turn later (at
//   the episode's end for the last turn: the final answer). Each turn is then the same 2x2 stage game with
//   per-decision payoffs (C,C) = R_col + R_syn - R_ind, (C,D) = R_col, (D,*) = R_ind.
// Closed forms (derivations in docs/training.md, the toy game):
//   Observation 1, one learner vs a partner who plays C with probability pi (own return):
//     collaborate iff (R_syn - R_ind) * pi >= R_ind - R_col.
//   Observation 2, two co-learners from the uniform policy (the logit-QRE principal branch selects the
//     risk-dominant equilibrium, Zhang & Hofbauer 2016):
//     reward 'team' (MAPoRL's influence-aware reward averages the team's scores): R_syn > 2 R_ind - R_col, i.e.
//       the paper's max(3 R_col - 2 R_ind, 2 R_ind - R_col) as transcribed (its first term never binds when R_col < R_ind);
//     reward 'own': R_syn > max(3 R_ind - 2 R_col, 2 R_ind - R_col) (risk dominance and Nash).
import { mulberry32 } from "../../random.js";
import { groupAdvantages } from "../../rl/groupAdvantages.js";
import { fusedPolicyLoss } from "../../rl/logits.js";
import { reinforceReturns } from "../../rl/reinforceReturns.js";
import { sample } from "../../rl/sampling.js";
import { requireChoice, requireInteger, requireNumber, requireOptions } from "../../validate.js";

export interface ToyPayoffs {
    rCol: number;
    rInd: number;
    rSyn: number;
}

export interface ToyOptions {
    payoffs: ToyPayoffs;
    /** Turns per episode. Defaults to 10. */
    turns?: number;
    /** Agents. Defaults to 2. */
    agents?: number;
    /** C(q): partners who must also collaborate in a turn for the synergy. Defaults to 1. */
    threshold?: number;
    /** 'co-train': every agent learns; 'fixed-partner': agent 0 learns, the others play C with probability `partnerPi`. */
    mode?: "co-train" | "fixed-partner";
    partnerPi?: number;
    /** 'own': each agent's own payoff; 'team': the mean over agents (MAPoRL's 'all' scope). Defaults to 'own'. */
    reward?: "own" | "team";
    /** Episodes per iteration. Defaults to 64. */
    episodes?: number;
    /** Defaults to 300. */
    iterations?: number;
    /** SGD step on the logits. Defaults to 0.5. */
    lr?: number;
    /** Entropy regularisation tau. Defaults to 0.001. */
    entropyCoef?: number;
    seed?: number;
    /** Record the collaboration rate every `every` iterations. Defaults to 10. */
    every?: number;
}

export interface ToyResult {
    /** Learners' probability of C averaged over turns, per recorded iteration. */
    curve: { iteration: number; rate: number }[];
    /** The learners' final probability of C averaged over turns (the collaboration rate at convergence). */
    rate: number;
    /** Final P(C) per learner and turn, [learners][turns]. */
    perTurn: number[][];
}

const KEYS = [
    "payoffs",
    "turns",
    "agents",
    "threshold",
    "mode",
    "partnerPi",
    "reward",
    "episodes",
    "iterations",
    "lr",
    "entropyCoef",
    "seed",
    "every",
];

/** Observation 1's prediction: does a learner facing a partner who collaborates with probability pi collaborate? */
export function observation1(p: ToyPayoffs, pi: number): boolean {
    return (p.rSyn - p.rInd) * pi >= p.rInd - p.rCol;
}

/** Observation 2's prediction for co-learners: 'team' as the paper states it, 'own' for selfish returns. */
export function observation2(p: ToyPayoffs, reward: "own" | "team" = "team"): boolean {
    if (reward === "team") return p.rSyn > Math.max(3 * p.rCol - 2 * p.rInd, 2 * p.rInd - p.rCol);
    return p.rSyn > Math.max(3 * p.rInd - 2 * p.rCol, 2 * p.rInd - p.rCol);
}

function requireInt(what: string, x: unknown, dflt: number, lo: number, hi: number): number {
    return requireInteger("toyGame", what, x ?? dflt, lo, hi);
}

/** Trains tabular softmax policies on the toy game and returns the collaboration-rate curve. */
export function toyGame(options: ToyOptions): ToyResult {
    const o = requireOptions<ToyOptions>("toyGame", "options", options, KEYS);
    const p = o.payoffs;
    if (!p || typeof p !== "object") throw new TypeError("toyGame: payoffs: expected { rCol, rInd, rSyn }");
    const payoff = (k: keyof ToyPayoffs) => requireNumber("toyGame", `payoffs.${k}`, p[k] ?? NaN, NaN, -1e6, 1e6);
    const rCol = payoff("rCol"),
        rInd = payoff("rInd"),
        rSyn = payoff("rSyn");
    if (!(rCol < rInd && rInd < rSyn))
        throw new RangeError(`toyGame: payoffs: expected rCol < rInd < rSyn, got ${rCol}, ${rInd}, ${rSyn}`);
    const T = requireInt("turns", o.turns, 10, 1, 1000),
        A = requireInt("agents", o.agents, 2, 2, 64);
    const threshold = requireInt("threshold", o.threshold, 1, 0, A - 1);
    const mode = requireChoice("toyGame", "mode", o.mode, ["co-train", "fixed-partner"] as const, "co-train");
    const reward = requireChoice("toyGame", "reward", o.reward, ["own", "team"] as const, "own");
    const pi = requireNumber("toyGame", "partnerPi", o.partnerPi, 0.5, 0, 1);
    const E = requireInt("episodes", o.episodes, 64, 2, 1 << 16),
        iters = requireInt("iterations", o.iterations, 300, 1, 1e7);
    const every = requireInt("every", o.every, 10, 1, 1e7);
    const lr = requireNumber("toyGame", "lr", o.lr, 0.5, 0, 1e3),
        tau = requireNumber("toyGame", "entropyCoef", o.entropyCoef, 0.001, 0, 10);
    const seed = requireInt("seed", o.seed, 0, 0, 2 ** 31 - 1);
    const learners = mode === "co-train" ? A : 1;
    const theta = Array.from({ length: learners }, () => new Float32Array(T * 2)); // logits [T, {C, D}]
    const partnerRng = mulberry32(seed ^ 0x70f1);
    const N = E * T;
    const logits = new Float32Array(N * 2),
        mask = new Uint8Array(N).fill(1);
    const groups = Int32Array.from({ length: N }, (_, i) => i % T); // the baseline: the batch mean per turn
    const position = Int32Array.from({ length: N }, (_, i) => i);
    const prob = (th: Float32Array, t: number) => 1 / (1 + Math.exp(th[2 * t + 1]! - th[2 * t]!));
    const rate = () =>
        theta.reduce(
            (s, th) => s + Array.from({ length: T }, (_, t) => prob(th, t)).reduce((a, b) => a + b, 0) / T,
            0,
        ) / learners;
    const curve: ToyResult["curve"] = [];
    const collab = Array.from({ length: A }, () => new Uint8Array(N)); // [agent][episode * T + turn]: 1 = C
    const pay = Array.from({ length: A }, () => new Float32Array(N));
    for (let it = 0; it < iters; it++) {
        if (it % every === 0) curve.push({ iteration: it, rate: rate() });
        for (let a = 0; a < A; a++) {
            if (a < learners) {
                const th = theta[a]!;
                for (let i = 0; i < N; i++) {
                    logits[2 * i] = th[2 * (i % T)]!;
                    logits[2 * i + 1] = th[2 * (i % T) + 1]!;
                }
                const s = sample(
                    { logits, shape: [N, 2] },
                    {
                        seed: BigInt(seed) * 1000003n + BigInt(it * 64 + a),
                        position,
                        rawLogprobs: false,
                        device: "cpu",
                    },
                );
                for (let i = 0; i < N; i++) collab[a]![i] = s.tokens[i] === 0 ? 1 : 0;
            } else {
                for (let i = 0; i < N; i++) collab[a]![i] = partnerRng() < pi ? 1 : 0;
            }
        }
        // Payoffs [agent][episode, turn]; the synergy of turn t lands at t + 1 (the last turn's at the end, i.e. at T - 1).
        for (const row of pay) row.fill(0);
        for (let e = 0; e < E; e++)
            for (let t = 0; t < T; t++) {
                const i = e * T + t;
                let cs = 0;
                for (let a = 0; a < A; a++) cs += collab[a]![i]!;
                for (let a = 0; a < A; a++) {
                    const c = collab[a]![i]!,
                        row = pay[a]!,
                        later = e * T + Math.min(t + 1, T - 1);
                    row[i] = row[i]! + (c ? rCol : rInd);
                    if (c && cs - 1 >= threshold) row[later] = row[later]! + rSyn - rInd;
                }
            }
        if (reward === "team") {
            for (let i = 0; i < N; i++) {
                let m = 0;
                for (let a = 0; a < A; a++) m += pay[a]![i]!;
                for (let a = 0; a < A; a++) pay[a]![i] = m / A;
            }
        }
        for (let a = 0; a < learners; a++) {
            const th = theta[a]!;
            const ret = reinforceReturns(
                { rewards: pay[a]!, mask, shape: [E, T] },
                { gamma: 1, whiten: false, device: "cpu" },
            ).returns;
            const adv = groupAdvantages(
                { scores: ret, groups },
                { estimator: "magrpo", baseline: "mean", device: "cpu" },
            );
            for (let i = 0; i < N; i++) {
                logits[2 * i] = th[2 * (i % T)]!;
                logits[2 * i + 1] = th[2 * (i % T) + 1]!;
            }
            const targets = Int32Array.from(collab[a]!, (c) => (c ? 0 : 1));
            // seq-mean-token-sum over E sequences of T turns: each turn's logit gets the mean over episodes of A * dlogp.
            const g = fusedPolicyLoss(
                { logits, targets, advantages: adv, mask, shape: [E, T, 2] },
                {
                    type: "reinforce",
                    aggregation: "seq-mean-token-sum",
                    entropyCoef: tau,
                    inPlace: true,
                    device: "cpu",
                },
            ).gradLogits;
            for (let i = 0; i < N; i++) {
                const k = 2 * (i % T);
                th[k] = th[k]! - lr * g[2 * i]!;
                th[k + 1] = th[k + 1]! - lr * g[2 * i + 1]!;
            }
        }
    }
    curve.push({ iteration: iters, rate: rate() });
    return { curve, rate: rate(), perTurn: theta.map((th) => Array.from({ length: T }, (_, t) => prob(th, t))) };
}

/** The payoff grid the CLI and the tests sweep: R_ind = 1, R_col in {0, 0.3, 0.6, 0.85}, R_syn in 1.1 .. 3.85 (no point on a boundary). */
export function toyPayoffGrid(): ToyPayoffs[] {
    const out: ToyPayoffs[] = [];
    for (const rCol of [0, 0.3, 0.6, 0.85])
        for (let k = 0; k < 12; k++) out.push({ rCol, rInd: 1, rSyn: 1.1 + 0.25 * k });
    return out;
}
