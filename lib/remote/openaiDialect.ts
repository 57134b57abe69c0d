// openaiDialect.ts: what OpenAICompatiblePolicy and FleetPolicy say to a chat-completions server and read back, per
// server dialect, so that a generation carries the exact token ids the server read and sampled:
//   - 'vllm' (and `maporl serve`): return_token_ids -> prompt_token_ids on the reply and token_ids on the choice; with
//     logprobs, return_tokens_as_token_ids -> logprob tokens "token_id:N" (ids even from a vLLM without
//     return_token_ids); the prompt ids otherwise from POST /tokenize (the server's own template and tokenizer);
//   - 'sglang': return_prompt_token_ids and return_token_ids -> prompt_token_ids and token_ids on the choice; a LoRA
//     adapter named by lora_path;
//   - 'openai' (OpenAI, llama.cpp, Ollama, or unknown): no ids; the generation says so (tokenIdsExact false).
// 'auto' asks GET /v1/models once: owned_by "vllm" or "maporl" -> vllm, "sglang" -> sglang, else openai.
import { getJson, postJson, type PostOptions, redactUrl } from "../http.js";
import {
    type ChatMessage,
    type GenerateRequest,
    type Generation,
    requestMessages,
    requestSampling,
    requestSeed,
    type ToolCall,
} from "../policy/types.js";

export type Dialect = "vllm" | "sglang" | "openai";
export const DIALECTS: readonly (Dialect | "auto")[] = ["auto", "vllm", "sglang", "openai"];

/** The server root of a base URL ("http://h:8000/v1" -> "http://h:8000"). */
export const serverRoot = (baseUrl: string): string => baseUrl.replace(/\/v1$/, "");

/** The dialect a server speaks, from its /v1/models (owned_by); 'openai' when it answers anything else, an error
 * status included. */
export async function detectDialect(
    where: string,
    baseUrl: string,
    o: { timeoutMs: number; headers?: Record<string, string>; signal?: AbortSignal; maxResponseBytes?: number },
): Promise<Dialect> {
    const r = await getJson(where, `${baseUrl}/models`, o); // (a network failure rejects: detection is tried again later)
    if (!r.ok) return "openai";
    let owners: unknown[] = [];
    try {
        owners = ((JSON.parse(r.text) as { data?: { owned_by?: unknown }[] }).data ?? []).map((m) => m?.owned_by);
    } catch {
        /* not JSON: unknown */
    }
    if (owners.includes("vllm") || owners.includes("maporl")) return "vllm";
    if (owners.includes("sglang")) return "sglang";
    return "openai";
}

export interface BodyOptions {
    model: string;
    adapter?: string | undefined;
    dialect: Dialect;
    logprobs: boolean;
    /** Token ids a reply names must be below it (and always below 2^31). */
    vocabSize?: number | undefined;
}

/** Token ids are below this whatever the vocabulary (they travel as int32 in batches and kernels). */
export const MAX_TOKEN_ID = 2 ** 31 - 1;
/** A reply's log-prob may exceed 0 by this much (a log-softmax rounded in bf16 / f32), no more; it is kept as sent. */
export const LOGPROB_EPSILON = 1e-3;

