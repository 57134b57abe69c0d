// server.ts: an OpenAI-compatible server over any Policy (e.g. a trained NativePolicy), speaking vLLM's dialect so that
// OpenAICompatiblePolicy, FleetPolicy, the debate layer or any OpenAI client can talk to it. Endpoints:
//   GET  /health, /version, /v1/models (the base and every LoRA adapter, vLLM's model cards)
//   POST /v1/chat/completions, /v1/completions (prompt: a string or token ids)
//   POST /v1/responses (OpenAI's Responses API, stateless, answered whole: responses.ts)
//   POST /tokenize, /detokenize (vLLM's shapes; also under /v1)
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter (with allowAdapterUpdates; serverModels.ts)
// Generation fields: messages | prompt, model, temperature, top_p, top_k, max_tokens (or max_completion_tokens),
// stop, seed, n (1..64 choices, decoded as one batch; choice i draws with seed + i), logprobs, and the token-id fields
// of vLLM (return_token_ids: prompt_token_ids on the reply, token_ids on each choice; return_tokens_as_token_ids:
// logprob tokens as "token_id:N") and SGLang (return_prompt_token_ids: prompt_token_ids on each choice). Requests are
// validated (a bad body is a 400 with a message, a body over maxBodyBytes a 413, an unknown `model` a 404 naming the
// served ones, a prompt over the context a 400 giving the limit); at most maxPending generation requests are answered
// or wait at once (then 503 with Retry-After). `stream: true` answers with server-sent events (serverStream.ts).
import { realpathSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { resolve } from "node:path";

import { HttpError, ServedModels } from "./serverModels.js";
import { answerFailure, bearerAuth, fail, jsonBody, listenHttp, pendingSlots, send } from "./requests.js";
import { responsesRoute } from "./responses.js";
import { chatRoute, detokenizeRoute, tokenizeRoute, type RouteContext } from "./routes.js";
import { type Policy } from "../policy/types.js";

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

// The options checked and their defaults resolved (a runtime-LoRA server without a root is refused).
function checkOptions(policy: Policy, options: ServeOptions) {
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
    return { model, limit, maxPending, maxLoras, loraRoot };
}

export async function servePolicy(policy: Policy, options: ServeOptions = {}): Promise<RunningServer> {
    const { model, limit, maxPending, maxLoras, loraRoot } = checkOptions(policy, options);
    const authorized = bearerAuth(options.apiKey);
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
    const slots = pendingSlots(maxPending, "the server");
    let counter = 0;

    const routes: RouteContext = {
        models,
        ctx: typeof ctx === "number" ? ctx : null,
        next: () => ++counter,
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
            const generation = route === "/chat/completions" || route === "/completions" || route === "/responses";
            if (
                req.method !== "POST" ||
                !(
                    generation ||
                    ["/tokenize", "/detokenize", "/load_lora_adapter", "/unload_lora_adapter"].includes(route)
                )
            )
                return fail(res, 404, `no route ${req.method} ${url}`);
            const body = await jsonBody(req, limit);
            if (generation) {
                if (!slots.take(res)) return;
                counted = true;
            }
            if (route === "/responses") return await responsesRoute(routes, body, res);
            if (generation) return await chatRoute(routes, body, res, route === "/completions");
            if (route === "/tokenize") return tokenizeRoute(routes, body, res);
            if (route === "/detokenize") return detokenizeRoute(routes, body, res);
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
            answerFailure(res, e);
        } finally {
            if (counted) slots.release();
        }
    };
    const http = await listenHttp(handle, options.port ?? 8000, options.host ?? "127.0.0.1").catch(
        async (e: unknown) => {
            await models.close();
            throw e;
        },
    );
    return {
        server: http.server,
        baseUrl: `http://${http.address.address}:${http.address.port}/v1`,
        close: async () => {
            await http.stop();
            await models.close();
        },
    };
}
