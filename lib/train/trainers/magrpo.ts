// magrpo.ts: one MAGRPO iteration (docs/algorithms.md B.2-B.3, CoMLRL's MAGRPOTrainer) on the embedded policy:
//   - per question, a joint-action tree (JointRollout): at every state each agent samples G answers, paired 'aligned'
//     (the g-th of every agent: G joint actions, G^T leaves) or 'cross' (every combination: G^A joint actions), each
//     of which branches to the next turn; the trees of all questions grow breadth first, one batched decode per
//     depth and model;
//   - the joint reward of a joint action is the team's mean verifier score; returns R = r + gamma * mean(children);
//   - advantages are group-relative within each sibling set (baseline mean | max | rloo | none, no std); with cross
//     joint actions per completion, over the sum of the returns of the joint actions that hold it (CoMLRL's rule);
//   - loss -A * log pi(answer), the sequence log-prob summed over its tokens ('seq-mean-token-sum'), no ratio, no
//     clip; an optional KL to the reference policy (Schulman k3, `klCoef`), in the loss rather than the reward.
import { JointRollout, type JointTree } from "../../debate/jointRollout.js";
import type { Generation, Policy } from "../../policy/types.js";
import { TreeIds, type RowIds } from "./magrpoIds.js";
import type { NativePolicy } from "../../model/nativePolicy.js";
import { treeReturns } from "../../rl/tree.js";
import type { TrainConfig } from "../job/config.js";
import { teamMetrics } from "../job/evaluate.js";
import type { AgentStats } from "./maporl.js";
import { addMismatch, correctBatch, correctionOptions, meanMismatch } from "./correction.js";
import { dropTruncated, overlongOf } from "./dapo.js";
import { agentSampling, agentSetting, miniBatches } from "../job/agentSettings.js";
import { crossCompletions } from "./magrpoCross.js";

export { crossCompletions } from "./magrpoCross.js";
import { groupHasSignal } from "../../rl/dapo.js";
import { agentGroupAdvantages } from "../../rl/agentGroups.js";
import {
    answerOf,
    jointScore,
    packRows,
    promptFor,
    runTools,
    traceTurns,
    turnScores,
    type RolloutEntry,
    type TeamRollout,
} from "./rollout.js";
import type { ToolResult } from "../../env/tools.js";
import type { IterationResult } from "./iteration.js";
import type { Task, TaskItem } from "../tasks/tasks.js";
import { answerKey } from "../../debate/metrics.js";
import { pushTo } from "../../collections.js";

const right = (task: Task, text: string, item: TaskItem) => {
    const x = answerOf(task, text);
    return x !== null && answerKey(x) === answerKey(item.reference);
};

// The debate along the first sample of every state (joint action 0, its child 0, ...), for the training metrics.
async function firstPath(
    task: Task,
    tree: JointTree,
    item: TaskItem,
    turns: number,
    ids: TreeIds,
    extra: (action: number, agent: number) => Promise<Partial<RolloutEntry>>,
): Promise<RolloutEntry[][]> {
    const path: RolloutEntry[][] = [];
    let parent = -1;
    for (let d = 0; d < turns; d++) {
        const id = tree.actions.findIndex((x) => x.parent === parent && x.depth === d);
        if (id < 0) break;
        const act = tree.actions[id]!;
        path.push(
            await Promise.all(
                act.generations.map(async (g, a) => ({
                    ...ids.of(g, act.prompts[a] as string),
                    text: g.text,
                    extracted: answerOf(task, g.text),
                    correct: right(task, g.text, item),
                    score: right(task, g.text, item) ? 1 : 0,
                    ...(await extra(id, a)),
                })),
            ),
        );
        parent = id;
    }
    return path;
}

export type Roll = {
    turns: number;
    temperature: number;
    maxTokens: number;
    seed: number;
    turn0?: Policy[];
    signal?: AbortSignal;
    /** The trainer's stop tokens (a remote answer that stopped must end on one). */
    isStop?: (id: number) => boolean;
};

