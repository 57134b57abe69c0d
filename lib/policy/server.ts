// server.ts: an OpenAI-compatible chat-completions server over any Policy (e.g. a trained NativePolicy), so
// OpenAICompatiblePolicy, the debate layer or any OpenAI client can talk to it. Endpoints:
//   GET  /v1/models                 -> { object: "list", data: [{ id, object: "model" }] }
//   POST /v1/chat/completions       -> { id, object: "chat.completion", model, choices: [{ index, message,
//                                        finish_reason, logprobs: { content: [{ token, logprob }] } }], usage }
// Request fields: messages, temperature, top_p, top_k, max_tokens, stop, seed, logprobs, n (1..64 choices, decoded
// as one batch; choice i draws with seed + i). Requests are validated (a bad body is a 400 with a message, a body
// over maxBodyBytes a 413, a `model` other than the served one a 404 naming it, as vLLM; a prompt over the
// context a 400 giving the limit); at most maxPending chat requests are answered or wait at once (then 503 with
// Retry-After). Streaming is not supported (a 400 says so).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import type { ChatMessage, Policy, SamplingOptions } from "./types.js";

export interface ServeOptions {
    /** Defaults to 127.0.0.1. */
    host?: string;
    /** Defaults to 8000; 0 picks a free port. */
    port?: number;
    /** The model id reported and accepted. Defaults to the policy's name. */
    model?: string;
    /** Largest accepted body (a larger one is answered 413). Defaults to 1 MiB. */
    maxBodyBytes?: number;
    /** Chat requests being answered or waiting at once; one more is answered 503 with Retry-After (latency stays
     * bounded instead of growing with the queue). Defaults to 64. */
    maxPending?: number;
}

export interface RunningServer {
    server: Server;
    /** e.g. "http://127.0.0.1:8000/v1" */
    baseUrl: string;
    close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
}

function fail(res: ServerResponse, status: number, message: string): void {
    send(res, status, { error: { message, type: status === 400 || status === 413 ? "invalid_request_error" : "server_error", code: status } });
}

class TooLarge extends Error {}

// The body as text. Over `limit` bytes the rest is read and dropped (so that the client, still sending, receives
// the 413 rather than a reset), up to 64 x limit, past which the connection is closed.
function readBody(req: IncomingMessage, limit: number): Promise<string> {
    return new Promise((resolve, reject) => {
        let size = 0;
        const chunks: Buffer[] = [];
        const declared = Number(req.headers["content-length"]);
        if (Number.isFinite(declared) && declared > 64 * limit) {
            reject(new TooLarge(`the request body is ${declared} bytes, over the ${limit} this server accepts (maxBodyBytes)`));
            req.resume();
            return;
        }
        req.on("data", (c: Buffer) => {
            size += c.length;
            if (size > 64 * limit) req.destroy();
            else if (size <= limit) chunks.push(c);
        });
        req.on("end", () => (size > limit ? reject(new TooLarge(`the request body is ${size} bytes, over the ${limit} this server accepts (maxBodyBytes)`))
            : resolve(Buffer.concat(chunks).toString("utf8"))));
        req.on("error", reject);
    });
}

/** Starts serving `policy`; resolves once listening. */
const MAX_CHOICES = 64;

