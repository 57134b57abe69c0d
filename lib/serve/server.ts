// server.ts: an OpenAI-compatible server over any Policy (e.g. a trained NativePolicy), speaking vLLM's dialect so that
// OpenAICompatiblePolicy, FleetPolicy, the debate layer or any OpenAI client can talk to it. Endpoints:
//   GET  /health, /version, /v1/models (the base and every LoRA adapter, vLLM's model cards)
//   POST /v1/chat/completions, /v1/completions (prompt: a string or token ids)
//   POST /tokenize, /detokenize (vLLM's shapes; also under /v1)
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter (with allowAdapterUpdates; serverModels.ts)
// Generation fields: messages | prompt, model, temperature, top_p, top_k, max_tokens (or max_completion_tokens),
// stop, seed, n (1..64 choices, decoded as one batch; choice i draws with seed + i), logprobs, and the token-id fields
// of vLLM (return_token_ids: prompt_token_ids on the reply, token_ids on each choice; return_tokens_as_token_ids:
// logprob tokens as "token_id:N") and SGLang (return_prompt_token_ids: prompt_token_ids on each choice). Requests are
// validated (a bad body is a 400 with a message, a body over maxBodyBytes a 413, an unknown `model` a 404 naming the
// served ones, a prompt over the context a 400 giving the limit); at most maxPending generation requests are answered
// or wait at once (then 503 with Retry-After). `stream: true` answers with server-sent events (serverStream.ts).
import { createHash, timingSafeEqual } from "node:crypto";
import { realpathSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { resolve } from "node:path";

import { clientFault, HttpError, ServedModels } from "./serverModels.js";
import { streamGeneration } from "./serverStream.js";
import { assistantMessage, wireToChat, wireTools } from "./serverTools.js";
import { fewestTokens } from "../policy/tokenizer.js";
import { nativeChat } from "../policy/toolText.js";
import {
    type ChatMessage,
    type GenerateRequest,
    type Generation,
    MAX_TOP_LOGPROBS,
    type Policy,
    type SamplingOptions,
} from "../policy/types.js";

export interface ServeOptions {
    /** Defaults to 127.0.0.1. */
    host?: string;
    /** Defaults to 8000; 0 picks a free port. */
    port?: number;
    /** The base model's id, reported and accepted. Defaults to the policy's name. */
    model?: string;
    /** Largest accepted body (a larger one is answered 413). Defaults to 1 MiB. */
    maxBodyBytes?: number;
    /** Generation requests being answered or waiting at once; one more is answered 503 with Retry-After (latency stays
     * bounded instead of growing with the queue). Defaults to 64. */
    maxPending?: number;
    /** LoRA adapters served from the start: model name -> PEFT adapter directory (vLLM's --lora-modules). */
    adapters?: Record<string, string>;
    /** Accept POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING): they
     * read a directory named by the client, so they are off unless asked. Defaults to false. */
    allowAdapterUpdates?: boolean;
    /** With allowAdapterUpdates: the directory every runtime lora_path must lie in once links are resolved, with the
     * adapter files in it (a path outside it is a 400; a relative one is taken from this directory). Required unless
     * allowAnyLoraPath. */
    loraRoot?: string;
    /** With allowAdapterUpdates: accept a lora_path anywhere the server can read (no loraRoot). Defaults to false. */
    allowAnyLoraPath?: boolean;
    /** Adapters loaded at once (at start and at run time); one more is a 400 naming the limit (vLLM's --max-loras).
     * Defaults to 8. */
    maxLoras?: number;
    /** Every route but GET /health requires `Authorization: Bearer <apiKey>` (vLLM's --api-key); else 401. */
    apiKey?: string;
    /** Reported by GET /version. Defaults to the package's version. */
    version?: string;
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

function fail(res: ServerResponse, status: number, message: string, type?: string): void {
    send(res, status, {
        error: {
            message,
            type: type ?? (status === 400 || status === 413 ? "invalid_request_error" : "server_error"),
            code: status,
        },
    });
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
            reject(
                new TooLarge(
                    `the request body is ${declared} bytes, over the ${limit} this server accepts (maxBodyBytes)`,
                ),
            );
            req.resume();
            return;
        }
        req.on("data", (c: Buffer) => {
            size += c.length;
            if (size > 64 * limit) req.destroy();
            else if (size <= limit) chunks.push(c);
        });
        req.on("end", () =>
            size > limit
                ? reject(
                      new TooLarge(
                          `the request body is ${size} bytes, over the ${limit} this server accepts (maxBodyBytes)`,
                      ),
                  )
                : resolve(Buffer.concat(chunks).toString("utf8")),
        );
        req.on("error", reject);
    });
}

