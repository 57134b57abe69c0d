// trainers.test.ts: the pieces of the co-training loop, each against an independent statement of what it must do:
//   - the protocol: prompts, answer extraction, the packing of answers into next-token batches;
//   - MAPoRL's turn reward equals Definition 1 recomputed in float64 here, plus the bonuses;
//   - schedules: which agents and turns train at which iteration;
//   - one iteration of every algorithm updates exactly the models it should (frozen partners and the reference
//     stay bit-identical) and reports finite statistics.
import { describe, expect, it } from "vitest";

import { fnVerifier, NativePolicy } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { crossCompletions } from "../../lib/train/trainers/magrpo.js";
import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { makeTask } from "../../lib/train/job/job.js";
import { maporlTurnRewards } from "../../lib/train/trainers/maporl.js";
import {
    extractAnswer,
    packRows,
    protocolSolution,
    turnPrompt,
    type TeamRollout,
} from "../../lib/train/trainers/rollout.js";
import { runIteration, scheduled, stageModels } from "../../lib/train/trainers/stage.js";

const params = (m: NativePolicy) => {
    const p = new Float32Array(m.parameterCount);
    native.gptGet(m.h(), { which: 0, out: p });
    return p;
};

describe("the debate protocol of the embedded policy", () => {
    it("prompts carry every agent's previous answer, own first, as 3 digits; empty slots at turn 0", () => {
        expect(turnPrompt("2+3*4", 0, 3, null)).toBe("2+3*4|???,???,???");
        expect(turnPrompt("2+3*4", 1, 3, ["20", "7", null])).toBe("2+3*4|007,020,???");
        expect(turnPrompt("x", 2, 3, ["1234", "-1", "5"])).toBe("x|005,???,???"); // too wide or negative: no answer
        // With the verifier's feedback: "+" for a score >= 0.5, "-" below, "?" in an empty slot.
        expect(turnPrompt("2+3*4", 0, 3, null, "empty")).toBe("2+3*4|????,????,????");
        expect(turnPrompt("2+3*4", 2, 3, ["20", "7", null], [1, 0, 0])).toBe("2+3*4|???-,020+,007-");
        expect(protocolSolution("2+3=5,5*4=20;20")).toBe("2+3=5,5*4=20;020");
        expect(extractAnswer("2+3=5,5*4=20;020")).toBe("020");
        expect(extractAnswer("no answer")).toBeNull();
        // Only the protocol's format is an answer: noise holding the reference's digits is not paid.
        for (const noise of ["2+3=5", "x2q", "20", "0;2x", "a;20b", ";;2 7", "020;"])
            expect(extractAnswer(noise)).toBeNull();
        expect(extractAnswer("junk;7")).toBe("7");
    });

    it("packRows: the mask covers exactly the positions that predict the answer and its EOS", () => {
        const b = packRows(
            [
                { prompt: [1, 5, 6], completion: [7, 8], stopped: true },
                { prompt: [1, 5], completion: [9], stopped: false },
            ],
            2,
            64,
        );
        expect(b.shape).toEqual([2, 6]);
        expect(Array.from(b.tokens)).toEqual([1, 5, 6, 7, 8, 2, 1, 5, 9, 0, 0, 0]);
        expect(Array.from(b.targets.subarray(0, 5))).toEqual([5, 6, 7, 8, 2]);
        expect(Array.from(b.mask)).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0]);
        expect(Array.from(b.last)).toEqual([4, 1]);
    });
});

