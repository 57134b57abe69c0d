// stage.ts: one training stage of the job: which agent runs which model, which are trained (schedules), the
// critics each algorithm needs, and one iteration of the chosen algorithm.
//   schedule 'joint':       every agent trained (the method);
//   'independent':          agent 0 trained, the others frozen at the warm-started base (the negative control);
//   'alternating':          separate models; agent floor(it / period) mod A is frozen for `period` iterations;
//   'turn-based':           MAPoRL's update_turn_based_training: turn 1 for the first `initialIterations`, then
//                           the trained turn cycles T-1, ..., 1 every `period` iterations (turn 0 never trained).
import { correctionOptions } from "./correction.js";
import { overlongOf } from "./dapo.js";
import { agentSampling, agentSetting } from "../job/agentSettings.js";
import type { Generation } from "../../policy/types.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import type { TrainConfig } from "../job/config.js";
import { teamMetrics } from "../job/evaluate.js";
import { collmIteration } from "./collm.js";
import { magrpoIteration } from "./magrpo.js";
import { maporlUpdate, type AgentStats } from "./maporl.js";
import { rolloutTeam, traceTurns, type TeamRollout } from "./rollout.js";
import type { IterationResult } from "./iteration.js";

export type { IterationResult } from "./iteration.js";
import type { Task, TaskItem } from "../tasks/tasks.js";

export interface StageModels {
    /** The model each agent answers with. */
    agents: NativePolicy[];
    /** Agent a's trainable model, or null when agent a never trains in this stage. */
    trainable: (NativePolicy | null)[];
    /** Agent a's critic (maporl, collm-dc), the shared one (collm-cc), or null (magrpo). */
    critics: (NativePolicy | null)[];
    /** Every model to checkpoint, by name. */
    named: Record<string, NativePolicy>;
}

/** Builds (or, with `load`, reloads) the models of a stage that trains under `schedule`: copies of the warm-started
 * embedded GPT and separate critics, or, on a Hugging Face base, LoRA adapters on it (actors and critics). */
export async function stageModels(
    cfg: TrainConfig,
    schedule: TrainConfig["schedule"],
    base: NativePolicy,
    load?: (name: string) => Promise<NativePolicy>,
): Promise<StageModels> {
    const A = cfg.agents,
        named: Record<string, NativePolicy> = {};
    const hf = base.family === "llama",
        lora = { rank: cfg.lora.rank, alpha: cfg.lora.alpha, dropout: cfg.lora.dropout };
    const get = async (name: string, make: () => Promise<NativePolicy>) =>
        (named[name] = load ? await load(name) : await make());
    const trained = (a: number) => schedule !== "independent" || a === 0;
    const shared = cfg.shareParameters && schedule !== "alternating";
    const trainable: (NativePolicy | null)[] = [];
    for (let a = 0; a < A; a++) {
        if (!trained(a)) trainable.push(null);
        else if (shared && a > 0 && trainable[0]) trainable.push(trainable[0]);
        else
            trainable.push(
                await get(`actor-${a}`, () => (hf ? base.withAdapter(`actor-${a}`, lora) : base.clone(`actor-${a}`))),
            );
    }
    // A Hugging Face base: every critic is an adapter on it too (MAPoRL's value adapters), its value head trained.
    const criticOf = (name: string, seed: number) =>
        get(name, () =>
            hf
                ? base.withAdapter(name, { ...lora, seed: cfg.seed * 31 + seed })
                : NativePolicy.create({
                      ...cfg.critic,
                      contextLength: cfg.model.contextLength,
                      tokenizer: base.charTokenizer("the trainers' critics"),
                      seed: cfg.seed * 31 + seed,
                      name,
                      device: cfg.device,
                  }),
        );
    const critics: (NativePolicy | null)[] = [];
    if (cfg.algo === "collm-cc") {
        const c = await criticOf("critic-central", 101);
        for (let a = 0; a < A; a++) critics.push(trainable[a] ? c : null);
    } else if (cfg.algo !== "magrpo") {
        for (let a = 0; a < A; a++) {
            if (!trainable[a]) critics.push(null);
            else if (cfg.algo === "maporl" && shared && a > 0 && critics[0]) critics.push(critics[0]);
            else critics.push(await criticOf(`critic-${a}`, 102 + a));
        }
    } else for (let a = 0; a < A; a++) critics.push(null);
    return { agents: trainable.map((m) => m ?? base), trainable, critics, named };
}

