// crosscheck.ts (bench): before timing, confirm that each PyTorch baseline computes what the package computes, on
// a small batch with ragged masks (bench/python/crosscheck.py). The harness prints the largest difference per
// kernel, so a fast number can never come from a baseline that does different work.
import { gae } from "../rl/gae.js";
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { fusedPolicyLoss } from "../rl/logits.js";
import { policyLoss } from "../rl/policyLoss.js";
import { reinforceReturns } from "../rl/reinforceReturns.js";
import { logprobsOfTokens, sample } from "../rl/sampling.js";
import { runPythonScript } from "./python.js";
import { lcg } from "../random.js";

export interface CrossCheck {
    ok: boolean;
    /** Largest |ours − baseline| per output, when ok. */
    maxAbsDiff?: Record<string, number>;
    error?: string;
}

export function crossCheckBaselines(): CrossCheck {
    const B = 6,
        T = 40,
        n = B * T;
    const next = lcg(11);
    const r = new Float32Array(n).map(next),
        v = new Float32Array(n).map(next),
        m = new Float32Array(n);
    for (let b = 0; b < B; b++) {
        const len = 5 + Math.floor(next() * (T - 5));
        for (let t = 0; t < len; t++) m[b * T + t] = 1;
    }
    const s = new Float32Array(64).map(next),
        g = Int32Array.from({ length: 64 }, (_, i) => Math.floor(i / 8));
    const gamma = 0.99,
        lambda = 0.95;
    // Policy loss (ppo + k3 KL, as bench/python/policy_loss.py) on the same ragged mask, and the fused loss on 6 x 33 logits.
    const lp = r.map((x) => -1 - x),
        old = lp.map((x, i) => x + 0.1 * (v[i]! - 0.5)),
        adv = v.map((x) => x - 0.5);
    const ref = lp.map((x, i) => x - 0.1 * r[i]!);
    const N = 6,
        V = 33;
    const z = new Float32Array(N * V).map(() => 4 * next() - 2),
        y = Int32Array.from({ length: N }, (_, i) => (i * 7) % V);
    const zold = new Float32Array(N).map(() => -3.5 + next()),
        zadv = new Float32Array(N).map(() => next() - 0.5);
    // Sampling: the processed distribution's log-probs of sampled tokens (top-k 20, top-p 0.8, temperature 0.7).
    const SB = 8,
        SV = 300,
        sz = new Float32Array(SB * SV).map(() => 6 * next() - 3);
    const sopts = { temperature: 0.7, topK: 20, topP: 0.8, device: "cpu" as const };
    const stok = sample({ logits: sz, shape: [SB, SV] }, { ...sopts, seed: 3 }).tokens;
    const res = runPythonScript("crosscheck.py", {
        SB,
        SV,
        sz: [...sz],
        stemp: 0.7,
        sk: 20,
        sp: 0.8,
        stok: [...stok],
        B,
        T,
        gamma,
        lambda,
        r: [...r],
        v: [...v],
        m: [...m],
        s: [...s],
        g: [...g],
        lp: [...lp],
        old: [...old],
        adv: [...adv],
        ref: [...ref],
        N,
        V,
        z: [...z],
        y: [...y],
        zold: [...zold],
        zadv: [...zadv],
    });
    if (!res.ok) return { ok: false, error: res.error };
    const py = res.value as Record<string, number[]>;
    const ours = gae({ rewards: r, values: v, mask: m, shape: [B, T] }, { gamma, lambda, whiten: true, device: "cpu" });
    const rpp = reinforceReturns({ rewards: r, mask: m, shape: [B, T] }, { gamma, whiten: true, device: "cpu" });
    const grpo = groupAdvantages({ scores: s, groups: g }, { device: "cpu" });
    const pl = policyLoss(
        { logp: lp, oldLogp: old, advantages: adv, mask: m, refLogp: ref, shape: [B, T] },
        { kl: { coef: 0.001, estimator: "k3" }, device: "cpu" },
    );
    const fl = fusedPolicyLoss(
        { logits: z, targets: y, oldLogp: zold, advantages: zadv, mask: new Uint8Array(N).fill(1), shape: [N, V] },
        { device: "cpu" },
    );
    const slp = logprobsOfTokens({ logits: sz, tokens: stok, shape: [SB, SV] }, sopts).logprobs;
    const diff = (a: Float32Array, b: number[] | undefined) =>
        b === undefined || b.length !== a.length
            ? Infinity
            : Array.from(a, (x, i) => Math.abs(x - b[i]!)).reduce((m, d) => (d > m || Number.isNaN(d) ? d : m), 0);
    return {
        ok: true,
        maxAbsDiff: {
            "gae.advantages": diff(ours.advantages, py.gae_advantages),
            "gae.returns": diff(ours.returns, py.gae_returns),
            "reinforce++.advantages": diff(rpp.advantages, py.rpp_advantages),
            "reinforce++.returns": diff(rpp.returns, py.rpp_returns),
            grpo: diff(grpo, py.grpo),
            "policyLoss.loss": diff(Float32Array.of(pl.loss), py.pl_loss),
            "policyLoss.gradLogp": diff(pl.gradLogp, py.pl_grad),
            "fusedPolicyLoss.loss": diff(Float32Array.of(fl.loss), py.fused_loss),
            "fusedPolicyLoss.gradLogits": diff(fl.gradLogits, py.fused_grad),
            "sample.logprobs (top-k, top-p)": diff(slp, py.sample_logprobs),
        },
    };
}