describe("MAPoRL's turn reward", () => {
    it("equals Definition 1 (discounted team-mean future scores, normalised) recomputed in float64, plus the bonuses", () => {
        const E = 4,
            T = 3,
            A = 3,
            d = 0.3;
        let s = 7;
        const rnd = () => (s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32;
        const entries = Array.from({ length: E }, () =>
            Array.from({ length: T }, () =>
                Array.from({ length: A }, () => {
                    const correct = rnd() < 0.5;
                    return {
                        prompt: [],
                        completion: [],
                        stopped: true,
                        text: "",
                        extracted: null,
                        correct,
                        score: correct ? 1 : 0,
                    };
                }),
            ),
        );
        const r: TeamRollout = { items: [], entries, agents: A, turns: T };
        r.items = Array.from({ length: E }, (_, i) => ({ id: String(i), question: "", views: [], reference: "0" }));
        const R = maporlTurnRewards(r, d, {});
        for (let e = 0; e < E; e++)
            for (let t = 0; t < T; t++)
                for (let a = 0; a < A; a++) {
                    let num = entries[e][t][a].score,
                        den = 1;
                    for (let u = t + 1; u < T; u++) {
                        const w = d ** (u - t);
                        num += (w * entries[e][u].reduce((x, y) => x + y.score, 0)) / A;
                        den += w;
                    }
                    expect(R[(e * T + t) * A + a]).toBeCloseTo(num / den, 6);
                }
        // A wrong -> right change while the others were right earns persuadedCorrectly at that turn.
        const two: TeamRollout = {
            ...r,
            entries: [
                [0, 1].map((t) =>
                    [0, 1, 2].map((a) => ({
                        prompt: [],
                        completion: [],
                        stopped: true,
                        text: "",
                        extracted: null,
                        correct: a === 0 ? t === 1 : true,
                        score: 0,
                    })),
                ),
            ],
            turns: 2,
            items: [r.items[0]],
        };
        const withBonus = maporlTurnRewards(two, d, { persuadedCorrectly: 2 }),
            plain = maporlTurnRewards(two, d, {});
        expect(withBonus[1 * 3 + 0] - plain[1 * 3 + 0]).toBeCloseTo(2, 6);
        expect(withBonus[0] - plain[0]).toBe(0);
    });
});

describe("schedules", () => {
    it("alternating freezes one agent per period; turn-based trains turn 1 first, then cycles T-1 .. 1", async () => {
        const cfg = resolveConfig({
            agents: 3,
            turns: 3,
            schedule: "alternating",
            shareParameters: false,
            alternatingPeriod: 2,
            turnBased: { initialIterations: 3, period: 2 },
            model: { layers: 1, heads: 2, dModel: 16, contextLength: 32 },
            critic: { layers: 1, heads: 2, dModel: 16 },
        });
        const base = await NativePolicy.create({ contextLength: 32, layers: 1, heads: 2, dModel: 16 });
        const m = await stageModels(cfg, "alternating", base);
        expect(new Set(m.trainable).size).toBe(3); // a model per agent
        const frozenAt = (it: number) => scheduled(cfg, "alternating", m, it).trainable.findIndex((x) => x === null);
        expect([0, 1, 2, 3, 4, 5, 6].map(frozenAt)).toEqual([0, 0, 1, 1, 2, 2, 0]);
        const turnAt = (it: number) => [0, 1, 2].filter(scheduled(cfg, "turn-based", m, it).trainTurn);
        expect([0, 2, 3, 4, 5, 6, 7].map(turnAt)).toEqual([[1], [1], [2], [2], [1], [1], [2]]);
        const ind = await stageModels(cfg, "independent", base);
        expect(ind.trainable.map((x) => x !== null)).toEqual([true, false, false]);
        expect(ind.agents[1]).toBe(base);
        const shared = await stageModels(resolveConfig({ model: cfg.model, critic: cfg.critic }), "joint", base);
        expect(new Set(shared.trainable).size).toBe(1); // parameter sharing: one model for the team
        expect(new Set(shared.critics).size).toBe(1);
    });
});

describe("one iteration of every algorithm", () => {
    for (const [algo, joint] of [
        ["maporl", "aligned"],
        ["magrpo", "aligned"],
        ["magrpo", "cross"],
        ["collm-cc", "aligned"],
        ["collm-dc", "aligned"],
    ] as [Algo, "aligned" | "cross"][]) {
        it(`${algo}${algo === "magrpo" ? ` (${joint})` : ""}, independent schedule: agent 0 and its critic change; the frozen partners and the reference do not`, async () => {
            const cfg = resolveConfig({
                algo,
                agents: 3,
                turns: 2,
                episodesPerIteration: 3,
                magrpo: { generations: 2, baseline: "mean", discount: 0.9, klCoef: 0.01, joint },
                model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
                critic: { layers: 1, heads: 2, dModel: 32 },
                lr: 1e-2,
                criticLr: 1e-2,
            });
            // An untrained model is never right, which gives every answer the same reward and zero advantages; a
            // verifier that scores the answer's length parity gives the update something to follow.
            const task = { ...makeTask(cfg), verifier: fnVerifier("parity", ({ response }) => response.length % 2) };
            const base = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 32, seed: 3 });
            const before = params(base);
            const m = await stageModels(cfg, "independent", base);
            const actor = m.trainable[0]!,
                a0 = params(actor);
            expect(Array.from(a0)).toEqual(Array.from(before)); // cloned from the base
            const critic = m.critics[0],
                c0 = critic ? params(critic) : null;
            const r = await runIteration(cfg, task, task.generate(3, 42), "independent", m, base, 0, 42);
            expect(Array.from(params(base))).toEqual(Array.from(before));
            expect(params(actor).some((x, i) => x !== a0[i])).toBe(true);
            if (critic) expect(params(critic).some((x, i) => x !== c0![i])).toBe(true);
            else expect(algo).toBe("magrpo");
            expect(r.stats.length).toBe(3);
            for (const s of r.stats) for (const v of Object.values(s)) expect(Number.isFinite(v)).toBe(true);
            expect(r.stats[0].updates).toBeGreaterThan(0);
            expect(r.stats[1].updates).toBe(0);
            expect(r.train.majorityAccuracy.length).toBe(2);
            expect(r.trace.turns.length).toBe(2);
        });
    }
});

