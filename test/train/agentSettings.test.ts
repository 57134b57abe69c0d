// agentSettings.test.ts: per-agent settings. The config checks every entry and names agentSettings[i].key; in an
// iteration each agent samples at its own temperature (a greedy agent answers the same whatever the seed, a hot one
// does not; the trace records both temperatures) and trains at its own learning rate (lr 0 leaves its model
// untouched while its partner's changes), and the metrics report both.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { NativePolicy, trainJob } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { runIteration, stageModels } from "../../lib/train/trainers/stage.js";
import { tinyTeam } from "../helpers/team.js";

const params = (m: NativePolicy) => {
    const p = new Float32Array(m.parameterCount);
    native.gptGet(m.h(), { which: 0, out: p });
    return p;
};

describe("agentSettings in the config", () => {
    it("is checked entry by entry, naming agentSettings[i].key", () => {
        expect(resolveConfig({ agentSettings: [{ lr: 0.01 }, { temperature: 0.5 }] }).agentSettings).toEqual([
            { lr: 0.01 },
            { temperature: 0.5 },
        ]);
        const bad: [unknown, RegExp][] = [
            [{ agentSettings: [{ lrr: 0.1 }] }, /agentSettings\[0\]\.lrr: unknown key \(did you mean lr\?\)/],
            [
                { agentSettings: [{}, { temperature: -1 }] },
                /agentSettings\[1\]\.temperature: expected a number in \[0, 10\]/,
            ],
            [{ agentSettings: [{ maxTokens: 2.5 }] }, /agentSettings\[0\]\.maxTokens: expected an integer/],
            [{ agentSettings: [{ lr: "0.1" }] }, /agentSettings\[0\]\.lr: expected a number/],
            [{ agentSettings: [{}, {}, {}, {}] }, /at most one entry per agent \(3\), got 4/],
            [{ agentSettings: { lr: 1 } }, /agentSettings: expected an array/],
            [{ agentSettings: [null] }, /agentSettings\[0\]: expected an object/],
            [
                { overlong: { buffer: 10 }, agentSettings: [{ maxTokens: 5 }] },
                /agentSettings\[0\]\.maxTokens: expected at least overlong.buffer \(10\)/,
            ],
        ];
        for (const [c, re] of bad) expect(() => resolveConfig(c), JSON.stringify(c)).toThrow(re);
    });
});

async function iterate(algo: Algo, seed: number) {
    const { cfg, task, base } = await tinyTeam({
        algo,
        shareParameters: false,
        separateTurn0: false,
        sampling: { temperature: 1, maxTokens: 10 },
        agentSettings: [
            { lr: 2e-2, temperature: 1.5 },
            { lr: 0, temperature: 0 },
        ],
    });
    const m = await stageModels(cfg, "joint", base);
    const before = m.agents.map(params);
    const r = await runIteration(cfg, task, task.generate(3, 42), "joint", m, base, 0, seed);
    return { r, changed: m.agents.map((x, a) => params(x).some((v, i) => v !== before[a][i])) };
}

describe("per-agent settings in an iteration", () => {
    for (const algo of ["maporl", "magrpo", "collm-dc"] as Algo[])
        it(`${algo}: each agent samples at its own temperature and trains at its own learning rate`, async () => {
            const a = await iterate(algo, 42),
                b = await iterate(algo, 4242);
            // lr 0: agent 1's model is untouched; agent 0's moves
            expect(a.changed).toEqual([true, false]);
            expect(a.r.stats[0].lr).toBe(2e-2);
            expect(a.r.stats[0].temperature).toBe(1.5);
            expect(a.r.stats[1].lr).toBe(0);
            expect(a.r.stats[1].temperature).toBe(0);
            // temperature 0 is greedy: agent 1's first answers do not depend on the seed; agent 0's do
            const first = (x: typeof a, agent: number) => x.r.rollout!.entries.map((ep) => ep[0][agent].text);
            expect(first(a, 1)).toEqual(first(b, 1));
            expect(first(a, 0)).not.toEqual(first(b, 0));
            if (algo !== "magrpo") {
                // the trace records the temperature each answer was sampled at
                expect(a.r.trace.turns[0].map((e) => e.temperature)).toEqual([1.5, 0]);
            }
        });
});