/** A request's chat-completions body (JSON text), checked (every field named in the error). */
export function chatBody(
    where: string,
    r: GenerateRequest,
    i: number,
    o: BodyOptions,
): { json: string; messages: ChatMessage[] } {
    const messages = requestMessages(where, r, i);
    const s = requestSampling(where, r, i);
    if (r.seed !== undefined) requestSeed(where, r, i); // checked; sent as given (OpenAI's seed is a signed integer)
    const b: Record<string, unknown> = {
        model: o.dialect === "vllm" ? (o.adapter ?? o.model) : o.model,
        messages: wireMessages(messages),
    };
    if (r.tools !== undefined && r.tools.length > 0)
        b.tools = r.tools.map((t) => ({
            type: "function",
            function: {
                name: t.name,
                ...(t.description ? { description: t.description } : {}),
                parameters: t.parameters ?? { type: "object", properties: {} },
            },
        }));
    if (o.adapter !== undefined && o.dialect === "sglang") b.lora_path = o.adapter;
    else if (o.adapter !== undefined && o.dialect === "openai") b.model = o.adapter;
    if (s.temperature !== undefined) b.temperature = s.temperature;
    if (s.topP !== undefined) b.top_p = s.topP;
    if (s.topK !== undefined) b.top_k = s.topK; // vLLM / SGLang extension
    if (s.maxTokens !== undefined) b.max_tokens = s.maxTokens;
    if (s.stop !== undefined) b.stop = s.stop;
    if (r.seed !== undefined) b.seed = 0; // a placeholder: the digits go in below (JSON.stringify has no bigint)
    if (o.logprobs) b.logprobs = true;
    if (o.dialect === "vllm") {
        b.return_token_ids = true;
        if (o.logprobs) b.return_tokens_as_token_ids = true;
    } else if (o.dialect === "sglang") {
        b.return_prompt_token_ids = true;
        b.return_token_ids = true;
    }
    const json = JSON.stringify(b);
    return { json: r.seed === undefined ? json : json.replace(/"seed":0(?=[,}])/, `"seed":${r.seed}`), messages };
}

/** The first entry of `x` that is not a token id below `vocab` (as "[k] = v"), or null when every one is. */
function badId(x: readonly unknown[], vocab: number | undefined): string | null {
    const limit = Math.min(vocab ?? MAX_TOKEN_ID + 1, MAX_TOKEN_ID + 1);
    const k = x.findIndex((v) => !(typeof v === "number" && Number.isInteger(v) && v >= 0 && v < limit));
    return k < 0
        ? null
        : `[${k}] = ${JSON.stringify(x[k]) ?? String(x[k])}, expected an integer in [0, ${limit})` +
              (vocab !== undefined && typeof x[k] === "number" && x[k] >= vocab ? ` (vocabSize ${vocab})` : "");
}

/** `x` as token ids: null when absent; an error (`fail(why)`) when present but not a list of ids below `vocab`. */
function idList(x: unknown, vocab: number | undefined, fail: (why: string) => Error): number[] | null {
    if (x === undefined || x === null) return null;
    if (!Array.isArray(x)) throw fail(`expected an array of token ids, got ${typeof x}`);
    const bad = badId(x, vocab);
    if (bad !== null) throw fail(bad);
    return x as number[];
}

