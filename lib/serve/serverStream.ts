// serverStream.ts: `stream: true` for maporl serve (server.ts): server-sent events in OpenAI's and vLLM's shapes. A
// chat stream opens each choice with a role delta, then sends a chunk per sampled token (its text delta, and with
// logprobs / return_token_ids that token's log-prob and id), then a chunk with the finish reason per choice, a usage
// chunk when stream_options.include_usage, and `data: [DONE]`. Text is released only once it is final: a character
// still incomplete (byte-level tokens), the last (longest stop string - 1) characters and anything from a stop string on wait, so a stop string never
// reaches the client. A policy that does not stream (no per-token callback) sends each answer in one chunk. An error
// after the stream began is sent as an `error` event before [DONE]; a client that disconnects aborts the generation.
import type { ServerResponse } from "node:http";

import { clientFault, HttpError } from "./serverModels.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";

export interface StreamTokenizer {
    decode(ids: number[]): string;
    isStop?(id: number): boolean;
}

export interface StreamRequest {
    policy: Policy;
    /** The requests of the n choices. */
    requests: GenerateRequest[];
    completions: boolean;
    id: string;
    model: string;
    returnIds: boolean;
    includeUsage: boolean;
    tokenizer: StreamTokenizer | null;
    /** A chunk's logprobs for its tokens, as the non-streamed answer gives them; null when not asked. */
    logprobsOf: ((ids: number[], lps: number[], tops?: { id: number; logprob: number }[][]) => unknown) | null;
    /** The usage of the answers, as the non-streamed reply gives it. */
    usage(gens: Generation[]): unknown;
    choiceExtras(g: Generation): Record<string, unknown>;
}

/** Answers one generation request as a stream; resolves when the stream has ended. */
export async function streamGeneration(res: ServerResponse, r: StreamRequest): Promise<void> {
    const n = r.requests.length,
        created = Math.floor(Date.now() / 1000);
    const object = r.completions ? "text_completion" : "chat.completion.chunk";
    const stops = r.requests.map((q) =>
        q.sampling?.stop === undefined ? [] : typeof q.sampling.stop === "string" ? [q.sampling.stop] : q.sampling.stop,
    );
    const hold = stops.map((s) => Math.max(0, ...s.map((x) => x.length - 1)));
    const abort = new AbortController();
    res.once("close", () => {
        if (!res.writableFinished) abort.abort(new Error("the client closed the stream"));
    });
    // The headers (and the chat roles) go out with the first event: a request the policy refuses at once (a prompt
    // over the context) is still answered with its HTTP status.
    let begun = false;
    const event = (data: unknown) => {
        if (res.destroyed || res.writableEnded) return; // (a token a decode step sends after the stream ended)
        if (!begun) {
            begun = true;
            res.writeHead(200, {
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
                connection: "keep-alive",
            });
            if (!r.completions)
                for (let i = 0; i < n; i++)
                    res.write(
                        `data: ${JSON.stringify({ id: r.id, object, created, model: r.model, choices: [{ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] })}\n\n`,
                    );
        }
        res.write(`data: ${JSON.stringify(data)}\n\n`);
    };
    const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
        event({ id: r.id, object, created, model: r.model, choices: [choice], ...extra });
    const delta = (
        index: number,
        text: string,
        ids: number[],
        lps: number[],
        tops?: { id: number; logprob: number }[][],
    ) =>
        chunk({
            index,
            ...(r.completions ? { text } : { delta: { content: text } }),
            logprobs: r.logprobsOf?.(ids, lps, tops) ?? null,
            finish_reason: null,
            ...(r.returnIds && ids.length > 0 ? { token_ids: ids } : {}),
        });
    const st = Array.from({ length: n }, () => ({ ids: [] as number[], sent: 0, streamed: false }));
    const tk = r.tokenizer;
    const onToken = (i: number, id: number, logprob: number, top?: { id: number; logprob: number }[]) => {
        const s = st[i]!;
        s.streamed = true;
        if (!tk?.isStop?.(id)) s.ids.push(id);
        let text = tk ? tk.decode(s.ids) : "";
        while (text.endsWith("\uFFFD")) text = text.slice(0, -1); // a character not yet complete
        // Never past the first stop string (the answer ends before it), nor into the last hold[i] characters (one may begin there).
        let end = text.length - hold[i]!;
        for (const x of stops[i]!) {
            const at = text.indexOf(x, Math.max(0, s.sent - x.length + 1));
            if (at >= 0 && at < end) end = at;
        }
        const ready = Math.max(s.sent, end);
        const piece = text.slice(s.sent, ready);
        s.sent = ready;
        delta(i, piece, [id], [logprob], top ? [top] : undefined);
    };
    try {
        const gens = await r.policy.generate(r.requests, { signal: abort.signal, ...(tk ? { onToken } : {}) });
        gens.forEach((g, i) => {
            const s = st[i]!,
                rest = g.text.slice(s.sent);
            if (!s.streamed)
                delta(i, g.text, g.tokenIds ?? [], g.logprobs ?? [], g.topLogprobs); // a policy that does not stream: the answer whole
            else if (rest !== "") delta(i, rest, [], []);
            chunk({
                index: i,
                ...(r.completions ? { text: "" } : { delta: {} }),
                logprobs: null,
                finish_reason: g.finishReason,
                ...r.choiceExtras(g),
            });
        });
        if (r.includeUsage) event({ id: r.id, object, created, model: r.model, choices: [], usage: r.usage(gens) });
    } catch (e) {
        const status = e instanceof HttpError ? e.status : clientFault(e) ? 400 : 500;
        if (!begun)
            throw e instanceof HttpError ? e : new HttpError(status, e instanceof Error ? e.message : String(e));
        event({
            error: {
                message: e instanceof Error ? e.message : String(e),
                type: status === 400 ? "invalid_request_error" : "server_error",
                code: status,
            },
        });
    }
    if (!res.destroyed && !res.writableEnded) res.end("data: [DONE]\n\n");
}