describe("per-agent loss, mini-batches and stop strings", () => {
    it("the config checks them and names the key", () => {
        const c = resolveConfig({
            agentSettings: [{ loss: "gspo", lossAggregation: "seq-mean-token-mean", miniBatchSize: 2, stop: [";"] }],
        });
        expect(c.agentSettings[0]).toEqual({
            loss: "gspo",
            lossAggregation: "seq-mean-token-mean",
            miniBatchSize: 2,
            stop: [";"],
        });
        const bad: [Record<string, unknown>, RegExp][] = [
            [{ agentSettings: [{ loss: "dpo" }] }, /agentSettings\[0\]\.loss: expected one of 'ppo', 'gspo'/],
            [{ agentSettings: [{ lossAggregation: 1 }] }, /agentSettings\[0\]\.lossAggregation: expected one of/],
            [{ agentSettings: [{ stop: ";" }] }, /agentSettings\[0\]\.stop: expected at most 4 non-empty strings/],
            [{ agentSettings: [{ stop: ["a", "b", "c", "d", "e"] }] }, /agentSettings\[0\]\.stop: expected at most 4/],
            [{ agentSettings: [{ stop: [""] }] }, /agentSettings\[0\]\.stop/],
            [{ agentSettings: [{ miniBatchSize: -1 }] }, /agentSettings\[0\]\.miniBatchSize: expected an integer/],
            [
                { algo: "magrpo", agentSettings: [{}, { loss: "ppo" }] },
                /agentSettings\[1\]\.loss: 'magrpo' takes one REINFORCE step/,
            ],
        ];
        for (const [x, re] of bad) expect(() => resolveConfig(x), JSON.stringify(x)).toThrow(re);
    });

    // One MAPoRL iteration of separate models; agent 1's settings vary, agent 0's do not.
    async function maporlWith(agent1: Record<string, unknown>) {
        const { cfg, task, base } = await tinyTeam({
            algo: "maporl",
            shareParameters: false,
            separateTurn0: false,
            episodesPerIteration: 5,
            sampling: { temperature: 1, maxTokens: 10 },
            agentSettings: [{}, agent1],
        });
        const m = await stageModels(cfg, "joint", base);
        const r = await runIteration(cfg, task, task.generate(5, 42), "joint", m, base, 0, 7);
        return { r, params: m.agents.map(params) };
    }

    it("maporl: miniBatchSize splits each (turn, agent) batch into steps; one batch-sized mini-batch is the default", async () => {
        const whole = await maporlWith({}),
            same = await maporlWith({ miniBatchSize: 5 }),
            split = await maporlWith({ miniBatchSize: 2 });
        // 2 turns x 2 PPO epochs: 4 batches of 5 answers; 3 steps each at miniBatchSize 2
        expect(whole.r.stats.map((s) => [s.updates, s.steps])).toEqual([
            [4, 4],
            [4, 4],
        ]);
        expect(split.r.stats.map((s) => [s.updates, s.steps])).toEqual([
            [4, 4],
            [4, 12],
        ]);
        expect(same.params).toEqual(whole.params); // bit for bit
        expect(split.params[0]).toEqual(whole.params[0]); // agent 0's model: its own rows, its own steps
        expect(split.params[1]).not.toEqual(whole.params[1]);
    });

    it("maporl: an agent's loss type and aggregation reach its steps only", async () => {
        const ppo = await maporlWith({}),
            cispo = await maporlWith({ loss: "cispo", lossAggregation: "seq-mean-token-sum" });
        expect(cispo.params[0]).toEqual(ppo.params[0]);
        expect(cispo.params[1]).not.toEqual(ppo.params[1]);
        expect(cispo.r.stats[1].policyLoss).not.toBe(ppo.r.stats[1].policyLoss);
    });

    it("a stop string ends an agent's answers: every sampled token kept, no eos appended, log-probs aligned", async () => {
        const { r } = await maporlWith({ stop: ["1", "2", "3", "4"], maxTokens: 24 });
        let cut = 0;
        for (const ep of r.rollout!.entries)
            for (const turn of ep) {
                const e = turn[1];
                expect(e.text).not.toMatch(/[123]/);
                expect(e.logprobs!.length).toBe(e.completion.length + (e.stopped ? 1 : 0));
                if (!e.stopped && !e.truncated) cut++;
            }
        expect(cut).toBeGreaterThan(0); // some answers were ended by a string (random characters: about a third of answers)
        // the rows kept their sampler's log-probs, so the mismatch was measured: the sampler is the trainer
        expect(r.stats[1].mismatchK3!).toBeLessThan(1e-5);
    });
});

