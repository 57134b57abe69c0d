// loop.ts (gateway): the whole co-training loop through the gateway, as `maporl train --gateway` runs it: the held-out
// reward of the untrained agents, `iterations` co-training iterations (train.ts), the held-out reward after. An
// evaluation runs each item `runs` times as recorded episodes (so a program that posts its own reward is scored too)
// and trains nothing; a program that fails, or an episode never rewarded, counts as failed, not as reward 0.
import { randomBytes } from "node:crypto";

import type { GatewayEpisode } from "./episodes.js";
import type { Gateway } from "./gateway.js";
import { runEpisodes } from "./runs.js";
import {
    type GatewayIterationResult,
    type GatewayRun,
    type GatewayTrainOptions,
    trainGatewayIteration,
} from "./train.js";

export interface GatewayEvalOptions<I> {
    gateway: Gateway;
    program: (run: GatewayRun<I>) => Promise<unknown>;
    /** The episode's reward from its output; when omitted, the program posts it. */
    reward?: (item: I, output: unknown, episode: GatewayEpisode) => number | Promise<number>;
    /** Runs of each item. Defaults to 1. */
    runs?: number;
    /** Programs running at once. Defaults to 8. */
    concurrency?: number;
    signal?: AbortSignal;
}

export interface GatewayEvalResult {
    /** Mean joint reward over the rewarded episodes (NaN when none). */
    meanReward: number;
    /** Each item's mean reward over its rewarded runs (NaN when none was). */
    items: number[];
    episodes: number;
    failed: { episode: string; reason: string }[];
}

/** Runs every item `runs` times through the gateway, training nothing: the agents' reward as they are. */
export async function evaluateGateway<I>(items: I[], o: GatewayEvalOptions<I>): Promise<GatewayEvalResult> {
    const fn = "evaluateGateway";
    if (!Array.isArray(items) || items.length === 0) throw new TypeError(`${fn}: items: expected a non-empty array`);
    const runs = o.runs ?? 1,
        limit = o.concurrency ?? 8;
    if (!Number.isInteger(runs) || runs < 1)
        throw new RangeError(`${fn}: runs: expected an integer >= 1, got ${String(runs)}`);
    if (!Number.isInteger(limit) || limit < 1)
        throw new RangeError(`${fn}: concurrency: expected an integer >= 1, got ${String(limit)}`);
    const tag = randomBytes(4).toString("hex");
    const episodes = await runEpisodes(
        items.flatMap((item, i) =>
            Array.from({ length: runs }, (_, r) => ({
                id: `e${tag}-${i}-${r}`,
                item,
                index: i,
                group: r,
                meta: { item: i, run: r, eval: 1 },
            })),
        ),
        { ...o, concurrency: limit }, // (its gateway, program, reward and signal)
    );
    const failed = episodes.flatMap((ep) =>
        ep.status === "rewarded" ? [] : [{ episode: ep.id, reason: ep.reason ?? ep.status }],
    );
    const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);
    const rewarded = (eps: GatewayEpisode[]) => eps.filter((ep) => ep.status === "rewarded").map((ep) => ep.reward);
    return {
        meanReward: mean(rewarded(episodes)),
        items: items.map((_, i) => mean(rewarded(episodes.slice(i * runs, (i + 1) * runs)))),
        episodes: episodes.length,
        failed,
    };
}

export interface GatewayLoopOptions<I> extends GatewayTrainOptions<I> {
    /** Co-training iterations over `items`. */
    iterations: number;
    /** Held-out items evaluated before and after (none: no evaluation). */
    evalItems?: I[];
    /** Runs of each held-out item. Defaults to 1. */
    evalRuns?: number;
    /** Called after every iteration (e.g. to save the adapters and write a metrics line). */
    onIteration?: (iteration: number, result: GatewayIterationResult) => void | Promise<void>;
}

export interface GatewayLoopResult {
    before: GatewayEvalResult | null;
    after: GatewayEvalResult | null;
    /** Every iteration's mean reward (NaN where no episode was rewarded). */
    rewards: number[];
}

/** Evaluates, co-trains `iterations` times, evaluates again. `items`: the same every iteration, or a function giving
 * iteration k's (fresh questions each iteration, as the job's rollouts draw them). An abort stops after the iteration
 * under way. */
export async function trainGateway<I>(
    items: I[] | ((iteration: number) => I[]),
    o: GatewayLoopOptions<I>,
): Promise<GatewayLoopResult> {
    if (!Number.isInteger(o.iterations) || o.iterations < 1)
        throw new RangeError(`trainGateway: iterations: expected an integer >= 1, got ${String(o.iterations)}`);
    const evaluate = async () =>
        o.evalItems?.length
            ? await evaluateGateway(o.evalItems, {
                  gateway: o.gateway,
                  program: o.program,
                  ...(o.reward ? { reward: o.reward } : {}),
                  ...(o.evalRuns !== undefined ? { runs: o.evalRuns } : {}),
                  ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}),
                  ...(o.signal ? { signal: o.signal } : {}),
              })
            : null;
    const before = await evaluate();
    const rewards: number[] = [];
    for (let it = 0; it < o.iterations; it++) {
        o.signal?.throwIfAborted();
        const r = await trainGatewayIteration(typeof items === "function" ? items(it) : items, o);
        rewards.push(r.meanReward);
        await o.onIteration?.(it, r);
    }
    return { before, after: await evaluate(), rewards };
}
