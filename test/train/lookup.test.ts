// lookup.test.ts: tool-lookup, the researcher / solver workflow the trainers run as an environment: the task's
// items, its tool (restricted to the researcher; errors are results), the transition (tool results on the entries,
// the scratchpad in the next observations, the joint reward credited to the researcher), the metrics over the
// answerers, the warm start's demonstrations at their stated rates, and the three trainers and the replay buffer
// running on it with roles, tool calls and per-agent credit in traces.jsonl.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/model/nativePolicy.js";
import type { Generation, GenerateRequest } from "../../lib/policy/types.js";
import { mulberry32 } from "../../lib/random.js";
import { teamMetrics } from "../../lib/train/job/evaluate.js";
import { resolveConfig } from "../../lib/train/job/config.js";
import { trainJob } from "../../lib/train/job/job.js";
import { chainEnd, lookupCalls, lookupTask, scratchpad } from "../../lib/train/tasks/lookup.js";
import { rolloutTeam, transition, type RolloutEntry } from "../../lib/train/trainers/rollout.js";

const work = mkdtempSync(join(tmpdir(), "maporl-lookup-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const entry = (text: string, score = 0): RolloutEntry => ({
    prompt: [],
    completion: [],
    stopped: true,
    text,
    extracted: null,
    correct: false,
    score,
});

// A policy that answers by a script of its prompt (the model's own tokenizer gives the completion's ids).
async function scripted(name: string, answer: (prompt: string) => string): Promise<NativePolicy> {
    const p = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 16, seed: 3, name });
    p.generate = async (reqs: GenerateRequest[]): Promise<Generation[]> =>
        reqs.map((r) => {
            const text = answer(String(r.messages![0].content));
            return {
                text,
                tokens: p.tokenizer.encode(text),
                finishReason: "stop",
                usage: { promptTokens: 0, completionTokens: text.length },
                latencyMs: 0,
            };
        });
    return p;
}
// The protocol played right: the researcher looks up its key; the solver adds the scratchpad's value (0 when empty).
const researcher = (prompt: string) => `@${/^k=(\d)/.exec(prompt)![1]}`;
const solver = (prompt: string) => {
    const x = Number(/^x=(\d)/.exec(prompt)![1]),
        pad = /#(.)$/.exec(prompt)![1],
        v = /\d/.test(pad) ? Number(pad) : 0;
    return `${x}+${v}=${x + v};${x + v}`;
};