/** A reply, parsed; `promptIdsMissing` when the completion's ids came back but the prompt's did not. */
export function parseChat(
    where: string,
    text: string,
    latencyMs: number,
    o: { dialect: Dialect; adapter?: string | undefined; vocabSize?: number | undefined },
): { generation: Generation; promptIdsMissing: boolean } {
    const bad = (what: string) =>
        new SyntaxError(`${where}: malformed reply: ${what}; got ${JSON.stringify(text.slice(0, 160))}`);
    let j: Record<string, unknown>;
    try {
        j = JSON.parse(text) as Record<string, unknown>;
    } catch {
        throw bad("expected JSON");
    }
    const choice = (j as { choices?: unknown[] })?.choices?.[0] as Record<string, unknown> | undefined;
    const msg = choice?.message as { content?: unknown; tool_calls?: unknown } | undefined;
    const toolCalls =
        msg?.tool_calls === undefined || msg?.tool_calls === null
            ? undefined
            : wireToolCalls(msg.tool_calls, "default", (k) =>
                  bad(
                      k === null
                          ? "expected message.tool_calls as an array"
                          : `expected message.tool_calls[${k}].function.name`,
                  ),
              );
    if (msg && msg.content == null && toolCalls?.length) msg.content = ""; // a reply that only calls tools
    if (!choice || !msg || typeof msg.content !== "string")
        throw bad("expected choices[0].message.content as a string");
    const content = (choice.logprobs as { content?: { token?: unknown; logprob?: unknown }[] } | null | undefined)
        ?.content;
    let tokens: (string | number)[] | undefined, logprobs: number[] | undefined;
    if (Array.isArray(content)) {
        tokens = content.map((c, i) => {
            if (typeof c?.token !== "string") throw bad(`expected logprobs.content[${i}].token`);
            return c.token;
        });
        // A sampled token's log-prob is finite and at most 0 (LOGPROB_EPSILON over it for rounding): anything else
        // (a positive value, NaN, +-Infinity, null, "-inf") is not a log-prob the server's sampler can have drawn from.
        logprobs = content.map((c, i) => {
            const v = c?.logprob;
            if (typeof v === "number" && Number.isFinite(v) && v <= LOGPROB_EPSILON) return v;
            throw bad(
                `logprobs.content[${i}].logprob: expected a finite number <= 0 (${LOGPROB_EPSILON} allowed for rounding), got ${JSON.stringify(v) ?? String(v)}`,
            );
        });
    }
    // Completion ids: the choice's token_ids, else "token_id:N" logprob tokens (vLLM's return_tokens_as_token_ids).
    let tokenIds: number[] | null =
        o.dialect === "openai"
            ? null
            : idList(choice.token_ids, o.vocabSize, (why) =>
                  bad(`choices[0].token_ids${why.startsWith("[") ? "" : ": "}${why}`),
              );
    const asIds = tokens?.map((t) => (typeof t === "string" ? /^token_id:(\d+)$/.exec(t) : null));
    if (asIds && asIds.length > 0 && asIds.every((m) => m !== null)) {
        const ids = asIds.map((m) => Number(m[1]));
        const badTok = badId(ids, o.vocabSize);
        if (badTok !== null)
            throw bad(
                `logprobs.content${badTok.replace(/^\[(\d+)\] = /, (_m, k: string) => `[${k}].token = "${tokens![Number(k)]}": `)}`,
            );
        if (tokenIds !== null && ids.join() !== tokenIds.join())
            throw bad("token_ids and the logprob tokens name different ids");
        tokenIds ??= ids;
        tokens = ids;
    }
    if (tokenIds !== null && logprobs !== undefined && logprobs.length !== tokenIds.length)
        throw bad(`${tokenIds.length} token ids but ${logprobs.length} log-probs`);
    const promptIds =
        o.dialect === "openai"
            ? null
            : (idList(j.prompt_token_ids, o.vocabSize, (why) =>
                  bad(`prompt_token_ids${why.startsWith("[") ? "" : ": "}${why}`),
              ) ??
              idList(choice.prompt_token_ids, o.vocabSize, (why) =>
                  bad(`choices[0].prompt_token_ids${why.startsWith("[") ? "" : ": "}${why}`),
              ));
    const usage = j.usage as { prompt_tokens?: unknown; completion_tokens?: unknown } | undefined;
    for (const k of ["prompt_tokens", "completion_tokens"] as const) {
        const v = usage?.[k];
        if (v !== undefined && v !== null && !(typeof v === "number" && Number.isSafeInteger(v) && v >= 0))
            throw bad(`usage.${k}: expected a count (an integer >= 0), got ${JSON.stringify(v) ?? String(v)}`);
    }
    const exact = tokenIds !== null && promptIds !== null;
    const generation: Generation = {
        text: msg.content,
        ...(tokens ? { tokens, logprobs } : {}),
        ...(tokenIds ? { tokenIds } : {}),
        ...(promptIds ? { promptTokenIds: promptIds } : {}),
        tokenIdsExact: exact,
        ...(typeof j.model === "string" || o.adapter !== undefined ? { model: o.adapter ?? (j.model as string) } : {}),
        finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "unknown",
        usage: {
            promptTokens: typeof usage?.prompt_tokens === "number" ? usage.prompt_tokens : (promptIds?.length ?? 0),
            completionTokens:
                typeof usage?.completion_tokens === "number"
                    ? usage.completion_tokens
                    : (tokenIds?.length ?? tokens?.length ?? 0),
        },
        latencyMs,
        ...(toolCalls?.length ? { toolCalls } : {}),
    };
    return { generation, promptIdsMissing: tokenIds !== null && promptIds === null };
}

