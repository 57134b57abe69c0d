// batches.ts (bench): the kernel benchmarks' inputs, built from fixed seeds: one table of shapes and builders, used by
// each benchmark (gae.ts, reinforceReturns.ts, groupAdvantages.ts, policyLoss.ts) and by fresh.ts, which times the
// same calls in a fresh process.
import { lcg } from "../random.js";

/** The benchmarks' shapes: [rows, steps] for the per-token kernels, [rows, vocabulary] for the fused loss. */
export const SHAPES = {
    gae: [256, 4096],
    reinforceReturns: [256, 4096],
    policyLoss: [64, 4096],
    rolloutCorrection: [256, 4096],
    fusedPolicyLoss: [2048, 32768],
} as const;

/** The benchmark's batch (also timed in a fresh process by fresh.ts). */
export function gaeBatch() {
    const [B, T] = SHAPES.gae;
    const n = B * T,
        next = lcg(1);
    const rewards = new Float32Array(n).map(next),
        values = new Float32Array(n).map(next);
    return { rewards, values, mask: new Float32Array(n).fill(1), shape: [B, T] as [number, number] };
}

/** The benchmark's batch (also timed in a fresh process by fresh.ts). */
export function reinforceBatch() {
    const [B, T] = SHAPES.reinforceReturns;
    const n = B * T,
        next = lcg(3);
    return {
        rewards: new Float32Array(n).map(next),
        mask: new Float32Array(n).fill(1),
        shape: [B, T] as [number, number],
    };
}

/** The benchmark's batch of N scores in groups of G (also timed in a fresh process by fresh.ts). */
export function grpoBatch(N: number, G: number, layout: "adjacent" | "shuffled") {
    const next = lcg(7);
    const scores = new Float32Array(N).map(next);
    const perm = Int32Array.from({ length: N }, (_, i) => i);
    if (layout === "shuffled")
        for (let i = N - 1; i > 0; i--) {
            const j = Math.floor(next() * (i + 1));
            [perm[i], perm[j]] = [perm[j]!, perm[i]!];
        }
    return { scores, groups: perm.map((p) => Math.floor(p / G)) };
}

/** The benchmarks' batches (also timed in a fresh process by fresh.ts). */
export function policyLossBatch() {
    const [B, T] = SHAPES.policyLoss;
    const n = B * T,
        next = lcg(5);
    const logp = new Float32Array(n).map(() => -1 - next());
    return {
        logp,
        oldLogp: logp.map((x) => x + 0.1 * (next() - 0.5)),
        advantages: new Float32Array(n).map(() => next() - 0.5),
        refLogp: logp.map((x) => x - 0.1 * next()),
        mask: new Uint8Array(n).fill(1),
        shape: [B, T] as [number, number],
    };
}

export function fusedBatch() {
    const [N, V] = SHAPES.fusedPolicyLoss;
    const next = lcg(9);
    const logits = new Float32Array(N * V);
    for (let i = 0; i < logits.length; i++) logits[i] = 4 * next() - 2;
    return {
        logits,
        targets: Int32Array.from({ length: N }, () => Math.floor(next() * V)),
        oldLogp: new Float32Array(N).fill(-3),
        advantages: new Float32Array(N).fill(0.5),
        mask: new Uint8Array(N).fill(1),
        shape: [N, V] as [number, number],
    };
}

/** The rollout-correction benchmark's batch: trainer log-probs in (-2, -1], the sampler's within 0.05 of them. */
export function rolloutCorrectionBatch() {
    const [B, T] = SHAPES.rolloutCorrection;
    const n = B * T,
        next = lcg(11);
    const oldLogp = new Float32Array(n).map(() => -1 - next());
    return {
        oldLogp,
        rolloutLogp: oldLogp.map((x) => x + 0.1 * (next() - 0.5)),
        mask: new Uint8Array(n).fill(1),
        shape: [B, T] as [number, number],
    };
}
