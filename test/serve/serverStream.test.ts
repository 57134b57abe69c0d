// serverStream.test.ts: `stream: true` on servePolicy (server-sent events, OpenAI's and vLLM's chunk shapes): the
// streamed pieces add up to the non-streamed answer for the same seed (text, log-probs, token ids, finish reason,
// usage), a stop string never reaches the client, no chunk ends inside a character (byte-level BPE), a policy that
// does not stream sends its answer whole, a refused request keeps its HTTP status, a closed client stops nothing else.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, servePolicy, type Policy, type RunningServer } from "../../lib/index.js";
import { tinyHfModel } from "../helpers/serve.js";

let policy: NativePolicy;
let srv: RunningServer;

beforeAll(async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "maporl-stream-")), "model");
    await tinyHfModel(dir, 5);
    policy = await NativePolicy.load(dir);
    srv = await servePolicy(policy, { port: 0, model: "tiny" });
});
afterAll(async () => {
    await srv.close();
    await policy.dispose();
});

type Chunk = {
    object: string;
    choices: {
        index: number;
        delta?: { role?: string; content?: string };
        text?: string;
        finish_reason: string | null;
        logprobs: null | { content?: { logprob: number }[]; token_logprobs?: number[] };
        token_ids?: number[];
    }[];
    usage?: { completion_tokens: number; prompt_tokens: number };
};

async function stream(
    base: string,
    route: string,
    body: Record<string, unknown>,
): Promise<{ chunks: Chunk[]; done: boolean; raw: string }> {
    const res = await fetch(`${base}/${route}`, { method: "POST", body: JSON.stringify({ ...body, stream: true }) });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const raw = await res.text();
    const events = raw
        .split("\n\n")
        .filter((e) => e !== "")
        .map((e) => {
            expect(e.startsWith("data: ")).toBe(true);
            return e.slice(6);
        });
    const done = events.at(-1) === "[DONE]";
    return { chunks: events.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e) as Chunk), done, raw };
}

const post = async (route: string, body: unknown) =>
    (await fetch(`${srv.baseUrl}/${route}`, { method: "POST", body: JSON.stringify(body) })).json() as Promise<{
        choices: {
            message?: { content: string };
            text?: string;
            finish_reason: string;
            token_ids: number[];
            logprobs: { content?: { logprob: number }[]; token_logprobs?: number[] };
        }[];
        usage: unknown;
    }>;

