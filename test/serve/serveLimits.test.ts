// serveLimits.test.ts: `servePolicy` (what `maporl serve` runs) against a hostile client, each a reproducer that
// failed before: a 900 KB prompt (a 400 "Maximum call stack size exceeded" from a spread, now a 400 that gives the
// context limit), a body over maxBodyBytes (a TCP reset, now 413 with a message), a `model` other than the served
// one (accepted, now 404 naming both, as vLLM), and more requests than maxPending (queued without bound, now 503
// with Retry-After while the server keeps answering).
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    NativePolicy,
    servePolicy,
    type GenerateRequest,
    type Generation,
    type Policy,
    type RunningServer,
} from "../../lib/index.js";

let policy: NativePolicy;
let srv: RunningServer;

beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 16, seed: 2 });
    srv = await servePolicy(policy, { port: 0, model: "tiny", maxBodyBytes: 1 << 20 });
});
afterAll(async () => {
    await srv.close();
    await policy.dispose();
});

const post = (base: string, body: unknown) =>
    fetch(`${base}/chat/completions`, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
const message = async (r: Response) => ((await r.json()) as { error: { message: string } }).error.message;

describe("maporl serve: input limits", () => {
    it("a 900 KB prompt is a 400 that gives the context; generate() itself says the same", async () => {
        const long = "x".repeat(900_000);
        const r = await post(srv.baseUrl, { model: "tiny", messages: [{ role: "user", content: long }] });
        expect(r.status).toBe(400);
        expect(await message(r)).toMatch(/the prompt is at least 450000 tokens, the context is 64/);
        await expect(policy.generate([{ prompt: long }])).rejects.toThrow(
            /the prompt is at least 450000 tokens, the context is 64/,
        );
    });

    it("a body over maxBodyBytes is a 413 with a message, not a reset; the server goes on", async () => {
        const r = await post(srv.baseUrl, {
            model: "tiny",
            messages: [{ role: "user", content: "y".repeat(1_200_000) }],
        });
        expect(r.status).toBe(413);
        expect(await message(r)).toMatch(
            /the request body is \d+ bytes, over the 1048576 this server accepts \(maxBodyBytes\)/,
        );
        const ok = await post(srv.baseUrl, {
            model: "tiny",
            messages: [{ role: "user", content: "hi" }],
            max_tokens: 2,
        });
        expect(ok.status).toBe(200);
    });

    it("a request at temperature 1e-38 is answered (it wedged the server) and the server goes on", async () => {
        const r = await post(srv.baseUrl, {
            model: "tiny",
            messages: [{ role: "user", content: "hi" }],
            temperature: 1e-38,
            top_p: 0.9,
            max_tokens: 3,
        });
        expect(r.status).toBe(200);
        const greedy = await post(srv.baseUrl, {
            model: "tiny",
            messages: [{ role: "user", content: "hi" }],
            temperature: 0,
            max_tokens: 3,
        });
        const text = (x: unknown) => (x as { choices: { message: { content: string } }[] }).choices[0].message.content;
        expect(text(await r.json())).toBe(text(await greedy.json())); // 1e-38 samples as temperature 0 here
        expect((await fetch(`${srv.baseUrl}/models`)).status).toBe(200);
    });

    it("a model other than the served one is a 404 naming both", async () => {
        const r = await post(srv.baseUrl, { model: "gpt-4", messages: [{ role: "user", content: "hi" }] });
        expect(r.status).toBe(404);
        expect(await message(r)).toBe("The model `gpt-4` does not exist; this server serves `tiny`");
    });

    it("past maxPending requests, 503 with Retry-After; the others are answered", async () => {
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        const slow: Policy = {
            name: "slow",
            async generate(reqs: GenerateRequest[]): Promise<Generation[]> {
                await gate;
                return reqs.map(() => ({
                    text: "ok",
                    finishReason: "stop",
                    usage: { promptTokens: 1, completionTokens: 1 },
                    latencyMs: 0,
                }));
            },
        };
        const s = await servePolicy(slow, { port: 0, maxPending: 3 });
        try {
            const body = { messages: [{ role: "user", content: "hi" }] };
            const first = [0, 1, 2].map(() => post(s.baseUrl, body));
            await new Promise((r) => setTimeout(r, 100));
            const busy = await post(s.baseUrl, body);
            expect(busy.status).toBe(503);
            expect(busy.headers.get("retry-after")).toBe("1");
            expect(await message(busy)).toMatch(/busy: 3 requests .* \(maxPending 3\)/);
            expect((await fetch(`${s.baseUrl}/models`)).status).toBe(200); // the server itself still answers
            release();
            expect((await Promise.all(first)).map((r) => r.status)).toEqual([200, 200, 200]);
            expect((await post(s.baseUrl, body)).status).toBe(200);
        } finally {
            release();
            await s.close();
        }
    });
});
