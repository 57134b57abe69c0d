// Co-training through the gateway (trainGatewayIteration): an unchanged two-agent program (the openai SDK: a
// researcher writes a note, a solver answers from it) whose reward depends on the solver's answer. Co-trained, the
// held-out reward rises far above the untrained team's; the control, which trains the researcher only, stays where
// the untrained team is (the solver decides the reward). A failed program, an episode never rewarded and samples
// without exact ids are left out without losing the others; every trained agent is pushed after its step.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, type Policy } from "../../lib/index.js";
import { startGateway } from "../../lib/gateway/gateway.js";
import { trainGatewayIteration } from "../../lib/gateway/train.js";
import { tinyHfModel } from "../helpers/serve.js";

let work: string;
beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gwtrain-"));
    await tinyHfModel(join(work, "m"), 5);
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

const question = (k: number) => `Question ${k}: what is ${k} + 1?`;
// The reward: the solver's answer begins with a vowel (the untrained model's rate is about 0.1 to 0.2).
const score = (answer: unknown): number => (/^[aeiou]/i.test(String(answer)) ? 1 : 0);

async function program(item: string, baseUrl: string, temperature = 1): Promise<string> {
    const client = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
    const ask = async (model: string, content: string) =>
        (
            await client.chat.completions.create({
                model,
                messages: [{ role: "user", content }],
                max_tokens: 6,
                temperature,
            })
        ).choices[0].message.content ?? "";
    const note = await ask("researcher", item);
    return ask("solver", `${item} Note: ${note}`);
}

// The held-out reward: 48 unrecorded runs (the gateway's base URL names no episode) on questions 100 to 111.
async function heldOut(baseUrl: string): Promise<number> {
    let sum = 0;
    for (let r = 0; r < 4; r++)
        sum += (await Promise.all(Array.from({ length: 12 }, (_, k) => program(question(100 + k), baseUrl))))
            .map(score)
            .reduce((a, b) => a + b, 0);
    return sum / 48;
}

async function team(train: "both" | "researcher"): Promise<{ before: number; after: number; rewards: number[] }> {
    const researcher = await NativePolicy.load(join(work, "m")),
        solver = await NativePolicy.load(join(work, "m"));
    const gw = await startGateway({ agents: { researcher, solver }, port: 0 });
    try {
        const before = await heldOut(gw.baseUrl);
        const rewards: number[] = [];
        const items = Array.from({ length: 8 }, (_, k) => question(k));
        for (let it = 0; it < 30; it++) {
            const r = await trainGatewayIteration(items, {
                gateway: gw,
                models: train === "both" ? { researcher, solver } : { researcher },
                program: ({ item, baseUrl }) => program(item, baseUrl),
                reward: (_item, answer) => score(answer),
                groups: 4,
                lr: 3e-2,
            });
            expect(r.failed).toEqual([]);
            expect(r.episodes.every((ep) => ep.calls.length === 2)).toBe(true);
            rewards.push(r.meanReward);
        }
        return { before, after: await heldOut(gw.baseUrl), rewards };
    } finally {
        await gw.close();
        await researcher.dispose();
        await solver.dispose();
    }
}

