// types.ts: the one interface every model implements. Generation is batched; a request is chat messages (or a
// prompt string), sampling options and a seed. Trainable policies (the embedded model) add logprobs() and
// trainStep(); remote ones (OpenAICompatiblePolicy) generate only.

import { describe, requireInteger, requireNumber, requireOptions } from "../validate.js";

export interface ChatMessage {
    role: "system" | "user" | "assistant" | "tool";
    content: string;
    /** An assistant message's tool calls (OpenAI's tool_calls). */
    toolCalls?: ToolCall[];
    /** A tool message: the call it answers (OpenAI's tool_call_id) and the tool's name. */
    toolCallId?: string;
    name?: string;
}

/** A call of a tool as the model wrote it: `arguments` is the JSON text (OpenAI's function.arguments), unparsed. */
export interface ToolCall {
    id: string;
    name: string;
    arguments: string;
}

/** A tool as the model is told of it (OpenAI's tools[].function): a JSON Schema for its arguments. */
export interface ToolSpec {
    name: string;
    description?: string;
    parameters?: Record<string, unknown>;
}

export interface SamplingOptions {
    /** >= 0 (0 = greedy). */
    temperature?: number;
    /** In [0, 1]. */
    topP?: number;
    /** 0 (or vLLM's -1) = off. */
    topK?: number;
    /** Completion tokens at most. */
    maxTokens?: number;
    /** Stop strings (OpenAI's `stop`): generation ends when the text contains one; the returned text ends before it
     * (the tokens and log-probs keep every sampled token, as vLLM's token_ids do). */
    stop?: string | string[];
    /** For every sampled token, the `topLogprobs` most likely tokens and their log-probs under the model's raw softmax
     * (vLLM's logprobs=k, its default raw_logprobs mode), in Generation.topLogprobs. 0 to MAX_TOP_LOGPROBS; native
     * policies. */
    topLogprobs?: number;
}

/** The most alternatives a request's topLogprobs may ask for (vLLM's default max_logprobs). */
export const MAX_TOP_LOGPROBS = 20;

export interface GenerateRequest {
    /** Chat messages; or `prompt`, sent as one user message. */
    messages?: ChatMessage[];
    prompt?: string;
    /** Token ids to continue as they are (no chat template; vLLM's prompt_token_ids). Native policies only. */
    promptTokenIds?: readonly number[];
    sampling?: SamplingOptions;
    /** An integer (number or bigint) in [-2^63, 2^64); a negative seed is taken modulo 2^64 (its int64 bits). */
    seed?: number | bigint;
    /** Sticky routing (FleetPolicy): requests with the same key go to the same endpoint while it is healthy, so its
     * prefix cache serves a growing discussion (Debate sets `<episode>/<agent>`). Other policies ignore it. */
    routingKey?: string;
    /** Tools the model may call (OpenAI's tools); its calls come back in Generation.toolCalls. */
    tools?: ToolSpec[];
}

export interface Generation {
    text: string;
    /** The completion's tokens as the backend names them: ids for native policies (the model's stop token left out, as
     * in the text), text pieces for remote ones. Prefer `tokenIds` for training. */
    tokens?: (number | string)[];
    /** The behaviour log-prob of every sampled token (the processed distribution: temperature, top-k, top-p), aligned
     * with `tokenIds` when present (else with the server's logprobs.content). */
    logprobs?: number[];
    /** With sampling.topLogprobs = k: per entry of tokenIds, the k most likely tokens under the raw softmax, most
     * likely first. */
    topLogprobs?: { id: number; logprob: number }[][];
    /** The completion's token ids exactly as the model sampled them: every sampled token, the one that completed a stop
     * string and the stop token that ended the answer included (as vLLM's token_ids). Present when the backend gives
     * ids. */
    tokenIds?: number[];
    /** The prompt's token ids exactly as the model read them (after its chat template). */
    promptTokenIds?: number[];
    /** true when `tokenIds` and `promptTokenIds` are the ids the model itself read and sampled (a native policy, or a
     * server that returned them); false when the backend gave none (text only: using the answer for training then
     * needs re-tokenisation, which exportBatch refuses unless asked). */
    tokenIdsExact?: boolean;
    /** The served model that answered (e.g. a LoRA adapter's versioned name on a fleet), when known. */
    model?: string;
    /** The endpoint (base URL) that answered, for remote policies. */
    endpoint?: string;
    /** HTTP attempts made for this answer (retries and failovers included), for remote policies. */
    attempts?: number;
    finishReason: string;
    usage: { promptTokens: number; completionTokens: number };
    latencyMs: number;
    /** The tools the model called (finishReason 'tool_calls'), when the request offered tools. */
    toolCalls?: ToolCall[];
}