/** The models trained at `iteration` (schedules freeze some). */
export function scheduled(
    cfg: TrainConfig,
    schedule: TrainConfig["schedule"],
    m: StageModels,
    iteration: number,
): { trainable: (NativePolicy | null)[]; trainTurn: (t: number) => boolean } {
    let trainable = m.trainable,
        trainTurn = (t: number) => !cfg.separateTurn0 || t > 0;
    if (schedule === "alternating") {
        const frozen = Math.floor(iteration / cfg.alternatingPeriod) % cfg.agents;
        trainable = m.trainable.map((x, a) => (a === frozen ? null : x));
    } else if (schedule === "turn-based") {
        const { initialIterations, period } = cfg.turnBased;
        const k =
            iteration < initialIterations
                ? 1
                : cfg.turns - 1 - (Math.floor((iteration - initialIterations) / period) % (cfg.turns - 1));
        trainTurn = (t: number) => t === k; // never turn 0
    }
    return { trainable, trainTurn };
}

function traceOf(r: TeamRollout): IterationResult["trace"] {
    return {
        question: r.items[0]!.question,
        reference: r.items[0]!.reference,
        turns: traceTurns(r.task, r.entries[0]!),
    };
}

/** The rollout options of an iteration (sampling, turn-0 models, DAPO's length penalty, per-agent sampling). */
export function rollOptions(cfg: TrainConfig, m: StageModels, ref: NativePolicy, seed: number, signal?: AbortSignal) {
    return {
        turns: cfg.turns,
        temperature: cfg.sampling.temperature,
        maxTokens: cfg.sampling.maxTokens,
        seed,
        ...(signal ? { signal } : {}),
        ...(cfg.separateTurn0 ? { turn0: m.agents.map(() => ref) } : {}),
        feedback: cfg.feedback,
        isStop: (id: number) => ref.tokenizer.isStop(id),
        ...(cfg.overlong.buffer > 0 ? { lengthPenalty: (g: Generation, a: number) => overlongOf(cfg, g, a) } : {}),
        ...(cfg.agentSettings.length
            ? {
                  agentSampling: agentSampling(cfg, m.agents.length),
              }
            : {}),
    };
}

/** One iteration of the configured algorithm on `items`. */
export async function runIteration(
    cfg: TrainConfig,
    task: Task,
    items: TaskItem[],
    schedule: TrainConfig["schedule"],
    m: StageModels,
    ref: NativePolicy,
    iteration: number,
    seed: number,
    signal?: AbortSignal,
): Promise<IterationResult> {
    const roll = rollOptions(cfg, m, ref, seed, signal);
    if (cfg.algo === "magrpo") {
        const { trainable, trainTurn } = scheduled(cfg, schedule, m, iteration);
        return magrpoIteration(cfg, task, items, m.agents, trainable, trainTurn, ref, roll);
    }
    const r = await rolloutTeam(task, items, m.agents, roll);
    return updateIteration(cfg, r, schedule, m, ref, iteration, seed, signal);
}

/** The update of an iteration (MAPoRL, CoLLM) on a rollout that `m.agents` or a snapshot of them sampled. */
export async function updateIteration(
    cfg: TrainConfig,
    r: TeamRollout,
    schedule: TrainConfig["schedule"],
    m: StageModels,
    ref: NativePolicy,
    iteration: number,
    seed: number,
    signal?: AbortSignal,
): Promise<IterationResult> {
    const { trainable, trainTurn } = scheduled(cfg, schedule, m, iteration);
    let stats: AgentStats[];
    if (cfg.algo === "maporl") {
        const mp = cfg.maporl;
        stats = await maporlUpdate(r, trainable, m.critics, ref, trainTurn, {
            klCoef: mp.klCoef,
            discount: mp.discount,
            bonus: mp.bonus,
            gamma: mp.gamma,
            lambda: mp.lambda,
            ppoEpochs: mp.ppoEpochs,
            clip: mp.clip,
            valueClip: mp.valueClip,
            lr: cfg.lr,
            criticLr: cfg.criticLr,
            ...(cfg.agentSettings.length ? { perAgent: m.agents.map((_, a) => agentSetting(cfg, a)) } : {}),
            seed,
            correction: correctionOptions(cfg.rolloutCorrection),
            dropTruncated: cfg.overlong.filter,
            ...(signal ? { signal } : {}),
        });
    } else stats = await collmIteration(cfg, r, trainable, m.critics, trainTurn, signal);
    return { stats, train: teamMetrics(r), ...(r.failed ? { failed: r.failed } : {}), trace: traceOf(r), rollout: r };
}
