// server.test.ts: a NativePolicy served over the OpenAI-compatible protocol on loopback, driven by
// OpenAICompatiblePolicy (the debate backend): text, token log-probs and usage come back and match the policy's
// own generation for the same seed; a debate runs over it; bad requests get 400s with a message.
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Debate, NativePolicy, OpenAICompatiblePolicy, servePolicy, type RunningServer } from "../../lib/index.js";

let policy: NativePolicy;
let srv: RunningServer;

beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 1024, layers: 1, heads: 2, dModel: 16, seed: 2 });
    srv = await servePolicy(policy, { port: 0, model: "tiny" });
});
afterAll(async () => {
    await srv.close();
    await policy.dispose();
});

describe("servePolicy", () => {
    it("answers chat completions with log-probs, the same as the policy itself", async () => {
        const client = new OpenAICompatiblePolicy({ baseUrl: srv.baseUrl, model: "tiny" });
        const req = {
            messages: [{ role: "user" as const, content: "hello" }],
            sampling: { temperature: 0.9, maxTokens: 6 },
            seed: 11,
        };
        const [remote] = await client.generate([req]);
        const [local] = await policy.generate([req]);
        expect(remote.text).toBe(local.text);
        expect(remote.logprobs).toEqual(local.logprobs);
        expect(remote.usage).toEqual(local.usage);
        // The exact ids the server read and sampled (vLLM's return_token_ids), the stop token included.
        expect(remote.tokenIdsExact).toBe(true);
        expect(remote.tokenIds).toEqual(local.tokenIds);
        expect(remote.promptTokenIds).toEqual(local.promptTokenIds);
        expect(remote.promptTokenIds).toEqual(policy.tokenizer.encodeChat(req.messages));
        expect(remote.model).toBe("tiny");
        // A client in the plain OpenAI dialect gets text pieces and no ids, and says so.
        const [plain] = await new OpenAICompatiblePolicy({
            baseUrl: srv.baseUrl,
            model: "tiny",
            dialect: "openai",
        }).generate([req]);
        expect(plain.tokens).toEqual(local.tokenIds!.map((t) => policy.tokenizer.decode([t])));
        expect(plain.tokenIds).toBeUndefined();
        expect(plain.tokenIdsExact).toBe(false);
        expect(plain.logprobs).toEqual(local.logprobs);
        const models = (await (await fetch(`${srv.baseUrl}/models`)).json()) as { data: { id: string }[] };
        expect(models.data[0].id).toBe("tiny");
    });

    it("serves a debate and rejects bad requests with 400", async () => {
        const agents = [0, 1].map(() => new OpenAICompatiblePolicy({ baseUrl: srv.baseUrl, model: "tiny" }));
        const tr = await new Debate({ agents, turns: 2, sampling: { maxTokens: 4 }, seed: 1 }).run({
            question: "1+1?",
            reference: 2,
        });
        expect(tr.turns.length).toBe(2);
        const post = (body: unknown) =>
            fetch(`${srv.baseUrl}/chat/completions`, {
                method: "POST",
                body: typeof body === "string" ? body : JSON.stringify(body),
            });
        const bad = await post("{oops");
        expect(bad.status).toBe(400);
        expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/not JSON/);
        expect((await post({ messages: [] })).status).toBe(400);
        expect((await post({ messages: [{ role: "user", content: "x" }], stream: "yes" })).status).toBe(400);
        expect((await post({ messages: [{ role: "user", content: "x".repeat(1100) }] })).status).toBe(400); // longer than the context
        expect((await fetch(`${srv.baseUrl}/nope`)).status).toBe(404);
        const msg = async (r: Response) => ((await r.json()) as { error: { message: string } }).error.message;
        const typed = await post({ messages: [{ role: "user", content: "x" }], top_p: "0.9" }); // JSON numbers only
        expect(typed.status).toBe(400);
        expect(await msg(typed)).toMatch(/top_p: expected a number, got string/);
        const range = await post({ messages: [{ role: "user", content: "x" }], temperature: -2 });
        expect(range.status).toBe(400);
        expect(await msg(range)).toMatch(/^temperature: expected a number in \[0, 3\.40\d*e\+38\], got -2/); // (the wire name)
        const huge = await post({ messages: [{ role: "user", content: "x" }], temperature: 1e308 }); // (past float32)
        expect(await msg(huge)).toMatch(/^temperature: expected a number in \[0, /);
        const tokens = await post({ messages: [{ role: "user", content: "x" }], max_completion_tokens: 1.5 });
        expect(await msg(tokens)).toMatch(/^max_completion_tokens: expected an integer/);
        const seed = await post({ messages: [{ role: "user", content: "x" }], seed: 2 ** 64 });
        expect(await msg(seed)).toMatch(/^seed: expected an integer in \[-2\^63, 2\^64\)/);
        // an integer past 2^53 is taken exactly (a JSON number that is an integer), its n choices seed + i
        const big = await post({ messages: [{ role: "user", content: "x" }], seed: 2 ** 60, n: 2, max_tokens: 2 });
        expect(big.status).toBe(200);
    });

    it("answers n choices, the first as a single request, and refuses malformed n / logprobs / bodies", async () => {
        const post = (body: unknown) =>
            fetch(`${srv.baseUrl}/chat/completions`, { method: "POST", body: JSON.stringify(body) });
        const req = { messages: [{ role: "user", content: "hi" }], temperature: 1, max_tokens: 6, seed: 5 };
        type Reply = {
            choices: { index: number; message: { content: string } }[];
            usage: { completion_tokens: number };
        };
        const one = (await (await post(req)).json()) as Reply,
            three = (await (await post({ ...req, n: 3 })).json()) as Reply;
        expect(three.choices.map((c) => c.index)).toEqual([0, 1, 2]);
        expect(three.choices[0].message.content).toBe(one.choices[0].message.content);
        const second = await policy.generate([
            { messages: req.messages as never, sampling: { temperature: 1, maxTokens: 6 }, seed: 6 },
        ]);
        expect(three.choices[1].message.content).toBe(second[0].text); // choice i = seed + i
        expect(three.usage.completion_tokens).toBeGreaterThanOrEqual(one.usage.completion_tokens);
        // without a seed, each request draws its own (as vLLM): four identical requests are not one answer four times
        const unseeded = { ...req, seed: undefined, max_tokens: 12 };
        const texts = await Promise.all(
            [0, 1, 2, 3].map(async () => ((await (await post(unseeded)).json()) as Reply).choices[0].message.content),
        );
        expect(new Set(texts).size).toBeGreaterThan(1);
        for (const [bad, re] of [
            [{ ...req, n: 0 }, /n: expected an integer in \[1, 64\], got 0/],
            [{ ...req, n: 1.5 }, /n: expected an integer/],
            [{ ...req, logprobs: "yes" }, /logprobs: expected a boolean, got string/],
            [null, /the body: expected a JSON object/],
            [[req], /the body: expected a JSON object/],
        ] as const) {
            const r = await post(bad);
            expect(r.status).toBe(400);
            expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(re);
        }
    });

    it("passes stop strings through, as the policy applies them", async () => {
        const client = new OpenAICompatiblePolicy({ baseUrl: srv.baseUrl, model: "tiny" });
        const req = {
            messages: [{ role: "user" as const, content: "hi" }],
            sampling: { temperature: 0, maxTokens: 24 },
        };
        const [full] = await policy.generate([req]);
        const stop = full.text.slice(2, 3);
        const [remote] = await client.generate([{ ...req, sampling: { ...req.sampling, stop: [stop] } }]);
        expect(remote.text).toBe(full.text.slice(0, full.text.indexOf(stop)));
        expect(remote.finishReason).toBe("stop");
    });
});