// The joint-action trees of every item through JointRollout.runBatch (breadth first: one batched decode per depth
// and model): `magrpo.joint` joint actions, the team's mean score as the joint reward, every joint action branching
// into the next turn's prompts (with the verdicts when `feedback`), the frozen turn-0 models at depth 0 when given.
// Each answer is verified once: the reward and the next turn's verdicts share the score.
async function trees(
    cfg: TrainConfig,
    task: Task,
    items: TaskItem[],
    agents: Policy[],
    roll: Roll,
    ids: TreeIds,
): Promise<{
    grown: JointTree[];
    toolsOf: (item: TaskItem, a: number, depth: number, text: string) => Promise<ToolResult[] | undefined>;
}> {
    const verified = new Map<TaskItem, Map<string, Promise<number>>>();
    const scoreOf = (item: TaskItem, text: string) => {
        let m = verified.get(item);
        if (!m) verified.set(item, (m = new Map()));
        let s = m.get(text);
        if (!s)
            m.set(
                text,
                (s = task.verifier
                    .score({ question: item.question, response: text, reference: item.reference })
                    .then((r) => r.score)),
            );
        return s;
    };
    const scores = (item: TaskItem, texts: string[]) => Promise.all(texts.map((text) => scoreOf(item, text)));
    // A task with tools: each completion's calls run once (the transition), their results shown in the next prompts.
    const ran = new Map<TaskItem, Map<string, Promise<ToolResult[] | undefined>>>();
    const toolsOf = (item: TaskItem, a: number, depth: number, text: string) => {
        let m = ran.get(item);
        if (!m) ran.set(item, (m = new Map()));
        const key = `${a}/${depth}/${text}`;
        let p = m.get(key);
        if (!p) m.set(key, (p = runTools(task, item, a, text, depth, roll.signal)));
        return p;
    };
    const sampling = cfg.agentSettings.length ? agentSampling(cfg, agents.length) : null;
    const rollout = new JointRollout<TaskItem>({
        agents,
        ...(roll.turn0 ? { firstTurnAgents: roll.turn0 } : {}),
        generations: cfg.magrpo.generations,
        turns: roll.turns,
        joint: cfg.magrpo.joint,
        prompt: (item, a) => promptFor(task, item, a, null, cfg.feedback ? "empty" : undefined),
        transition: async ({ item, completions, turn }) => {
            const results = await Promise.all(completions.map((text, a) => toolsOf(item, a, turn, text)));
            const answers = completions.map((text, a) => ({
                text,
                extracted: answerOf(task, text),
                ...(results[a] ? { toolResults: results[a] } : {}),
            }));
            // The verdicts as rolloutTeam shows them (turnScores: answerers, finalReward); a transition is never after the last turn.
            const s = cfg.feedback ? turnScores(task, await scores(item, completions), false) : undefined;
            return agents.map((_, a) => promptFor(task, item, a, answers, s));
        },
        reward: async (texts, item, turn) =>
            task.finalReward && turn < roll.turns - 1 ? 0 : jointScore(task, await scores(item, texts)),
        sampling: { temperature: roll.temperature, maxTokens: roll.maxTokens },
        ...(sampling ? { agentSampling: sampling } : {}),
        seed: (item) => (roll.seed % 1_000_000_007) * 1_000_003 + items.indexOf(item) * 100_003, // < 2^53
    });
    const grown = await rollout.runBatch(items, roll.signal ? { signal: roll.signal } : {});
    ids.check(grown, agents, roll.turn0, roll.isStop, (a) => sampling?.[a]?.stop);
    return { grown, toolsOf };
}

