// openai.ts: a Policy over any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp server,
// Ollama): POST {baseUrl}/chat/completions with logprobs, per-attempt and per-request timeouts (120 s, 300 s: the
// worst case of a hung server), retries with exponential backoff on network errors, timeouts, 429 and 5xx (Retry-After
// honoured), a concurrency limit, and AbortSignal. A malformed reply is an error
// that says what was missing.
import { postJson } from "../http.js";
import { type GenerateRequest, type Generation, type Policy, type SettledGeneration, requestMessages, requestSampling, requestSeed } from "./types.js";

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
}

export class OpenAICompatiblePolicy implements Policy {
    readonly name: string;
    private readonly o: Required<Omit<OpenAICompatibleOptions, "apiKey" | "name">> & { apiKey?: string };

    constructor(options: OpenAICompatibleOptions) {
        if (options === null || typeof options !== "object") throw new TypeError("OpenAICompatiblePolicy: options: expected an object");
        if (typeof options.baseUrl !== "string") throw new TypeError("OpenAICompatiblePolicy: baseUrl: expected a URL string");
        new URL(options.baseUrl);
        if (typeof options.model !== "string" || !options.model) throw new TypeError("OpenAICompatiblePolicy: model: expected a model name");
        const num = (v: unknown, d: number, what: string, min: number) => {
            if (v === undefined) return d;
            if (typeof v !== "number" || !Number.isFinite(v) || v < min) throw new RangeError(`OpenAICompatiblePolicy: ${what}: expected a number >= ${min}, got ${String(v)}`);
            return v;
        };
        this.name = options.name ?? `openai:${options.model}`;
        this.o = { baseUrl: options.baseUrl.replace(/\/+$/, ""), model: options.model, apiKey: options.apiKey,
            timeoutMs: num(options.timeoutMs, 120_000, "timeoutMs", 1), totalTimeoutMs: num(options.totalTimeoutMs, 300_000, "totalTimeoutMs", 1), retries: num(options.retries, 3, "retries", 0),
            backoffMs: num(options.backoffMs, 250, "backoffMs", 0), concurrency: num(options.concurrency, 8, "concurrency", 1),
            logprobs: options.logprobs ?? true };
    }

    /** Rejects with the first failed request's error (the others are not waited for). */
    async generate(requests: GenerateRequest[], options: { signal?: AbortSignal } = {}): Promise<Generation[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        const bodies = requests.map((r, i) => this.body(r, i));
        const out: Generation[] = new Array(requests.length);
        await this.pool(bodies.length, async (i) => { out[i] = await this.one(bodies[i]!, options.signal); });
        return out;
    }

    /** Every request's outcome: a failed request (after its retries) does not stop the others. Rejects on abort, and
     * on a request that is invalid before any is sent. */
    async generateSettled(requests: GenerateRequest[], options: { signal?: AbortSignal } = {}): Promise<SettledGeneration[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        const bodies = requests.map((r, i) => this.body(r, i));
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

    // Runs job(0 .. n-1) with at most `concurrency` in flight.
    private async pool(n: number, job: (i: number) => Promise<void>): Promise<void> {
        let next = 0;
        const worker = async () => {
            while (next < n) await job(next++);
        };
        await Promise.all(Array.from({ length: Math.min(this.o.concurrency, n) }, worker));
    }

    private body(r: GenerateRequest, i: number): string {
        const messages = requestMessages(this.name, r, i);
        const s = requestSampling(this.name, r, i);
        if (r.seed !== undefined) requestSeed(this.name, r, i);  // checked; sent as given (OpenAI's seed is a signed integer)
        const seed = r.seed;
        const b: Record<string, unknown> = { model: this.o.model, messages };
        if (s.temperature !== undefined) b.temperature = s.temperature;
        if (s.topP !== undefined) b.top_p = s.topP;
        if (s.topK !== undefined) b.top_k = s.topK;  // vLLM / SGLang extension
        if (s.maxTokens !== undefined) b.max_tokens = s.maxTokens;
        if (s.stop !== undefined) b.stop = s.stop;
        if (seed !== undefined) b.seed = 0;  // a placeholder: the digits go in below (JSON.stringify has no bigint)
        if (this.o.logprobs) b.logprobs = true;
        const json = JSON.stringify(b);
        return seed === undefined ? json : json.replace(/"seed":0(?=[,}])/, `"seed":${seed}`);
    }

    private async one(body: string, signal?: AbortSignal): Promise<Generation> {
        const r = await postJson(this.name, `${this.o.baseUrl}/chat/completions`, body, { timeoutMs: this.o.timeoutMs, totalTimeoutMs: this.o.totalTimeoutMs, retries: this.o.retries,
            backoffMs: this.o.backoffMs, signal, headers: this.o.apiKey ? { authorization: `Bearer ${this.o.apiKey}` } : {} });
        if (!r.ok) throw new Error(`${this.name}: HTTP ${r.status}: ${r.text.slice(0, 300)}`);
        return this.parse(r.text, r.latencyMs);
    }

    private parse(text: string, latencyMs: number): Generation {
        const bad = (what: string) => new SyntaxError(`${this.name}: malformed reply: ${what}; got ${JSON.stringify(text.slice(0, 160))}`);
        let j: unknown;
        try {
            j = JSON.parse(text);
        } catch {
            throw bad("expected JSON");
        }
        const choice = (j as { choices?: unknown[] })?.choices?.[0] as Record<string, unknown> | undefined;
        const msg = choice?.message as { content?: unknown } | undefined;
        if (!choice || !msg || typeof msg.content !== "string") throw bad("expected choices[0].message.content as a string");
        const content = (choice.logprobs as { content?: { token?: unknown; logprob?: unknown }[] } | null | undefined)?.content;
        let tokens: string[] | undefined, logprobs: number[] | undefined;
        if (Array.isArray(content)) {
            tokens = content.map((c, i) => { if (typeof c?.token !== "string") throw bad(`expected logprobs.content[${i}].token`); return c.token; });
            logprobs = content.map((c, i) => { if (typeof c?.logprob !== "number") throw bad(`expected logprobs.content[${i}].logprob`); return c.logprob; });
        }
        const usage = (j as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } }).usage;
        return {
            text: msg.content, ...(tokens ? { tokens, logprobs } : {}),
            finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "unknown",
            usage: { promptTokens: typeof usage?.prompt_tokens === "number" ? usage.prompt_tokens : 0,
                completionTokens: typeof usage?.completion_tokens === "number" ? usage.completion_tokens : (tokens?.length ?? 0) },
            latencyMs,
        };
    }
}
