// tokenIds.test.ts: token-exact generations over HTTP. A real `maporl serve` process (vLLM's dialect) gives the exact
// prompt and completion ids and the behaviour log-probs the policy itself produces for the same seed; through a proxy
// that strips the id fields (a vLLM without return_token_ids) the client still gets them, from "token_id:N" logprob
// tokens and POST /tokenize; a small server in SGLang's shape (per-choice prompt_token_ids / token_ids, adapters by
// lora_path) gives the same; a plain OpenAI server gives text only and the generation says so. The server's
// /tokenize, /detokenize, /v1/completions with token-id prompts, /health and /version answer as vLLM's do.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { type ChatMessage, NativePolicy, OpenAICompatiblePolicy } from "../../lib/index.js";
import { chatBody } from "../../lib/remote/openaiDialect.js";
import { startServe, tinyCheckpoint, type ServeProcess } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-ids-"));
let local: NativePolicy;
let srv: ServeProcess;
const servers: Server[] = [];

beforeAll(async () => {
    local = await tinyCheckpoint(join(work, "ckpt"), 256, 7);
    srv = await startServe(join(work, "ckpt"));
});
afterAll(async () => {
    await srv?.stop();
    for (const s of servers) {
        s.closeAllConnections();
        s.close();
    }
    await local?.dispose();
    rmSync(work, { recursive: true, force: true });
});