async function jsonBody(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
    let body: unknown;
    try {
        body = JSON.parse(await readBody(req, limit));
    } catch (e) {
        throw e instanceof TooLarge ? new HttpError(413, e.message) : new HttpError(400, "the body is not JSON");
    }
    if (body === null || typeof body !== "object" || Array.isArray(body))
        throw new HttpError(400, "the body: expected a JSON object");
    return body as Record<string, unknown>;
}

const MAX_CHOICES = 64;

// The tokenizer of a policy that has one (NativePolicy's), else null.
type Tk = {
    encode(t: string): number[];
    decode(ids: number[]): string;
    encodeChat(m: readonly ChatMessage[]): number[];
    vocabSize?: number;
    isStop?(id: number): boolean;
    maxTokenChars?: number;
};
const tokenizerOf = (p: Policy): Tk | null => {
    const t = (p as { tokenizer?: Partial<Tk> }).tokenizer;
    return t && typeof t.encode === "function" && typeof t.decode === "function" && typeof t.encodeChat === "function"
        ? (t as Tk)
        : null;
};

const flag = (body: Record<string, unknown>, k: string): boolean => {
    const v = body[k];
    if (v === undefined || v === null) return false;
    if (typeof v !== "boolean") throw new HttpError(400, `${k}: expected a boolean, got ${typeof v}`);
    return v;
};

// The sampling fields of a body (JSON numbers only: no "0.7" strings; ranges are checked by generate, which names the
// field), its seed and n.
function samplingOf(body: Record<string, unknown>): { sampling: SamplingOptions; seed: number | undefined; n: number } {
    const n = body.n === undefined || body.n === null ? 1 : body.n;
    if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES)
        throw new HttpError(400, `n: expected an integer in [1, ${MAX_CHOICES}], got ${JSON.stringify(n)}`);
    const fields: [string, string][] = [
        ["temperature", "temperature"],
        ["top_p", "topP"],
        ["top_k", "topK"],
        ["max_tokens", "maxTokens"],
        ["max_completion_tokens", "maxTokens"],
        ["seed", "seed"],
    ];
    const s: Record<string, unknown> = {};
    for (const [k, name] of fields) {
        const v = body[k];
        if (v === undefined || v === null) continue;
        if (typeof v !== "number") throw new HttpError(400, `${k}: expected a number, got ${typeof v}`);
        s[name] = v;
    }
    const seed = s.seed as number | undefined;
    delete s.seed;
    if (body.stop !== undefined && body.stop !== null) s.stop = body.stop;
    return { sampling: s, seed, n };
}

// n choices in one batch: choice i draws with seed + i (modulo 2^64; i alone without a seed), so choice 0 is what a
// single request with that seed gives.
const seedOf = (seed: number | undefined, i: number): number | bigint | undefined =>
    i === 0
        ? seed
        : seed === undefined
          ? i
          : Number.isSafeInteger(seed)
            ? BigInt.asUintN(64, BigInt(seed) + BigInt(i))
            : seed;

const choiceRequests = (base: Omit<GenerateRequest, "seed">, seed: number | undefined, n: number): GenerateRequest[] =>
    Array.from({ length: n }, (_, i) => {
        const s = seedOf(seed, i);
        return { ...base, ...(s !== undefined ? { seed: s } : {}) };
    });

