// config.ts: the training job's configuration: defaults, merging of a config file and CLI flags, and validation.
// Every key is checked against the defaults' shape; an unknown or misspelled key is an error that names its path
// (and the closest known key), and every value is checked for its type and range.

import { existsSync } from "node:fs";
import { join } from "node:path";

import { isHfModelDir, readHfConfig, readJsonObject } from "../../model/hf.js";
import { GSM8K_FIXTURE } from "../tasks/gsm8k.js";
import { rolloutCorrectionParams } from "../../rl/rolloutCorrection.js";
import { checkAgentSettings, type AgentSettings } from "./agentSettings.js";
import { merge } from "./configRules.js";

export { ALGOS, DEVICES, SCHEDULES, TASKS } from "./configRules.js";
import { correctionOptions, type CorrectionConfig } from "../trainers/correction.js";

export type Algo = "maporl" | "magrpo" | "collm-cc" | "collm-dc";
export type Schedule = "joint" | "independent" | "alternating" | "turn-based";

export interface TrainConfig {
    /** The task: arith-debate, split-sum and tool-lookup (the embedded policy's compact protocol, any model; tool-lookup
     * is a researcher / solver workflow with a tool, lookup.ts), or gsm8k (real models: model.dir; MAPoRL's math
     * prompts, the train split for training, the test split held out). */
    task: "arith-debate" | "split-sum" | "tool-lookup" | "gsm8k";
    /** arith-debate: operations per problem and the largest operand; split-sum: digits per operand and the warm
     * start's tendency to build on a peer's previous answer (splitSumTask's peerUse); tool-lookup: how often the warm
     * start's researcher looks up its own key (keyUse) and its solver uses the scratchpad (padUse); gsm8k: `data`, a directory
     * with train.jsonl and test.jsonl (default: the copy the tests ship, test/fixtures/gsm8k). */
    taskOptions: {
        steps: number;
        maxOperand: number;
        digits: number;
        peerUse: number;
        keyUse: number;
        padUse: number;
        /** tool-lookup: lookups chained before the answer (1: the task as designed; h > 1: turns = h + 1, the reward
         * only at the end of a long horizon). */
        hops: number;
        data: string;
    };
    algo: Algo;
    agents: number;
    turns: number;
    schedule: Schedule;
    /** One model for every trained agent (MAPoRL's homogeneous setting), or one per agent (diff_model_training). */
    shareParameters: boolean;
    /** MAPoRL's collaboration_separation with task_training off: turn 0 is answered by the frozen warm-started model
     * (the "policy" adapter), turns >= 1 by the trained model (the "col" adapter); turn 0 is never trained. */
    separateTurn0: boolean;
    /** Show every previous answer's verifier verdict in the prompts (MAPoRL's reward_feedback). */
    feedback: boolean;
    seed: number;
    iterations: number;
    /** Questions per iteration (each runs a whole debate). */
    episodesPerIteration: number;
    evalEpisodes: number;
    /** Evaluate on the held-out split every N iterations (and always before and after). */
    evalEvery: number;
    /** Also train the `independent` control (one agent against frozen partners) for the final table. */
    controls: boolean;
    /** Where every model (actors, critics, the reference) lives: 'cpu' (bit-identical for any thread count), 'cuda'
     * (deterministic run to run, not bit-equal to the CPU), or 'auto' (a visible GPU, else the CPU). */
    device: "cpu" | "cuda" | "auto";
    /** The models' float32 matmuls on CUDA: 'highest' (float32) or 'high' (TF32 tensor cores); see setMatmulPrecision.
     * No effect on the CPU. */
    matmulPrecision: "highest" | "high";
    sampling: { temperature: number; maxTokens: number };
    /** The embedded GPT's shape, or `dir`: a Hugging Face model directory (llama, mistral, qwen2, qwen3) whose agents
     * and critics are LoRA adapters (`lora`) on its one frozen base; the warm start is then off unless sft.steps is
     * given (real models are already instruction-tuned), and contextLength defaults to 512. */
    model: {
        layers: number;
        heads: number;
        dModel: number;
        contextLength: number;
        dir: string;
        /** model.dir only: the base's matrices in memory: 'float32', 'bfloat16' (frozen, half the memory) or 'int8'
         * (frozen, Q8_0 blocks: about 0.53x bfloat16); with a frozen base the warm start, which trains the base, is
         * not possible. */
        dtype: "float32" | "bfloat16" | "int8";
    };
    /** model.dir only: every agent's and critic's adapter (PEFT's r, lora_alpha, lora_dropout; every block projection). */
    lora: { rank: number; alpha: number; dropout: number };
    critic: { layers: number; heads: number; dModel: number };
    sft: { steps: number; batchSize: number; lr: number };
    lr: number;
    criticLr: number;
    maporl: {
        klCoef: number;
        discount: number;
        gamma: number;
        lambda: number;
        ppoEpochs: number;
        clip: number;
        valueClip: number;
        bonus: {
            correctedAlone: number;
            persuadedCorrectly: number;
            wrongButUseful: number;
            persuasive: number;
            signs: "paper" | "reference-code";
        };
    };
    /** joint: 'aligned' (the g-th sample of every agent, G joint actions per state) or 'cross' (every combination, G^agents:
     * mind the tree's size, G^(agents * turns) leaves). */
    magrpo: {
        generations: number;
        baseline: "mean" | "max" | "rloo" | "none";
        discount: number;
        klCoef: number;
        joint: "aligned" | "cross";
        /** 'state' (MAGRPO: each sibling set of joint actions, with `baseline`), 'agent-turn' (AT-GRPO: every candidate
         * of an agent at one turn of a question) or 'agent' (Dr. MAS: every candidate of an agent in a question), the
         * last two as (R - mean) / (std + 1e-6); joint 'aligned' only. */
        grouping: "state" | "agent-turn" | "agent";
    };
    collm: { gamma: number; normalize: boolean };
    /** 'alternating': each agent in turn is frozen for this many iterations. */
    alternatingPeriod: number;
    /** 'turn-based': the first `initialIterations` train turn 1, then the trained turn cycles T-1, ..., 1 every `period`. */
    turnBased: { initialIterations: number; period: number };
    /** A replay buffer of successful team trajectories (the answerers' last-turn majority right) and an offline phase
     * from it every `every` iterations: `steps` supervised steps of `batchSize` answers of the trained turns at `lr`
     * (replay.ts; MAGRPO buffers the first path of each tree). Off by default. */
    replay: { enabled: boolean; capacity: number; every: number; steps: number; batchSize: number; lr: number };
    /** The rollout/trainer mismatch correction (verl's algorithm.rollout_correction keys; lib/rl/rolloutCorrection.ts):
     * IS weights of the policy-gradient term ('none' off) and rejection criteria ('' off). The mismatch is measured
     * whenever a batch's rows carry the sampler's log-probs (MAPoRL always; MAGRPO and CoLLM only when this corrects,
     * as it costs them one more forward). */
    rolloutCorrection: CorrectionConfig;
    /** DAPO's dynamic sampling (verl's algorithm.filter_groups), MAGRPO only: a question whose joint-action tree has
     * one reward everywhere (every advantage 0) is dropped and new questions are sampled, at most `maxNumGenBatches`
     * batches per iteration. */
    filterGroups: { enable: boolean; maxNumGenBatches: number };
    /** DAPO's soft overlong punishment (verl's overlong_buffer: `buffer` tokens before sampling.maxTokens, 0 = off,
     * times `penaltyFactor`) added to each trained answer's score, and its overlong filter (`filter`: answers cut
     * at sampling.maxTokens are left out of the actor's loss). Training rollouts only, never evaluations. */
    overlong: { buffer: number; penaltyFactor: number; filter: boolean };
    /** Per-agent settings (agentSettings.ts): one object per agent (at most `agents`), each key optional, the team's
     * value where absent: lr, criticLr, klCoef, clip, entropyCoef, temperature, topP, maxTokens. */
    agentSettings: AgentSettings[];
    /** Asynchronous rollouts (MAPoRL, CoLLM, MAGRPO; lib/train/trainers/pipeline.ts): iteration i's update overlaps the
     * sampling of iterations i + 1 .. i + maxStaleness by snapshots of the agents; 0 = the on-policy loop. */
    asyncRollout: { maxStaleness: number };
    /** Rollouts sampled on a fleet (every algorithm, with model.dir; fleetRollout.ts): `serve` maporl serve processes the
     * job starts on its base (at `dtype`, `threads` each), and/or `endpoints` the user runs (base URLs of vLLM, SGLang
     * or maporl serve with runtime LoRA loading, serving the same base as `model`). The agents' adapters train in
     * process and are pushed after every update; `concurrency` requests in flight per endpoint. */
    rolloutFleet: {
        serve: number;
        endpoints: string[];
        model: string;
        threads: number;
        dtype: "float32" | "bfloat16" | "int8";
        concurrency: number;
    };
}

