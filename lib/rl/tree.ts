// tree.ts: MAGRPO's multi-turn Monte Carlo returns over the joint-action tree (docs/algorithms.md B.2–B.3): each node
// is a joint action with its immediate joint reward r; R = r + γ · mean(R of its children), R = r at a leaf
// (a branch stopped early by the termination threshold is a leaf). Advantages are group-relative within each
// sibling set (the joint actions sampled at one state), with MAGRPO's baselines.
import { groupAdvantages, type MagrpoBaseline } from "./groupAdvantages.js";
import { requireArray, requireChoice, requireNumber, requireOptions } from "../validate.js";

export interface TreeBatch {
    /** Parent joint action of each node, or −1 for the joint actions sampled at the first state, [N]. */
    parent: Int32Array;
    /** Immediate joint reward of each node, [N]. */
    rewards: Float32Array;
}

export interface TreeOptions {
    /** Discount γ in [0, 1]. Defaults to `0.9` (CoMLRL's `discount`). */
    gamma?: number;
    /** `'mean'` (R − mean of siblings), `'max'`, `'rloo'`, `'none'`. Defaults to `'mean'`. */
    baseline?: MagrpoBaseline;
}

export interface TreeResult {
    /** R per node. */
    returns: Float32Array;
    /** Group-relative advantage per node, within its sibling set. */
    advantages: Float32Array;
    /** Depth of each node (0 for the first turn). */
    depth: Int32Array;
}

export function treeReturns(batch: TreeBatch, options?: TreeOptions): TreeResult {
    const fn = "treeReturns";
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with parent and rewards, got ${typeof batch}`);
    const o = requireOptions<TreeOptions>(fn, "options", options, ["gamma", "baseline"]);
    const N = batch.parent instanceof Int32Array ? batch.parent.length : -1;
    const parent = requireArray(fn, "parent", batch.parent, [Int32Array], Math.max(N, 0));
    const r = requireArray(fn, "rewards", batch.rewards, [Float32Array], N);
    const gamma = requireNumber(fn, "gamma", o.gamma, 0.9, 0, 1);
    const baseline = requireChoice(fn, "baseline", o.baseline, ["mean", "max", "rloo", "none"], "mean");
    const children: number[][] = Array.from({ length: N }, () => []);
    parent.forEach((p, i) => {
        if (p < -1 || p >= N || p === i)
            throw new RangeError(`${fn}: parent[${i}]: expected −1 or another node index in [0, ${N}), got ${p}`);
        if (p >= 0) children[p]!.push(i);
    });
    // Depths from the roots; a node never reached is on a cycle.
    const depth = new Int32Array(N).fill(-1);
    const order: number[] = [];
    parent.forEach((p, i) => {
        if (p === -1) {
            depth[i] = 0;
            order.push(i);
        }
    });
    for (let k = 0; k < order.length; k++)
        for (const c of children[order[k]!]!) {
            depth[c] = depth[order[k]!]! + 1;
            order.push(c);
        }
    if (order.length !== N) {
        const i = depth.findIndex((d) => d < 0);
        throw new RangeError(`${fn}: parent: expected a forest, got a cycle through node ${i}`);
    }
    const R = new Float64Array(N);
    for (let k = N - 1; k >= 0; k--) {
        // children come after their parent in `order`
        const i = order[k]!;
        const kids = children[i]!;
        let m = 0;
        for (const c of kids) m += R[c]!;
        R[i] = r[i]! + (kids.length ? gamma * (m / kids.length) : 0);
    }
    const returns = Float32Array.from(R);
    const advantages = groupAdvantages(
        { scores: returns, groups: Int32Array.from(parent, (p) => p + 1) },
        { estimator: "magrpo", baseline, device: "cpu" },
    );
    return { returns, advantages, depth };
}

/** {@link treeReturns} as a promise (TS work on the calling thread; `signal` checked first). */
export async function treeReturnsAsync(
    batch: TreeBatch,
    options?: TreeOptions & { signal?: AbortSignal },
): Promise<TreeResult> {
    const { signal, ...rest } = options ?? {};
    signal?.throwIfAborted();
    return treeReturns(batch, rest);
}
