// train.ts (gateway): co-training the agents of an unchanged program through the gateway. One iteration:
//   - every item runs `groups` times (G episodes, each with its own episode URL), at most `concurrency` at once;
//   - an episode's reward: `reward(item, output, episode)` where given, else what the program posted to
//     /episodes/<id>/reward; a program that throws, or an episode never rewarded, fails only that episode;
//   - agent a's return in an episode: the joint reward, plus (shaped, the default) its own reward and the sum of its
//     milestones; its credit is group-relative over the item's G episodes (MAGRPO: groupAdvantages 'magrpo',
//     baseline mean, no std), as workflowTrain's; or, with credit 'influence', MAPoRL's influence-aware reward per
//     turn (credit.ts);
//   - every exact sample of a's calls (the prompt ids the model read, the ids it sampled) is a row with that credit;
//     loss -A * log pi(sample) summed over its tokens ('seq-mean-token-sum'); one step per model (agents that share a
//     model share it), then `push` (e.g. save the adapter and push it to a fleet) so the next episodes use it.
// Samples without exact ids (an upstream that gave text only) are never trained on: they are counted. With
// `rolloutCorrection`, the recorded behaviour log-probs are the rollout's and verl's correction applies (correction.ts).
import { randomBytes } from "node:crypto";

import { pushTo } from "../collections.js";
import { type GatewayRun, runEpisodes } from "./runs.js";
import { correctBatch, type MismatchStats } from "../train/trainers/correction.js";
import { packRows } from "../train/trainers/rollout.js";
import type { RolloutCorrectionOptions } from "../rl/rolloutCorrection.js";
import {
    type CallCredit,
    criticCredit,
    type CriticCreditOptions,
    influenceCredit,
    type InfluenceCreditOptions,
    magrpoCredit,
} from "./credit.js";
import type { GatewayEpisode } from "./episodes.js";
import type { Gateway } from "./gateway.js";
import type { NativePolicy } from "../model/nativePolicy.js";

export type { GatewayRun } from "./runs.js";

export interface GatewayTrainOptions<I> {
    gateway: Gateway;
    /** Agent name -> the trainable policy behind it (the one the gateway's agent answers with, or the one whose
     * adapter `push` sends to the upstream). Agents left out are not trained. */
    models: Record<string, NativePolicy>;
    /** Runs the agent program once against `run.baseUrl`; what it resolves with is the episode's output. */
    program: (run: GatewayRun<I>) => Promise<unknown>;
    /** The episode's joint reward from its output; when omitted, the program posts the reward itself. */
    reward?: (item: I, output: unknown, episode: GatewayEpisode) => number | Promise<number>;
    /** Episodes per item (the group its credit is relative to). Defaults to 4. */
    groups?: number;
    /** Programs running at once. Defaults to 8. */
    concurrency?: number;
    /** Learning rate of each model's step. Defaults to 1e-4. */
    lr?: number;
    /** Add each agent's own reward and milestones to the joint reward ('magrpo' credit). Defaults to true. */
    shaped?: boolean;
    /** 'magrpo' (the default): one group-relative return per agent and episode. 'influence': MAPoRL's
     * influence-aware reward per turn (an agent's t-th call), from the milestones posted on each call and the joint
     * reward at the last, group-relative per (turn, agent). 'critic': CoLLM-DC's TD(0) advantages from each agent's
     * own critic (`critics`), which takes a step each iteration (credit.ts). */
    credit?: "magrpo" | "influence" | "critic";
    /** With credit 'influence': the discount d (0.3) and scope ('all'). */
    influence?: InfluenceCreditOptions;
    /** With credit 'critic': agent name -> its critic (a NativePolicy whose value head is trained, e.g. another LoRA
     * adapter on the base); required for every trained agent. */
    critics?: Record<string, NativePolicy>;
    /** With credit 'critic': gamma (1), normalize ('turn'), the critics' lr (1e-4). */
    collm?: Omit<CriticCreditOptions, "signal">;
    /** Called after each model's step, for each agent it trains (e.g. save the adapter and push it to a fleet). */
    push?: (agent: string, model: NativePolicy) => Promise<void>;
    /** Correct for the sampler not being the trainer (a fleet in bf16, an adapter a version behind, a temperature
     * other than 1): verl's options (rolloutCorrection); the recorded behaviour log-probs are the rollout's, the
     * model's own of the same ids the trainer's; each agent's mismatch figures come back in `agents`. Off by default. */
    rolloutCorrection?: RolloutCorrectionOptions;
    signal?: AbortSignal;
}