describe("tool-lookup: the task and its tool", () => {
    const task = lookupTask();
    const items = task.generate(50, 7);

    it("items: the reference is the database's value for the researcher's key plus the solver's operand", () => {
        for (const it of items) {
            const values = it.hidden!.values as string,
                key = it.views[0].slice(2),
                x = Number(it.views[1].slice(2));
            expect(it.views[0]).toMatch(/^k=\d$/);
            expect(it.views[1]).toMatch(/^x=\d$/);
            expect(it.reference).toBe(String(Number(values[Number(key)]) + x));
            expect(JSON.parse(JSON.stringify(it))).toEqual(it); // scenario suites store items as JSON
        }
        expect(task.generate(50, 7)).toEqual(items);
        expect(new Set(items.map((i) => i.reference)).size).toBeGreaterThan(8);
        expect(() => task.generate(-1, 0)).toThrow(/count/);
        expect(() => lookupTask({ keyUse: 2 })).toThrow(/keyUse/);
    });

    it("the transition: the researcher's lookup returns its value; the solver's is forbidden; bad keys and a missing database are errors, not throws", async () => {
        const it0 = items[0],
            values = it0.hidden!.values as string;
        const row = [entry("@2@z"), entry("9+1=10;10@4", 1)];
        await transition(task, it0, row, 1, true);
        expect(row[0].toolResults!.map((r) => [r.ok, r.content, r.error])).toEqual([
            [true, values[2], undefined],
            [false, expect.stringMatching(/invalid arguments for 'lookup'.*pattern/) as unknown as string, "arguments"],
        ]);
        expect(row[1].toolResults).toMatchObject([
            {
                ok: false,
                error: "forbidden",
                content: expect.stringMatching(/solver may not call 'lookup' \(only researcher\)/),
            },
        ]);
        expect(row[0].score).toBe(1); // the researcher is credited with the turn's joint reward: the solver's score
        const early = [entry("@2"), entry("9+1=10;10", 1)];
        await transition(task, it0, early, 0, false);
        expect(early.map((e) => e.score)).toEqual([0, 0]); // finalReward: the outcome at the horizon only
        const bare = [entry("@0"), entry("1")];
        await transition(task, { ...it0, hidden: {} }, bare, 0, false);
        expect(bare[0].toolResults).toMatchObject([
            { ok: false, error: "threw", content: expect.stringMatching(/no database/) },
        ]);
        expect(lookupCalls("@1@2@3@4@5").length).toBe(4);
        // A task whose own call parser throws: a tool error on that answer, not an error of the episode.
        const odd = [entry("@1"), entry("2")];
        await transition(
            {
                ...task,
                toolCalls: () => {
                    throw new Error("parser broke");
                },
            },
            it0,
            odd,
            0,
            false,
        );
        expect(odd[0].toolResults).toMatchObject([
            { ok: false, error: "arguments", content: expect.stringMatching(/could not be read \(parser broke\)/) },
        ]);
        expect(
            scratchpad([
                {
                    text: "",
                    extracted: null,
                    toolResults: [
                        { ok: false, content: "e" },
                        { ok: true, content: "7" },
                    ],
                },
            ]),
        ).toBe("7");
        expect(scratchpad([{ text: "", extracted: null, toolResults: [{ ok: false, content: "e" }] }])).toBe("!");
        expect(scratchpad(null)).toBe("?");
    });

    it("the warm start's demonstrations: the researcher's own key at rate p + (1 - p)/10, the solver's use of the scratchpad at q + (1 - q)/10", () => {
        const t = lookupTask({ keyUse: 0.4, padUse: 0.2 }),
            rng = mulberry32(5),
            many = t.generate(4000, 3);
        let own = 0,
            used = 0,
            shown = 0;
        for (const it of many) {
            const r = t.demonstration!(it, 0, 0, rng, false);
            expect(r.prompt).toBe(`${it.views[0]}|???,???#?`);
            if (r.answer === `@${it.views[0].slice(2)}`) own++;
            const s = t.demonstration!(it, 1, 1, rng, false),
                pad = /#(\d)$/.exec(s.prompt)![1];
            shown++;
            if (s.answer.split("=")[0].endsWith(`+${pad}`)) used++;
        }
        const se = (p: number) => Math.sqrt((p * (1 - p)) / many.length);
        expect(Math.abs(own / many.length - 0.46)).toBeLessThan(4 * se(0.46));
        expect(Math.abs(used / shown - 0.28)).toBeLessThan(4 * se(0.28));
    });

    it("a team playing the protocol: every tool call and result on the entries, the scratchpad in the solver's next prompt, accuracy 1 at turn 2", async () => {
        const r0 = await scripted("researcher", researcher),
            s0 = await scripted("solver", solver);
        const r = await rolloutTeam(task, items.slice(0, 20), [r0, s0], {
            turns: 2,
            temperature: 1,
            maxTokens: 8,
            seed: 1,
        });
        const m = teamMetrics(r);
        expect(m.majorityAccuracy[1]).toBe(1);
        // Turn 1: the solver had nothing to read (right only where the value is 0); metrics read the solver alone.
        expect(m.majorityAccuracy[0]).toBeCloseTo(
            r.items.filter((it, e) => r.entries[e][0][1].correct).length / 20,
            10,
        );
        expect(m.agentAccuracy.map((row) => row.length)).toEqual([1, 1]);
        r.entries.forEach((ep, e) => {
            const values = r.items[e].hidden!.values as string,
                key = r.items[e].views[0].slice(2);
            expect(ep[0][0].toolResults).toMatchObject([{ name: "lookup", ok: true, content: values[Number(key)] }]);
            expect(r0.tokenizer.decode(ep[1][1].prompt)).toContain(`#${values[Number(key)]}`);
            expect(ep[1][0].score).toBe(1);
        });
        // With the researcher replaced by one that looks up the wrong key, the team fails (the chemistry the task needs).
        const wrong = await scripted("wrong", (p) => `@${(Number(researcher(p)[1]) + 1) % 10}`);
        const w = teamMetrics(
            await rolloutTeam(task, items.slice(0, 20), [wrong, s0], {
                turns: 2,
                temperature: 1,
                maxTokens: 8,
                seed: 1,
            }),
        );
        expect(w.majorityAccuracy[1]).toBeLessThan(0.5);
        for (const p of [r0, s0, wrong]) await p.dispose();
    });
});