export const DEFAULT_CONFIG: TrainConfig = {
    task: "arith-debate",
    taskOptions: { steps: 3, maxOperand: 9, digits: 1, peerUse: 0.3, keyUse: 0.3, padUse: 0.3, hops: 1, data: "" },
    algo: "maporl",
    agents: 3,
    turns: 3,
    schedule: "joint",
    shareParameters: true,
    separateTurn0: true,
    feedback: true,
    seed: 0,
    iterations: 120,
    episodesPerIteration: 32,
    evalEpisodes: 200,
    evalEvery: 40,
    controls: true,
    device: "cpu",
    matmulPrecision: "highest",
    sampling: { temperature: 1, maxTokens: 30 },
    model: { layers: 2, heads: 4, dModel: 64, contextLength: 64, dir: "", dtype: "float32" },
    lora: { rank: 16, alpha: 32, dropout: 0 },
    critic: { layers: 1, heads: 4, dModel: 64 },
    sft: { steps: 800, batchSize: 32, lr: 2e-3 },
    lr: 1e-4,
    criticLr: 1e-3,
    maporl: {
        klCoef: 0.002,
        discount: 0.3,
        gamma: 1,
        lambda: 0.95,
        ppoEpochs: 2,
        clip: 0.2,
        valueClip: 0.2,
        bonus: { correctedAlone: 0, persuadedCorrectly: 0, wrongButUseful: 0, persuasive: 0, signs: "paper" },
    },
    magrpo: { generations: 4, baseline: "mean", discount: 0.9, klCoef: 0, joint: "aligned", grouping: "state" },
    collm: { gamma: 1, normalize: true },
    alternatingPeriod: 10,
    turnBased: { initialIterations: 20, period: 40 },
    replay: { enabled: false, capacity: 1024, every: 10, steps: 4, batchSize: 32, lr: 1e-4 },
    rolloutCorrection: {
        rolloutIs: "none",
        rolloutIsMode: "truncate",
        rolloutIsThreshold: 2,
        rolloutIsThresholdLower: 0,
        rolloutIsBatchNormalize: false,
        rolloutRs: "",
        rolloutRsThreshold: "",
    },
    filterGroups: { enable: false, maxNumGenBatches: 4 },
    overlong: { buffer: 0, penaltyFactor: 1, filter: false },
    agentSettings: [],
    asyncRollout: { maxStaleness: 0 },
    rolloutFleet: { serve: 0, endpoints: [], model: "base", threads: 1, dtype: "float32", concurrency: 64 },
};

