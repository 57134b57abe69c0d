// td.ts: turn-level TD(0) targets and advantages for CoLLM-CC / CoLLM-DC (docs/algorithms.md C.1, CoMLRL's
// maac/iac trainers, checked against comlrl/trainers/actor_critic/maac.py and ac_base.py at commit 10c5083):
// y_t = r_t + γ·V_old(h_{t+1}) for t < H − 1, y_{H−1} = r_{H−1}; δ_t = y_t − V_old(h_t); then, as CoMLRL's
// _prepare_advantages, (δ − mean) / max(std, 1e-6) with the biased std, within each turn (CoMLRL updates an agent's
// buffer turn by turn), a group of one left as it is. Episodes may have different lengths.
import { pushTo } from "../collections.js";
import { describe, requireArray, requireChoice, requireNumber, requireOptions } from "../validate.js";

export interface TdBatch {
    /** Rewards of every turn of every episode, concatenated, [Σ H]. */
    rewards: Float32Array;
    /** V_old(h_t) at every turn, same layout. */
    values: Float32Array;
    /** Turns per episode (H ≥ 1 each), [E]. */
    lengths: Int32Array;
    /** V(h_{t+1}) used in the targets, same layout as values (entry t holds the value of turn t + 1; the last turn
     * of each episode is ignored). Defaults to `values` shifted by one turn. */
    nextValues?: Float32Array;
}

export interface TdOptions {
    /** Discount γ in [0, 1]. Defaults to `1` (CoMLRL's current default). */
    gamma?: number;
    /** Normalise the advantages with (δ − mean) / max(std, 1e-6): within each turn index across the episodes (`true` or
     * `'turn'`, CoMLRL's grouping), over every turn of the batch (`'batch'`), or not (`false`). A group of one is left
     * as it is. Defaults to `true`. */
    normalize?: boolean | "turn" | "batch";
    /** The std of the normalisation: `'biased'` (CoMLRL's, torch std(unbiased=False)) or `'unbiased'`. Defaults to `'biased'`. */
    std?: "biased" | "unbiased";
}

export interface TdResult {
    /** y_t, the critic's regression targets. */
    targets: Float32Array;
    /** δ_t, normalised when `normalize`. */
    advantages: Float32Array;
}

export function tdAdvantages(batch: TdBatch, options?: TdOptions): TdResult {
    const fn = "tdAdvantages";
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with rewards, values and lengths, got ${typeof batch}`);
    const o = requireOptions<TdOptions>(fn, "options", options, ["gamma", "normalize", "std"]);
    if (!(batch.lengths instanceof Int32Array))
        throw new TypeError(`${fn}: lengths: expected Int32Array, got ${describe(batch.lengths)}`);
    let total = 0;
    batch.lengths.forEach((h, e) => {
        if (h < 1) throw new RangeError(`${fn}: lengths[${e}]: expected an episode length >= 1, got ${h}`);
        total += h;
    });
    const r = requireArray(fn, "rewards", batch.rewards, [Float32Array], total);
    const v = requireArray(fn, "values", batch.values, [Float32Array], total);
    const next =
        batch.nextValues === undefined
            ? undefined
            : requireArray(fn, "nextValues", batch.nextValues, [Float32Array], total);
    const gamma = requireNumber(fn, "gamma", o.gamma, 1, 0, 1);
    const norm =
        o.normalize === undefined || o.normalize === true
            ? "turn"
            : o.normalize === false
              ? "off"
              : requireChoice(fn, "normalize", o.normalize, ["turn", "batch"], "turn");
    const biased = requireChoice(fn, "std", o.std, ["biased", "unbiased"], "biased") === "biased";
    const targets = new Float32Array(total),
        adv = new Float64Array(total),
        turn = new Int32Array(total);
    let i0 = 0;
    for (const H of batch.lengths) {
        for (let t = 0; t < H; t++) {
            const i = i0 + t;
            const y = t < H - 1 ? r[i]! + gamma * (next ? next[i]! : v[i + 1]!) : r[i]!;
            targets[i] = y;
            adv[i] = y - v[i]!;
            turn[i] = t;
        }
        i0 += H;
    }
    if (norm !== "off") {
        const groups = new Map<number, number[]>();
        for (let i = 0; i < total; i++) pushTo(groups, norm === "turn" ? turn[i]! : 0, i);
        for (const g of groups.values()) {
            if (g.length < 2) continue; // (CoMLRL normalises only when there is more than one)
            let mean = 0;
            for (const i of g) mean += adv[i]!;
            mean /= g.length;
            let dev = 0;
            for (const i of g) dev += (adv[i]! - mean) ** 2;
            const scale = 1 / Math.max(Math.sqrt(dev / (biased ? g.length : g.length - 1)), 1e-6);
            for (const i of g) adv[i] = (adv[i]! - mean) * scale;
        }
    }
    return { targets, advantages: Float32Array.from(adv) };
}

/** {@link tdAdvantages} as a promise (TS work on the calling thread; `signal` checked first). */
export async function tdAdvantagesAsync(
    batch: TdBatch,
    options?: TdOptions & { signal?: AbortSignal },
): Promise<TdResult> {
    const { signal, ...rest } = options ?? {};
    signal?.throwIfAborted();
    return tdAdvantages(batch, rest);
}