// The trees of an iteration: with DAPO's overlong punishment, every joint action's reward gains its answers' mean
// penalty; with filterGroups (DAPO's dynamic sampling), a tree whose rewards are all equal (every group-relative
// advantage 0: the joint reward is the team's, so this holds for every agent at once) is dropped and new questions
// are sampled (task.generate with a seed per extra batch) until the batch is full or maxNumGenBatches batches ran. A
// tree whose request failed stays (it is reported as failed, as without the filter).
async function grow(
    cfg: TrainConfig,
    task: Task,
    items: TaskItem[],
    agents: Policy[],
    roll: Roll,
    ids: TreeIds,
): Promise<{
    grown: JointTree[];
    toolsOf: Awaited<ReturnType<typeof trees>>["toolsOf"];
    filter: { items: TaskItem[]; batches: number; sampled: number; dropped: number };
}> {
    const penalize = (t: JointTree) => {
        if (cfg.overlong.buffer === 0) return;
        t.actions.forEach((act, n) => {
            const p = act.generations.reduce((s, g, a) => s + overlongOf(cfg, g, a), 0) / act.generations.length;
            act.reward += p;
            t.rewards[n] = t.rewards[n]! + p;
        });
    };
    const f = cfg.filterGroups;
    const target = items.length;
    const keptItems: TaskItem[] = [],
        keptTrees: JointTree[] = [],
        tools = new Map<TaskItem, Awaited<ReturnType<typeof trees>>["toolsOf"]>();
    let first: Awaited<ReturnType<typeof trees>> | null = null;
    let batch = items,
        batches = 0,
        sampled = 0,
        dropped = 0,
        full = 0;
    for (;;) {
        const r = await trees(
            cfg,
            task,
            batch,
            agents,
            batches === 0 ? roll : { ...roll, seed: roll.seed + batches * 10_000_019 },
            ids,
        );
        batches++;
        first ??= r;
        r.grown.forEach((t, i) => {
            penalize(t);
            sampled++;
            const item = batch[i]!;
            if (f.enable && !t.error && !groupHasSignal(t.rewards)) {
                dropped++;
                return;
            }
            if (full >= target && !t.error) return; // the batch is full: extra trees of the last batch are not used
            if (!t.error) full++;
            keptItems.push(item);
            keptTrees.push(t);
            tools.set(item, r.toolsOf);
        });
        if (!f.enable || full >= target || batches >= f.maxNumGenBatches) break;
        batch = task.generate(target - full, roll.seed + batches * 10_000_019);
    }
    // Every tree dropped: the first batch's trees train anyway (zero advantages; the iteration still reports).
    if (keptTrees.length === 0)
        return { grown: first.grown, toolsOf: first.toolsOf, filter: { items, batches, sampled, dropped } };
    return {
        grown: keptTrees,
        toolsOf: (item, a, depth, text) => tools.get(item)!(item, a, depth, text),
        filter: { items: keptItems, batches, sampled, dropped },
    };
}

export async function magrpoIteration(
    cfg: TrainConfig,
    task: Task,
    items: TaskItem[],
    agents: NativePolicy[],
    trainable: (NativePolicy | null)[],
    trainTurn: (t: number) => boolean,
    ref: NativePolicy,
    roll: Roll,
): Promise<IterationResult> {
    return magrpoUpdate(cfg, task, await magrpoSample(cfg, task, items, agents, roll), trainable, trainTurn, ref, roll);
}

/** An iteration's sampled trees (MAGRPO's rollout phase), before any update: what the asynchronous pipeline samples
 * ahead on snapshots of the agents, or on a fleet. */
export interface MagrpoSample {
    items: TaskItem[];
    agents: number;
    ids: TreeIds;
    grown: Awaited<ReturnType<typeof grow>>;
}

/** The joint-action trees of `items` (with DAPO's filter, the items it kept and the ones it sampled more), sampled by
 * `agents`: the embedded models, or remote samplers whose answers become rows through `tokenizer` (the trainer's). */
export async function magrpoSample(
    cfg: TrainConfig,
    task: Task,
    items: TaskItem[],
    agents: Policy[],
    roll: Roll,
    tokenizer: NativePolicy["tokenizer"] = (agents[0] as NativePolicy).tokenizer,
): Promise<MagrpoSample> {
    const ids = new TreeIds(tokenizer);
    const grown = await grow(cfg, task, items, agents, roll, ids);
    return { items, agents: agents.length, ids, grown };
}

/** The served models that sampled the kept trees' answers (a fleet's adapter versions), one per remote answer. */
export const magrpoServed = (sample: MagrpoSample): string[] => sample.ids.served(sample.grown.grown);

