// routes.ts (serve): maporl serve's generation and tokenizer routes over the served models.
import type { ServerResponse } from "node:http";

import { fewestTokens } from "../policy/tokenizer.js";
import { nativeChat } from "../policy/toolText.js";
import type { GenerateRequest, Generation, Policy } from "../policy/types.js";
import {
    choiceRequests,
    flag,
    generateN,
    logprobsField,
    samplingOf,
    send,
    tokenizerOf,
    topLogprobsOf,
    usageOf,
} from "./requests.js";
import { HttpError } from "./serverModels.js";
import { streamGeneration } from "./serverStream.js";
import { assistantMessage, wireToChat, wireTools } from "./serverTools.js";

/** The models a server answers for: `get` resolves a request's `model` field (an HttpError 404 when it names none). */
export interface ModelLookup {
    get(model: unknown): { name: string; policy: Policy };
}

/** What the routes share: the served models, the context length (null: unknown) and the reply ids. */
export interface RouteContext {
    models: ModelLookup;
    ctx: number | null;
    /** The next reply's number (ids chatcmpl-maporl-N, cmpl-maporl-N). */
    next(): number;
}

/** POST /v1/chat/completions and /v1/completions. */
export async function chatRoute(
    ctx: RouteContext,
    body: Record<string, unknown>,
    res: ServerResponse,
    completions: boolean,
): Promise<void> {
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
    const served = ctx.models.get(body.model); // (resolved right before generate: an adapter replaced meanwhile answers wholly)
    const tk = tokenizerOf(served.policy);
    if (completions && typeof body.prompt === "string" && tk) {
        // raw text, no chat template
        const least = fewestTokens(tk, body.prompt.length); // (refused before it is tokenized when far past the context)
        if (ctx.ctx !== null && least >= ctx.ctx)
            throw new HttpError(400, `prompt: at least ${least} tokens, the context is ${ctx.ctx}`);
        req = { promptTokenIds: tk.encode(body.prompt), sampling };
    }
    if (body.stream === true)
        return streamGeneration(res, {
            policy: served.policy,
            requests: choiceRequests(req, seed, n),
            completions,
            id: `${completions ? "cmpl" : "chatcmpl"}-maporl-${ctx.next()}`,
            model: served.name,
            returnIds,
            includeUsage: (so as { include_usage?: unknown } | undefined)?.include_usage === true,
            tokenizer: tk,
            logprobsOf: logprobs ? (ids, lps, tops) => logprobsField(ids, lps, tk, asIds, completions, tops) : null,
            usage: usageOf,
            choiceExtras: (g) => (promptIdsPerChoice && g.promptTokenIds ? { prompt_token_ids: g.promptTokenIds } : {}),
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
                  id: `cmpl-maporl-${ctx.next()}`,
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
                  id: `chatcmpl-maporl-${ctx.next()}`,
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
}

/** POST /tokenize (and /v1/tokenize). */
export function tokenizeRoute(ctx: RouteContext, body: Record<string, unknown>, res: ServerResponse): void {
    const served = ctx.models.get(body.model),
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
        max_model_len: ctx.ctx,
        tokens,
        ...(flag(body, "return_token_strs") ? { token_strs: tokens.map((t) => tk.decode([t])) } : {}),
    });
}

/** POST /detokenize (and /v1/detokenize). */
export function detokenizeRoute(ctx: RouteContext, body: Record<string, unknown>, res: ServerResponse): void {
    const served = ctx.models.get(body.model),
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
}
