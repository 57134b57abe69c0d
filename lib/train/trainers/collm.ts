// collm.ts: one CoLLM-CC / CoLLM-DC update (docs/algorithms.md C.1, CoMLRL's MAAC / IAC trainers) on a team rollout:
//   - the joint reward of turn t is the team's mean verifier score, shared by every agent;
//   - the critic reads V(h_t) at the last prompt token: CC, one centralised critic on the joint history (every
//     agent's view and every previous answer); DC, one critic per agent on its own prompt;
//   - TD(0) targets y_t = r_t + gamma * V_old(h_{t+1}) (y = r at the last turn), delta_t = y_t - V_old(h_t),
//     normalised over the batch; actor loss -delta * log pi(answer) (sequence sum, no ratio, no clip);
//     critic loss (V(h_t) - y_t)^2. CC steps its critic once per iteration after all actors (the paper-aligned
//     order; upstream MAAC steps it inside every actor update).
import type { NativePolicy } from "../../model/nativePolicy.js";
import { tdAdvantages } from "../../rl/td.js";
import type { TrainConfig } from "../job/config.js";
import type { AgentStats } from "./maporl.js";
import { packRows, turnPrompt, type TeamRollout } from "./rollout.js";
import { addMismatch, correctBatch, correctionOptions, meanMismatch } from "./correction.js";
import { dropTruncated } from "./dapo.js";
import { agentSetting, miniBatches } from "../job/agentSettings.js";

/** The centralised critic's input at turn t of episode e: every distinct view, then every previous answer. */
function jointPrompt(r: TeamRollout, e: number, t: number, feedback: boolean): string {
    const views = [...new Set(r.items[e]!.views)].join("&");
    const prev = t === 0 ? null : r.entries[e]![t - 1]!;
    const marks = feedback ? (prev ? prev.map((x) => x.score) : ("empty" as const)) : undefined;
    if (r.task?.centralPrompt) return r.task.centralPrompt(r.items[e]!, prev, marks);
    // A words task (one shared question): agent 0's message, which quotes every previous answer.
    if (r.task?.prompt) return r.task.prompt(r.items[e]!, 0, prev, marks);
    return turnPrompt(views, 0, r.agents, prev ? prev.map((x) => x.extracted) : null, marks);
}

/** A critic's values V(h) of states given as prompt ids, read at each prompt's last token. */
export async function criticValues(c: NativePolicy, prompts: number[][]) {
    const b = packRows(
        prompts.map((p) => ({ prompt: p, completion: [], stopped: false })),
        c.tokenizer.eos,
        c.config.contextLength,
    );
    const v = await c.values(b);
    const at = prompts.map((p, i) => i * b.shape[1] + Math.min(p.length, b.shape[1]) - 1);
    return { b, at, values: Float32Array.from(at, (k) => v[k]!) };
}
export type CriticValues = Awaited<ReturnType<typeof criticValues>>;

/** One step of critic `c` regressing its values at those states on `targets` (loss (V - y)^2). */
export async function fitCritic(
    c: NativePolicy,
    s: CriticValues,
    targets: Float32Array,
    lr: number,
    signal?: AbortSignal,
) {
    const [B, L] = s.b.shape,
        mask = new Float32Array(B * L),
        returns = new Float32Array(B * L);
    s.at.forEach((k, i) => {
        mask[k] = 1;
        returns[k] = targets[i]!;
    });
    return c.trainStep(
        { tokens: s.b.tokens, targets: s.b.targets, mask, shape: s.b.shape, returns },
        { loss: "value", lr, ...(signal ? { signal } : {}) },
    );
}

