// agentSettings.ts: per-agent settings of a training job (config `agentSettings`: one object per agent, each key
// optional, the team's value where absent), as Dr. MAS (per-agent learning rates) and verl's per-role configs let
// agents differ: the actor's and critic's learning rates, the KL coefficient, the clip range, the entropy
// coefficient, the policy loss and its aggregation (MAPoRL), the mini-batch size, and the sampling (temperature, top-p,
// max tokens, stop strings).
import {
    LOSS_AGGREGATIONS,
    POLICY_LOSS_TYPES,
    type LossAggregation,
    type PolicyLossType,
} from "../../rl/policyLoss.js";
import { editDistance } from "../../validate.js";

export interface AgentSettings {
    lr?: number;
    criticLr?: number;
    /** MAPoRL: the reward's KL to the reference; MAGRPO: the loss's. */
    klCoef?: number;
    /** MAPoRL's PPO clip range. */
    clip?: number;
    /** loss -= entropyCoef * mean entropy. */
    entropyCoef?: number;
    temperature?: number;
    topP?: number;
    maxTokens?: number;
    /** Strings that end the agent's answers (OpenAI's / vLLM's `stop`): the answer keeps every sampled token, the
     * string's included, and nothing is appended (an answer a stop token ends gets the trainer's eos). At most 4. */
    stop?: string[];
    /** MAPoRL's policy loss for this agent's PPO steps (policyLoss's `type`: 'ppo', 'gspo', 'cispo', 'reinforce'),
     * and its aggregation (verl's loss_agg_mode). MAGRPO and CoLLM take one REINFORCE step and refuse another. */
    loss?: PolicyLossType;
    lossAggregation?: LossAggregation;
    /** Rows per optimizer step (verl's ppo_mini_batch_size): each (turn, agent) batch of MAPoRL, each agent's batch of
     * MAGRPO and CoLLM is split into steps of this many answers, in order (advantages are computed on the whole batch
     * first). 0 = the whole batch in one step. */
    miniBatchSize?: number;
}

/** Every setting of one agent, resolved. */
export type ResolvedAgent = Required<AgentSettings>;

// The settings that are not numbers: a choice, or a short list of strings.
const CHOICES: Partial<Record<keyof AgentSettings, readonly string[]>> = {
    loss: POLICY_LOSS_TYPES,
    lossAggregation: LOSS_AGGREGATIONS,
};
const MAX_STOP = 4,
    MAX_STOP_CHARS = 64;

const RANGES: Record<keyof AgentSettings, { min: number; max: number; int?: boolean }> = {
    lr: { min: 0, max: 1 },
    criticLr: { min: 0, max: 1 },
    klCoef: { min: 0, max: 100 },
    clip: { min: 0, max: 10 },
    entropyCoef: { min: 0, max: 10 },
    temperature: { min: 0, max: 10 },
    topP: { min: 1e-6, max: 1 },
    maxTokens: { min: 1, max: 4096, int: true },
    miniBatchSize: { min: 0, max: 65536, int: true },
    stop: { min: 0, max: 0 },
    loss: { min: 0, max: 0 },
    lossAggregation: { min: 0, max: 0 },
};
export const AGENT_SETTING_KEYS = Object.keys(RANGES) as (keyof AgentSettings)[];