describe("servePolicy stream: true", () => {
    it("chat: the pieces add up to the non-streamed answer (text, log-probs, token ids, finish reason, usage)", async () => {
        const body = {
            messages: [{ role: "user", content: "Grüße, 你好!" }],
            temperature: 1,
            max_tokens: 24,
            seed: 3,
            n: 2,
            logprobs: true,
            return_token_ids: true,
        };
        const whole = await post("chat/completions", body);
        const { chunks, done } = await stream(srv.baseUrl, "chat/completions", {
            ...body,
            stream_options: { include_usage: true },
        });
        expect(done).toBe(true);
        expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
        for (let i = 0; i < 2; i++) {
            const mine = chunks.filter((c) => c.choices[0]?.index === i).map((c) => c.choices[0]);
            expect(mine[0].delta).toEqual({ role: "assistant", content: "" });
            expect(mine.map((c) => c.delta?.content ?? "").join("")).toBe(whole.choices[i].message!.content);
            expect(mine.flatMap((c) => c.logprobs?.content?.map((x) => x.logprob) ?? [])).toEqual(
                whole.choices[i].logprobs.content!.map((x) => x.logprob),
            );
            expect(mine.flatMap((c) => c.token_ids ?? [])).toEqual(whole.choices[i].token_ids);
            expect(mine.at(-1)!.finish_reason).toBe(whole.choices[i].finish_reason);
            expect(mine.slice(0, -1).every((c) => c.finish_reason === null)).toBe(true);
            expect(mine.length).toBeGreaterThan(3); // token by token, not the answer at the end
            // a chunk never ends inside a character
            expect(mine.some((c) => (c.delta?.content ?? "").includes("\uFFFD"))).toBe(
                whole.choices[i].message!.content.includes("\uFFFD"),
            );
        }
        const usage = chunks.at(-1)!;
        expect(usage.choices).toEqual([]);
        expect(usage.usage).toEqual(whole.usage);
    });

    it("a stop string never reaches the client; completions stream text chunks", async () => {
        const base = { messages: [{ role: "user", content: "count" }], temperature: 1, max_tokens: 30, seed: 9 };
        const free = (await post("chat/completions", base)).choices[0].message!.content;
        expect(free.length).toBeGreaterThan(8);
        const stop = free.slice(5, 8); // a string the free answer contains
        const cut = await post("chat/completions", { ...base, stop });
        expect(cut.choices[0].message!.content).toBe(free.slice(0, free.indexOf(stop)));
        const { chunks } = await stream(srv.baseUrl, "chat/completions", { ...base, stop });
        const texts = chunks.map((c) => c.choices[0]?.delta?.content ?? "");
        expect(texts.join("")).toBe(cut.choices[0].message!.content);
        expect(texts.join("")).not.toContain(stop);
        expect(chunks.at(-1)!.choices[0].finish_reason).toBe("stop");

        const cbody = { prompt: "1 2 3", temperature: 1, max_tokens: 12, seed: 4, logprobs: 1 };
        const cw = await post("completions", cbody);
        const cs = await stream(srv.baseUrl, "completions", cbody);
        expect(cs.chunks.every((c) => c.object === "text_completion")).toBe(true);
        expect(cs.chunks.map((c) => c.choices[0].text).join("")).toBe(cw.choices[0].text);
        expect(cs.chunks.flatMap((c) => c.choices[0].logprobs?.token_logprobs ?? [])).toEqual(
            cw.choices[0].logprobs.token_logprobs,
        );
    });

    it("a refused request keeps its status; a bad stream flag is a 400; a closed client leaves the server answering", async () => {
        const long = await fetch(`${srv.baseUrl}/chat/completions`, {
            method: "POST",
            body: JSON.stringify({ messages: [{ role: "user", content: "x".repeat(2000) }], stream: true }),
        });
        expect(long.status).toBe(400);
        expect(((await long.json()) as { error: { message: string } }).error.message).toMatch(/the context is 1024/);
        const bad = await fetch(`${srv.baseUrl}/chat/completions`, {
            method: "POST",
            body: JSON.stringify({ messages: [{ role: "user", content: "x" }], stream: 1 }),
        });
        expect(bad.status).toBe(400);
        const ac = new AbortController();
        const res = await fetch(`${srv.baseUrl}/chat/completions`, {
            method: "POST",
            signal: ac.signal,
            body: JSON.stringify({
                messages: [{ role: "user", content: "go" }],
                max_tokens: 900,
                temperature: 1,
                stream: true,
            }),
        });
        const reader = res.body!.getReader();
        await reader.read(); // the first event
        ac.abort();
        const t0 = performance.now();
        const after = await post("chat/completions", {
            messages: [{ role: "user", content: "hi" }],
            max_tokens: 4,
            seed: 1,
        });
        expect(after.choices[0].finish_reason).toMatch(/stop|length/);
        expect(performance.now() - t0).toBeLessThan(20_000);
    });

    it("a policy that does not stream sends each answer in one chunk", async () => {
        const whole: Policy = {
            name: "fake",
            generate: async (reqs) =>
                reqs.map((_, i) => ({
                    text: `answer ${i}`,
                    tokenIds: [1, 2],
                    logprobs: [-0.5, -0.25],
                    finishReason: "stop",
                    usage: { promptTokens: 3, completionTokens: 2 },
                    latencyMs: 1,
                })),
        };
        const s = await servePolicy(whole, { port: 0 });
        try {
            const { chunks, done } = await stream(s.baseUrl, "chat/completions", {
                messages: [{ role: "user", content: "q" }],
                n: 2,
                logprobs: true,
            });
            expect(done).toBe(true);
            for (const i of [0, 1]) {
                const mine = chunks.filter((c) => c.choices[0]?.index === i).map((c) => c.choices[0]);
                expect(mine.map((c) => c.delta?.content ?? "").join("")).toBe(`answer ${i}`);
                expect(mine.flatMap((c) => c.logprobs?.content?.map((x) => x.logprob) ?? [])).toEqual([-0.5, -0.25]);
                expect(mine.at(-1)!.finish_reason).toBe("stop");
            }
        } finally {
            await s.close();
        }
    });
});