// A loopback server around `handle` (the body parsed as JSON, or null for a GET).
async function serve(
    handle: (url: string, body: Record<string, unknown> | null) => Promise<[number, unknown]>,
): Promise<string> {
    const s = createServer((req, res) => {
        let data = "";
        req.on("data", (c) => (data += c));
        const reply = async () => {
            const [status, out] = await handle(
                req.url ?? "",
                data ? (JSON.parse(data) as Record<string, unknown>) : null,
            );
            const text = typeof out === "string" ? out : JSON.stringify(out);
            res.writeHead(status, { "content-type": typeof out === "string" ? "text/plain" : "application/json" });
            res.end(text);
        };
        req.on("end", () => void reply().catch(() => res.destroy()));
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}/v1`;
}

const messages: ChatMessage[] = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "What is 12 + 30?" },
];
const reqs = [0, 1, 2].map((i) => ({ messages, sampling: { temperature: 1, maxTokens: 12 }, seed: 40 + i }));

describe("token-exact generations from a server", () => {
    it("maporl serve (vLLM's dialect): the exact ids and behaviour log-probs of the policy itself", async () => {
        const client = new OpenAICompatiblePolicy({ baseUrl: srv.baseUrl, model: "tiny" });
        expect(await client.resolveDialect()).toBe("vllm");
        const remote = await client.generate(reqs),
            mine = await local.generate(reqs);
        remote.forEach((g, i) => {
            expect(g.tokenIdsExact).toBe(true);
            expect(g.tokenIds).toEqual(mine[i].tokenIds);
            expect(g.promptTokenIds).toEqual(mine[i].promptTokenIds);
            expect(g.logprobs).toEqual(mine[i].logprobs); // JSON carries float32 values exactly
            expect(g.text).toBe(mine[i].text);
            expect(g.logprobs!.length).toBe(g.tokenIds!.length);
            expect(g.endpoint).toBe(srv.baseUrl);
        });
        expect(new Set(remote.map((g) => g.tokenIds!.join())).size).toBeGreaterThan(1); // the seeds really differ
    });

    it("a vLLM without return_token_ids: ids from token_id:N log-prob tokens, the prompt's from POST /tokenize", async () => {
        let tokenizeCalls = 0;
        const proxy = await serve(async (url, body) => {
            const target = `${srv.baseUrl.replace(/\/v1$/, "")}${url}`;
            if (url.endsWith("/tokenize")) tokenizeCalls++;
            const r = await fetch(target, body ? { method: "POST", body: JSON.stringify(body) } : {});
            const j = (await r.json()) as Record<string, unknown>;
            if (url === "/v1/chat/completions") {
                // an older vLLM: no id fields
                delete j.prompt_token_ids;
                for (const c of j.choices as Record<string, unknown>[]) delete c.token_ids;
            }
            return [r.status, j];
        });
        const client = new OpenAICompatiblePolicy({ baseUrl: proxy, model: "tiny" });
        const [g] = await client.generate([reqs[0]]),
            [want] = await local.generate([reqs[0]]);
        expect(g.tokenIdsExact).toBe(true);
        expect(g.tokenIds).toEqual(want.tokenIds);
        expect(g.tokens).toEqual(want.tokenIds); // "token_id:N" read as ids
        expect(g.promptTokenIds).toEqual(want.promptTokenIds);
        expect(tokenizeCalls).toBe(1);
    });

    it("SGLang's shape: per-choice prompt_token_ids and token_ids, adapters by lora_path", async () => {
        const seen: Record<string, unknown>[] = [];
        const sglang = await serve(async (url, body) => {
            if (url === "/v1/models")
                return [200, { object: "list", data: [{ id: "tiny", object: "model", owned_by: "sglang" }] }];
            seen.push(body!);
            const [g] = await local.generate([
                {
                    messages: body!.messages as ChatMessage[],
                    sampling: { temperature: body!.temperature as number, maxTokens: body!.max_tokens as number },
                    seed: body!.seed as number,
                },
            ]);
            return [
                200,
                {
                    id: "x",
                    object: "chat.completion",
                    model: "tiny",
                    choices: [
                        {
                            index: 0,
                            message: { role: "assistant", content: g.text },
                            finish_reason: g.finishReason,
                            logprobs: {
                                content: g.tokenIds!.map((t, i) => ({
                                    token: local.tokenizer.decode([t]),
                                    logprob: g.logprobs![i],
                                    bytes: [],
                                    top_logprobs: [],
                                })),
                            },
                            ...(body!.return_prompt_token_ids ? { prompt_token_ids: g.promptTokenIds } : {}),
                            ...(body!.return_token_ids ? { token_ids: g.tokenIds } : {}),
                        },
                    ],
                    usage: {
                        prompt_tokens: g.usage.promptTokens,
                        completion_tokens: g.usage.completionTokens,
                        total_tokens: 0,
                    },
                },
            ];
        });
        const client = new OpenAICompatiblePolicy({ baseUrl: sglang, model: "tiny" });
        expect(await client.resolveDialect()).toBe("sglang");
        const [g] = await client.generate([reqs[1]]),
            [want] = await local.generate([reqs[1]]);
        expect(seen[0]).toMatchObject({
            return_prompt_token_ids: true,
            return_token_ids: true,
            logprobs: true,
            model: "tiny",
        });
        expect(seen[0].return_tokens_as_token_ids).toBeUndefined();
        expect(g.tokenIdsExact).toBe(true);
        expect(g.tokenIds).toEqual(want.tokenIds);
        expect(g.promptTokenIds).toEqual(want.promptTokenIds);
        expect(g.logprobs).toEqual(want.logprobs);
        expect(g.tokens).toEqual(want.tokenIds!.map((t) => local.tokenizer.decode([t]))); // SGLang's pieces kept as text
        // An adapter: SGLang names it by lora_path on the base model; vLLM (and maporl serve) by the model name.
        const body = (dialect: "sglang" | "vllm") =>
            JSON.parse(
                chatBody("t", reqs[0], 0, { model: "tiny", adapter: "a0-v2", dialect, logprobs: true }).json,
            ) as Record<string, unknown>;
        expect(body("sglang")).toMatchObject({ model: "tiny", lora_path: "a0-v2" });
        expect(body("vllm")).toMatchObject({
            model: "a0-v2",
            return_token_ids: true,
            return_tokens_as_token_ids: true,
            seed: 40,
        });
        expect(body("vllm").lora_path).toBeUndefined();
    });

    it("a plain OpenAI server: text and pieces only, tokenIdsExact false; a reply whose ids and log-probs disagree is malformed", async () => {
        let reply: unknown = null;
        const plain = await serve(async (url) => {
            if (url === "/v1/models")
                return [200, { object: "list", data: [{ id: "gpt-x", object: "model", owned_by: "openai" }] }];
            return [200, reply];
        });
        reply = {
            choices: [
                {
                    index: 0,
                    finish_reason: "stop",
                    message: { role: "assistant", content: "42" },
                    logprobs: { content: [{ token: "42", logprob: -0.1 }] },
                },
            ],
        };
        const [g] = await new OpenAICompatiblePolicy({ baseUrl: plain, model: "gpt-x" }).generate([{ prompt: "hi" }]);
        expect(g).toMatchObject({ text: "42", tokens: ["42"], logprobs: [-0.1], tokenIdsExact: false });
        expect(g.tokenIds).toBeUndefined();
        reply = {
            choices: [
                {
                    index: 0,
                    finish_reason: "stop",
                    message: { role: "assistant", content: "42" },
                    token_ids: [5, 6],
                    logprobs: { content: [{ token: "42", logprob: -0.1 }] },
                },
            ],
            prompt_token_ids: [1],
        };
        await expect(
            new OpenAICompatiblePolicy({ baseUrl: plain, model: "gpt-x", dialect: "vllm", retries: 0 }).generate([
                { prompt: "hi" },
            ]),
        ).rejects.toThrow(/malformed reply: 2 token ids but 1 log-probs/);
        expect(() => new OpenAICompatiblePolicy({ baseUrl: plain, model: "gpt-x", dialect: "tgi" as never })).toThrow(
            /dialect: expected 'auto', 'vllm', 'sglang', 'openai', got "tgi"/,
        );
    });
});

describe("maporl serve's vLLM endpoints", () => {
    const root = () => srv.baseUrl.replace(/\/v1$/, "");
    const post = async (path: string, body: unknown) => {
        const r = await fetch(`${root()}${path}`, { method: "POST", body: JSON.stringify(body) });
        return { status: r.status, json: (await r.json()) as Record<string, unknown> };
    };

    it("/tokenize and /detokenize round-trip; the chat form is the prompt the server generates from", async () => {
        const chat = await post("/tokenize", { model: "tiny", messages, add_generation_prompt: true });
        expect(chat.json.tokens).toEqual(local.tokenizer.encodeChat(messages));
        expect(chat.json).toMatchObject({ count: (chat.json.tokens as number[]).length, max_model_len: 256 });
        const text = await post("/v1/tokenize", { prompt: "12 + 30 = 42" });
        expect(text.json.tokens).toEqual(local.tokenizer.encode("12 + 30 = 42"));
        expect((await post("/detokenize", { tokens: text.json.tokens })).json).toEqual({ prompt: "12 + 30 = 42" });
        expect((await post("/detokenize", { tokens: [1, -1] })).status).toBe(400);
        expect((await post("/tokenize", { model: "other", prompt: "x" })).status).toBe(404);
    });

    it("/v1/completions takes token-id prompts (token in, token out) and gives the policy's own continuation", async () => {
        const ids = local.tokenizer.encodeChat(messages);
        const r = await post("/v1/completions", {
            model: "tiny",
            prompt: ids,
            max_tokens: 8,
            temperature: 1,
            seed: 9,
            logprobs: 1,
            return_token_ids: true,
        });
        expect(r.status).toBe(200);
        const [want] = await local.generate([
            { promptTokenIds: ids, sampling: { temperature: 1, maxTokens: 8 }, seed: 9 },
        ]);
        const c = (r.json.choices as Record<string, unknown>[])[0];
        expect(c.token_ids).toEqual(want.tokenIds);
        expect(c.text).toBe(want.text);
        expect(r.json.prompt_token_ids).toEqual(ids);
        expect((c.logprobs as { token_logprobs: number[] }).token_logprobs).toEqual(want.logprobs);
    });

    it("/health, /version and /v1/models answer; runtime LoRA routes are off unless --enable-lora", async () => {
        expect((await fetch(`${root()}/health`)).status).toBe(200);
        expect(((await (await fetch(`${root()}/version`)).json()) as { version: string }).version).toMatch(
            /^\d+\.\d+\.\d+/,
        );
        const models = (await (await fetch(`${srv.baseUrl}/models`)).json()) as {
            data: { id: string; owned_by: string; max_model_len: number }[];
        };
        expect(models.data).toEqual([expect.objectContaining({ id: "tiny", owned_by: "maporl", max_model_len: 256 })]);
        const r = await post("/v1/load_lora_adapter", { lora_name: "x", lora_path: "/tmp" });
        expect(r.status).toBe(404);
        expect((r.json.error as { message: string }).message).toMatch(/runtime LoRA updates are off .*--enable-lora/);
    });
});
