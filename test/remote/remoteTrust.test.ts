// remoteTrust.test.ts: what a server hands the HTTP clients is bounded and checked before it becomes data. Loopback
// servers that answer with bombs (a gzip body that expands past any sane size, a plain body past the bound), with
// ids out of range or not integers, with log-probs above 0 or not finite, with negative usage counts; a base URL
// carrying credentials (sent as Basic authorization, never echoed); a fleet endpoint that refuses every request with
// a 400 while the other answers (counted, ejected, its requests answered elsewhere); a policy returning a generation
// without text (the field named).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";

import { afterAll, describe, expect, it } from "vitest";

import { FleetPolicy, generateSettled, HttpVerifier, OpenAICompatiblePolicy, type Policy } from "../../lib/index.js";
import { redactUrl } from "../../lib/http.js";

const servers: Server[] = [];
afterAll(() => {
    for (const s of servers) {
        s.closeAllConnections();
        s.close();
    }
});

async function listen(handle: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<string> {
    const s = createServer((req, res) => {
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => handle(req, res, body));
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}/v1`;
}

const json = (res: ServerResponse, status: number, x: unknown) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(x));
};
const models = (res: ServerResponse) => json(res, 200, { data: [{ id: "m", owned_by: "vllm" }] });

// A vLLM-shaped chat reply with the given ids, log-probs and usage.
function reply(ids: unknown[], logprobs: unknown[], extra: Record<string, unknown> = {}): unknown {
    return {
        model: "m",
        prompt_token_ids: [1, 2, 3],
        choices: [
            {
                message: { role: "assistant", content: "ok" },
                finish_reason: "stop",
                token_ids: ids,
                logprobs: { content: logprobs.map((l, i) => ({ token: `token_id:${String(ids[i])}`, logprob: l })) },
            },
        ],
        usage: { prompt_tokens: 3, completion_tokens: ids.length },
        ...extra,
    };
}

const ask = [{ prompt: "hi", sampling: { maxTokens: 4 } }];

describe("reply size is bounded", () => {
    it("a gzip bomb (2 GiB once decoded) is a failed request after at most the bound, not a crash", async () => {
        const chunk = gzipSync(Buffer.alloc(64 << 20, 32)); // 64 MiB of spaces: ~65 KB compressed
        let posts = 0;
        const url = await listen((req, res) => {
            if (req.method === "GET") return models(res);
            posts++;
            res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" });
            for (let i = 0; i < 32; i++) res.write(chunk); // concatenated gzip members: 2 GiB decoded
            res.end();
        });
        const rss0 = process.memoryUsage().rss;
        const p = new OpenAICompatiblePolicy({
            baseUrl: url,
            model: "m",
            retries: 2,
            backoffMs: 1,
            maxResponseBytes: 8 << 20,
        });
        await expect(p.generate(ask)).rejects.toThrow(/over maxResponseBytes \(8388608\)/);
        expect(posts).toBe(1); // not retried: the same server would send the same
        expect(process.memoryUsage().rss - rss0).toBeLessThan(256 << 20);
    });

    it("a plain body past the default bound (64 MiB) is refused, by the verifier and the fleet too", async () => {
        const big = Buffer.alloc(65 << 20, 32);
        const url = await listen((req, res) => {
            if (req.method === "GET") return models(res);
            res.writeHead(200, { "content-type": "application/json" });
            res.end(big);
        });
        await expect(
            new OpenAICompatiblePolicy({ baseUrl: url, model: "m", retries: 0 }).generate(ask),
        ).rejects.toThrow(/over maxResponseBytes \(67108864\)/);
        await expect(
            new HttpVerifier({ url: `${url}/verify`, retries: 0, maxResponseBytes: 1024 }).score({
                response: "1",
                reference: "1",
            }),
        ).rejects.toThrow(/over maxResponseBytes \(1024\)/);
        const fleet = new FleetPolicy({
            endpoints: [url],
            model: "m",
            maxAttempts: 1,
            healthCheckIntervalMs: 0,
            maxResponseBytes: 4096,
        });
        try {
            await expect(fleet.generate(ask)).rejects.toThrow(/over maxResponseBytes \(4096\)/);
            expect(fleet.stats()[0]).toMatchObject({ requests: 1, errors: 1 });
        } finally {
            fleet.close();
        }
    });

    it("maxResponseBytes is checked by name", () => {
        expect(
            () => new OpenAICompatiblePolicy({ baseUrl: "http://127.0.0.1:1/v1", model: "m", maxResponseBytes: 0 }),
        ).toThrow(/maxResponseBytes: expected a number >= 1, got 0/);
        expect(
            () => new FleetPolicy({ endpoints: ["http://127.0.0.1:1/v1"], model: "m", maxResponseBytes: Number.NaN }),
        ).toThrow(/maxResponseBytes: expected an integer >= 1, got NaN/);
    });
});

describe("ids, log-probs and counts are checked", () => {
    // Each case: a reply and the field its error must name.
    const cases: [string, unknown, RegExp][] = [
        [
            "id past 2^31",
            reply([5, 2 ** 31], [-1, -1]),
            /choices\[0\]\.token_ids\[1\] = 2147483648, expected an integer in \[0, 2147483648\)/,
        ],
        ["id 2^32 + 7", reply([2 ** 32 + 7], [-1]), /token_ids\[0\] = 4294967303/],
        ["id 1e300", reply([1e300], [-1]), /token_ids\[0\] = 1e\+300/],
        ["fractional id", reply([1.5], [-1]), /token_ids\[0\] = 1\.5/],
        ["negative id", reply([-1], [-1]), /token_ids\[0\] = -1/],
        [
            "id past vocabSize",
            reply([5, 999_999], [-1, -1]),
            /token_ids\[1\] = 999999, expected an integer in \[0, 1000\) \(vocabSize 1000\)/,
        ],
        [
            "a huge token_id:N",
            {
                ...(reply([1], [-1]) as object),
                choices: [
                    {
                        message: { content: "x" },
                        logprobs: { content: [{ token: "token_id:99999999999999999999999", logprob: -1 }] },
                    },
                ],
            },
            /logprobs\.content\[0\]\.token = "token_id:99999999999999999999999"/,
        ],
        [
            "positive log-prob",
            reply([1, 2], [-1, 5.5]),
            /logprobs\.content\[1\]\.logprob: expected a finite number <= 0 .* got 5\.5/,
        ],
        ["log-prob 1e308", reply([1], [1e308]), /logprob: expected a finite number <= 0 .* got 1e\+308/],
        ["null log-prob", reply([1], [null]), /logprob: expected a finite number <= 0 .* got null/],
        ["NaN-ish log-prob", reply([1], ["NaN"]), /logprob: expected a finite number/],
        [
            "lengths differ",
            {
                ...(reply([1, 2], [-1, -1]) as object),
                choices: [
                    {
                        message: { content: "x" },
                        token_ids: [1, 2, 3],
                        logprobs: { content: [{ token: "a", logprob: -1 }] },
                    },
                ],
            },
            /3 token ids but 1 log-probs/,
        ],
        [
            "negative usage",
            reply([1], [-1], { usage: { prompt_tokens: -4, completion_tokens: 1 } }),
            /usage\.prompt_tokens: expected a count \(an integer >= 0\), got -4/,
        ],
        [
            "fractional usage",
            reply([1], [-1], { usage: { prompt_tokens: 3, completion_tokens: 0.5 } }),
            /usage\.completion_tokens: .* got 0\.5/,
        ],
        ["bad prompt ids", reply([1], [-1], { prompt_token_ids: [1, "2"] }), /prompt_token_ids\[1\] = "2"/],
        [
            "prompt ids not an array",
            reply([1], [-1], { prompt_token_ids: 7 }),
            /prompt_token_ids: expected an array of token ids/,
        ],
    ];
    for (const [what, body, error] of cases) {
        it(`${what}: a failed request naming the field`, async () => {
            const url = await listen((req, res) => (req.method === "GET" ? models(res) : json(res, 200, body)));
            const p = new OpenAICompatiblePolicy({
                baseUrl: url,
                model: "m",
                retries: 0,
                vocabSize: what.includes("vocabSize") ? 1000 : undefined,
            });
            await expect(p.generate(ask)).rejects.toThrow(error);
        });
    }

    it("a /tokenize id out of range is refused, and a valid reply still passes (log-prob within the rounding allowance)", async () => {
        const url = await listen((req, res) => {
            if (req.method === "GET") return models(res);
            if (req.url === "/tokenize") return json(res, 200, { tokens: [1, 99_999_999_999] });
            const r = reply([7, 8], [-0.5, 0.0004]) as { prompt_token_ids?: unknown };
            delete r.prompt_token_ids;
            json(res, 200, r);
        });
        await expect(
            new OpenAICompatiblePolicy({ baseUrl: url, model: "m", retries: 0 }).generate(ask),
        ).rejects.toThrow(/tokens\[1\] = 99999999999/);
        const ok = await listen((req, res) =>
            req.method === "GET" ? models(res) : json(res, 200, reply([7, 8], [-0.5, 0.0004])),
        );
        const [g] = await new OpenAICompatiblePolicy({ baseUrl: ok, model: "m", retries: 0, vocabSize: 9 }).generate(
            ask,
        );
        expect(g).toMatchObject({
            tokenIds: [7, 8],
            promptTokenIds: [1, 2, 3],
            logprobs: [-0.5, 0.0004],
            tokenIdsExact: true,
        });
    });

    it("vocabSize is checked by name", () => {
        expect(
            () => new OpenAICompatiblePolicy({ baseUrl: "http://127.0.0.1:1/v1", model: "m", vocabSize: 2 ** 32 }),
        ).toThrow(/vocabSize: expected an integer in \[1, 2\^31\]/);
    });
});

describe("credentials in a base URL", () => {
    it("are sent as Basic authorization and appear in no message, stat or generation", async () => {
        let auth: string | undefined;
        const good = await listen((req, res) => {
            auth = req.headers.authorization;
            return req.method === "GET" ? models(res) : json(res, 200, reply([1], [-1]));
        });
        const withCred = (u: string) => u.replace("http://", "http://alice:s3cret%21@");
        const [g] = await new OpenAICompatiblePolicy({ baseUrl: withCred(good), model: "m", retries: 0 }).generate(ask);
        expect(auth).toBe(`Basic ${Buffer.from("alice:s3cret!").toString("base64")}`);
        expect(JSON.stringify(g)).not.toMatch(/s3cret/);

        const bad = await listen((_req, res) => json(res, 500, { error: "boom" }));
        const err = await new OpenAICompatiblePolicy({
            baseUrl: withCred(bad),
            model: "m",
            retries: 1,
            backoffMs: 1,
            dialect: "vllm",
        })
            .generate(ask)
            .catch((e: Error) => e);
        expect(String((err as Error).message)).toMatch(/failed after 2 attempts: HTTP 500/);
        expect(String((err as Error).message)).not.toMatch(/alice|s3cret/);

        const fleet = new FleetPolicy({
            endpoints: [withCred(bad)],
            model: "m",
            maxAttempts: 1,
            healthCheckIntervalMs: 0,
            dialect: "vllm",
        });
        try {
            const e2 = await fleet.generate(ask).catch((e: Error) => e);
            expect((e2 as Error).message).toMatch(/HTTP 500/);
            expect(`${(e2 as Error).message} ${JSON.stringify(fleet.stats())} ${fleet.endpoints.join()}`).not.toMatch(
                /alice|s3cret/,
            );
        } finally {
            fleet.close();
        }
        expect(redactUrl("http://u:p@h:1/v1")).toBe("http://***@h:1/v1");
        expect(() => new OpenAICompatiblePolicy({ baseUrl: withCred(good), model: "m", apiKey: "k" })).toThrow(
            /credentials in the URL and apiKey both given/,
        );
    });
});

describe("failures are loud", () => {
    it("a fleet endpoint that answers 400 to what the other answers is counted, ejected, and its requests answered elsewhere", async () => {
        const refuse = await listen((req, res) =>
            req.method === "GET"
                ? req.url === "/health"
                    ? json(res, 200, {})
                    : models(res)
                : json(res, 400, { error: "no" }),
        );
        const answer = await listen((req, res) =>
            req.method === "GET" ? models(res) : json(res, 200, reply([1], [-1])),
        );
        const fleet = new FleetPolicy({
            endpoints: [refuse, answer],
            model: "m",
            healthCheckIntervalMs: 0,
            probeIntervalMs: 60_000,
            dialect: "vllm",
        });
        try {
            const out = await fleet.generateSettled(
                Array.from({ length: 40 }, (_, i) => ({ prompt: `q${i}`, sampling: { maxTokens: 2 } })),
            );
            expect(out.filter((x) => !x.ok)).toHaveLength(0);
            const s = fleet.stats().find((x) => x.url === refuse)!;
            expect(s.requests).toBeGreaterThan(0);
            expect(s.errors).toBe(s.requests);
            expect(s.lastError).toMatch(/HTTP 400/);
            expect(s.ejections).toBe(1);
            expect(s.healthy).toBe(false);
        } finally {
            fleet.close();
        }
    });

    it("a request every endpoint refuses is the request's fault: it fails, and no endpoint is ejected", async () => {
        const a = await listen((req, res) =>
            req.method === "GET" ? models(res) : json(res, 400, { error: "prompt too long" }),
        );
        const b = await listen((req, res) =>
            req.method === "GET" ? models(res) : json(res, 400, { error: "prompt too long" }),
        );
        const fleet = new FleetPolicy({ endpoints: [a, b], model: "m", healthCheckIntervalMs: 0, dialect: "vllm" });
        try {
            for (let k = 0; k < 3; k++)
                await expect(fleet.generate(ask)).rejects.toThrow(
                    /refused by 2 endpoints: .*HTTP 400.*prompt too long/,
                );
            expect(fleet.stats().map((s) => [s.healthy, s.ejections, s.requests])).toEqual([
                [true, 0, 3],
                [true, 0, 3],
            ]);
        } finally {
            fleet.close();
        }
    });

    it("a generation without text names the field", async () => {
        const p: Policy = { name: "bad", generate: async () => [{ text: undefined } as never] };
        const [out] = await generateSettled(p, [{ prompt: "x" }]);
        expect(out.ok).toBe(false);
        expect((out as { error: Error }).error.message).toMatch(
            /bad: generate\(\) returned generation 0 with text undefined, expected a string/,
        );
    });
});