describe("mini-batches in MAGRPO and CoLLM", () => {
    for (const algo of ["magrpo", "collm-dc"] as Algo[])
        it(`${algo}: an agent's miniBatchSize splits its batch into steps, and changes only its own model`, async () => {
            const run = async (mb: number) => {
                const { cfg, task, base } = await tinyTeam({
                    algo,
                    shareParameters: false,
                    separateTurn0: false,
                    agentSettings: [{}, { miniBatchSize: mb }],
                });
                const m = await stageModels(cfg, "joint", base);
                const r = await runIteration(cfg, task, task.generate(3, 42), "joint", m, base, 0, 5);
                return { r, params: m.agents.map(params) };
            };
            const whole = await run(0),
                split = await run(1);
            expect(split.params[0]).toEqual(whole.params[0]);
            expect(split.params[1]).not.toEqual(whole.params[1]);
            if (algo === "collm-dc") {
                // 3 questions x 2 turns = 6 answers of agent 1: 6 steps of one
                expect(whole.r.stats.map((s) => s.updates)).toEqual([1, 1]);
                expect(split.r.stats.map((s) => s.updates)).toEqual([1, 6]);
            } else expect(split.r.stats[1].updates).toBeGreaterThan(whole.r.stats[1].updates);
        });
});

describe("agentSettings in a job's evaluation", () => {
    it("the held-out evaluation samples each agent with its own settings (maxTokens here), as training does", async () => {
        const work = mkdtempSync(join(tmpdir(), "maporl-agent-eval-"));
        try {
            const run = async (name: string, extra: Record<string, unknown>) => {
                const out = join(work, name);
                await trainJob({
                    out,
                    config: {
                        iterations: 1,
                        episodesPerIteration: 3,
                        evalEpisodes: 6,
                        controls: false,
                        sft: { steps: 2, batchSize: 4 },
                        model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
                        critic: { layers: 1, heads: 2, dModel: 32 },
                        sampling: { temperature: 1, maxTokens: 16 },
                        ...extra,
                    },
                });
                return readFileSync(join(out, "metrics.jsonl"), "utf8")
                    .split("\n")
                    .filter((l) => l.includes('"kind":"eval"'))
                    .map((l) => JSON.parse(l) as { tokensPerTurn: number[] });
            };
            // the untrained random model rarely stops early: at the team's 16 tokens its answers run long ...
            const team = await run("team", {});
            expect(Math.max(...team.flatMap((e) => e.tokensPerTurn))).toBeGreaterThan(3);
            // ... and at each agent's maxTokens 3 no evaluation answer is longer
            const own = await run("own", { agentSettings: [{ maxTokens: 3 }, { maxTokens: 3 }, { maxTokens: 3 }] });
            expect(own.length).toBeGreaterThan(0);
            for (const e of own) for (const t of e.tokensPerTurn) expect(t).toBeLessThanOrEqual(3);
        } finally {
            rmSync(work, { recursive: true, force: true });
        }
    }, 120_000);
});
