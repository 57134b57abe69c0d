// maporl.ts: one MAPoRL update (docs/algorithms.md A.4-A.6, the reference code's multi-agent PPOv2):
//   - every (turn, agent) answer is its own PPO episode; the outcome reward at its last token is the
//     influence-aware verification reward (Definition 1, discount 0.3) plus the optional collaboration bonuses;
//   - every answer token also pays -klCoef * (log pi - log pi_ref) against the frozen reference policy;
//   - token-level GAE (gamma 1, lambda 0.95) on the agent's critic, advantages whitened per (turn, agent) batch;
//   - PPO epochs over the (turn, agent) micro-batches: the clipped surrogate for the actor, verl's clipped value
//     loss for the critic, one optimizer step each (as the reference code steps per micro-batch).
import type { NativePolicy } from "../../model/nativePolicy.js";
import { mulberry32 } from "../../random.js";
import { gae } from "../../rl/gae.js";
import { collaborationBonus, influenceRewards, type BonusOptions } from "../../rl/influence.js";
import type { RolloutCorrectionOptions } from "../../rl/rolloutCorrection.js";
import { addMismatch, correctBatch, meanMismatch, type MismatchStats } from "./correction.js";
import { dropTruncated } from "./dapo.js";
import { miniBatches, type ResolvedAgent } from "../job/agentSettings.js";
import { packRows, type PackedBatch, type TeamRollout } from "./rollout.js";

export interface MaporlOptions {
    klCoef: number;
    discount: number;
    bonus: BonusOptions;
    gamma: number;
    lambda: number;
    ppoEpochs: number;
    clip: number;
    valueClip: number;
    lr: number;
    criticLr: number;
    seed: number;
    /** The rollout correction (correction.ts); null or absent: the mismatch is measured, not corrected. */
    correction?: RolloutCorrectionOptions | null;
    /** Per-agent settings (the job's agentSettings resolved): lr, criticLr, klCoef, clip, entropyCoef, the loss type
     * and aggregation and the mini-batch size of agent a replace the team's. */
    perAgent?: Pick<
        ResolvedAgent,
        | "lr"
        | "criticLr"
        | "klCoef"
        | "clip"
        | "entropyCoef"
        | "temperature"
        | "loss"
        | "lossAggregation"
        | "miniBatchSize"
    >[];
    /** DAPO's overlong filter: answers cut at maxTokens leave the actor's loss (the critic still fits them). */
    dropTruncated?: boolean;
    signal?: AbortSignal;
}

/** With the sampler's log-probs on the rows, the mismatch figures (correction.ts) are there too. */
export interface AgentStats extends Partial<MismatchStats> {
    /** With per-agent settings: the agent's learning rate and sampling temperature. */
    lr?: number;
    temperature?: number;
    /** DAPO: the batches sampled and the share of questions dropped (filterGroups), and the share of trained answers
     * left out of the loss for reaching maxTokens (overlong.filter). */
    filterBatches?: number;
    filterDroppedFraction?: number;
    truncatedFraction?: number;
    reward: number;
    kl: number;
    clipFrac: number;
    entropy: number;
    valueLoss: number;
    policyLoss: number;
    /** (turn, agent) batches that were trained (times the PPO epochs). */
    updates: number;
    /** Optimizer steps of the actor (more than `updates` with per-agent mini-batches); MAPoRL only. */
    steps?: number;
}

/** The per-turn outcome reward [E, T, A]: Definition 1 plus the collaboration bonuses. */
export function maporlTurnRewards(r: TeamRollout, discount: number, bonus: BonusOptions): Float32Array {
    const { turns: T, agents: A } = r,
        E = r.items.length;
    const scores = new Float32Array(E * T * A),
        correct = new Uint8Array(E * T * A);
    r.entries.forEach((ep, e) =>
        ep.forEach((turn, t) =>
            turn.forEach((x, a) => {
                scores[(e * T + t) * A + a] = x.score;
                correct[(e * T + t) * A + a] = x.correct ? 1 : 0;
            }),
        ),
    );
    const R = influenceRewards({ scores, shape: [E, T, A] }, { discount });
    if (Object.values(bonus).some((v) => typeof v === "number" && v !== 0)) {
        const b = collaborationBonus({ correct, shape: [E, T, A] }, bonus);
        for (let i = 0; i < R.length; i++) R[i] = R[i]! + b[i]!;
    }
    return R;
}

/** One MAPoRL update. `models[a]` is agent a's trainable policy, or null when agent a is frozen (schedules);
 * `trainTurn(t)` says whether turn t's answers are trained (turn-based schedules). */