async function generateN(
    policy: Policy,
    base: Omit<GenerateRequest, "seed">,
    seed: number | undefined,
    n: number,
    signal: AbortSignal,
): Promise<Generation[]> {
    try {
        return await policy.generate(choiceRequests(base, seed, n), { signal });
    } catch (e) {
        throw new HttpError(clientFault(e) ? 400 : 500, e instanceof Error ? e.message : String(e));
    }
}

// A choice's logprobs for these sampled tokens (a whole answer's tokenIds, the stop token included, as vLLM; or one
// streamed token): chat's logprobs.content or completions' parallel lists, a token's piece its text or, with
// return_tokens_as_token_ids, "token_id:N".
// With tops (sampling.topLogprobs k > 0): each token's k alternatives, completions' {piece: logprob} dicts, chat's
// [{token, logprob, bytes}] lists (vLLM's shapes).
function logprobsField(
    ids: readonly (number | string)[],
    lps: readonly number[] | undefined,
    tk: Tk | null,
    asIds: boolean,
    completions: boolean,
    tops?: readonly { id: number; logprob: number }[][],
) {
    const piece = (t: number | string) =>
        typeof t === "number" ? (asIds ? `token_id:${t}` : tk ? tk.decode([t]) : String(t)) : String(t);
    const pieces = ids.map(piece);
    return completions
        ? {
              tokens: pieces,
              token_logprobs: pieces.map((_, i) => lps?.[i] ?? 0),
              top_logprobs: tops
                  ? pieces.map((_, i) => Object.fromEntries((tops[i] ?? []).map((x) => [piece(x.id), x.logprob])))
                  : null,
              text_offset: [],
          }
        : {
              content: pieces.map((token, i) => ({
                  token,
                  logprob: lps?.[i] ?? 0,
                  bytes: [...Buffer.from(token, "utf8")],
                  top_logprobs: (tops?.[i] ?? []).map((x) => {
                      const p = piece(x.id);
                      return { token: p, logprob: x.logprob, bytes: [...Buffer.from(p, "utf8")] };
                  }),
              })),
          };
}

// The alternatives a request asks for: completions' logprobs (an integer k, or a boolean: k 0), chat's top_logprobs
// (with logprobs: true); 0 to MAX_TOP_LOGPROBS, else a 400 naming the field.
function topLogprobsOf(body: Record<string, unknown>, completions: boolean): number {
    const k = completions ? body.logprobs : body.top_logprobs,
        name = completions ? "logprobs" : "top_logprobs";
    if (k === undefined || k === null || typeof k === "boolean") return 0;
    if (typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > MAX_TOP_LOGPROBS)
        throw new HttpError(400, `${name}: expected an integer in [0, ${MAX_TOP_LOGPROBS}], got ${JSON.stringify(k)}`);
    if (!completions && k > 0 && body.logprobs !== true) throw new HttpError(400, "top_logprobs: needs logprobs: true");
    return k;
}

const usageOf = (gens: Generation[]) => {
    const completion = gens.reduce((a, g) => a + g.usage.completionTokens, 0),
        prompt = gens[0]!.usage.promptTokens;
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
};