export async function servePolicy(policy: Policy, options: ServeOptions = {}): Promise<RunningServer> {
    const model = options.model ?? policy.name, limit = options.maxBodyBytes ?? 1 << 20, maxPending = options.maxPending ?? 64;
    if (!Number.isInteger(maxPending) || maxPending < 1) throw new RangeError(`servePolicy: maxPending: expected an integer >= 1, got ${String(maxPending)}`);
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`servePolicy: maxBodyBytes: expected an integer >= 1, got ${String(limit)}`);
    let counter = 0, pending = 0;
    const server = createServer(async (req, res) => {
        let counted = false;
        try {
            const url = (req.url ?? "").split("?")[0];
            if (req.method === "GET" && url === "/v1/models") return send(res, 200, { object: "list", data: [{ id: model, object: "model", owned_by: "maporl" }] });
            if (req.method !== "POST" || url !== "/v1/chat/completions") return fail(res, 404, `no route ${req.method} ${url}`);
            if (pending >= maxPending) {
                req.resume();
                res.setHeader("retry-after", "1");
                return fail(res, 503, `the server is busy: ${pending} requests are being answered or waiting (maxPending ${maxPending}); retry later`);
            }
            pending++;
            counted = true;
            let body: Record<string, unknown>;
            try {
                body = JSON.parse(await readBody(req, limit));
            } catch (e) {
                return e instanceof TooLarge ? fail(res, 413, e.message) : fail(res, 400, "the body is not JSON");
            }
            if (body === null || typeof body !== "object" || Array.isArray(body)) return fail(res, 400, "the body: expected a JSON object");
            if (body.model !== undefined && body.model !== model)
                return send(res, 404, { error: { message: `The model \`${String(body.model)}\` does not exist; this server serves \`${model}\``, type: "NotFoundError", code: 404 } });
            const messages = body.messages as ChatMessage[];
            if (!Array.isArray(messages) || messages.length === 0 || messages.some((m) => !m || typeof m.content !== "string" || !["system", "user", "assistant"].includes(m.role)))
                return fail(res, 400, "messages: expected a non-empty array of { role: 'system' | 'user' | 'assistant', content: string }");
            if (body.stream) return fail(res, 400, "stream: not supported by this server");
            if (body.logprobs !== undefined && body.logprobs !== null && typeof body.logprobs !== "boolean")
                return fail(res, 400, `logprobs: expected a boolean, got ${typeof body.logprobs}`);
            const n = body.n === undefined || body.n === null ? 1 : body.n;
            if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES)
                return fail(res, 400, `n: expected an integer in [1, ${MAX_CHOICES}], got ${JSON.stringify(n)}`);
            // JSON numbers only (no "0.7" strings, no booleans); ranges are checked by generate, which names the field.
            const fields: [string, string][] = [["temperature", "temperature"], ["top_p", "topP"], ["top_k", "topK"], ["max_tokens", "maxTokens"], ["seed", "seed"]];
            const sampling: Record<string, unknown> = {};
            for (const [k, name] of fields) {
                const v = body[k];
                if (v === undefined || v === null) continue;
                if (typeof v !== "number") return fail(res, 400, `${k}: expected a number, got ${typeof v}`);
                sampling[name] = v;
            }
            const seed = sampling.seed as number | undefined;
            delete sampling.seed;
            if (body.stop !== undefined && body.stop !== null) sampling.stop = body.stop;
            // n choices in one batch: choice i draws with seed + i (modulo 2^64; i alone without a seed), so choice 0 is
            // what a single request with that seed gives.
            const seedOf = (i: number): number | bigint | undefined =>
                i === 0 ? seed : seed === undefined ? i : typeof seed === "number" && Number.isSafeInteger(seed) ? BigInt.asUintN(64, BigInt(seed) + BigInt(i)) : seed;
            let gens;
            try {
                gens = await policy.generate(Array.from({ length: n }, (_, i) => {
                    const s = seedOf(i);
                    return { messages, sampling: sampling as SamplingOptions, ...(s !== undefined ? { seed: s } : {}) };
                }));
            } catch (e) {
                return fail(res, e instanceof RangeError || e instanceof TypeError ? 400 : 500, e instanceof Error ? e.message : String(e));
            }
            // Token pieces as text: a policy with a tokenizer (NativePolicy) decodes its ids; others give strings already.
            const tk = (policy as { tokenizer?: { decode?: (ids: number[]) => string } }).tokenizer;
            const pieces = (g: (typeof gens)[number]) =>
                (g.tokens ?? []).map((t) => (typeof t === "number" && typeof tk?.decode === "function" ? tk.decode([t]) : String(t)));
            const completion = gens.reduce((a, g) => a + g.usage.completionTokens, 0);
            send(res, 200, {
                id: `chatcmpl-maporl-${++counter}`, object: "chat.completion", created: Math.floor(Date.now() / 1000), model,
                choices: gens.map((g, index) => ({ index, message: { role: "assistant", content: g.text }, finish_reason: g.finishReason,
                    logprobs: body.logprobs ? { content: pieces(g).map((t, i) => ({ token: t, logprob: g.logprobs?.[i] ?? 0 })) } : null })),
                usage: { prompt_tokens: gens[0]!.usage.promptTokens, completion_tokens: completion, total_tokens: gens[0]!.usage.promptTokens + completion },
            });
        } catch (e) {
            if (!res.headersSent) fail(res, 500, e instanceof Error ? e.message : String(e));
        } finally {
            if (counted) pending--;
        }
    });
    await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(options.port ?? 8000, options.host ?? "127.0.0.1", () => resolve());
    });
    const addr = server.address() as AddressInfo;
    return {
        server,
        baseUrl: `http://${addr.address}:${addr.port}/v1`,
        close: () => new Promise<void>((r) => server.close(() => r())),
    };
}