export interface GatewayIterationResult {
    /** Every episode (G per item, item-major), as recorded. */
    episodes: GatewayEpisode[];
    /** Per trained agent: its mean return over the valid episodes, the rows trained on, the step's loss (null: none),
     * and, with credit 'critic', its critic's loss. */
    agents: Record<
        string,
        { meanReturn: number; rows: number; loss: number | null; valueLoss?: number } & Partial<MismatchStats>
    >;
    /** Mean joint reward over the valid episodes (NaN when none). */
    meanReward: number;
    /** Episodes that failed (a program error, no reward, a timeout), with why. */
    failed: { episode: string; reason: string }[];
    /** Samples left out for want of exact ids. */
    inexact: number;
    /** With credit 'influence': rewarded episodes left out because their agents made different numbers of calls. */
    ragged: number;
}

/** One co-training iteration of the agents in `o.models` on `items` through the gateway. */
export async function trainGatewayIteration<I>(items: I[], o: GatewayTrainOptions<I>): Promise<GatewayIterationResult> {
    const fn = "trainGatewayIteration";
    if (!Array.isArray(items) || items.length === 0) throw new TypeError(`${fn}: items: expected a non-empty array`);
    const G = o.groups ?? 4,
        lr = o.lr ?? 1e-4,
        limit = o.concurrency ?? 8;
    if (!Number.isInteger(G) || G < 2)
        throw new RangeError(
            `${fn}: groups: expected an integer >= 2 (a group-relative credit needs two), got ${String(G)}`,
        );
    if (!Number.isInteger(limit) || limit < 1)
        throw new RangeError(`${fn}: concurrency: expected an integer >= 1, got ${String(limit)}`);
    if (!(Number.isFinite(lr) && lr > 0))
        throw new RangeError(`${fn}: lr: expected a positive number, got ${String(lr)}`);
    if (typeof o.program !== "function") throw new TypeError(`${fn}: program: expected a function`);
    const names = Object.keys(o.models ?? {});
    if (names.length === 0)
        throw new TypeError(`${fn}: models: expected { agent: NativePolicy } for at least one agent`);
    for (const a of names) {
        if (!o.gateway.agents.includes(a))
            throw new RangeError(
                `${fn}: models.${a}: the gateway has no agent '${a}' (agents: ${o.gateway.agents.join(", ")})`,
            );
        if (typeof o.models[a]!.trainStep !== "function")
            throw new TypeError(`${fn}: models.${a}: expected a NativePolicy (with trainStep)`);
    }
    if (o.credit !== undefined && !["magrpo", "influence", "critic"].includes(o.credit))
        throw new RangeError(`${fn}: credit: expected 'magrpo', 'influence' or 'critic', got ${String(o.credit)}`);
    const unit = (x: unknown, at: string) => {
        if (x !== undefined && !(typeof x === "number" && x >= 0 && x <= 1))
            throw new RangeError(`${fn}: ${at}: expected a number in [0, 1], got ${String(x)}`);
    };
    unit(o.influence?.discount, "influence.discount");
    unit(o.collm?.gamma, "collm.gamma");
    if (o.collm?.lr !== undefined && !(Number.isFinite(o.collm.lr) && o.collm.lr > 0))
        throw new RangeError(`${fn}: collm.lr: expected a positive number, got ${String(o.collm.lr)}`);
    if (o.credit === "critic")
        for (const a of names)
            if (typeof o.critics?.[a]?.values !== "function")
                throw new TypeError(
                    `${fn}: critics.${a}: credit 'critic' needs a critic (a NativePolicy) for every trained agent`,
                );
    const tag = randomBytes(4).toString("hex");
    const failed: GatewayIterationResult["failed"] = [];
    const episodes = await runEpisodes(
        items.flatMap((item, i) =>
            Array.from({ length: G }, (_, g) => ({
                id: `t${tag}-${i}-${g}`,
                item,
                index: i,
                group: g,
                meta: { item: i, group: g },
            })),
        ),
        { ...o, concurrency: limit }, // (its gateway, program, reward and signal)
    );
    for (const ep of episodes)
        if (ep.status !== "rewarded") failed.push({ episode: ep.id, reason: ep.reason ?? ep.status });
    const ks = episodes.flatMap((ep, k) => (ep.status === "rewarded" ? [k] : []));
    const how = o.credit ?? "magrpo";
    const credit: CallCredit & { valueLoss?: Record<string, number> } =
        how === "influence"
            ? influenceCredit(episodes, ks, G, names, o.gateway.agents, o.influence)
            : how === "critic"
              ? await criticCredit(episodes, ks, names, o.gateway.agents, o.critics!, {
                    ...o.collm,
                    ...(o.signal ? { signal: o.signal } : {}),
                })
              : magrpoCredit(episodes, ks, G, names, o.shaped ?? true);
    const agents: GatewayIterationResult["agents"] = {};
    const rows = new Map<
        NativePolicy,
        { prompt: number[]; completion: number[]; stopped: boolean; logprobs: number[]; adv: number }[]
    >();
    let inexact = 0;
    for (const a of names) {
        agents[a] = { meanReturn: credit.meanReturn[a] ?? NaN, rows: 0, loss: null };
        const vl = credit.valueLoss?.[a];
        if (vl !== undefined) agents[a].valueLoss = vl;
        for (const k of ks)
            for (const c of episodes[k]!.calls) {
                const adv = c.agent === a ? credit.of(k, c) : undefined;
                if (adv === undefined || !Number.isFinite(adv)) continue; // (NaN / Inf never reaches a step)
                for (const s of c.samples) {
                    if (!s.tokenIdsExact || s.tokenIds.length === 0) {
                        inexact += s.tokenIdsExact ? 0 : 1;
                        continue;
                    }
                    pushTo(rows, o.models[a]!, {
                        prompt: s.promptTokenIds,
                        completion: s.tokenIds,
                        stopped: false,
                        logprobs: s.logprobs,
                        adv,
                    });
                    agents[a].rows++;
                }
            }
    }
    for (const [model, list] of rows) {
        o.signal?.throwIfAborted();
        if (list.every((x) => x.adv === 0)) continue;
        const b = packRows(list, model.tokenizer.eos, model.config.contextLength);
        // (the trainer's log-probs of the rows: one more forward, only when the correction is on)
        const corr =
            o.rolloutCorrection && b.rolloutLogp
                ? await correctBatch(b, await model.logprobs(b), { device: "cpu", ...o.rolloutCorrection })
                : null;
        const r = await model.trainStep(
            {
                tokens: b.tokens,
                targets: b.targets,
                mask: corr ? corr.mask : b.mask,
                shape: b.shape,
                advantages: Float32Array.from(list, (x) => x.adv),
                ...(corr?.rolloutIsWeights ? { rolloutIsWeights: corr.rolloutIsWeights } : {}),
            },
            {
                loss: { type: "reinforce", aggregation: "seq-mean-token-sum" },
                lr,
                ...(o.signal ? { signal: o.signal } : {}),
            },
        );
        for (const a of names)
            if (o.models[a] === model && agents[a]!.rows) {
                agents[a]!.loss = r.loss;
                if (corr) Object.assign(agents[a]!, corr.stats);
                await o.push?.(a, model);
            }
    }
    const rewards = ks.map((k) => episodes[k]!.reward);
    return {
        episodes,
        agents,
        meanReward: rewards.length ? rewards.reduce((s, x) => s + x, 0) / rewards.length : NaN,
        failed,
        inexact,
        ragged: credit.ragged,
    };
}
