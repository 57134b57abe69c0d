// types.ts: the one interface every model implements. Generation is batched; a request is chat messages (or a
// prompt string), sampling options and a seed. Trainable policies (the embedded model) add logprobs() and
// trainStep(); remote ones (OpenAICompatiblePolicy) generate only.

export interface ChatMessage {
    role: "system" | "user" | "assistant";
    content: string;
}

export interface SamplingOptions {
    temperature?: number;
    topP?: number;
    topK?: number;
    maxTokens?: number;
    stop?: string[];
}

export interface GenerateRequest {
    /** Chat messages; or `prompt`, sent as one user message. */
    messages?: ChatMessage[];
    prompt?: string;
    sampling?: SamplingOptions;
    seed?: number;
}

export interface Generation {
    text: string;
    /** The completion's tokens (ids for local policies, strings for remote ones), when the backend gives them. */
    tokens?: (number | string)[];
    /** Their log-probs under the sampling distribution, when the backend gives them. */
    logprobs?: number[];
    finishReason: string;
    usage: { promptTokens: number; completionTokens: number };
    latencyMs: number;
}

export interface Policy {
    readonly name: string;
    generate(requests: GenerateRequest[], options?: { signal?: AbortSignal }): Promise<Generation[]>;
}

/** The messages of a request (a prompt becomes one user message); throws naming the request on bad input. */
export function requestMessages(where: string, r: GenerateRequest, i: number): ChatMessage[] {
    if (r === null || typeof r !== "object") throw new TypeError(`${where}: requests[${i}]: expected an object, got ${typeof r}`);
    if (r.messages !== undefined) {
        if (!Array.isArray(r.messages) || r.messages.length === 0)
            throw new TypeError(`${where}: requests[${i}].messages: expected a non-empty array of { role, content }`);
        r.messages.forEach((m, j) => {
            if (!m || !["system", "user", "assistant"].includes(m.role) || typeof m.content !== "string")
                throw new TypeError(`${where}: requests[${i}].messages[${j}]: expected { role: 'system' | 'user' | 'assistant', content: string }`);
        });
        return r.messages;
    }
    if (typeof r.prompt !== "string") throw new TypeError(`${where}: requests[${i}]: expected messages or a prompt string`);
    return [{ role: "user", content: r.prompt }];
}