/** One request's outcome under generateSettled. */
export type SettledGeneration = { ok: true; generation: Generation } | { ok: false; error: Error };

/** Called for every sampled token, in order, as it is sampled (the stop token that ends an answer included):
 * `request` indexes the generate call's requests. A callback that throws fails its call. */
export type TokenCallback = (
    request: number,
    tokenId: number,
    logprob: number,
    top?: { id: number; logprob: number }[],
) => void;

export interface Policy {
    readonly name: string;
    /** Rejects when any request fails (after the policy's own retries) or on abort. `onToken`: a policy that decodes
     * here (NativePolicy) calls it for every token as it is sampled; others ignore it (their answers arrive whole). */
    generate(
        requests: GenerateRequest[],
        options?: { signal?: AbortSignal; onToken?: TokenCallback },
    ): Promise<Generation[]>;
    /** Optional: every request's outcome, rejecting only on abort (Debate and JointRollout use it, through
     * settle.ts's generateSettled, so that one failed request fails only its own episode). */
    generateSettled?(requests: GenerateRequest[], options?: { signal?: AbortSignal }): Promise<SettledGeneration[]>;
}

/** The largest float32: the largest temperature (the kernels sample in float32). */
const FLOAT32_MAX = 3.4028234663852886e38;

const SAMPLING_KEYS = ["temperature", "topP", "topK", "maxTokens", "stop", "topLogprobs"];

/** A request's sampling options, checked (every field named in the error); `stop` comes back as an array. */
export function requestSampling(
    where: string,
    r: GenerateRequest,
    i: number,
): Omit<SamplingOptions, "stop"> & { stop?: string[] } {
    return samplingOptions(where, `requests[${i}].sampling`, r.sampling);
}

/** Sampling options `x` (named `at` in errors), checked; `stop` comes back as an array. */
export function samplingOptions(
    where: string,
    at: string,
    x: unknown,
): Omit<SamplingOptions, "stop"> & { stop?: string[] } {
    const s = requireOptions<SamplingOptions>(where, at, x, SAMPLING_KEYS);
    const out: Omit<SamplingOptions, "stop"> & { stop?: string[] } = {};
    if (s.temperature !== undefined)
        out.temperature = requireNumber(where, `${at}.temperature`, s.temperature, 1, 0, FLOAT32_MAX); // (sampled in f32)
    if (s.topP !== undefined) out.topP = requireNumber(where, `${at}.topP`, s.topP, 1, 0, 1);
    if (s.topK !== undefined) out.topK = requireInteger(where, `${at}.topK`, s.topK, -1, 2 ** 31 - 1);
    if (s.maxTokens !== undefined)
        out.maxTokens = requireInteger(where, `${at}.maxTokens`, s.maxTokens, 0, 2 ** 31 - 1);
    if (s.topLogprobs !== undefined)
        out.topLogprobs = requireInteger(where, `${at}.topLogprobs`, s.topLogprobs, 0, MAX_TOP_LOGPROBS);
    if (s.stop !== undefined) {
        const stop = typeof s.stop === "string" ? [s.stop] : s.stop;
        if (!Array.isArray(stop) || stop.some((x) => typeof x !== "string" || x.length === 0))
            throw new TypeError(
                `${where}: ${at}.stop: expected a non-empty string or an array of them, got ${describe(s.stop)}`,
            );
        out.stop = stop;
    }
    return out;
}