describe("tool-lookup: the trainers on the workflow", () => {
    const small = {
        task: "tool-lookup",
        iterations: 3,
        episodesPerIteration: 8,
        evalEpisodes: 8,
        evalEvery: 100,
        controls: true,
        sft: { steps: 20, batchSize: 16, lr: 2e-3 },
    };
    const traces = (dir: string) =>
        readFileSync(join(dir, "traces.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map(
                (l) =>
                    JSON.parse(l) as {
                        stage: string;
                        turns: {
                            role: string;
                            text: string;
                            tools?: { name: string; ok: boolean }[];
                            credit?: number;
                        }[][];
                    },
            );

    for (const algo of ["maporl", "collm-cc", "magrpo"] as const)
        it(`${algo}: roles, tool calls and the credit each trained answer got are in traces.jsonl; the control credits the researcher only`, async () => {
            const dir = join(work, algo);
            const s = await trainJob({
                out: dir,
                config: {
                    ...small,
                    algo,
                    ...(algo === "magrpo"
                        ? { episodesPerIteration: 4, replay: { enabled: true, every: 2, steps: 1, batchSize: 4 } }
                        : {}),
                },
            });
            expect(s.config.agents).toBe(2);
            expect(s.config.turns).toBe(2);
            expect(s.config.separateTurn0).toBe(false);
            expect(s.rows.map((r) => r.majorityAccuracy.length)).toEqual([2, 2, 2]);
            const t = traces(dir);
            expect(t.length).toBe(6);
            for (const x of t) {
                expect(x.turns.map((turn) => turn.map((e) => e.role))).toEqual([
                    ["researcher", "solver"],
                    ["researcher", "solver"],
                ]);
                for (const turn of x.turns) {
                    for (const e of turn) if (e.tools) expect(e.tools.length).toBe(lookupCalls(e.text).length);
                    if (x.stage === "independent") {
                        expect(typeof turn[0].credit).toBe("number");
                        expect(turn[1].credit).toBeUndefined(); // the frozen solver is not trained
                    } else expect(turn.every((e) => Number.isFinite(e.credit))).toBe(true);
                }
            }
            if (algo === "magrpo") {
                const replay = readFileSync(join(dir, "metrics.jsonl"), "utf8")
                    .trim()
                    .split("\n")
                    .map((l) => JSON.parse(l) as { kind: string; replay?: { size: number; offlineLoss?: number } })
                    .filter((m) => m.kind === "train");
                expect(replay.every((m) => m.replay !== undefined)).toBe(true);
            }
        }, 300_000);
});

describe("tool-lookup with chained lookups (taskOptions.hops)", () => {
    it("hops 1 is the task as designed: the same items and the same demonstrations", () => {
        const a = lookupTask({ keyUse: 0.4, padUse: 0.2 }),
            b = lookupTask({ keyUse: 0.4, padUse: 0.2, hops: 1 });
        expect(b.generate(30, 9)).toEqual(a.generate(30, 9));
        const ra = mulberry32(3),
            rb = mulberry32(3);
        for (const it of a.generate(30, 9))
            for (const [agent, turn] of [
                [0, 0],
                [0, 1],
                [1, 1],
                [1, 2],
            ])
                expect(b.demonstration!(it, agent, turn, rb, true)).toEqual(
                    a.demonstration!(it, agent, turn, ra, true),
                );
    });

    it("hops 3: the reference is the third value of the chain plus the operand; a researcher that follows the scratchpad makes the team right at turn 4, one that looks up its own key every turn does not", async () => {
        const task = lookupTask({ hops: 3 });
        const items = task.generate(40, 5);
        for (const it of items) {
            const values = it.hidden!.values as string;
            let k = Number(it.views[0].slice(2));
            for (let h = 0; h < 3; h++) k = Number(values[k]);
            expect(it.reference).toBe(String(k + Number(it.views[1].slice(2))));
            expect(it.question).toMatch(/\^3\+\d$/);
        }
        expect(() => lookupTask({ hops: 0 })).toThrow(/hops: expected an integer in \[1, 6\]/);
        // a warm start that always plays the protocol (p = q = 1) demonstrates the chain: lookup t is the value of
        // lookup t - 1, and the solver's answer at the horizon is the reference
        const sure = lookupTask({ hops: 3, keyUse: 1, padUse: 1 }),
            rng = mulberry32(1);
        for (const it of items) {
            const values = it.hidden!.values as string,
                key = it.views[0].slice(2);
            for (let t = 0; t < 3; t++)
                expect(sure.demonstration!(it, 0, t, rng, true).answer).toBe(`@${chainEnd(values, key, t)}`);
            expect(sure.demonstration!(it, 1, 3, rng, true).answer).toMatch(new RegExp(`;${it.reference}$`));
        }
        // the chain played right: at turn 0 its own key, after that the scratchpad's value
        const follow = await scripted("follow", (p) => {
            const pad = /#(.)$/.exec(p)![1];
            return /\d/.test(pad) ? `@${pad}` : researcher(p);
        });
        const own = await scripted("own", researcher),
            s0 = await scripted("solver", solver);
        const roll = { turns: 4, temperature: 1, maxTokens: 8, seed: 1 };
        const right = await rolloutTeam(task, items, [follow, s0], roll);
        expect(teamMetrics(right).majorityAccuracy[3]).toBe(1);
        // finalReward: nothing is paid before the horizon
        for (const ep of right.entries)
            expect(
                ep
                    .slice(0, 3)
                    .flat()
                    .every((e) => e.score === 0),
            ).toBe(true);
        const wrong = teamMetrics(await rolloutTeam(task, items, [own, s0], roll));
        expect(wrong.majorityAccuracy[3]).toBeLessThan(0.5);
        for (const p of [follow, own, s0]) await p.dispose();
    });

    it("the config: hops sets the horizon, and other horizons or tasks are named errors", () => {
        expect(resolveConfig({ task: "tool-lookup", taskOptions: { hops: 3 } }).turns).toBe(4);
        expect(() => resolveConfig({ task: "tool-lookup", turns: 3, taskOptions: { hops: 3 } })).toThrow(
            /turns: tool-lookup with taskOptions.hops 3 takes hops \+ 1 turns/,
        );
        expect(() => resolveConfig({ taskOptions: { hops: 2 } })).toThrow(/taskOptions.hops: chained lookups are/);
        expect(() => resolveConfig({ task: "tool-lookup", taskOptions: { hops: 7 } })).toThrow(
            /taskOptions.hops: expected an integer in \[1, 6\]/,
        );
    });
});