/** Messages in OpenAI's wire form: an assistant's toolCalls as tool_calls, a tool message's call id as tool_call_id. */
export function wireMessages(messages: readonly ChatMessage[]): Record<string, unknown>[] {
    return messages.map((m) => {
        if (m.role === "tool")
            return {
                role: "tool",
                tool_call_id: m.toolCallId,
                content: m.content,
                ...(m.name ? { name: m.name } : {}),
            };
        if (m.role === "assistant" && m.toolCalls?.length)
            return {
                role: "assistant",
                content: m.content === "" ? null : m.content,
                tool_calls: m.toolCalls.map((c) => ({
                    id: c.id,
                    type: "function",
                    function: { name: c.name, arguments: c.arguments },
                })),
            };
        return { role: m.role, content: m.content };
    });
}

/**
 * OpenAI's wire-form tool_calls as ToolCalls (arguments kept as the JSON text the model wrote; an object is
 * stringified). `ids`: 'required' for a request's history (each call carries the id its tool message answers),
 * 'default' for a reply (call-k where a server sent none). `fail(k)` makes the error for call k (null: not an array).
 */
export function wireToolCalls(x: unknown, ids: "required" | "default", fail: (k: number | null) => Error): ToolCall[] {
    if (!Array.isArray(x)) throw fail(null);
    return x.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, k) => {
        const f = c?.function,
            hasId = typeof c?.id === "string" && c.id !== "";
        if (!f || typeof f.name !== "string" || (ids === "required" && !hasId)) throw fail(k);
        const args = typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments ?? {});
        return { id: hasId ? (c.id as string) : `call-${k}`, name: f.name, arguments: args };
    });
}

/** The prompt ids of `messages` from the server's own tokenizer and chat template (POST /tokenize), for a server that
 * gave the completion's ids but not the prompt's. Sets them on `g` (exact: the server's template and tokenizer). */
export async function fillPromptIds(
    where: string,
    baseUrl: string,
    g: Generation,
    messages: ChatMessage[],
    o: BodyOptions & PostOptions,
): Promise<void> {
    const url = o.dialect === "sglang" ? `${baseUrl}/tokenize` : `${serverRoot(baseUrl)}/tokenize`;
    const r = await postJson(
        where,
        url,
        JSON.stringify({
            model: o.dialect === "vllm" ? (o.adapter ?? o.model) : o.model,
            messages: wireMessages(messages),
            add_generation_prompt: true,
        }),
        o,
    );
    if (!r.ok)
        throw new Error(
            `${where}: the reply had no prompt_token_ids and POST ${redactUrl(url)} answered HTTP ${r.status}: ${r.text.slice(0, 200)}`,
        );
    const fail = (why: string) =>
        new SyntaxError(
            `${where}: malformed reply from ${redactUrl(url)}: ${why}; got ${JSON.stringify(r.text.slice(0, 160))}`,
        );
    let parsed: unknown;
    try {
        parsed = JSON.parse(r.text);
    } catch {
        throw fail("expected JSON { tokens: [ids] }");
    }
    const ids = idList((parsed as { tokens?: unknown } | null)?.tokens, o.vocabSize, (why) =>
        fail(`tokens${why.startsWith("[") ? "" : ": "}${why}`),
    );
    if (ids === null) throw fail("expected { tokens: [ids] }");
    g.promptTokenIds = ids;
    g.tokenIdsExact = true;
}