describe("trainGatewayIteration", () => {
    it("co-training through the gateway raises the held-out reward; training the researcher alone does not", async () => {
        const co = await team("both");
        const control = await team("researcher");
        expect(co.before).toBeLessThan(0.35);
        expect(co.after).toBeGreaterThan(0.8);
        expect(control.after).toBeLessThan(0.4);
        expect(co.after - control.after).toBeGreaterThan(0.4);
    }, 120_000);

    it("a failed program, an unrewarded episode and inexact samples are left out; the rest trains and is pushed", async () => {
        const a = await NativePolicy.load(join(work, "m")),
            b = await NativePolicy.load(join(work, "m"));
        // agent b's upstream gives no exact ids (as a text-only server)
        const textOnly: Policy = {
            name: "text-only",
            generate: async (reqs, o) =>
                (await b.generate(reqs, o)).map((g) => ({ ...g, tokenIdsExact: false, tokenIds: undefined })),
        };
        const gw = await startGateway({ agents: { a, b: textOnly }, port: 0, episodeTimeoutMs: 200 });
        const pushed: string[] = [];
        try {
            const r = await trainGatewayIteration(["x", "y"], {
                gateway: gw,
                models: { a, b },
                program: async ({ item, baseUrl, group }) => {
                    if (item === "x" && group === 0) throw new Error("the program crashed");
                    const c = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
                    for (const model of ["a", "b"])
                        await c.chat.completions.create({
                            model,
                            messages: [{ role: "user", content: item }],
                            max_tokens: 3,
                        });
                    if (item === "y" && group === 1) return "never rewarded"; // (no reward function: the program posts)
                    await fetch(`${baseUrl.replace(/\/v1$/, "")}/reward`, {
                        method: "POST",
                        body: JSON.stringify({ reward: group, agents: { a: 0.5 } }),
                    });
                    return "ok";
                },
                groups: 3,
                lr: 1e-3,
                push: async (agent) => void pushed.push(agent),
            });
            expect(r.failed.map((f) => f.reason)).toEqual([
                "the program failed: the program crashed",
                expect.stringMatching(/the program ended without rewarding its episode/) as string,
            ]);
            expect(r.episodes).toHaveLength(6);
            expect(r.agents.a.rows).toBe(4); // the four rewarded episodes' calls of a
            expect(r.agents.b.rows).toBe(0);
            expect(r.inexact).toBe(4);
            expect(r.agents.a.loss).not.toBeNull();
            expect(r.agents.a.meanReturn).toBeCloseTo((1 + 2 + 0 + 2) / 4 + 0.5, 6);
            expect(pushed).toEqual(["a"]);
            expect(gw.episodes.counts()).toEqual({ open: 0, closed: 0 }); // all taken
        } finally {
            await gw.close();
            await a.dispose();
            await b.dispose();
        }
    }, 60_000);

    it("with rolloutCorrection, the mismatch of what was sampled is measured and corrected", async () => {
        const researcher = await NativePolicy.load(join(work, "m")),
            solver = await NativePolicy.load(join(work, "m"));
        const gw = await startGateway({ agents: { researcher, solver }, port: 0 });
        // (a reward that differs between every episode: at temperature 0.1 a group's answers can all be the same, and
        // a group whose advantages are all zero trains nothing and measures nothing)
        let episode = 0;
        try {
            const run = (temperature: number) =>
                trainGatewayIteration([question(1), question(2)], {
                    gateway: gw,
                    models: { solver },
                    program: ({ item, baseUrl }) => program(item, baseUrl, temperature),
                    reward: () => episode++,
                    groups: 4,
                    lr: 1e-4,
                    // (mask mode: tokens whose weight leaves [1/1.1, 1.1] are left out)
                    rolloutCorrection: { rolloutIs: "token", rolloutIsMode: "mask", rolloutIsThreshold: 1.1 },
                });
            // sampled at temperature 1 by the model that trains: no mismatch; at 0.1: the behaviour log-probs differ
            const same = (await run(1)).agents.solver,
                cold = (await run(0.1)).agents.solver;
            expect(same.mismatchK3).toBeLessThan(1e-5);
            expect(same.isMean).toBeCloseTo(1, 4);
            expect(same.isCorrectedFraction).toBe(0);
            expect(cold.mismatchK3).toBeGreaterThan(0.5);
            expect(cold.isCorrectedFraction).toBeGreaterThan(0.05);
        } finally {
            await gw.close();
            await researcher.dispose();
            await solver.dispose();
        }
    });

    it("credit 'influence': each turn's call is credited from the milestones posted on it; a ragged episode is left out", async () => {
        const a = await NativePolicy.load(join(work, "m"));
        const gw = await startGateway({ agents: { r: a, s: a }, port: 0 });
        try {
            const r = await trainGatewayIteration(["x", "y"], {
                gateway: gw,
                models: { r: a, s: a },
                credit: "influence",
                program: async ({ item, baseUrl, group }) => {
                    const c = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
                    const turns = item === "y" && group === 3 ? 1 : 2; // (y's last run: s answers once more than r)
                    for (let t = 0; t < turns; t++)
                        for (const model of ["r", "s"])
                            await c.chat.completions.create({
                                model,
                                messages: [{ role: "user", content: item }],
                                max_tokens: 3,
                            });
                    if (turns === 1)
                        await c.chat.completions.create({
                            model: "s",
                            messages: [{ role: "user", content: item }],
                            max_tokens: 3,
                        });
                    const calls = turns === 1 ? 3 : 4;
                    const milestones = Array.from({ length: calls }, (_, call) => ({
                        agent: call % 2 === 0 ? "r" : "s",
                        reward: (group + call) % 3,
                        call,
                    }));
                    if (turns === 1) milestones[2].agent = "s";
                    await fetch(`${baseUrl.replace(/\/v1$/, "")}/reward`, {
                        method: "POST",
                        body: JSON.stringify({ reward: group % 2, milestones }),
                    });
                    return "";
                },
                groups: 4,
                lr: 1e-4,
            });
            expect(r.failed).toEqual([]);
            expect(r.ragged).toBe(1);
            expect(r.agents.r.rows).toBe(7 * 2); // (7 episodes with turns x 2 calls of r)
            expect(r.agents.s.rows).toBe(7 * 2);
            expect(r.agents.r.loss).not.toBeNull();
            expect(Number.isFinite(r.agents.r.meanReturn)).toBe(true);
        } finally {
            await gw.close();
            await a.dispose();
        }
    });

    it("credit 'critic' (CoLLM-DC): each trained agent's critic credits its calls and takes a step", async () => {
        const base = await NativePolicy.load(join(work, "m"));
        const r = await base.withAdapter("r", { rank: 4, seed: 1 }),
            s = await base.withAdapter("s", { rank: 4, seed: 2 });
        const critics = { r: await base.withAdapter("cr", { rank: 4, seed: 3 }) };
        const gw = await startGateway({ agents: { r, s }, port: 0 });
        try {
            const go = (o: object) =>
                trainGatewayIteration(["x", "y"], {
                    gateway: gw,
                    models: { r },
                    program: async ({ item, baseUrl }) => {
                        const c = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
                        for (let t = 0; t < 2; t++)
                            for (const model of ["r", "s"])
                                await c.chat.completions.create({
                                    model,
                                    messages: [{ role: "user", content: `${item} ${t}` }],
                                    max_tokens: 3,
                                });
                        return item;
                    },
                    reward: (_i, _o, ep) => ep.calls[0].samples[0].tokenIds.length % 2,
                    groups: 2,
                    ...o,
                });
            const res = await go({ credit: "critic", critics, collm: { lr: 1e-3 } });
            expect(res.agents.r.rows).toBe(4 * 2);
            expect(Number.isFinite(res.agents.r.valueLoss)).toBe(true);
            await expect(go({ credit: "critic" })).rejects.toThrow(/critics.r: credit 'critic' needs a critic/);
            await expect(go({ credit: "ppo" })).rejects.toThrow(/credit: expected 'magrpo', 'influence' or 'critic'/);
        } finally {
            await gw.close();
            await base.dispose();
        }
    });

    it("an episode the gateway refuses to open (a limit) fails alone; the others are trained", async () => {
        const a = await NativePolicy.load(join(work, "m"));
        const gw = await startGateway({ agents: { a }, port: 0, maxClosedEpisodes: 3 });
        try {
            const r = await trainGatewayIteration(["x", "y"], {
                gateway: gw,
                models: { a },
                concurrency: 1,
                program: async ({ item, baseUrl }) => {
                    const c = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
                    await c.chat.completions.create({
                        model: "a",
                        messages: [{ role: "user", content: item }],
                        max_tokens: 3,
                    });
                    return item;
                },
                reward: (_i, _o, ep) => ep.calls[0].samples[0].tokenIds.length,
                groups: 2,
            });
            expect(r.episodes.map((ep) => ep.status)).toEqual(["rewarded", "rewarded", "rewarded", "failed"]);
            expect(r.failed[0].reason).toMatch(/^not opened: .*maxClosedEpisodes/);
            expect(r.agents.a.rows).toBe(3);
        } finally {
            await gw.close();
            await a.dispose();
        }
    });

    it("an abort starts no new program and rejects once the one under way has ended", async () => {
        const a = await NativePolicy.load(join(work, "m"));
        const gw = await startGateway({ agents: { a }, port: 0 });
        const abort = new AbortController();
        let started = 0,
            ended = 0;
        try {
            const run = trainGatewayIteration(["x", "y"], {
                gateway: gw,
                models: { a },
                concurrency: 1,
                signal: abort.signal,
                program: async () => {
                    started++;
                    abort.abort(new Error("stop"));
                    await new Promise((r) => setTimeout(r, 50));
                    ended++;
                    return "";
                },
                reward: () => 0,
                groups: 2,
            });
            await expect(run).rejects.toThrow("stop");
            expect([started, ended]).toEqual([1, 1]);
        } finally {
            await gw.close();
            await a.dispose();
        }
    });

    it("refuses bad options with their names", async () => {
        const a = await NativePolicy.load(join(work, "m"));
        const gw = await startGateway({ agents: { a }, port: 0 });
        const base = { gateway: gw, models: { a }, program: async () => "" };
        try {
            await expect(trainGatewayIteration([], base)).rejects.toThrow(/items: expected a non-empty array/);
            await expect(trainGatewayIteration(["x"], { ...base, groups: 1 })).rejects.toThrow(
                /groups: expected an integer >= 2/,
            );
            await expect(trainGatewayIteration(["x"], { ...base, lr: -1 })).rejects.toThrow(/lr: expected a positive/);
            await expect(trainGatewayIteration(["x"], { ...base, models: { z: a } })).rejects.toThrow(
                /models.z: the gateway has no agent/,
            );
            await expect(trainGatewayIteration(["x"], { ...base, concurrency: 0 })).rejects.toThrow(/concurrency/);
        } finally {
            await gw.close();
            await a.dispose();
        }
    });
});