/** Starts serving `policy`; resolves once listening. */
export async function servePolicy(policy: Policy, options: ServeOptions = {}): Promise<RunningServer> {
    const model = options.model ?? policy.name,
        limit = options.maxBodyBytes ?? 1 << 20,
        maxPending = options.maxPending ?? 64;
    if (!Number.isInteger(maxPending) || maxPending < 1)
        throw new RangeError(`servePolicy: maxPending: expected an integer >= 1, got ${String(maxPending)}`);
    if (!Number.isInteger(limit) || limit < 1)
        throw new RangeError(`servePolicy: maxBodyBytes: expected an integer >= 1, got ${String(limit)}`);
    const maxLoras = options.maxLoras ?? 8;
    if (!Number.isInteger(maxLoras) || maxLoras < 0)
        throw new RangeError(`servePolicy: maxLoras: expected an integer >= 0, got ${String(maxLoras)}`);
    if (options.apiKey !== undefined && (typeof options.apiKey !== "string" || options.apiKey.length === 0))
        throw new TypeError("servePolicy: apiKey: expected a non-empty string");
    let loraRoot: string | null = null;
    if (options.allowAdapterUpdates && !options.allowAnyLoraPath) {
        if (typeof options.loraRoot !== "string" || options.loraRoot.length === 0)
            throw new RangeError(
                "servePolicy: runtime LoRA loading (allowAdapterUpdates; maporl serve --enable-lora) reads directories named by clients: " +
                    "give loraRoot (--lora-root DIR), the directory they must lie in, or allowAnyLoraPath (--allow-any-lora-path)",
            );
        try {
            loraRoot = realpathSync(options.loraRoot);
        } catch {
            throw new RangeError(`servePolicy: loraRoot: ${options.loraRoot} does not exist`);
        }
    }
    const keyBuf = options.apiKey === undefined ? null : createHash("sha256").update(options.apiKey).digest();
    const authorized = (req: IncomingMessage) => {
        if (keyBuf === null) return true;
        const h = req.headers.authorization;
        const given = typeof h === "string" && h.startsWith("Bearer ") ? h.slice(7) : "";
        return timingSafeEqual(createHash("sha256").update(given).digest(), keyBuf); // (equal lengths: digests)
    };
    const ctx = (policy as { config?: { contextLength?: unknown } }).config?.contextLength;
    const models = new ServedModels(policy, model, typeof ctx === "number" ? ctx : null, {
        loraRoot,
        maxLoras,
        ...(loraRoot !== null ? { loraRootAsGiven: resolve(options.loraRoot!) } : {}),
    });
    for (const [name, dir] of Object.entries(options.adapters ?? {})) {
        try {
            await models.load(name, dir, false, false);
        } catch (e) {
            await models.close();
            throw new Error(`servePolicy: adapters.${name}: ${(e as Error).message}`);
        }
    }
    const version = options.version ?? "maporl";
    let counter = 0,
        pending = 0;

    const chat = async (body: Record<string, unknown>, res: ServerResponse, completions: boolean) => {
        if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean")
            throw new HttpError(400, `stream: expected a boolean, got ${typeof body.stream}`);
        const so = body.stream_options;
        if (so !== undefined && so !== null && (typeof so !== "object" || Array.isArray(so)))
            throw new HttpError(400, "stream_options: expected an object");
        const logprobs = completions
            ? body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false
            : flag(body, "logprobs");
        if (
            completions &&
            body.logprobs !== undefined &&
            body.logprobs !== null &&
            typeof body.logprobs !== "number" &&
            typeof body.logprobs !== "boolean"
        )
            throw new HttpError(400, `logprobs: expected an integer, got ${typeof body.logprobs}`);
        const topK = topLogprobsOf(body, completions);
        const returnIds = flag(body, "return_token_ids"),
            promptIdsPerChoice = flag(body, "return_prompt_token_ids"),
            asIds = flag(body, "return_tokens_as_token_ids");
        const { sampling, seed, n } = samplingOf(body);
        if (topK > 0) sampling.topLogprobs = topK;
        let req: Omit<GenerateRequest, "seed">;
        if (completions) {
            const p = body.prompt;
            if (typeof p === "string") req = { prompt: p, sampling };
            else if (Array.isArray(p) && p.length > 0 && p.every((x) => Number.isInteger(x)))
                req = { promptTokenIds: p as number[], sampling };
            else
                throw new HttpError(
                    400,
                    "prompt: expected a string or a non-empty array of token ids (one prompt per request)",
                );
        } else {
            const tools = wireTools(body.tools);
            if (tools && body.stream === true)
                throw new HttpError(400, "stream: tool calling is answered whole here; send stream: false with tools");
            req = { messages: wireToChat(body.messages), sampling, ...(tools ? { tools } : {}) };
        }
        const served = models.get(body.model); // (resolved right before generate: an adapter replaced meanwhile answers wholly)
        const tk = tokenizerOf(served.policy);
        if (completions && typeof body.prompt === "string" && tk) {
            // raw text, no chat template
            const least = fewestTokens(tk, body.prompt.length); // (refused before it is tokenized when far past the context)
            if (typeof ctx === "number" && least >= ctx)
                throw new HttpError(400, `prompt: at least ${least} tokens, the context is ${ctx}`);
            req = { promptTokenIds: tk.encode(body.prompt), sampling };
        }
        if (body.stream === true)
            return streamGeneration(res, {
                policy: served.policy,
                requests: choiceRequests(req, seed, n),
                completions,
                id: `${completions ? "cmpl" : "chatcmpl"}-maporl-${++counter}`,
                model: served.name,
                returnIds,
                includeUsage: (so as { include_usage?: unknown } | undefined)?.include_usage === true,
                tokenizer: tk,
                logprobsOf: logprobs ? (ids, lps, tops) => logprobsField(ids, lps, tk, asIds, completions, tops) : null,
                usage: usageOf,
                choiceExtras: (g) =>
                    promptIdsPerChoice && g.promptTokenIds ? { prompt_token_ids: g.promptTokenIds } : {},
            });
        // A client that goes away stops its generation (its rows leave the batch at the next step).
        const abort = new AbortController();
        res.once("close", () => {
            if (!res.writableFinished) abort.abort(new Error("the client closed the connection"));
        });
        const gens = await generateN(served.policy, req, seed, n, abort.signal);
        const promptIds = gens[0]!.promptTokenIds;
        const choice = (g: Generation, index: number) => ({
            index,
            finish_reason: g.finishReason,
            ...(returnIds && g.tokenIds ? { token_ids: g.tokenIds } : {}),
            ...(promptIdsPerChoice && g.promptTokenIds ? { prompt_token_ids: g.promptTokenIds } : {}),
        });
        const created = Math.floor(Date.now() / 1000);
        send(
            res,
            200,
            completions
                ? {
                      id: `cmpl-maporl-${++counter}`,
                      object: "text_completion",
                      created,
                      model: served.name,
                      choices: gens.map((g, i) => ({
                          ...choice(g, i),
                          text: g.text,
                          logprobs: logprobs
                              ? logprobsField(g.tokenIds ?? g.tokens ?? [], g.logprobs, tk, asIds, true, g.topLogprobs)
                              : null,
                      })),
                      ...(returnIds && promptIds ? { prompt_token_ids: promptIds } : {}),
                      usage: usageOf(gens),
                  }
                : {
                      id: `chatcmpl-maporl-${++counter}`,
                      object: "chat.completion",
                      created,
                      model: served.name,
                      choices: gens.map((g, i) => ({
                          ...choice(g, i),
                          message: assistantMessage(g),
                          logprobs: logprobs
                              ? logprobsField(g.tokenIds ?? g.tokens ?? [], g.logprobs, tk, asIds, false, g.topLogprobs)
                              : null,
                      })),
                      ...(returnIds && promptIds ? { prompt_token_ids: promptIds } : {}),
                      usage: usageOf(gens),
                  },
        );
    };

    const tokenize = (body: Record<string, unknown>, res: ServerResponse) => {
        const served = models.get(body.model),
            tk = tokenizerOf(served.policy);
        if (!tk) throw new HttpError(400, `the model ${served.name} has no tokenizer`);
        if (body.add_special_tokens === true && body.messages === undefined)
            throw new HttpError(400, "add_special_tokens: only false is supported (the text is encoded as it is)");
        let tokens: number[];
        if (body.messages !== undefined) {
            if (body.add_generation_prompt === false)
                throw new HttpError(400, "add_generation_prompt: only true is supported");
            tokens = tk.encodeChat(nativeChat(wireToChat(body.messages), wireTools(body.tools))); // as NativePolicy.generate reads them
        } else if (typeof body.prompt === "string") tokens = tk.encode(body.prompt);
        else throw new HttpError(400, "expected a prompt string or messages");
        send(res, 200, {
            count: tokens.length,
            max_model_len: typeof ctx === "number" ? ctx : null,
            tokens,
            ...(flag(body, "return_token_strs") ? { token_strs: tokens.map((t) => tk.decode([t])) } : {}),
        });
    };

    const detokenize = (body: Record<string, unknown>, res: ServerResponse) => {
        const served = models.get(body.model),
            tk = tokenizerOf(served.policy);
        if (!tk) throw new HttpError(400, `the model ${served.name} has no tokenizer`);
        const ids = body.tokens;
        if (
            !Array.isArray(ids) ||
            !ids.every((x) => Number.isInteger(x) && x >= 0 && (tk.vocabSize === undefined || x < tk.vocabSize))
        )
            throw new HttpError(
                400,
                `tokens: expected an array of token ids${tk.vocabSize !== undefined ? ` in [0, ${tk.vocabSize})` : ""}`,
            );
        send(res, 200, { prompt: tk.decode(ids as number[]) });
    };

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
        let counted = false;
        try {
            const url = (req.url ?? "").split("?")[0]!.replace(/\/+$/, "");
            const route = url.startsWith("/v1/") ? url.slice(3) : url; // /tokenize and /v1/tokenize alike
            if (req.method === "GET" && url === "/health") {
                res.writeHead(200, { "content-length": 0 });
                return res.end();
            }
            if (!authorized(req))
                return fail(res, 401, "Unauthorized: this server requires Authorization: Bearer <api key>");
            if (req.method === "GET") {
                if (url === "/version") return send(res, 200, { version });
                if (url === "/v1/models") return send(res, 200, { object: "list", data: models.cards() });
                return fail(res, 404, `no route GET ${url}`);
            }
            const generation = route === "/chat/completions" || route === "/completions";
            if (
                req.method !== "POST" ||
                !(
                    generation ||
                    ["/tokenize", "/detokenize", "/load_lora_adapter", "/unload_lora_adapter"].includes(route)
                )
            )
                return fail(res, 404, `no route ${req.method} ${url}`);
            if (generation) {
                if (pending >= maxPending) {
                    req.resume();
                    res.setHeader("retry-after", "1");
                    return fail(
                        res,
                        503,
                        `the server is busy: ${pending} requests are being answered or waiting (maxPending ${maxPending}); retry later`,
                    );
                }
                pending++;
                counted = true;
            }
            const body = await jsonBody(req, limit);
            if (generation) return await chat(body, res, route === "/completions");
            if (route === "/tokenize") return tokenize(body, res);
            if (route === "/detokenize") return detokenize(body, res);
            if (!options.allowAdapterUpdates)
                throw new HttpError(
                    404,
                    `no route POST ${url}: runtime LoRA updates are off (servePolicy's allowAdapterUpdates; maporl serve --enable-lora)`,
                );
            const text =
                route === "/load_lora_adapter"
                    ? await models.load(body.lora_name, body.lora_path, body.load_inplace === true)
                    : await models.unload(body.lora_name);
            res.writeHead(200, {
                "content-type": "text/plain; charset=utf-8",
                "content-length": Buffer.byteLength(text),
            });
            res.end(text);
        } catch (e) {
            if (res.headersSent) return;
            if (e instanceof HttpError) return fail(res, e.status, e.message, e.type);
            fail(res, clientFault(e) ? 400 : 500, e instanceof Error ? e.message : String(e));
        } finally {
            if (counted) pending--;
        }
    };
    // (handle answers every failure itself; the catch is for a reply that cannot be written at all.)
    const server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
    await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(options.port ?? 8000, options.host ?? "127.0.0.1", () => resolve());
    }).catch(async (e: unknown) => {
        await models.close();
        throw e;
    });
    const addr = server.address() as AddressInfo;
    return {
        server,
        baseUrl: `http://${addr.address}:${addr.port}/v1`,
        close: async () => {
            await new Promise<void>((r) => {
                server.close(() => r());
                server.closeAllConnections?.();
            });
            await models.close();
        },
    };
}