describe("MAGRPO cross joint actions", () => {
    it("each completion gets the sum of the returns of the joint actions holding it, baselined over the agent's own G", () => {
        // One state, 2 agents, G = 2, cross: joint actions (0,0) (0,1) (1,0) (1,1) with returns 1, 2, 4, 8 (leaves).
        const gen = (text: string) => ({
            text,
            finishReason: "stop",
            usage: { promptTokens: 1, completionTokens: 1 },
            latencyMs: 0,
        });
        const samples = [
            [0, 0],
            [0, 1],
            [1, 0],
            [1, 1],
        ];
        const tree = {
            actions: samples.map((sample, n) => ({
                parent: -1,
                depth: 0,
                sample,
                generations: sample.map((k, a) => gen(`a${a}k${k}`)),
                prompts: ["p0", "p1"],
                reward: [1, 2, 4, 8][n],
            })),
            parent: new Int32Array(4).fill(-1),
            rewards: Float32Array.from([1, 2, 4, 8]),
            leaves: 4,
            terminated: 0,
        };
        const returns = Float32Array.from([1, 2, 4, 8]);
        const got = crossCompletions(tree, returns, 2, 2, "mean");
        // agent 0: k0 holds 1+2 = 3, k1 holds 4+8 = 12 (mean 7.5); agent 1: k0 holds 1+4 = 5, k1 holds 2+8 = 10 (mean 7.5)
        expect(got.map((c) => [c.agent, tree.actions[c.action].generations[c.agent].text, c.adv])).toEqual([
            [0, "a0k0", -4.5],
            [0, "a0k1", 4.5],
            [1, "a1k0", -2.5],
            [1, "a1k1", 2.5],
        ]);
        const none = crossCompletions(tree, returns, 2, 2, "none");
        expect(none.map((c) => c.adv)).toEqual([3, 12, 5, 10]);
        const max = crossCompletions(tree, returns, 2, 2, "max");
        expect(max.map((c) => c.adv)).toEqual([-9, 0, -5, 0]);
    });
});
