// agentSettings.ts: per-agent settings of a training job (config `agentSettings`: one object per agent, each key
// optional, the team's value where absent), as Dr. MAS (per-agent learning rates) and verl's per-role configs let
// agents differ: the actor's and critic's learning rates, the KL coefficient, the clip range, the entropy
// coefficient, and the sampling (temperature, top-p, max tokens).
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
}

/** Every setting of one agent, resolved. */
export type ResolvedAgent = Required<AgentSettings>;

const RANGES: Record<keyof AgentSettings, { min: number; max: number; int?: boolean }> = {
    lr: { min: 0, max: 1 },
    criticLr: { min: 0, max: 1 },
    klCoef: { min: 0, max: 100 },
    clip: { min: 0, max: 10 },
    entropyCoef: { min: 0, max: 10 },
    temperature: { min: 0, max: 10 },
    topP: { min: 1e-6, max: 1 },
    maxTokens: { min: 1, max: 4096, int: true },
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
            if (typeof v !== "number" || !(v >= r.min && v <= r.max) || (r.int && !Number.isInteger(v)))
                throw new RangeError(
                    `${where}: agentSettings[${i}].${k}: expected ${r.int ? "an integer" : "a number"} in [${r.min}, ${r.max}], got ${typeof v === "number" ? String(v) : JSON.stringify(v)}`,
                );
            out[k as keyof AgentSettings] = v;
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
    };
}

/** The sampling of agents 0 .. n-1 under their settings (what rollouts and JointRollout take per agent). */
export function agentSampling(
    cfg: TeamSettings,
    n: number,
): { temperature: number; topP: number; maxTokens: number }[] {
    return Array.from({ length: n }, (_, a) => {
        const s = agentSetting(cfg, a);
        return { temperature: s.temperature, topP: s.topP, maxTokens: s.maxTokens };
    });
}
