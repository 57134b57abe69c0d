// agentGroups.ts: group-relative advantages with the multi-agent groupings of AT-GRPO and Dr. MAS, on the native group
// kernel (groupAdvantages, estimator 'grpo': (R - mean) / (std + eps), verl's unbiased std and eps 1e-6).
//   - 'agent-turn' (AT-GRPO, arXiv 2510.11062): one group per (question, agent, turn): the candidates an agent sampled
//     at one turn of one question are compared with each other only, since prompts differ by role and by turn;
//   - 'agent' (Dr. MAS, arXiv 2602.08847): one group per (question, agent): each agent's advantages are normalised
//     with its own reward statistics over its steps, not a baseline shared with agents whose rewards differ;
//   - 'question': one group per question over every step of every agent (the global baseline both papers replace).
import { groupAdvantages } from "./groupAdvantages.js";
import { describe } from "../validate.js";

export type AgentGrouping = "question" | "agent" | "agent-turn";

export interface AgentStep {
    /** Which question (prompt) the step belongs to. */
    question: number;
    agent: number;
    turn: number;
    /** The step's return (outcome reward, or its discounted return). */
    reward: number;
}

/** Group ids for `steps` under a grouping (dense, in order of first appearance). */
export function agentGroupIds(steps: readonly AgentStep[], grouping: AgentGrouping): Int32Array {
    const ids = new Map<string, number>();
    return Int32Array.from(steps, (s, i) => {
        for (const k of ["question", "agent", "turn"] as const)
            if (!Number.isInteger(s[k]) || s[k] < 0)
                throw new RangeError(
                    `agentGroupIds: steps[${i}].${k}: expected an integer >= 0, got ${describe(s[k])}`,
                );
        const key =
            grouping === "question"
                ? `${s.question}`
                : grouping === "agent"
                  ? `${s.question}/${s.agent}`
                  : `${s.question}/${s.agent}/${s.turn}`;
        let id = ids.get(key);
        if (id === undefined) ids.set(key, (id = ids.size));
        return id;
    });
}

/** (R - mean) / (std + eps) per step, the statistics over the step's group. */
export function agentGroupAdvantages(
    steps: readonly AgentStep[],
    grouping: AgentGrouping,
    options: { eps?: number; std?: "unbiased" | "biased" } = {},
): Float32Array {
    if (!["question", "agent", "agent-turn"].includes(grouping))
        throw new RangeError(
            `agentGroupAdvantages: grouping: expected 'question', 'agent' or 'agent-turn', got ${describe(grouping)}`,
        );
    const scores = Float32Array.from(steps, (s) => s.reward);
    return groupAdvantages(
        { scores, groups: agentGroupIds(steps, grouping) },
        {
            estimator: "grpo",
            ...(options.eps !== undefined ? { eps: options.eps } : {}),
            ...(options.std ? { std: options.std } : {}),
        },
    );
}
