// openai.ts: a Policy over any OpenAI-compatible chat-completions server (vLLM, SGLang, `maporl serve`, llama.cpp
// server, Ollama): POST {baseUrl}/chat/completions with logprobs and, in the vLLM and SGLang dialects, the exact token
// ids the server read and sampled (openaiDialect.ts); per-attempt and per-request timeouts (120 s, 300 s: the worst
// case of a hung server), retries with exponential backoff on network errors, timeouts, 429 and 5xx (Retry-After
// honoured), a concurrency limit, and AbortSignal. A malformed reply is an error that says what was missing.
import { DEFAULT_MAX_RESPONSE_BYTES, postJson, splitCredentials } from "../http.js";
import {
    type BodyOptions,
    chatBody,
    DIALECTS,
    type Dialect,
    detectDialect,
    fillPromptIds,
    parseChat,
} from "./openaiDialect.js";
import type { ChatMessage, GenerateRequest, Generation, Policy, SettledGeneration } from "../policy/types.js";

export interface OpenAICompatibleOptions {
    /** e.g. "http://127.0.0.1:8000/v1" */
    baseUrl: string;
    model: string;
    apiKey?: string;
    name?: string;
    /** Per attempt. Defaults to 120,000 ms. */
    timeoutMs?: number;
    /** Per request, every attempt and wait included: the worst case of a server that never answers. Defaults to
     * 300,000 ms. */
    totalTimeoutMs?: number;
    /** Defaults to 3. */
    retries?: number;
    /** First backoff; doubles per retry. Defaults to 250 ms. */
    backoffMs?: number;
    /** Requests in flight at once. Defaults to 8. */
    concurrency?: number;
    /** Ask for token log-probs. Defaults to true. */
    logprobs?: boolean;
    /** The server's dialect, which decides how token ids are asked for (openaiDialect.ts): 'vllm' (also `maporl
     * serve`), 'sglang', 'openai' (no ids), or 'auto' (asks GET /v1/models once). Defaults to 'auto'. */
    dialect?: Dialect | "auto";
    /** Decoded bytes of one reply read at most (a larger reply is a failed request, not retried). Defaults to 64 MiB. */
    maxResponseBytes?: number;
    /** The model's vocabulary size, when known: every token id a reply names must be below it (always below 2^31). */
    vocabSize?: number;
}

export class OpenAICompatiblePolicy implements Policy {
    readonly name: string;
    private readonly o: Required<Omit<OpenAICompatibleOptions, "apiKey" | "name" | "dialect" | "vocabSize">> & {
        apiKey?: string;
        vocabSize?: number;
    };
    private readonly auth: Record<string, string>;
    private dialect: Promise<Dialect> | null;

    constructor(options: OpenAICompatibleOptions) {
        if (options === null || typeof options !== "object")
            throw new TypeError("OpenAICompatiblePolicy: options: expected an object");
        if (typeof options.baseUrl !== "string")
            throw new TypeError("OpenAICompatiblePolicy: baseUrl: expected a URL string");
        let split: ReturnType<typeof splitCredentials>;
        try {
            split = splitCredentials(options.baseUrl);
        } catch {
            throw new TypeError(
                "OpenAICompatiblePolicy: baseUrl: expected a URL string, got a string that is not a URL",
            );
        }
        if (split.authorization !== null && options.apiKey)
            throw new TypeError(
                "OpenAICompatiblePolicy: baseUrl: credentials in the URL and apiKey both given: give one",
            );
        if (typeof options.model !== "string" || !options.model)
            throw new TypeError("OpenAICompatiblePolicy: model: expected a model name");
        const num = (v: unknown, d: number, what: string, min: number) => {
            if (v === undefined) return d;
            if (typeof v !== "number" || !Number.isFinite(v) || v < min)
                throw new RangeError(`OpenAICompatiblePolicy: ${what}: expected a number >= ${min}, got ${String(v)}`);
            return v;
        };
        this.name = options.name ?? `openai:${options.model}`;
        const vocab = options.vocabSize;
        if (vocab !== undefined && (!Number.isInteger(vocab) || vocab < 1 || vocab > 2 ** 31))
            throw new RangeError(
                `OpenAICompatiblePolicy: vocabSize: expected an integer in [1, 2^31], got ${String(vocab)}`,
            );
        this.auth =
            split.authorization !== null
                ? { authorization: split.authorization }
                : options.apiKey
                  ? { authorization: `Bearer ${options.apiKey}` }
                  : {};
        this.o = {
            baseUrl: split.url.replace(/\/+$/, ""),
            model: options.model,
            apiKey: options.apiKey,
            maxResponseBytes: num(options.maxResponseBytes, DEFAULT_MAX_RESPONSE_BYTES, "maxResponseBytes", 1),
            ...(vocab !== undefined ? { vocabSize: vocab } : {}),
            timeoutMs: num(options.timeoutMs, 120_000, "timeoutMs", 1),
            totalTimeoutMs: num(options.totalTimeoutMs, 300_000, "totalTimeoutMs", 1),
            retries: num(options.retries, 3, "retries", 0),
            backoffMs: num(options.backoffMs, 250, "backoffMs", 0),
            concurrency: num(options.concurrency, 8, "concurrency", 1),
            logprobs: options.logprobs ?? true,
        };
        const d = options.dialect ?? "auto";
        if (!DIALECTS.includes(d))
            throw new RangeError(
                `OpenAICompatiblePolicy: dialect: expected ${DIALECTS.map((x) => `'${x}'`).join(", ")}, got ${JSON.stringify(d)}`,
            );
        this.dialect = d === "auto" ? null : Promise.resolve(d);
    }