/** Checks `x` (the config's agentSettings) for `agents` agents; errors name agentSettings[i].key. */
export function checkAgentSettings(where: string, x: unknown, agents: number): AgentSettings[] {
    if (x === undefined) return [];
    if (!Array.isArray(x))
        throw new TypeError(`${where}: agentSettings: expected an array of objects (one per agent), got ${typeof x}`);
    if (x.length > agents)
        throw new RangeError(
            `${where}: agentSettings: expected at most one entry per agent (${agents}), got ${x.length}`,
        );
    return x.map((e: unknown, i) => {
        if (e === null || typeof e !== "object" || Array.isArray(e))
            throw new TypeError(
                `${where}: agentSettings[${i}]: expected an object, got ${e === null ? "null" : typeof e}`,
            );
        const out: AgentSettings = {};
        for (const [k, v] of Object.entries(e as Record<string, unknown>)) {
            const r = RANGES[k as keyof AgentSettings];
            if (!r) {
                const best = AGENT_SETTING_KEYS.map((c) => [c, editDistance(k, c)] as const).sort(
                    (p, q) => p[1] - q[1],
                )[0];
                throw new RangeError(
                    `${where}: agentSettings[${i}].${k}: unknown key${best && best[1] <= 3 ? ` (did you mean ${best[0]}?)` : ""}; known: ${AGENT_SETTING_KEYS.join(", ")}`,
                );
            }
            const at = `${where}: agentSettings[${i}].${k}`;
            const choices = CHOICES[k as keyof AgentSettings];
            if (choices) {
                if (typeof v !== "string" || !choices.includes(v))
                    throw new RangeError(
                        `${at}: expected one of ${choices.map((c) => `'${c}'`).join(", ")}, got ${JSON.stringify(v)}`,
                    );
                (out as Record<string, unknown>)[k] = v;
                continue;
            }
            if (k === "stop") {
                const ok = (x: unknown) => typeof x === "string" && x.length > 0 && x.length <= MAX_STOP_CHARS;
                if (!Array.isArray(v) || v.length > MAX_STOP || !v.every(ok))
                    throw new RangeError(
                        `${at}: expected at most ${MAX_STOP} non-empty strings of at most ${MAX_STOP_CHARS} characters, got ${JSON.stringify(v)?.slice(0, 200)}`,
                    );
                out.stop = [...(v as string[])];
                continue;
            }
            if (typeof v !== "number" || !(v >= r.min && v <= r.max) || (r.int && !Number.isInteger(v)))
                throw new RangeError(
                    `${at}: expected ${r.int ? "an integer" : "a number"} in [${r.min}, ${r.max}], got ${typeof v === "number" ? String(v) : JSON.stringify(v)}`,
                );
            (out as Record<string, unknown>)[k] = v;
        }
        return out;
    });
}

/** The team's values that an agent's settings override. */
export interface TeamSettings {
    algo: string;
    lr: number;
    criticLr: number;
    sampling: { temperature: number; maxTokens: number };
    maporl: { klCoef: number; clip: number };
    magrpo: { klCoef: number };
    agentSettings: AgentSettings[];
}

/** Agent a's settings: its own where given, else the team's (entropyCoef 0 and topP 1 when neither says). */
export function agentSetting(cfg: TeamSettings, a: number): ResolvedAgent {
    const s = cfg.agentSettings[a] ?? {};
    return {
        lr: s.lr ?? cfg.lr,
        criticLr: s.criticLr ?? cfg.criticLr,
        klCoef: s.klCoef ?? (cfg.algo === "magrpo" ? cfg.magrpo.klCoef : cfg.maporl.klCoef),
        clip: s.clip ?? cfg.maporl.clip,
        entropyCoef: s.entropyCoef ?? 0,
        temperature: s.temperature ?? cfg.sampling.temperature,
        topP: s.topP ?? 1,
        maxTokens: s.maxTokens ?? cfg.sampling.maxTokens,
        stop: s.stop ?? [],
        loss: s.loss ?? (cfg.algo === "maporl" ? "ppo" : "reinforce"),
        lossAggregation: s.lossAggregation ?? (cfg.algo === "maporl" ? "token-mean" : "seq-mean-token-sum"),
        miniBatchSize: s.miniBatchSize ?? 0,
    };
}

/** The sampling of agents 0 .. n-1 under their settings (what rollouts and JointRollout take per agent). */
export function agentSampling(
    cfg: TeamSettings,
    n: number,
): { temperature: number; topP: number; maxTokens: number; stop?: string[] }[] {
    return Array.from({ length: n }, (_, a) => {
        const s = agentSetting(cfg, a);
        return {
            temperature: s.temperature,
            topP: s.topP,
            maxTokens: s.maxTokens,
            ...(s.stop.length ? { stop: s.stop } : {}),
        };
    });
}

/** Splits `n` rows into consecutive mini-batches of `size` rows (0: one batch): [start, end) pairs. */
export function miniBatches(n: number, size: number): [number, number][] {
    if (size <= 0 || size >= n) return [[0, n]];
    const out: [number, number][] = [];
    for (let r = 0; r < n; r += size) out.push([r, Math.min(n, r + size)]);
    return out;
}