export async function maporlUpdate(
    r: TeamRollout,
    models: (NativePolicy | null)[],
    critics: (NativePolicy | null)[],
    ref: NativePolicy,
    trainTurn: (t: number) => boolean,
    o: MaporlOptions,
): Promise<AgentStats[]> {
    const { turns: T, agents: A } = r,
        E = r.items.length;
    const R = maporlTurnRewards(r, o.discount, o.bonus);
    const stats: AgentStats[] = Array.from({ length: A }, () => ({
        reward: 0,
        kl: 0,
        clipFrac: 0,
        entropy: 0,
        valueLoss: 0,
        policyLoss: 0,
        updates: 0,
    }));
    for (let a = 0; a < A; a++) {
        let s = 0;
        for (let e = 0; e < E; e++) for (let t = 0; t < T; t++) s += R[(e * T + t) * A + a]!;
        stats[a]!.reward = s / (E * T);
    }
    interface Group {
        t: number;
        a: number;
        b: PackedBatch;
        oldLogp: Float32Array;
        refLogp: Float32Array;
        /** The actor's mask (after rejection) and IS weights. */
        mask: PackedBatch["mask"];
        weights?: Float32Array;
        values: Float32Array;
        adv: Float32Array;
        ret: Float32Array;
    }
    const groups: Group[] = [];
    const truncated = new Float64Array(A),
        answers = new Float64Array(A);
    for (let t = 0; t < T; t++)
        for (let a = 0; a < A; a++) {
            const model = models[a],
                critic = critics[a];
            if (!model || !critic || !trainTurn(t)) continue;
            o.signal?.throwIfAborted();
            r.entries.forEach((ep, e) => {
                ep[t]![a]!.credit = R[(e * T + t) * A + a]!;
            });
            const rows = r.entries.map((ep) => ep[t]![a]!);
            const b = packRows(rows, model.tokenizer.eos, model.config.contextLength);
            const [B, L] = b.shape;
            const oldLogp = await model.logprobs(b),
                refLogp = await ref.logprobs(b),
                values = await critic.values(b);
            const rewards = new Float32Array(B * L);
            let kl = 0,
                n = 0;
            for (let i = 0; i < B * L; i++) {
                if (!b.mask[i]) continue;
                const d = oldLogp[i]! - refLogp[i]!;
                rewards[i] = -(o.perAgent?.[a]?.klCoef ?? o.klCoef) * d;
                kl += d;
                n++;
            }
            for (let e = 0; e < B; e++) {
                const k = e * L + b.last[e]!;
                rewards[k] = rewards[k]! + R[(e * T + t) * A + a]!;
            }
            const g = gae(
                { rewards, values, mask: b.mask, shape: b.shape },
                { gamma: o.gamma, lambda: o.lambda, whiten: true, device: "cpu" },
            );
            stats[a]!.kl += n ? kl / n : 0;
            const c = await correctBatch(b, oldLogp, o.correction ?? null);
            if (c) addMismatch(stats[a]!, c.stats);
            let actorMask = c ? c.mask : b.mask;
            if (o.dropTruncated) {
                const d = dropTruncated(actorMask, b.shape, rows);
                actorMask = d.mask;
                truncated[a] = truncated[a]! + d.dropped;
                answers[a] = answers[a]! + rows.length;
            }
            groups.push({
                t,
                a,
                b,
                oldLogp,
                refLogp,
                mask: actorMask,
                ...(c?.rolloutIsWeights ? { weights: c.rolloutIsWeights } : {}),
                values,
                adv: g.advantages,
                ret: g.returns,
            });
        }
    const rng = mulberry32(o.seed);
    for (let epoch = 0; epoch < o.ppoEpochs; epoch++) {
        const order = groups.map((_, i) => i);
        for (let i = order.length - 1; i > 0; i--) {
            const j = Math.floor(rng() * (i + 1));
            [order[i], order[j]] = [order[j]!, order[i]!];
        }
        for (const gi of order) {
            o.signal?.throwIfAborted();
            const g = groups[gi]!,
                st = stats[g.a]!,
                pa = o.perAgent?.[g.a];
            const [B, L] = g.b.shape;
            // verl's ppo_mini_batch_size: the batch's rows in consecutive steps (advantages whitened on the whole batch)
            for (const [r0, r1] of miniBatches(B, pa?.miniBatchSize ?? 0)) {
                const rows = <T extends Float32Array | Int32Array>(x: T): T =>
                    (r0 === 0 && r1 === B ? x : x.slice(r0 * L, r1 * L)) as T;
                const batch = {
                    tokens: rows(g.b.tokens),
                    targets: rows(g.b.targets),
                    mask: rows(g.b.mask),
                    shape: [r1 - r0, L] as [number, number],
                };
                const p = await models[g.a]!.trainStep(
                    {
                        ...batch,
                        mask: rows(g.mask),
                        advantages: rows(g.adv),
                        oldLogp: rows(g.oldLogp),
                        ...(g.weights ? { rolloutIsWeights: rows(g.weights) } : {}),
                    },
                    {
                        loss: {
                            type: pa?.loss ?? "ppo",
                            clip: pa?.clip ?? o.clip,
                            aggregation: pa?.lossAggregation ?? "token-mean",
                            ...(pa?.entropyCoef ? { entropyCoef: pa.entropyCoef } : {}),
                        },
                        lr: pa?.lr ?? o.lr,
                        ...(o.signal ? { signal: o.signal } : {}),
                    },
                );
                const v = await critics[g.a]!.trainStep(
                    { ...batch, returns: rows(g.ret), oldValues: rows(g.values) },
                    {
                        loss: "value",
                        valueClip: o.valueClip,
                        lr: pa?.criticLr ?? o.criticLr,
                        ...(o.signal ? { signal: o.signal } : {}),
                    },
                );
                st.clipFrac += p.stats.clipFrac;
                st.entropy += p.stats.entropyMean;
                st.policyLoss += p.loss;
                st.valueLoss += v.loss;
                st.steps = (st.steps ?? 0) + 1;
            }
            st.updates++;
        }
    }
    for (const [a, st] of stats.entries()) {
        meanMismatch(st);
        if (answers[a]) st.truncatedFraction = truncated[a]! / answers[a];
        if (o.perAgent && st.updates) {
            st.lr = o.perAgent[a]!.lr;
            st.temperature = o.perAgent[a]!.temperature;
        }
        const turnsTrained = st.updates / Math.max(1, o.ppoEpochs);
        if (st.updates) {
            const steps = st.steps!;
            st.clipFrac /= steps;
            st.entropy /= steps;
            st.policyLoss /= steps;
            st.valueLoss /= steps;
            st.kl /= turnsTrained;
        }
    }
    return stats;
}
