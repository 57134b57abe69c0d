// The gateway's bounds against an upstream or a client that misbehaves: a call the upstream never answers fails at
// its deadline (and its late answer changes nothing), gateway.close() leaves the episodes it hands out alone, an answer
// the client went away from is recorded as failed, requests refused as the client's fault are not calls, rewards whose
// sums overflow or whose milestones name no call are refused, a slow upload holds no slot, and a growing conversation
// is recorded without copying its history per call.
import { request } from "node:http";

import { describe, expect, it } from "vitest";

import type { Generation, GenerateRequest, Policy } from "../../lib/index.js";
import type { GatewayEpisode } from "../../lib/gateway/episodes.js";
import { startGateway } from "../../lib/gateway/gateway.js";

// An upstream that answers "ok" with exact ids, after `hold` resolves (ignoring the abort signal, as a remote server
// that keeps decoding does).
function upstream(hold: () => Promise<void> = async () => {}): Policy & { calls: GenerateRequest[][] } {
    const calls: GenerateRequest[][] = [];
    return {
        name: "up",
        calls,
        async generate(reqs) {
            calls.push(reqs);
            await hold();
            return reqs.map((): Generation => ({
                text: "ok",
                tokenIds: [5, 2],
                promptTokenIds: [1, 7, 9],
                logprobs: [-0.5, -0.1],
                tokenIdsExact: true,
                finishReason: "stop",
                latencyMs: 0,
                usage: { promptTokens: 3, completionTokens: 2 },
            }));
        },
    };
}

const q = [{ role: "user", content: "hi" }];
const post = (url: string, body: unknown, signal?: AbortSignal) =>
    fetch(url, { method: "POST", body: JSON.stringify(body), ...(signal ? { signal } : {}) });
const until = async (cond: () => boolean) => {
    for (let k = 0; k < 300 && !cond(); k++) await new Promise((r) => setTimeout(r, 10));
    expect(cond()).toBe(true);
};