/** A request's seed (an integer in [-2^63, 2^64)) as its 64 bits, a bigint in [0, 2^64) (0 when absent). */
export function requestSeed(where: string, r: GenerateRequest, i: number): bigint {
    const x = r.seed;
    if (x === undefined) return 0n;
    const expected = `${where}: requests[${i}].seed: expected an integer in [-2^63, 2^64), got ${describe(x)}`;
    if (typeof x !== "bigint" && typeof x !== "number") throw new TypeError(expected);
    const v = typeof x === "bigint" ? x : Number.isInteger(x) ? BigInt(x) : null; // (a double that is an integer: exact)
    if (v === null || v < -(2n ** 63n) || v >= 2n ** 64n) throw new RangeError(expected);
    return BigInt.asUintN(64, v);
}

/** The messages of a request (a prompt becomes one user message); throws naming the request on bad input. */
export function requestMessages(where: string, r: GenerateRequest, i: number): ChatMessage[] {
    if (r === null || typeof r !== "object")
        throw new TypeError(`${where}: requests[${i}]: expected an object, got ${typeof r}`);
    if (r.messages !== undefined) {
        if (!Array.isArray(r.messages) || r.messages.length === 0)
            throw new TypeError(`${where}: requests[${i}].messages: expected a non-empty array of { role, content }`);
        r.messages.forEach((m, j) => {
            const at = `${where}: requests[${i}].messages[${j}]`;
            if (!m || !["system", "user", "assistant", "tool"].includes(m.role) || typeof m.content !== "string")
                throw new TypeError(
                    `${at}: expected { role: 'system' | 'user' | 'assistant' | 'tool', content: string }`,
                );
            if (m.role === "tool" && (typeof m.toolCallId !== "string" || m.toolCallId === ""))
                throw new TypeError(
                    `${at}.toolCallId: expected the id of the call a tool message answers, got ${describe(m.toolCallId)}`,
                );
            if (m.toolCalls !== undefined) {
                if (m.role !== "assistant")
                    throw new TypeError(`${at}.toolCalls: expected only on an assistant message, got role '${m.role}'`);
                if (
                    !Array.isArray(m.toolCalls) ||
                    m.toolCalls.some(
                        (c) =>
                            !c ||
                            typeof c.id !== "string" ||
                            typeof c.name !== "string" ||
                            typeof c.arguments !== "string",
                    )
                )
                    throw new TypeError(`${at}.toolCalls: expected an array of { id, name, arguments (JSON text) }`);
            }
        });
        if (r.tools !== undefined) requestTools(where, r.tools, i);
        return r.messages;
    }
    if (r.tools !== undefined) requestTools(where, r.tools, i);
    if (typeof r.prompt !== "string")
        throw new TypeError(
            `${where}: requests[${i}]: expected messages or a prompt string` +
                (r.promptTokenIds !== undefined ? " (promptTokenIds are read by native policies only)" : ""),
        );
    return [{ role: "user", content: r.prompt }];
}

/** Checks a tool's name (OpenAI's form, [a-zA-Z0-9_-]{1,64}) and that no earlier tool of the list (`seen`) has it. */
export function checkToolName(at: string, t: { name?: unknown } | null | undefined, seen: Set<string>): void {
    if (!t || typeof t.name !== "string" || !/^[a-zA-Z0-9_-]{1,64}$/.test(t.name))
        throw new TypeError(`${at}.name: expected 1-64 letters, digits, '_' or '-', got ${describe(t?.name)}`);
    if (seen.has(t.name)) throw new TypeError(`${at}.name: '${t.name}' is offered twice`);
    seen.add(t.name);
}

/** A request's tools, checked: names unique, of OpenAI's form ([a-zA-Z0-9_-]{1,64}), parameters an object. */
export function requestTools(where: string, tools: unknown, i: number): ToolSpec[] {
    if (!Array.isArray(tools))
        throw new TypeError(
            `${where}: requests[${i}].tools: expected an array of { name, description?, parameters? }, got ${describe(tools)}`,
        );
    const seen = new Set<string>();
    tools.forEach((t: ToolSpec, k) => {
        const at = `${where}: requests[${i}].tools[${k}]`;
        checkToolName(at, t, seen);
        if (t.description !== undefined && typeof t.description !== "string")
            throw new TypeError(`${at}.description: expected a string`);
        if (
            t.parameters !== undefined &&
            (t.parameters === null || typeof t.parameters !== "object" || Array.isArray(t.parameters))
        )
            throw new TypeError(`${at}.parameters: expected a JSON Schema object`);
    });
    return tools as ToolSpec[];
}
