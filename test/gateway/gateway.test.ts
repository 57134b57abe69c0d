// The gateway with the official openai SDK as the client: recorded ids are what the model sampled (replayed in process
// under the recorded seed), every way of naming the agent and the episode, rewards, timeouts, limits, the key.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { type GatewayEpisode, NativePolicy, type Policy, type Span } from "../../lib/index.js";
import { type Gateway, startGateway } from "../../lib/gateway/gateway.js";
import { tinyHfModel } from "../helpers/serve.js";

let work: string, base: NativePolicy, solver: NativePolicy, critic: NativePolicy, gw: Gateway;
const q = [{ role: "user" as const, content: "What is 2 + 3?" }];

beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gw-"));
    await tinyHfModel(join(work, "m"), 5);
    base = await NativePolicy.load(join(work, "m"));
    solver = await base.withAdapter("solver", { rank: 4, alpha: 8, seed: 1 });
    critic = await base.withAdapter("critic", { rank: 4, alpha: 8, seed: 2 });
    gw = await startGateway({ agents: { solver, critic }, port: 0, episodeTimeoutMs: 60_000 });
});
afterAll(async () => {
    await gw.close();
    await base.dispose();
    rmSync(work, { recursive: true, force: true });
});

const client = (baseURL: string, headers: Record<string, string> = {}) =>
    new OpenAI({ baseURL, apiKey: "none", defaultHeaders: headers, maxRetries: 0 });

describe("gateway: recording", () => {
    it("records the ids and log-probs the model sampled; replaying the recorded seed in process gives the same", async () => {
        const c = client(gw.episodeUrl("e1"));
        const r = await c.chat.completions.create({ model: "solver", messages: q, max_tokens: 8, temperature: 1 });
        const r2 = await c.chat.completions.create({
            model: "critic",
            messages: [...q, { role: "assistant", content: r.choices[0].message.content ?? "" }],
            max_tokens: 8,
            temperature: 1,
        });
        const ep = gw.episodes.get("e1")!;
        expect(ep.status).toBe("open");
        expect(ep.calls.map((c) => [c.index, c.agent])).toEqual([
            [0, "solver"],
            [1, "critic"],
        ]);
        for (const [k, [who, reply]] of (
            [
                [solver, r],
                [critic, r2],
            ] as const
        ).entries()) {
            const s = ep.calls[k].samples[0];
            expect(s.tokenIdsExact).toBe(true);
            expect(s.text).toBe(reply.choices[0].message.content);
            const again = await who.generate([
                { messages: ep.calls[k].messages, sampling: { temperature: 1, maxTokens: 8 }, seed: BigInt(s.seed) },
            ]);
            expect(s.tokenIds).toEqual(again[0].tokenIds);
            expect(s.promptTokenIds).toEqual(again[0].promptTokenIds);
            expect(s.logprobs).toEqual(again[0].logprobs);
        }
        const rw = await fetch(gw.baseUrl.replace(/\/v1$/, "/episodes/e1/reward"), {
            method: "POST",
            body: JSON.stringify({
                reward: 1,
                agents: { critic: 0.5 },
                milestones: [{ agent: "solver", reward: 0.2, call: 0 }],
            }),
        });
        expect(rw.status).toBe(200);
        const done = await gw.episodes.wait("e1");
        expect(done).toMatchObject({ status: "rewarded", reward: 1, agentRewards: { critic: 0.5 } });
        expect(done.milestones).toEqual([{ agent: "solver", reward: 0.2, call: 0 }]);
        // a closed episode takes no more calls
        await expect(c.chat.completions.create({ model: "solver", messages: q, max_tokens: 2 })).rejects.toThrow(
            /409|closed/,
        );
        expect(gw.episodes.take("e1")!.calls).toHaveLength(2);
        expect(gw.episodes.get("e1")).toBeUndefined();
    });

    it("names the agent and episode by header or path whatever `model` says; a stream is recorded as a whole call", async () => {
        await client(gw.baseUrl, { "x-maporl-episode": "e2", "x-maporl-agent": "critic" }).chat.completions.create({
            model: "gpt-4o",
            messages: q,
            max_tokens: 4,
        });
        const stream = await client(gw.episodeUrl("e2", "solver")).chat.completions.create({
            model: "anything",
            messages: q,
            max_tokens: 6,
            stream: true,
        });
        let text = "";
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
        const ep = gw.episodes.get("e2")!;
        expect(ep.calls.map((c) => c.agent)).toEqual(["critic", "solver"]);
        expect(ep.calls[1].samples[0].text).toBe(text);
        expect(ep.calls[1].samples[0].tokenIds.length).toBeGreaterThan(0);
        // without an episode: answered, recorded nowhere
        const before = gw.episodes.counts();
        await client(gw.baseUrl).chat.completions.create({ model: "solver", messages: q, max_tokens: 2 });
        expect(gw.episodes.counts()).toEqual(before);
        // an unknown agent is a 404 naming the agents
        await expect(
            client(gw.episodeUrl("e2")).chat.completions.create({ model: "nobody", messages: q, max_tokens: 2 }),
        ).rejects.toThrow(/no agent "nobody".*solver, critic/);
        const models = await client(gw.baseUrl).models.list();
        expect(models.data.map((m) => m.id)).toEqual(["solver", "critic"]);
        gw.episodes.fail("e2", "done with it");
        expect(gw.episodes.take("e2")!.status).toBe("failed");
    });

    it("checks rewards and ids field by field; a bad one changes nothing", async () => {
        const root = gw.baseUrl.replace(/\/v1$/, "");
        const post = (path: string, body: unknown) =>
            fetch(`${root}${path}`, { method: "POST", body: JSON.stringify(body) });
        const opened = (await (await post("/episodes", { meta: { item: 3 } })).json()) as {
            id: string;
            base_url: string;
        };
        expect(opened.base_url).toBe(gw.episodeUrl(opened.id));
        for (const [body, msg] of [
            [{ reward: "1" }, /reward: expected a finite number/],
            [{ reward: null }, /reward: expected a finite number/],
            [{ reward: 1, agents: { ghost: 1 } }, /agents.ghost: no such agent/],
            [{ reward: 1, agents: { solver: Infinity } }, /agents.solver/],
            [{ reward: 1, milestones: [{ agent: "solver", reward: 1, call: -1 }] }, /milestones\[0\].call/],
        ] as const) {
            const r = await post(`/episodes/${opened.id}/reward`, body);
            expect(r.status).toBe(400);
            expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(msg);
        }
        expect(gw.episodes.get(opened.id)!.status).toBe("open");
        expect((await post(`/episodes/${"x".repeat(200)}/reward`, { reward: 1 })).status).toBe(400);
        expect((await post(`/episodes/nope/reward`, { reward: 1 })).status).toBe(404);
        expect((await post(`/episodes/${opened.id}/reward`, { reward: 0 })).status).toBe(200);
        expect((await post(`/episodes/${opened.id}/reward`, { reward: 1 })).status).toBe(409);
        expect(gw.episodes.take(opened.id)).toMatchObject({ reward: 0, meta: { item: 3 } });
    });
});

