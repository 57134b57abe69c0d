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
//   'critic': CoLLM-DC's (each agent its own critic on its own prompts): TD(0) over the turns with the team's mean
//     score of the turn as its reward (criticCredit below).
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { influenceRewards } from "../rl/influence.js";
import { tdAdvantages } from "../rl/td.js";
import { criticValues, fitCritic } from "../train/trainers/collm.js";
import type { NativePolicy } from "../model/nativePolicy.js";
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

// The episodes' turn structure (agent a's t-th answered call is its turn t; failed calls are not turns; an episode whose
// agents made different numbers of them has none: ragged) and the scores s(t, a) [Q, T, A] of the episodes that have
// one (NaN past an episode's last turn): the milestones posted on each call, the last turn's plus the joint reward,
// the agent's own, and its milestones that name no call.
function turnScores(episodes: GatewayEpisode[], ks: number[], all: string[]) {
    const A = all.length;
    const byAgent = new Map<number, GatewayCall[][]>();
    let ragged = 0;
    for (const k of ks) {
        // (a failed call, one the client retried say, is not a turn: it has no answer)
        const calls = all.map((a) => episodes[k]!.calls.filter((c) => c.agent === a && c.samples.length > 0));
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
                // (a milestone that names no call counts at the agent's last turn)
                let s = ep.milestones
                    .filter((m) => m.agent === a && (m.call === c.index || (m.call === undefined && t === Tq - 1)))
                    .reduce((x, m) => x + m.reward, 0);
                if (t === Tq - 1) s += ep.reward + (ep.agentRewards[a] ?? 0);
                scores[(q * T + t) * A + j] = s;
            }),
        );
    });
    return { byAgent, used, ragged, T, scores, lastTurn };
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
    const { byAgent, used, ragged, T, scores, lastTurn } = turnScores(episodes, ks, all);
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

export interface CriticCreditOptions {
    /** The TD discount gamma. Defaults to 1 (CoMLRL's). */
    gamma?: number;
    /** Normalise the TD errors within each turn ('turn', CoMLRL's), over the batch, or not. Defaults to 'turn'. */
    normalize?: boolean | "turn" | "batch";
    /** The critics' learning rate. Defaults to 1e-4. */
    lr?: number;
    signal?: AbortSignal;
}

/** CoLLM-DC's credit (each agent its own critic, rl/td.ts): the team's reward of turn t is the mean of s(t, j) over
 * the agents; agent a's critic reads V(h_t) at the last token of its t-th call's prompt; TD(0) targets y_t = r_t +
 * gamma V(h_{t+1}) (y = r at the last turn); the call's advantage is delta_t = y_t - V(h_t), normalised; the critic
 * then takes one step towards y. Episodes without a turn structure, or whose calls of a lack exact prompt ids, are
 * left out for a. Returns the credit and each critic's loss. */
export async function criticCredit(
    episodes: GatewayEpisode[],
    ks: number[],
    trained: string[],
    all: string[],
    critics: Record<string, NativePolicy>,
    o: CriticCreditOptions = {},
): Promise<CallCredit & { valueLoss: Record<string, number> }> {
    const A = all.length;
    const { byAgent, used, ragged, T, scores, lastTurn } = turnScores(episodes, ks, all);
    const advOf = new Map<GatewayCall, number>(),
        meanReturn: Record<string, number> = {},
        valueLoss: Record<string, number> = {};
    for (const a of trained) {
        const c = critics[a];
        if (!c) continue;
        o.signal?.throwIfAborted();
        const j = all.indexOf(a);
        const qs = used
            .map((k, q) => ({ k, q }))
            .filter(({ k }) => byAgent.get(k)![j]!.every((call) => call.samples[0]?.tokenIdsExact === true));
        if (!qs.length) continue;
        const calls = qs.flatMap(({ k }) => byAgent.get(k)![j]!);
        const rewards = Float32Array.from(
            qs.flatMap(({ q }) =>
                Array.from({ length: lastTurn[q]! + 1 }, (_, t) => {
                    let m = 0;
                    for (let i = 0; i < A; i++) m += scores[(q * T + t) * A + i]!;
                    return m / A;
                }),
            ),
        );
        const v = await criticValues(
            c,
            calls.map((call) => call.samples[0]!.promptTokenIds),
        );
        const td = tdAdvantages(
            { rewards, values: v.values, lengths: Int32Array.from(qs, ({ q }) => lastTurn[q]! + 1) },
            { gamma: o.gamma ?? 1, normalize: o.normalize ?? "turn" },
        );
        valueLoss[a] = (await fitCritic(c, v, td.targets, o.lr ?? 1e-4, o.signal)).loss;
        calls.forEach((call, i) => advOf.set(call, td.advantages[i]!));
        // (an episode's return: the sum of its turns' rewards; `rewards` holds every episode's turns end to end)
        meanReturn[a] = rewards.reduce((x, r) => x + r, 0) / qs.length;
    }
    return { of: (_k, call) => advOf.get(call), meanReturn, ragged, valueLoss };
}
