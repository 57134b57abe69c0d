// agentGroups.test.ts: AT-GRPO's (question, agent, turn) groups and Dr. MAS's per-agent normalisation against
// hand-computed values ((R - mean) / (unbiased std + 1e-6), worked out below), and in a MAGRPO iteration.
import { describe, expect, it } from "vitest";

import { agentGroupAdvantages, agentGroupIds, type AgentStep } from "../../lib/rl/agentGroups.js";
import { resolveConfig } from "../../lib/train/job/config.js";
import { runIteration, stageModels } from "../../lib/train/trainers/stage.js";
import { TINY_TEAM, tinyTeam } from "../helpers/team.js";

const S = (question: number, agent: number, turn: number, reward: number): AgentStep => ({
    question,
    agent,
    turn,
    reward,
});
const steps = [
    S(0, 0, 0, 1),
    S(0, 0, 0, 0),
    S(0, 0, 1, 1),
    S(0, 0, 1, 1),
    S(0, 0, 1, 0),
    S(0, 1, 0, 0.5),
    S(0, 1, 0, 0.5),
    S(0, 1, 1, 2),
    S(0, 1, 1, 0),
    S(1, 0, 0, 3),
    S(1, 0, 0, 1),
];

describe("multi-agent groupings", () => {
    it("AT-GRPO: one group per (question, agent, turn)", () => {
        // [1, 0]: mean 0.5, std sqrt(0.5); [1, 1, 0]: mean 2/3, std sqrt(1/3); [0.5, 0.5]: std 0 -> 0; [2, 0] and
        // [3, 1]: +-1/sqrt(2)
        const r2 = Math.SQRT1_2,
            s3 = Math.sqrt(1 / 3);
        const want = [r2, -r2, 1 / 3 / s3, 1 / 3 / s3, -2 / 3 / s3, 0, 0, r2, -r2, r2, -r2];
        const got = agentGroupAdvantages(steps, "agent-turn");
        got.forEach((v, i) => expect(v, `step ${i}`).toBeCloseTo(want[i], 5));
        expect(Array.from(agentGroupIds(steps, "agent-turn"))).toEqual([0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4]);
    });

    it("Dr. MAS: one group per (question, agent), each agent normalised by its own statistics", () => {
        // agent 0 in question 0: [1, 0, 1, 1, 0], mean 0.6, unbiased var 0.3; agent 1: [0.5, 0.5, 2, 0], mean 0.75,
        // unbiased var 0.75
        const s0 = Math.sqrt(0.3),
            s1 = Math.sqrt(0.75),
            r2 = Math.SQRT1_2;
        const want = [
            0.4 / s0,
            -0.6 / s0,
            0.4 / s0,
            0.4 / s0,
            -0.6 / s0,
            -0.25 / s1,
            -0.25 / s1,
            1.25 / s1,
            -0.75 / s1,
            r2,
            -r2,
        ];
        const got = agentGroupAdvantages(steps, "agent");
        got.forEach((v, i) => expect(v, `step ${i}`).toBeCloseTo(want[i], 5));
    });

    it("the global baseline: one group per question", () => {
        const q0 = steps.filter((s) => s.question === 0).map((s) => s.reward);
        const mean = q0.reduce((a, b) => a + b, 0) / q0.length;
        const std = Math.sqrt(q0.reduce((a, b) => a + (b - mean) ** 2, 0) / (q0.length - 1));
        const got = agentGroupAdvantages(steps, "question");
        q0.forEach((r, i) => expect(got[i]).toBeCloseTo((r - mean) / (std + 1e-6), 5));
    });

    it("rejects a bad grouping or step, naming it", () => {
        expect(() => agentGroupAdvantages(steps, "turn" as never)).toThrow(
            /grouping: expected 'question', 'agent' or 'agent-turn'/,
        );
        expect(() => agentGroupIds([S(0, -1, 0, 1)], "agent")).toThrow(/steps\[0\]\.agent: expected an integer >= 0/);
        expect(() => resolveConfig({ algo: "magrpo", magrpo: { joint: "cross", grouping: "agent" } })).toThrow(
            /magrpo.grouping: 'agent' needs magrpo.joint 'aligned'/,
        );
    });

    it("MAGRPO trains with each grouping; the advantages, and so the updates, differ", async () => {
        const run = async (grouping: "state" | "agent-turn" | "agent") => {
            const { cfg, task, base } = await tinyTeam({
                algo: "magrpo",
                magrpo: { ...TINY_TEAM.magrpo, grouping },
            });
            const m = await stageModels(cfg, "independent", base);
            const r = await runIteration(cfg, task, task.generate(3, 42), "independent", m, base, 0, 42);
            for (const v of Object.values(r.stats[0])) expect(Number.isFinite(v)).toBe(true);
            return r.stats[0].policyLoss;
        };
        const [a, b, c] = [await run("state"), await run("agent-turn"), await run("agent")];
        expect(new Set([a, b, c]).size).toBe(3);
    });
});