describe("gateway: bounds against a misbehaving upstream or client", () => {
    it("a call the upstream never answers fails at callTimeoutMs (504); its late answer changes nothing", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const g = await startGateway({ agents: { a: upstream(() => gate) }, port: 0, callTimeoutMs: 150 });
        try {
            const r = await post(`${g.episodeUrl("t", "a")}/chat/completions`, { messages: q });
            expect(r.status).toBe(504);
            expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/callTimeoutMs/);
            const ep = g.episodes.get("t")!;
            expect(ep.calls).toHaveLength(1);
            expect(ep.calls[0]).toMatchObject({ samples: [], error: expect.stringMatching(/within 150 ms/) });
            g.episodes.reward("t", { reward: 1 }); // (no call in flight: it closes now)
            expect(ep.status).toBe("rewarded");
            const before = JSON.stringify(ep);
            release();
            await new Promise((r) => setTimeout(r, 20));
            expect(JSON.stringify(g.episodes.get("t"))).toBe(before);
        } finally {
            release();
            await g.close();
        }
    });

    it("gateway.close() records calls in flight as unfinished; the episode handed out is not changed after", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const closed: GatewayEpisode[] = [];
        const g = await startGateway({
            agents: { a: upstream(() => gate) },
            port: 0,
            onEpisodeClosed: (ep) => void closed.push(ep),
        });
        const call = post(`${g.episodeUrl("c", "a")}/chat/completions`, { messages: q }).catch(() => null);
        await until(() => g.episodes.get("c")?.calls.length === 1);
        await g.close();
        expect(closed).toHaveLength(1);
        expect(closed[0]).toMatchObject({ status: "failed", reason: "the gateway closed" });
        expect(closed[0].calls[0].error).toMatch(/^unfinished: the gateway closed/);
        const before = JSON.stringify(closed[0]);
        release();
        await call;
        await new Promise((r) => setTimeout(r, 20));
        expect(JSON.stringify(closed[0])).toBe(before);
    });

    it("an answer the client went away from is recorded as failed, not as a sample", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const g = await startGateway({ agents: { a: upstream(() => gate) }, port: 0 });
        try {
            const abort = new AbortController();
            const call = post(`${g.episodeUrl("x", "a")}/chat/completions`, { messages: q }, abort.signal);
            await until(() => g.episodes.get("x")?.calls.length === 1);
            abort.abort();
            await expect(call).rejects.toThrow();
            await new Promise((r) => setTimeout(r, 20));
            release(); // (the upstream answers after all: nobody read it)
            await until(() => g.episodes.get("x")!.calls[0].error !== undefined);
            expect(g.episodes.get("x")!.calls[0]).toMatchObject({ samples: [], error: /client went away/ });
        } finally {
            release();
            await g.close();
        }
    });

    it("requests refused as the client's fault are not calls; rewards are checked against the calls and their sums", async () => {
        const up = upstream();
        const g = await startGateway({ agents: { a: up, b: upstream() }, port: 0, maxCallsPerEpisode: 2 });
        try {
            const url = `${g.episodeUrl("r")}/chat/completions`;
            for (const bad of [{ seed: 2 ** 64 }, { max_tokens: 1.5 }, { temperature: 1e308 }, { top_p: 2 }])
                expect((await post(url, { model: "a", messages: q, ...bad })).status).toBe(400);
            expect(g.episodes.get("r")).toBeUndefined(); // (not even opened)
            expect(up.calls).toHaveLength(0);
            expect((await post(url, { model: "a", messages: q })).status).toBe(200);
            expect((await post(url, { model: "b", messages: q })).status).toBe(200); // (2 calls: the limit)
            const reward = (body: unknown) => post(`${g.episodeUrl("r").replace(/\/v1$/, "")}/reward`, body);
            const message = async (r: Response) => ((await r.json()) as { error: { message: string } }).error.message;
            expect(
                await message(await reward({ reward: 1, milestones: [{ agent: "a", reward: 1, call: 2 }] })),
            ).toMatch(/milestones\[0\]\.call: expected the index of one of the episode's 2 calls, got 2/);
            expect(
                await message(await reward({ reward: 1, milestones: [{ agent: "a", reward: 1, call: 1 }] })),
            ).toMatch(/call 1 is b's, not a's/);
            const overflow = { reward: 1e308, agents: { a: 1e308 }, milestones: [{ agent: "a", reward: 1e308 }] };
            expect(await message(await reward(overflow))).toMatch(/a's return .* is Infinity; expected a finite sum/);
            // (finite, but past what float32 holds: refused too)
            expect(await message(await reward({ reward: 1e39 }))).toMatch(/is 1e\+39; expected .* at most 1e\+30/);
            expect(g.episodes.get("r")).toMatchObject({ status: "open", reward: NaN, milestones: [] }); // unchanged
            const ok = await reward({
                reward: 1e30,
                agents: { b: -1e30 },
                milestones: [{ agent: "b", reward: 2, call: 1 }],
            });
            expect(await ok.json()).toEqual({ id: "r", status: "rewarded" });
            // the Responses API takes a boolean stream only
            const rs = await post(`${g.episodeUrl("s", "a")}/responses`, { input: "hi", stream: "true" });
            expect(await message(rs)).toMatch(/^stream: expected a boolean, got string/);
        } finally {
            await g.close();
        }
    });

    it("opening an open episode again merges its labels (a conflict is a 409); failing one rewarded in flight is a 409", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const g = await startGateway({ agents: { a: upstream(() => gate) }, port: 0 });
        const root = g.baseUrl.replace(/\/v1$/, "");
        try {
            expect((await post(`${root}/episodes`, { id: "m", meta: { item: 1 } })).status).toBe(200);
            expect((await post(`${root}/episodes`, { id: "m", meta: { group: 2 } })).status).toBe(200);
            expect(g.episodes.get("m")!.meta).toEqual({ item: 1, group: 2 });
            const clash = await post(`${root}/episodes`, { id: "m", meta: { item: 3 } });
            expect(clash.status).toBe(409);
            expect(g.episodes.get("m")!.meta).toEqual({ item: 1, group: 2 });

            const call = post(`${g.episodeUrl("m", "a")}/chat/completions`, { messages: q });
            await until(() => g.episodes.get("m")!.calls.length === 1);
            expect(await (await post(`${root}/episodes/m/reward`, { reward: 1 })).json()).toMatchObject({
                status: "closing",
            });
            const f = await post(`${root}/episodes/m/fail`, { reason: "late" });
            expect(f.status).toBe(409);
            release();
            expect((await call).status).toBe(200);
            expect(await g.episodes.wait("m")).toMatchObject({ status: "rewarded", reward: 1 });
            expect(g.episodes.get("m")!.reason).toBeUndefined();
            expect((await post(`${root}/episodes/m/fail`, { reason: 5 })).status).toBe(400);
        } finally {
            release();
            await g.close();
        }
    });

    it("a slow upload holds no generation slot; a conversation's history is shared between an agent's calls", async () => {
        const g = await startGateway({ agents: { a: upstream() }, port: 0, maxPending: 1 });
        const url = new URL(`${g.episodeUrl("u", "a")}/chat/completions`);
        const slow = request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST" });
        slow.on("error", () => {});
        try {
            slow.setHeader("content-length", "1000");
            slow.write('{"messages": ['); // (and nothing more for now)
            await new Promise((r) => setTimeout(r, 50));
            const convo = [...q, { role: "assistant", content: "ok" }, { role: "user", content: "again" }];
            expect((await post(url.href, { messages: q })).status).toBe(200);
            expect((await post(url.href, { messages: convo })).status).toBe(200);
            const [c0, c1] = g.episodes.get("u")!.calls;
            expect(c1.messages).toEqual(convo);
            expect(c1.messages[0]).toBe(c0.messages[0]); // (the same object, not a copy)
            expect(c1.messages[1]).not.toBe(c0.messages[0]);
        } finally {
            slow.destroy();
            await g.close();
        }
    });
});