/** MAGRPO's update of the trainable models on sampled trees (by these models or by a snapshot of them). */
export async function magrpoUpdate(
    cfg: TrainConfig,
    task: Task,
    sample: MagrpoSample,
    trainable: (NativePolicy | null)[],
    trainTurn: (t: number) => boolean,
    ref: NativePolicy,
    roll: Roll,
): Promise<IterationResult> {
    const correction = correctionOptions(cfg.rolloutCorrection);
    const A = sample.agents,
        mg = cfg.magrpo,
        ids = sample.ids;
    let items = sample.items;
    const rows = new Map<NativePolicy, (RowIds & { adv: number; a: number })[]>();
    const paths: RolloutEntry[][][] = [];
    const truncated = new Float64Array(A);
    const rewardSum = new Float64Array(A),
        rewardN = new Float64Array(A);
    const { grown, toolsOf, filter } = sample.grown;
    items = filter.items;
    // An item whose tree failed (a request failed: JointRollout's onError 'skip') is dropped; the others train.
    const failed = grown.flatMap((t, i) =>
        t.error ? [{ item: items[i]!, turn: t.error.depth, agent: t.error.agent, error: t.error.message }] : [],
    );
    if (failed.length === items.length)
        throw new Error(
            `rollout: every episode failed (${items.length}); the first at turn ${failed[0]!.turn}, agent ${failed[0]!.agent}: ${failed[0]!.error}`,
        );
    const forest = grown.filter((t) => !t.error);
    items = items.filter((_, i) => !grown[i]!.error);
    const push = (
        a: number,
        depth: number,
        prompt: string,
        g: Generation,
        adv: number,
        credit: Map<string, number>,
        action: number,
    ) => {
        const model = trainable[a];
        if (!model || !trainTurn(depth)) return;
        credit.set(`${action}/${a}`, adv);
        pushTo(rows, model, { ...ids.of(g, prompt), adv, a });
    };
    for (const [i, item] of items.entries()) {
        const tree = forest[i]!;
        const { returns, advantages } = treeReturns(
            { parent: tree.parent, rewards: tree.rewards },
            { gamma: mg.discount, baseline: mg.baseline },
        );
        tree.actions.forEach((act) =>
            act.generations.forEach((_, a) => {
                rewardSum[a] = rewardSum[a]! + act.reward;
                rewardN[a] = rewardN[a]! + 1;
            }),
        );
        const credit = new Map<string, number>(); // "action/agent" -> the advantage the agent's completion trained with
        if (mg.joint === "aligned" && mg.grouping !== "state") {
            // AT-GRPO / Dr. MAS: agent a's candidate in joint action n carries the action's return, compared within
            // (agent, turn) or (agent) over the whole tree (agentGroups.ts)
            const steps = tree.actions.flatMap((act, n) =>
                act.generations.map((_, a) => ({ question: 0, agent: a, turn: act.depth, reward: returns[n]! })),
            );
            const adv = agentGroupAdvantages(steps, mg.grouping);
            let k = 0;
            tree.actions.forEach((act, n) =>
                act.generations.forEach((g, a) =>
                    push(a, act.depth, act.prompts[a] as string, g, adv[k++]!, credit, n),
                ),
            );
        } else if (mg.joint === "aligned")
            // joint action n is every agent's n-th sample: one advantage for all of them
            tree.actions.forEach((act, n) =>
                act.generations.forEach((g, a) =>
                    push(a, act.depth, act.prompts[a] as string, g, advantages[n]!, credit, n),
                ),
            );
        else
            for (const c of crossCompletions(tree, returns, A, mg.generations, mg.baseline)) {
                const act = tree.actions[c.action]!;
                push(
                    c.agent,
                    act.depth,
                    act.prompts[c.agent] as string,
                    act.generations[c.agent]!,
                    c.adv,
                    credit,
                    c.action,
                );
            }
        paths.push(
            await firstPath(task, tree, item, roll.turns, ids, async (n, a) => {
                const act = tree.actions[n]!,
                    results = await toolsOf(item, a, act.depth, act.generations[a]!.text),
                    c = credit.get(`${n}/${a}`);
                return { ...(results ? { toolResults: results } : {}), ...(c !== undefined ? { credit: c } : {}) };
            }),
        );
    }
    const stats: AgentStats[] = Array.from({ length: A }, (_, a) => ({
        reward: rewardN[a] ? rewardSum[a]! / rewardN[a] : 0,
        kl: 0,
        clipFrac: 0,
        entropy: 0,
        valueLoss: 0,
        policyLoss: 0,
        updates: 0,
    }));
    // With per-agent settings, each agent's rows train in their own step at the agent's lr / klCoef / entropyCoef
    // (a shared model then takes one step per agent); else one step per model, as before.
    const batches: [NativePolicy, typeof rows extends Map<NativePolicy, infer L> ? L : never, number | null][] = [];
    for (const [model, list] of rows)
        if (!cfg.agentSettings.length) batches.push([model, list, null]);
        else for (const a of new Set(list.map((x) => x.a))) batches.push([model, list.filter((x) => x.a === a), a]);
    // an agent's miniBatchSize splits its rows into consecutive steps (the advantages are the whole batch's)
    const split: typeof batches = [];
    for (const [model, list, who] of batches)
        for (const [r0, r1] of miniBatches(list.length, who === null ? 0 : agentSetting(cfg, who).miniBatchSize))
            split.push([model, list.slice(r0, r1), who]);
    // The rollout correction needs the trainer's log-probs of the rows: one more forward, only when it is on; all of
    // them before the first step (the sampler's lag, not this update's own earlier steps).
    const prepared = [];
    for (const [model, list, who] of split) {
        const b = packRows(list, model.tokenizer.eos, model.config.contextLength);
        const corr = correction && b.rolloutLogp ? await correctBatch(b, await model.logprobs(b), correction) : null;
        prepared.push({ model, list, who, b, corr });
    }
    for (const { model, list, who, b, corr } of prepared) {
        roll.signal?.throwIfAborted();
        const set = who === null ? null : agentSetting(cfg, who);
        const klCoef = set ? set.klCoef : mg.klCoef;
        const kl = klCoef > 0 ? { refLogp: await ref.logprobs(b) } : {};
        let mask = corr ? corr.mask : b.mask;
        if (cfg.overlong.filter) {
            const d = dropTruncated(mask, b.shape, list);
            mask = d.mask;
            for (const x of list) if (x.truncated) truncated[x.a] = truncated[x.a]! + 1;
        }
        const r = await model.trainStep(
            {
                tokens: b.tokens,
                targets: b.targets,
                mask,
                shape: b.shape,
                advantages: Float32Array.from(list, (x) => x.adv),
                ...(corr?.rolloutIsWeights ? { rolloutIsWeights: corr.rolloutIsWeights } : {}),
                ...kl,
            },
            {
                loss: {
                    type: "reinforce",
                    aggregation: "seq-mean-token-sum",
                    ...(klCoef > 0 ? { kl: { coef: klCoef, estimator: "k3" as const } } : {}),
                    ...(set?.entropyCoef ? { entropyCoef: set.entropyCoef } : {}),
                },
                lr: set ? set.lr : cfg.lr,
                ...(roll.signal ? { signal: roll.signal } : {}),
            },
        );
        for (const a of new Set(list.map((x) => x.a))) {
            const st = stats[a]!;
            if (corr) addMismatch(st, corr.stats);
            st.policyLoss = r.loss;
            st.entropy = r.stats.entropyMean;
            st.kl = r.stats.klMean;
            st.updates++;
        }
    }
    const rowsOf = new Float64Array(A);
    for (const list of rows.values()) for (const x of list) rowsOf[x.a] = rowsOf[x.a]! + 1;
    stats.forEach((st, a) => {
        meanMismatch(st);
        if (!rowsOf[a]) return;
        if (cfg.filterGroups.enable) {
            st.filterBatches = filter.batches;
            st.filterDroppedFraction = filter.sampled ? filter.dropped / filter.sampled : 0;
        }
        if (cfg.overlong.filter) st.truncatedFraction = truncated[a]! / rowsOf[a];
        if (cfg.agentSettings.length) {
            st.lr = agentSetting(cfg, a).lr;
            st.temperature = agentSetting(cfg, a).temperature;
        }
    });
    const team: TeamRollout = { task, items, entries: paths, agents: A, turns: roll.turns };
    const first = paths[0]!;
    // The replay buffer (replay.ts) keeps the successful episodes of `rollout`: here each tree's first path.
    return {
        stats,
        train: teamMetrics(team),
        ...(failed.length ? { failed } : {}),
        trace: { question: items[0]!.question, reference: items[0]!.reference, turns: traceTurns(task, first) },
        rollout: team,
    };
}