describe("gateway: limits", () => {
    it("an idle episode times out as failed; open episodes, calls per episode and the key are bounded", async () => {
        const g = await startGateway({
            agents: { solver },
            port: 0,
            episodeTimeoutMs: 150,
            maxEpisodes: 2,
            maxCallsPerEpisode: 2,
            apiKey: "k",
        });
        try {
            expect((await fetch(`${g.baseUrl}/models`)).status).toBe(401);
            const c = (ep: string) => new OpenAI({ baseURL: g.episodeUrl(ep), apiKey: "k", maxRetries: 0 });
            await c("a").chat.completions.create({ model: "solver", messages: q, max_tokens: 2 });
            await c("a").chat.completions.create({ model: "solver", messages: q, max_tokens: 2 });
            await expect(
                c("a").chat.completions.create({ model: "solver", messages: q, max_tokens: 2 }),
            ).rejects.toThrow(/maxCallsPerEpisode/);
            await c("b").chat.completions.create({ model: "solver", messages: q, max_tokens: 2 });
            await expect(
                c("c").chat.completions.create({ model: "solver", messages: q, max_tokens: 2 }),
            ).rejects.toThrow(/maxEpisodes/);
            const ep = await g.episodes.wait("a");
            expect(ep.status).toBe("failed");
            expect(ep.reason).toMatch(/timed out/);
            expect(ep.calls).toHaveLength(2); // (the third was refused before it ran)
        } finally {
            await g.close();
        }
    });

    it("writes a span per recorded call to the tracer; a tracer that throws loses its span, not the answer", async () => {
        const spans: Span[] = [];
        let broken = false;
        const tracer = {
            span: (s: Span) => {
                if (broken) throw new Error("disk full");
                spans.push(s);
            },
            close: () => {},
        };
        const g = await startGateway({ agents: { solver, critic }, port: 0, tracer, runId: "r1" });
        try {
            const c = client(g.episodeUrl("t"));
            await c.chat.completions.create({ model: "critic", messages: q, max_tokens: 3 });
            await c.chat.completions.create({ model: "solver", messages: q, max_tokens: 3 });
            await client(g.baseUrl).chat.completions.create({ model: "solver", messages: q, max_tokens: 3 }); // unrecorded
            const calls = g.episodes.get("t")!.calls;
            expect(spans.map((s) => [s.name, s.runId, s.episode, s.agent, s.role, s.turn])).toEqual([
                ["gateway.call", "r1", "t", 1, "critic", 0],
                ["gateway.call", "r1", "t", 0, "solver", 1],
            ]);
            expect(spans.map((s) => [s.promptTokens, s.completionTokens, s.text])).toEqual(
                calls.map((x) => [x.samples[0].promptTokenIds.length, x.samples[0].tokenIds.length, x.samples[0].text]),
            );
            broken = true;
            const r = await c.chat.completions.create({ model: "solver", messages: q, max_tokens: 3 });
            expect(r.choices[0].message.content).toBe(g.episodes.get("t")!.calls[2].samples[0].text);
        } finally {
            await g.close();
        }
    });

    it("a reward while a call is in flight closes the episode once that call ends, with its answer; no call starts meanwhile", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const slow: Policy = {
            name: "slow",
            generate: async (reqs, o) => {
                await gate;
                return solver.generate(reqs, o);
            },
        };
        const closed: GatewayEpisode[] = [];
        const g = await startGateway({
            agents: { slow, solver },
            port: 0,
            onEpisodeClosed: (ep) => void closed.push(structuredClone(ep)),
        });
        try {
            const root = g.baseUrl.replace(/\/v1$/, "");
            const call = client(g.episodeUrl("f")).chat.completions.create({
                model: "slow",
                messages: q,
                max_tokens: 3,
            });
            for (let k = 0; k < 100 && !g.episodes.get("f"); k++) await new Promise((r) => setTimeout(r, 10));
            const rw = await fetch(`${root}/episodes/f/reward`, {
                method: "POST",
                body: JSON.stringify({ reward: 2 }),
            });
            expect(await rw.json()).toEqual({ id: "f", status: "closing" });
            await expect(
                client(g.episodeUrl("f")).chat.completions.create({ model: "solver", messages: q, max_tokens: 2 }),
            ).rejects.toThrow(/closing/);
            expect(closed).toEqual([]);
            release();
            const r = await call;
            const ep = await g.episodes.wait("f");
            expect(ep).toMatchObject({ status: "rewarded", reward: 2 });
            expect(closed).toHaveLength(1);
            expect(closed[0].calls.map((c) => c.samples[0]?.text)).toEqual([r.choices[0].message.content]);
            // a malformed percent-encoding in the path is a 400, not a crash
            expect((await fetch(`${root}/episodes/%E0%A4%A/v1/models`)).status).toBe(400);
        } finally {
            release();
            await g.close();
        }
    });

    it("limits answer their own status; n choices without a seed are fresh draws; a completions prompt is recorded", async () => {
        const g = await startGateway({ agents: { solver }, port: 0, maxCallsPerEpisode: 1, maxEpisodes: 1 });
        try {
            const post = (ep: string, body: Record<string, unknown>, route = "chat/completions") =>
                fetch(`${g.episodeUrl(ep)}/${route}`, {
                    method: "POST",
                    body: JSON.stringify({ model: "solver", max_tokens: 3, ...body }),
                });
            expect((await post("n", { messages: q, n: 3, temperature: 1 })).status).toBe(200);
            expect((await post("n", { messages: q })).status).toBe(429); // maxCallsPerEpisode
            expect((await post("n", { messages: q, stream: true })).status).toBe(429);
            g.episodes.reward("n", { reward: 0 });
            expect((await post("n", { messages: q })).status).toBe(409); // closed
            expect((await post("c", { prompt: "hello world" }, "completions")).status).toBe(200);
            expect((await post("d", { messages: q })).status).toBe(503); // maxEpisodes: c is open
            const seeds = g.episodes.get("n")!.calls[0].samples.map((s) => BigInt(s.seed));
            expect(seeds.map((s) => s - seeds[0])).toEqual([0n, 1n, 2n]);
            expect(seeds[0] > 2n).toBe(true); // a drawn base, not the routes' 0, 1, 2
            const c = g.episodes.get("c")!.calls[0];
            expect(c.messages).toEqual([]);
            expect(c.promptTokenIds).toEqual(solver.tokenizer.encode("hello world"));
            expect(c.samples[0].promptTokenIds).toEqual(c.promptTokenIds);
        } finally {
            await g.close();
        }
    });

    it("refuses bad options with the option's name", async () => {
        await expect(startGateway({ agents: {} })).rejects.toThrow(/agents: expected/);
        await expect(startGateway({ agents: { "bad name": solver } })).rejects.toThrow(/agents: "bad name"/);
        await expect(startGateway({ agents: { solver }, maxEpisodes: 0 })).rejects.toThrow(/maxEpisodes/);
        await expect(startGateway({ agents: { solver }, episodeTimeoutMs: NaN })).rejects.toThrow(/episodeTimeoutMs/);
        await expect(startGateway({ agents: { solver }, colour: 1 } as never)).rejects.toThrow(/colour/);
    });
});