export async function collmIteration(
    cfg: TrainConfig,
    r: TeamRollout,
    trainable: (NativePolicy | null)[],
    critics: (NativePolicy | null)[],
    trainTurn: (t: number) => boolean,
    signal?: AbortSignal,
): Promise<AgentStats[]> {
    const { turns: T, agents: A } = r,
        E = r.items.length,
        central = cfg.algo === "collm-cc",
        correction = correctionOptions(cfg.rolloutCorrection);
    const reward = new Float32Array(E * T);
    r.entries.forEach((ep, e) =>
        ep.forEach((turn, t) => {
            reward[e * T + t] = turn.reduce((s, x) => s + x.score, 0) / A;
        }),
    );
    const meanReward = reward.reduce((s, x) => s + x, 0) / (E * T); // the joint reward: the same for every agent
    const stats: AgentStats[] = Array.from({ length: A }, () => ({
        reward: meanReward,
        kl: 0,
        clipFrac: 0,
        entropy: 0,
        valueLoss: 0,
        policyLoss: 0,
        updates: 0,
    }));
    const sig = signal ? { signal } : {};
    const critic = criticValues;
    const fit = (c: NativePolicy, v: CriticValues, targets: Float32Array, lr: number) =>
        fitCritic(c, v, targets, lr, signal);
    const lengths = new Int32Array(E).fill(T);
    let shared: { s: CriticValues; td: ReturnType<typeof tdAdvantages> } | null = null;
    if (central) {
        const c = critics.find((x) => x);
        if (c) {
            const tok = c.tokenizer;
            const s = await critic(
                c,
                Array.from({ length: E * T }, (_, i) =>
                    tok.encodeChat([{ role: "user", content: jointPrompt(r, Math.floor(i / T), i % T, cfg.feedback) }]),
                ),
            );
            shared = {
                s,
                td: tdAdvantages(
                    { rewards: reward, values: s.values, lengths },
                    { gamma: cfg.collm.gamma, normalize: cfg.collm.normalize },
                ),
            };
        }
    }
    for (let a = 0; a < A; a++) {
        const set = agentSetting(cfg, a);
        const model = trainable[a],
            c = critics[a];
        if (!model || !c) continue;
        signal?.throwIfAborted();
        let td = shared?.td;
        if (!central) {
            const s = await critic(
                c,
                Array.from({ length: E * T }, (_, i) => r.entries[Math.floor(i / T)]![i % T]![a]!.prompt),
            );
            td = tdAdvantages(
                { rewards: reward, values: s.values, lengths },
                { gamma: cfg.collm.gamma, normalize: cfg.collm.normalize },
            );
            stats[a]!.valueLoss = (await fit(c, s, td.targets, set.criticLr)).loss;
        }
        const rows: number[] = [];
        for (let i = 0; i < E * T; i++) if (trainTurn(i % T)) rows.push(i);
        if (!rows.length) continue;
        for (const i of rows) r.entries[Math.floor(i / T)]![i % T]![a]!.credit = td!.advantages[i]!;
        // one step, or one per mini-batch of the agent's miniBatchSize (in order; the advantages are the whole batch's)
        let loss = 0,
            entropy = 0,
            truncated = 0;
        const chunks = miniBatches(rows.length, set.miniBatchSize);
        // every mini-batch's correction against the weights before this iteration's first step (the sampler's lag,
        // not this update's own steps)
        const prepared = [];
        for (const [r0, r1] of chunks) {
            const part = rows.slice(r0, r1);
            const answers = part.map((i) => r.entries[Math.floor(i / T)]![i % T]![a]!);
            const b = packRows(answers, model.tokenizer.eos, model.config.contextLength);
            const corr =
                correction && b.rolloutLogp ? await correctBatch(b, await model.logprobs(b), correction) : null;
            prepared.push({ part, answers, b, corr });
        }
        for (const { part, answers, b, corr } of prepared) {
            if (corr) addMismatch(stats[a]!, corr.stats);
            let mask = corr ? corr.mask : b.mask;
            if (cfg.overlong.filter) {
                const d = dropTruncated(mask, b.shape, answers);
                mask = d.mask;
                truncated += d.dropped;
            }
            const p = await model.trainStep(
                {
                    tokens: b.tokens,
                    targets: b.targets,
                    mask,
                    shape: b.shape,
                    advantages: Float32Array.from(part, (i) => td!.advantages[i]!),
                    ...(corr?.rolloutIsWeights ? { rolloutIsWeights: corr.rolloutIsWeights } : {}),
                },
                {
                    loss: {
                        type: "reinforce",
                        aggregation: "seq-mean-token-sum",
                        ...(set.entropyCoef ? { entropyCoef: set.entropyCoef } : {}),
                    },
                    lr: set.lr,
                    ...sig,
                },
            );
            loss += p.loss / chunks.length;
            entropy += p.stats.entropyMean / chunks.length;
        }
        if (cfg.overlong.filter) stats[a]!.truncatedFraction = truncated / rows.length;
        Object.assign(stats[a]!, { policyLoss: loss, entropy, updates: chunks.length });
        if (cfg.agentSettings.length) Object.assign(stats[a]!, { lr: set.lr, temperature: set.temperature });
        meanMismatch(stats[a]!);
    }
    if (shared) {
        const c = critics.find((x) => x)!;
        const v = (await fit(c, shared.s, shared.td.targets, cfg.criticLr)).loss; // one central critic: the team's rate
        for (let a = 0; a < A; a++) if (trainable[a]) stats[a]!.valueLoss = v;
    }
    return stats;
}
