// credit.ts (gateway): the credit of each recorded call, from an iteration's episodes (G per item, item-major).
//   'magrpo' (the default): agent a's return in an episode (the joint reward, plus, shaped, its own reward and its
//     milestones) relative to the mean over the item's G episodes; every call of a in the episode gets it. A group of
//     one (the item's other episodes failed) carries no relative signal: 0.
//   'influence': MAPoRL's influence-aware verification reward (rl/influence.ts, Definition 1) where the episode has
//     turns: agent a's t-th call is its turn t, its score s(t, a) the milestones posted on that call (a verifier's
//     verdict of that answer, say), the last turn's also the joint reward and a's own; R(t, a) = (s(t, a) +
//     sum_{u > t} d^(u-t) mean_j s(u, j)) / sum d^(u-t); the critic MAPoRL trains is replaced by the group mean of R
//     over the item's G episodes at the same (turn, agent). An episode whose agents made different numbers of calls
//     has no turn structure: it is left out ('ragged').
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { influenceRewards } from "../rl/influence.js";
import type { GatewayCall, GatewayEpisode } from "./episodes.js";

export interface InfluenceCreditOptions {
    /** d, the weight of later turns. Defaults to 0.3 (MAPoRL's). */
    discount?: number;
    /** 'all': later turns count the team's mean score; 'individual': the agent's own. Defaults to 'all'. */
    scope?: "all" | "individual";
}

export interface CallCredit {
    /** The advantage of a call of a trained agent (undefined: not credited). */
    of(k: number, call: GatewayCall): number | undefined;
    /** Each trained agent's mean return over the credited episodes. */
    meanReturn: Record<string, number>;
    /** Episodes left out for want of a turn structure ('influence'). */
    ragged: number;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);

// Dense group ids for keys (groupAdvantages takes ids 0..n-1).
function dense(keys: string[]): Int32Array {
    const ids = new Map<string, number>();
    return Int32Array.from(keys, (k) => ids.get(k) ?? (ids.set(k, ids.size), ids.size - 1));
}

/** MAGRPO's credit: one advantage per (episode, agent), group-relative over an item's G episodes. */
export function magrpoCredit(
    episodes: GatewayEpisode[],
    ks: number[],
    G: number,
    agents: string[],
    shaped: boolean,
): CallCredit {
    const adv = new Map<string, Float32Array>(),
        meanReturn: Record<string, number> = {};
    for (const a of agents) {
        const ret = ks.map((k) => {
            const ep = episodes[k]!;
            if (!shaped) return ep.reward;
            const m = ep.milestones.filter((x) => x.agent === a).reduce((s, x) => s + x.reward, 0);
            return ep.reward + (ep.agentRewards[a] ?? 0) + m;
        });
        meanReturn[a] = mean(ret);
        if (ks.length)
            adv.set(
                a,
                groupAdvantages(
                    { scores: Float32Array.from(ret), groups: Int32Array.from(ks, (k) => Math.floor(k / G)) },
                    { estimator: "magrpo", baseline: "mean", singleton: "zero", device: "cpu" },
                ),
            );
    }
    const slot = new Map(ks.map((k, j) => [k, j]));
    return {
        of: (k, call) => {
            const j = slot.get(k);
            return j === undefined ? undefined : adv.get(call.agent)?.[j];
        },
        meanReturn,
        ragged: 0,
    };
}

/** MAPoRL's influence-aware credit per call (see above); `all` are every agent of the gateway (the team's mean). */
export function influenceCredit(
    episodes: GatewayEpisode[],
    ks: number[],
    G: number,
    trained: string[],
    all: string[],
    o: InfluenceCreditOptions = {},
): CallCredit {
    const A = all.length;
    // Each episode's calls by agent, in order; an episode whose agents made different numbers of calls is left out.
    const byAgent = new Map<number, GatewayCall[][]>();
    let ragged = 0;
    for (const k of ks) {
        const calls = all.map((a) => episodes[k]!.calls.filter((c) => c.agent === a));
        const T = calls[0]!.length;
        if (T === 0 || calls.some((c) => c.length !== T)) ragged++;
        else byAgent.set(k, calls);
    }
    const used = [...byAgent.keys()];
    const T = Math.max(1, ...used.map((k) => byAgent.get(k)![0]!.length));
    const scores = new Float32Array(used.length * T * A).fill(NaN);
    const lastTurn = new Int32Array(used.length);
    used.forEach((k, q) => {
        const ep = episodes[k]!,
            calls = byAgent.get(k)!;
        const Tq = calls[0]!.length;
        lastTurn[q] = Tq - 1;
        all.forEach((a, j) =>
            calls[j]!.forEach((c, t) => {
                let s = ep.milestones
                    .filter((m) => m.agent === a && m.call === c.index)
                    .reduce((x, m) => x + m.reward, 0);
                if (t === Tq - 1) s += ep.reward + (ep.agentRewards[a] ?? 0);
                scores[(q * T + t) * A + j] = s;
            }),
        );
    });
    const R = used.length
        ? influenceRewards(
              { scores, shape: [used.length, T, A] },
              { discount: o.discount ?? 0.3, scope: o.scope ?? "all", lastTurn },
          )
        : new Float32Array(0);
    // group-relative over the item's episodes at the same (turn, agent)
    const cells: { q: number; t: number; j: number }[] = [];
    used.forEach((k, q) => {
        for (let t = 0; t <= lastTurn[q]!; t++) for (let j = 0; j < A; j++) cells.push({ q, t, j });
    });
    const adv = cells.length
        ? groupAdvantages(
              {
                  scores: Float32Array.from(cells, (c) => R[(c.q * T + c.t) * A + c.j]!),
                  groups: dense(cells.map((c) => `${Math.floor(used[c.q]! / G)}/${c.t}/${c.j}`)),
              },
              { estimator: "magrpo", baseline: "mean", singleton: "zero", device: "cpu" },
          )
        : new Float32Array(0);
    const advOf = new Map<GatewayCall, number>();
    cells.forEach((c, i) => advOf.set(byAgent.get(used[c.q]!)![c.j]![c.t]!, adv[i]!));
    const meanReturn: Record<string, number> = {};
    for (const a of trained) {
        const j = all.indexOf(a);
        meanReturn[a] = mean(used.map((_, q) => R[(q * T + 0) * A + j]!));
    }
    return { of: (_k, call) => advOf.get(call), meanReturn, ragged };
}