    /** The dialect in use (detected on the first request under 'auto'; a failed detection is tried again next time). */
    async resolveDialect(signal?: AbortSignal): Promise<Dialect> {
        if (this.dialect === null) {
            const p = detectDialect(this.name, this.o.baseUrl, {
                timeoutMs: this.o.timeoutMs,
                headers: this.headers(),
                maxResponseBytes: this.o.maxResponseBytes,
                ...(signal ? { signal } : {}),
            });
            this.dialect = p;
            p.catch(() => {
                if (this.dialect === p) this.dialect = null;
            });
        }
        return this.dialect;
    }

    private headers(): Record<string, string> {
        return this.auth;
    }

    /** Rejects with the first failed request's error (the others are not waited for). */
    async generate(requests: GenerateRequest[], options: { signal?: AbortSignal } = {}): Promise<Generation[]> {
        const bodies = await this.bodies(requests, options.signal);
        const out: Generation[] = new Array(requests.length);
        await this.pool(bodies.length, async (i) => {
            out[i] = await this.one(bodies[i]!, options.signal);
        });
        return out;
    }

    /** Every request's outcome: a failed request (after its retries) does not stop the others. Rejects on abort, and
     * on a request that is invalid before any is sent. */
    async generateSettled(
        requests: GenerateRequest[],
        options: { signal?: AbortSignal } = {},
    ): Promise<SettledGeneration[]> {
        let bodies: Awaited<ReturnType<OpenAICompatiblePolicy["bodies"]>>;
        try {
            bodies = await this.bodies(requests, options.signal);
        } catch (e) {
            if (options.signal?.aborted) throw options.signal.reason;
            if (e instanceof TypeError || e instanceof RangeError) throw e;
            const error = e instanceof Error ? e : new Error(String(e)); // the dialect could not be detected: every request fails
            return requests.map(() => ({ ok: false as const, error }));
        }
        const out: SettledGeneration[] = new Array(requests.length);
        await this.pool(bodies.length, async (i) => {
            try {
                out[i] = { ok: true, generation: await this.one(bodies[i]!, options.signal) };
            } catch (e) {
                if (options.signal?.aborted) throw options.signal.reason;
                out[i] = { ok: false, error: e instanceof Error ? e : new Error(String(e)) };
            }
        });
        return out;
    }

    // Each request's body, checked first (a bad request rejects before anything is sent), in the server's dialect.
    private async bodies(
        requests: GenerateRequest[],
        signal?: AbortSignal,
    ): Promise<{ json: string; messages: ChatMessage[]; o: BodyOptions }[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        requests.forEach((r, i) =>
            chatBody(this.name, r, i, { model: this.o.model, dialect: "openai", logprobs: false }),
        );
        if (requests.length === 0) return [];
        const o: BodyOptions = {
            model: this.o.model,
            dialect: await this.resolveDialect(signal),
            logprobs: this.o.logprobs,
            vocabSize: this.o.vocabSize,
        };
        return requests.map((r, i) => ({ ...chatBody(this.name, r, i, o), o }));
    }

    // Runs job(0 .. n-1) with at most `concurrency` in flight.
    private async pool(n: number, job: (i: number) => Promise<void>): Promise<void> {
        let next = 0;
        const worker = async () => {
            while (next < n) await job(next++);
        };
        await Promise.all(Array.from({ length: Math.min(this.o.concurrency, n) }, worker));
    }

    private async one(
        b: { json: string; messages: ChatMessage[]; o: BodyOptions },
        signal?: AbortSignal,
    ): Promise<Generation> {
        const post = {
            timeoutMs: this.o.timeoutMs,
            totalTimeoutMs: this.o.totalTimeoutMs,
            retries: this.o.retries,
            backoffMs: this.o.backoffMs,
            headers: this.headers(),
            maxResponseBytes: this.o.maxResponseBytes,
            ...(signal ? { signal } : {}),
        };
        const r = await postJson(this.name, `${this.o.baseUrl}/chat/completions`, b.json, post);
        if (!r.ok) throw new Error(`${this.name}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
        const { generation, promptIdsMissing } = parseChat(this.name, r.text, r.latencyMs, b.o);
        if (promptIdsMissing)
            await fillPromptIds(this.name, this.o.baseUrl, generation, b.messages, { ...b.o, ...post });
        return { ...generation, endpoint: this.o.baseUrl, attempts: r.attempts };
    }
}