// model.dir: a Hugging Face model directory of an architecture the engine runs (the error names the key).
// The model's positions (config.json's, capped by a sliding window as the loader caps them).
function checkModelDir(where: string, dir: string): number {
    if (!isHfModelDir(dir))
        throw new RangeError(
            `${where}: model.dir: ${dir} is not a Hugging Face model directory (expected a config.json with model_type; download one, e.g. huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR)`,
        );
    let positions = 0;
    try {
        positions = readHfConfig(dir, readJsonObject(join(dir, "config.json"), "a model directory needs config.json"))
            .engine.context;
    } catch (e) {
        throw new RangeError(`${where}: model.dir: ${(e as Error).message.replace(/^NativePolicy\.load: /, "")}`);
    }
    if (!existsSync(join(dir, "tokenizer.json")))
        throw new RangeError(
            `${where}: model.dir: ${join(dir, "tokenizer.json")} missing (the agents speak through the model's tokenizer and chat template)`,
        );
    return positions;
}

/** `--algo magrpo`'s own defaults (applied where the config leaves them unset). */
export const MAGRPO_DEFAULTS = { episodesPerIteration: 16, generations: 2 } as const;

/** Validates a (partial) config against the defaults and returns the resolved config. */
export function resolveConfig(partial: unknown, where = "config"): TrainConfig {
    // agentSettings is the one array: checked on its own (agentSettings.ts) once the agent count is known.
    const whole = partial !== null && typeof partial === "object" && !Array.isArray(partial);
    const { agentSettings, ...rest } = whole ? (partial as Record<string, unknown>) : { agentSettings: undefined };
    const { agentSettings: _, ...shape } = DEFAULT_CONFIG;
    const c = merge(where, shape, whole ? rest : (partial ?? {}), "") as TrainConfig;
    // MAGRPO answers G times per agent and state: with the shared defaults (32 questions, G = 4) an iteration took
    // 33 s on 2 cores (over an hour for 120). Its own defaults where the user left them: 16 questions, G = 2 (4.6 min).
    const asked = (partial ?? {}) as { episodesPerIteration?: unknown; magrpo?: { generations?: unknown } };
    if (c.algo === "magrpo") {
        if (asked.episodesPerIteration === undefined) c.episodesPerIteration = MAGRPO_DEFAULTS.episodesPerIteration;
        if (asked.magrpo?.generations === undefined) c.magrpo.generations = MAGRPO_DEFAULTS.generations;
    }
    // tool-lookup is a two-role workflow whose first turn is the researcher's lookup: its own defaults where the user
    // left them (2 agents, 2 turns, turn 0 trained like the others).
    const set = (partial ?? {}) as { agents?: unknown; turns?: unknown; separateTurn0?: unknown };
    if (c.task === "tool-lookup") {
        if (set.agents === undefined) c.agents = 2;
        if (set.turns === undefined) c.turns = c.taskOptions.hops + 1;
        if (set.separateTurn0 === undefined) c.separateTurn0 = false;
    }
    if (c.model.dir) {
        const positions = checkModelDir(where, c.model.dir);
        const given = (partial ?? {}) as {
            sft?: { steps?: unknown };
            model?: { contextLength?: unknown };
            sampling?: { maxTokens?: unknown };
        };
        if (given.sft?.steps === undefined) c.sft.steps = 0;
        // GSM8K: reasoning needs room (three agents' solutions are quoted at turn t >= 1).
        // (the model's own positions where it has fewer: a longer prompt is then a named error per episode)
        if (given.model?.contextLength === undefined)
            c.model.contextLength = Math.min(c.task === "gsm8k" ? 2048 : 512, positions);
        if (given.sampling?.maxTokens === undefined && c.task === "gsm8k") c.sampling.maxTokens = 320;
        if (c.task === "gsm8k")
            for (const f of ["train.jsonl", "test.jsonl"]) {
                const path = join(c.taskOptions.data || GSM8K_FIXTURE, f);
                if (!existsSync(path))
                    throw new RangeError(
                        `${where}: taskOptions.data: ${path} missing (a GSM8K directory holds train.jsonl and test.jsonl)`,
                    );
            }
        if (c.model.dtype !== "float32" && c.sft.steps > 0)
            throw new RangeError(
                `${where}: model.dtype: '${c.model.dtype}' keeps the base frozen, and the warm start (sft.steps ${c.sft.steps}) trains it: give one of them`,
            );
    } else if (c.task === "gsm8k") {
        throw new RangeError(
            `${where}: task: 'gsm8k' needs a real model (model.dir, --model DIR); the embedded character-level GPT reads the compact tasks only`,
        );
    }
    if (!c.model.dir && c.model.dtype !== "float32")
        throw new RangeError(
            `${where}: model.dtype: '${c.model.dtype}' is for a Hugging Face base (model.dir, --model DIR); the embedded GPT trains in float32`,
        );
    if (c.model.dModel % c.model.heads !== 0)
        throw new RangeError(
            `${where}: model.dModel: expected a multiple of model.heads (${c.model.heads}), got ${c.model.dModel}`,
        );
    if (c.critic.dModel % c.critic.heads !== 0)
        throw new RangeError(
            `${where}: critic.dModel: expected a multiple of critic.heads (${c.critic.heads}), got ${c.critic.dModel}`,
        );
    const fleet = c.rolloutFleet.serve > 0 || c.rolloutFleet.endpoints.length > 0;
    if (fleet && !c.model.dir)
        throw new RangeError(
            `${where}: rolloutFleet: a fleet samples LoRA adapters on a Hugging Face base; give model.dir (--model DIR), or leave rolloutFleet.serve 0 and rolloutFleet.endpoints empty`,
        );
    if (c.rolloutFleet.endpoints.length > 0 && c.sft.steps > 0)
        throw new RangeError(
            `${where}: rolloutFleet.endpoints: your servers serve model.dir, and the warm start (sft.steps ${c.sft.steps}) trains another base; use rolloutFleet.serve (its servers load the warm-started base) or sft.steps 0`,
        );
    if (fleet && !/^[\w.:/-]+$/.test(c.rolloutFleet.model))
        throw new RangeError(
            `${where}: rolloutFleet.model: expected the served base model's name, got ${JSON.stringify(c.rolloutFleet.model)}`,
        );
    if (c.schedule === "alternating" && c.shareParameters)
        throw new RangeError(
            `${where}: schedule: 'alternating' freezes one agent at a time and needs shareParameters: false`,
        );
    if (c.task === "tool-lookup" && c.agents !== 2)
        throw new RangeError(`${where}: agents: tool-lookup has two roles (researcher, solver), got ${c.agents}`);
    if (c.taskOptions.hops > 1 && c.task !== "tool-lookup")
        throw new RangeError(`${where}: taskOptions.hops: chained lookups are tool-lookup's, got task '${c.task}'`);
    if (c.task === "tool-lookup" && c.taskOptions.hops > 1 && c.turns !== c.taskOptions.hops + 1)
        throw new RangeError(
            `${where}: turns: tool-lookup with taskOptions.hops ${c.taskOptions.hops} takes hops + 1 turns (the lookups, then the answer), got ${c.turns}`,
        );
    if (c.task === "tool-lookup" && c.turns < 2)
        throw new RangeError(
            `${where}: turns: tool-lookup needs turns >= 2 (the lookup, then the answer), got ${c.turns}`,
        );
    if (c.task === "split-sum" && c.agents !== 2)
        throw new RangeError(`${where}: agents: split-sum's warm start is written for 2 agents, got ${c.agents}`);
    if (c.separateTurn0 && c.turns < 2)
        throw new RangeError(`${where}: separateTurn0: needs turns >= 2 (turn 0 is frozen), got turns ${c.turns}`);
    if (c.schedule === "turn-based" && c.turns < 2)
        throw new RangeError(`${where}: schedule: 'turn-based' needs turns >= 2, got ${c.turns}`);
    if (c.overlong.buffer > c.sampling.maxTokens)
        throw new RangeError(
            `${where}: overlong.buffer: expected at most sampling.maxTokens (${c.sampling.maxTokens}), got ${c.overlong.buffer}`,
        );
    if (c.magrpo.grouping !== "state" && c.magrpo.joint !== "aligned")
        throw new RangeError(
            `${where}: magrpo.grouping: '${c.magrpo.grouping}' needs magrpo.joint 'aligned' (cross joint actions credit sums), got 'cross'`,
        );
    if (c.filterGroups.enable && c.algo !== "magrpo")
        throw new RangeError(
            `${where}: filterGroups.enable: dynamic sampling is for algo 'magrpo' (groups), got '${c.algo}'`,
        );
    c.agentSettings = checkAgentSettings(where, agentSettings, c.agents);
    for (const [i, s] of c.agentSettings.entries())
        if (s.maxTokens !== undefined && c.overlong.buffer > s.maxTokens)
            throw new RangeError(
                `${where}: agentSettings[${i}].maxTokens: expected at least overlong.buffer (${c.overlong.buffer}), got ${s.maxTokens}`,
            );
    for (const [i, s] of c.agentSettings.entries())
        for (const k of ["loss", "lossAggregation"] as const)
            if (s[k] !== undefined && c.algo !== "maporl")
                throw new RangeError(
                    `${where}: agentSettings[${i}].${k}: '${c.algo}' takes one REINFORCE step per batch (seq-mean-token-sum); ${k} is for 'maporl''s PPO steps`,
                );
    // The correction's rejection options and thresholds (verl's strings) are checked by the kernel's option parser.
    const rc = correctionOptions(c.rolloutCorrection);
    if (rc) rolloutCorrectionParams(`${where}: rolloutCorrection`, rc);
    return c;
}

/** Parses `--key value` CLI flags of `maporl train` into a partial config (dotted keys reach nested ones). */
export function configFromFlags(flags: Record<string, string>): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [key, raw] of Object.entries(flags)) {
        const parts = key.split(".");
        let node = out;
        parts.slice(0, -1).forEach((p) => {
            node = (node[p] ??= {}) as Record<string, unknown>;
        });
        const v =
            key === "model.dir" || key === "taskOptions.data"
                ? raw // (a path, even one that reads as a number)
                : raw === "true"
                  ? true
                  : raw === "false"
                    ? false
                    : raw !== "" && !Number.isNaN(Number(raw))
                      ? Number(raw)
                      : raw;
        node[parts.at(-1)!] = v;
    }
    return out;
}

/** Deep-merges `b` over `a` (plain objects only). */
export function mergePartial(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = { ...a };
    for (const [k, v] of Object.entries(b)) {
        const prev = out[k];
        out[k] =
            prev && typeof prev === "object" && !Array.isArray(prev) && v && typeof v === "object" && !Array.isArray(v)
                ? mergePartial(prev as Record<string, unknown>, v as Record<string, unknown>)
                : v;
    }
    return out;
}
