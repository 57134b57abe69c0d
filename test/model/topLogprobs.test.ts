// topLogprobs.test.ts: the k most likely tokens per sampled token (vLLM's logprobs=k on completions, top_logprobs on
// chat; raw softmax, as vLLM's default raw_logprobs): sorted, consistent with the greedy choice and with the model's
// own scoring of the same sequence (float64 reference), and out-of-range requests answered 400 naming the field.
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, servePolicy, type RunningServer } from "../../lib/index.js";
import { topRaw } from "../../lib/model/nativeDecode.js";

let policy: NativePolicy;
let srv: RunningServer;
beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 16, seed: 9, name: "m" });
    srv = await servePolicy(policy, { port: 0, model: "m" });
});
afterAll(async () => {
    await srv.close();
    await policy.dispose();
});

const post = async (route: string, body: unknown) => {
    const r = await fetch(`${srv.baseUrl}${route}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
    });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
};

describe("top log-probs", () => {
    it("topRaw is the float64 log-softmax's k largest, most likely first", () => {
        const z = Float32Array.from([0.5, 3, -1, 3, 2.25, -7]);
        const lse = Math.log([...z].reduce((a, x) => a + Math.exp(x), 0));
        expect(topRaw(z, 3)).toEqual(
            [
                { id: 1, logprob: 3 - lse },
                { id: 3, logprob: 3 - lse },
                { id: 4, logprob: 2.25 - lse },
            ].map((x) => ({ ...x, logprob: expect.closeTo(x.logprob, 12) })),
        );
        expect(topRaw(z, 6).map((x) => x.id)).toEqual([1, 3, 4, 0, 2, 5]);
    });

    it("generate: k alternatives per token; the greedy token is the first; the model's own scoring agrees", async () => {
        const [g] = await policy.generate([
            { prompt: "ab", sampling: { temperature: 0, maxTokens: 6, topLogprobs: 4 } },
        ]);
        expect(g.topLogprobs).toHaveLength(g.tokenIds!.length);
        // Score the same sequence: log p(token t | prefix) under the raw softmax.
        const seq = [...g.promptTokenIds!, ...g.tokenIds!],
            T = seq.length;
        const lp = await policy.logprobs({ tokens: Int32Array.from(seq), shape: [1, T] });
        g.topLogprobs!.forEach((alts, t) => {
            expect(alts).toHaveLength(4);
            expect(alts[0].id).toBe(g.tokenIds![t]); // greedy
            expect(alts[0].logprob).toBeCloseTo(lp[g.promptTokenIds!.length - 1 + t], 4);
            for (let j = 1; j < alts.length; j++) expect(alts[j].logprob).toBeLessThanOrEqual(alts[j - 1].logprob);
        });
        await expect(policy.generate([{ prompt: "x", sampling: { topLogprobs: 21 } }])).rejects.toThrow(
            /topLogprobs: expected an integer .*20/,
        );
    });

    it("maporl serve: completions logprobs=k and chat top_logprobs as vLLM shapes them; bad values are 400", async () => {
        const c = await post("/completions", { model: "m", prompt: "ab", max_tokens: 3, temperature: 0, logprobs: 2 });
        expect(c.status).toBe(200);
        const lc = (c.json.choices as { logprobs: { tokens: string[]; top_logprobs: Record<string, number>[] } }[])[0]
            .logprobs;
        expect(lc.top_logprobs).toHaveLength(lc.tokens.length);
        for (const d of lc.top_logprobs) expect(Object.keys(d).length).toBeGreaterThanOrEqual(1); // (two ids may decode to one piece)
        const h = await post("/chat/completions", {
            model: "m",
            messages: [{ role: "user", content: "ab" }],
            max_tokens: 3,
            temperature: 0,
            logprobs: true,
            top_logprobs: 3,
        });
        expect(h.status).toBe(200);
        const content = (
            h.json.choices as {
                logprobs: {
                    content: { token: string; top_logprobs: { token: string; logprob: number; bytes: number[] }[] }[];
                };
            }[]
        )[0].logprobs.content;
        for (const e of content) {
            expect(e.top_logprobs).toHaveLength(3);
            expect(e.top_logprobs[0].token).toBe(e.token);
        }
        // Streamed: each chunk's token with its alternatives.
        const s = await fetch(`${srv.baseUrl}/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
                model: "m",
                prompt: "ab",
                max_tokens: 3,
                temperature: 0,
                logprobs: 2,
                stream: true,
            }),
        });
        const chunks = (await s.text())
            .split("\n\n")
            .filter((l) => l.startsWith("data: {"))
            .map(
                (l) =>
                    JSON.parse(l.slice(6)) as {
                        choices: { logprobs: { top_logprobs: Record<string, number>[] } | null }[];
                    },
            );
        const tops = chunks.flatMap((x) => x.choices[0]?.logprobs?.top_logprobs ?? []);
        expect(tops.length).toBeGreaterThan(0);
        expect(tops.every((d) => Object.keys(d).length >= 1)).toBe(true);
        for (const [route, body, err] of [
            [
                "/completions",
                { prompt: "a", logprobs: 1e9 },
                /logprobs: expected an integer in \[0, 20\], got 1000000000/,
            ],
            ["/completions", { prompt: "a", logprobs: -1 }, /logprobs: expected an integer in \[0, 20\], got -1/],
            ["/completions", { prompt: "a", logprobs: 1.5 }, /logprobs: expected an integer/],
            [
                "/chat/completions",
                { messages: [{ role: "user", content: "a" }], logprobs: true, top_logprobs: 21 },
                /top_logprobs: expected an integer in \[0, 20\]/,
            ],
            [
                "/chat/completions",
                { messages: [{ role: "user", content: "a" }], top_logprobs: 2 },
                /top_logprobs: needs logprobs: true/,
            ],
        ] as const) {
            const r = await post(route, { model: "m", max_tokens: 2, ...body });
            expect([r.status, JSON.stringify(r.json)]).toEqual([400, expect.stringMatching(err)]);
        }
    });
});
