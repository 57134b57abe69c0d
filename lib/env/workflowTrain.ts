// workflowTrain.ts: co-training the roles of a Workflow (the sequential role graph: hand-offs, reviewer loops, tools,
// a shared artifact) played by native models. One iteration, MAGRPO's credit on the workflow's joint reward:
//   - every item runs `groups` times (G episodes; the workflow draws each with its own seed);
//   - role r's return in an episode is the joint reward, plus (by default) r's shaped rewards (milestones, loop
//     penalties): R_r = reward + shaped[r];
//   - its credit is group-relative (groupAdvantages, estimator 'magrpo', baseline mean over the item's G episodes, no
//     std), so a role is pushed toward what its episodes did better than its other tries at the same item;
//   - every generation of the role's turns (each tool round: the prompt ids the model read, the ids it sampled) is a
//     row with that credit; loss -A * log pi(generation), summed over its tokens, as MAGRPO's ('seq-mean-token-sum');
//     one optimizer step per model (roles sharing a model share the step).
// An episode that failed (a request error: reward NaN) is left out of its group; a role with no signal in a batch
// (all credits 0) takes no step. Each trained turn records its credit (WorkflowTurn.credit).
import { pushTo } from "../collections.js";
import type { NativePolicy } from "../model/nativePolicy.js";
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { packRows } from "../train/trainers/rollout.js";
import type { Workflow, WorkflowEpisode } from "./workflow.js";

export interface WorkflowTrainOptions {
    /** Episodes per item: the group its credit is relative to. Defaults to 4. */
    groups?: number;
    /** Learning rate of each model's step. Defaults to 1e-4. */
    lr?: number;
    /** Add each role's shaped rewards to the joint reward. Defaults to true. */
    shaped?: boolean;
    signal?: AbortSignal;
}

export interface WorkflowTrainResult<I> {
    /** Every episode (G per item, item-major), its trained turns carrying their credit. */
    episodes: WorkflowEpisode<I>[];
    /** Per trained role: the mean return over its valid episodes, the rows trained on, the step's loss (null: no step). */
    roles: Record<string, { meanReturn: number; rows: number; loss: number | null }>;
    /** Episodes left out because they failed. */
    failed: number;
}

/** One co-training iteration of the roles named in `models` (role name -> the NativePolicy that plays it). */
export async function trainWorkflow<I>(
    wf: Workflow<I>,
    items: I[],
    models: Record<string, NativePolicy>,
    o: WorkflowTrainOptions = {},
): Promise<WorkflowTrainResult<I>> {
    const fn = "trainWorkflow";
    if (!Array.isArray(items) || items.length === 0) throw new TypeError(`${fn}: items: expected a non-empty array`);
    const G = o.groups ?? 4,
        lr = o.lr ?? 1e-4;
    if (!Number.isInteger(G) || G < 2)
        throw new RangeError(
            `${fn}: groups: expected an integer >= 2 (a group-relative credit needs two episodes), got ${String(G)}`,
        );
    if (!(Number.isFinite(lr) && lr > 0))
        throw new RangeError(`${fn}: lr: expected a positive number, got ${String(lr)}`);
    if (!models || typeof models !== "object" || Object.keys(models).length === 0)
        throw new TypeError(`${fn}: models: expected { role: NativePolicy } for at least one role`);
    for (const [name, m] of Object.entries(models)) {
        const role = wf.roles.find((r) => r.name === name);
        if (!role)
            throw new RangeError(
                `${fn}: models.${name}: the workflow has no role '${name}' (roles: ${wf.roles.map((r) => r.name).join(", ")})`,
            );
        if (role.policy !== m)
            throw new TypeError(
                `${fn}: models.${name}: not the policy that plays '${name}' in the workflow (train the model that generates)`,
            );
        if (typeof m.trainStep !== "function")
            throw new TypeError(`${fn}: models.${name}: expected a NativePolicy (with trainStep)`);
    }
    const shaped = o.shaped ?? true;
    const episodes = await wf.runBatch(
        items.flatMap((it) => Array<I>(G).fill(it)),
        o.signal ? { signal: o.signal } : {},
    );
    const ks = episodes.flatMap((ep, k) => (Number.isFinite(ep.reward) ? [k] : [])); // the episodes that did not fail
    const roles: WorkflowTrainResult<I>["roles"] = {};
    const rows = new Map<NativePolicy, { prompt: number[]; completion: number[]; stopped: boolean; adv: number }[]>();
    for (const [name, model] of Object.entries(models)) {
        const ret = ks.map((k) => episodes[k]!.reward + (shaped ? (episodes[k]!.shaped[name] ?? 0) : 0));
        roles[name] = {
            meanReturn: ret.length ? ret.reduce((s, x) => s + x, 0) / ret.length : NaN,
            rows: 0,
            loss: null,
        };
        if (!ks.length) continue;
        const adv = groupAdvantages(
            { scores: Float32Array.from(ret), groups: Int32Array.from(ks, (k) => Math.floor(k / G)) },
            { estimator: "magrpo", baseline: "mean", device: "cpu" },
        );
        ks.forEach((k, j) => {
            for (const turn of episodes[k]!.turns) {
                if (turn.role !== name) continue;
                turn.credit = adv[j]!;
                for (const s of turn.samples ?? [])
                    pushTo(rows, model, {
                        prompt: s.promptTokenIds,
                        completion: s.tokenIds,
                        stopped: false,
                        adv: adv[j]!,
                    });
                roles[name]!.rows += turn.samples?.length ?? 0;
            }
        });
    }
    for (const [model, list] of rows) {
        o.signal?.throwIfAborted();
        if (list.every((x) => x.adv === 0)) continue;
        const b = packRows(list, model.tokenizer.eos, model.config.contextLength);
        const r = await model.trainStep(
            {
                tokens: b.tokens,
                targets: b.targets,
                mask: b.mask,
                shape: b.shape,
                advantages: Float32Array.from(list, (x) => x.adv),
            },
            {
                loss: { type: "reinforce", aggregation: "seq-mean-token-sum" },
                lr,
                ...(o.signal ? { signal: o.signal } : {}),
            },
        );
        for (const [name, m] of Object.entries(models))
            if (m === model && roles[name]!.rows) roles[name]!.loss = r.loss;
    }
    return { episodes, roles, failed: episodes.length - ks.length };
}
