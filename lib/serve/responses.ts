// responses.ts (serve): OpenAI's Responses API, POST /v1/responses, as vLLM serves it, for clients whose default it is
// (the OpenAI Agents SDK). The request's `instructions` and `input` (a string, or items: messages with text content,
// function_call and function_call_output) become chat messages; function tools become tools; the answer is an output
// list of a message (output_text) and / or function_call items. With stream: true the same answer comes as the
// Responses API's server-sent events (response.created ... response.completed / response.incomplete), its text in one
// output_text delta once generated (responsesStream.ts). Stateless: previous_response_id (stored responses) is
// refused; the fields that change nothing here (store, include, parallel_tool_calls, truncation,
// reasoning, metadata, user, text.format 'text') are accepted. vLLM's token-id field: return_token_ids.
import { randomBytes } from "node:crypto";
import type { ServerResponse } from "node:http";

import { assistantMessage } from "./serverTools.js";
import { generateN, samplingOf, send } from "./requests.js";
import { streamResponse } from "./responsesStream.js";
import type { RouteContext } from "./routes.js";
import { HttpError } from "./serverModels.js";
import type { ChatMessage, ToolCall, ToolSpec } from "../policy/types.js";

const id = (prefix: string) => `${prefix}_${randomBytes(12).toString("hex")}`;

// A content field as text: a string, or parts of type input_text / output_text / text (other parts are a 400).
function textOf(content: unknown, at: string): string {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) throw new HttpError(400, `${at}: expected a string or an array of text parts`);
    return content
        .map((p: { type?: unknown; text?: unknown }, k) => {
            if (
                !p ||
                (p.type !== "input_text" && p.type !== "output_text" && p.type !== "text") ||
                typeof p.text !== "string"
            )
                throw new HttpError(
                    400,
                    `${at}[${k}]: expected { type: 'input_text' | 'output_text', text } (only text is supported), got type ${JSON.stringify(p?.type)}`,
                );
            return p.text;
        })
        .join("");
}

/** The Responses request's instructions and input as chat messages (checked; an error names the item). */
export function responsesMessages(body: Record<string, unknown>): ChatMessage[] {
    const out: ChatMessage[] = [];
    if (body.instructions !== undefined && body.instructions !== null) {
        if (typeof body.instructions !== "string") throw new HttpError(400, "instructions: expected a string");
        out.push({ role: "system", content: body.instructions });
    }
    const input = body.input;
    if (typeof input === "string") out.push({ role: "user", content: input });
    else if (Array.isArray(input))
        input.forEach((it: Record<string, unknown>, k) => {
            const at = `input[${k}]`;
            if (!it || typeof it !== "object") throw new HttpError(400, `${at}: expected an object`);
            const type = it.type ?? "message";
            if (type === "message") {
                const role = it.role === "developer" ? "system" : it.role;
                if (role !== "system" && role !== "user" && role !== "assistant")
                    throw new HttpError(
                        400,
                        `${at}.role: expected 'system', 'developer', 'user' or 'assistant', got ${JSON.stringify(it.role)}`,
                    );
                out.push({ role, content: textOf(it.content, `${at}.content`) });
            } else if (type === "function_call") {
                if (typeof it.call_id !== "string" || typeof it.name !== "string" || typeof it.arguments !== "string")
                    throw new HttpError(400, `${at}: expected { type: 'function_call', call_id, name, arguments }`);
                const call: ToolCall = { id: it.call_id, name: it.name, arguments: it.arguments };
                const last = out[out.length - 1];
                if (last && last.role === "assistant" && !last.content && last.toolCalls) last.toolCalls.push(call);
                else out.push({ role: "assistant", content: "", toolCalls: [call] });
            } else if (type === "function_call_output") {
                if (typeof it.call_id !== "string")
                    throw new HttpError(400, `${at}.call_id: expected the id of the call it answers`);
                out.push({ role: "tool", toolCallId: it.call_id, content: textOf(it.output, `${at}.output`) });
            } else if (type === "reasoning") {
                // (a reasoning item of an earlier answer: nothing a model here produced or reads)
            } else
                throw new HttpError(
                    400,
                    `${at}.type: expected 'message', 'function_call' or 'function_call_output', got ${JSON.stringify(type)}`,
                );
        });
    else throw new HttpError(400, "input: expected a string or an array of input items");
    if (!out.some((m) => m.role !== "system")) throw new HttpError(400, "input: expected at least one message");
    return out;
}

/** The Responses request's function tools (other tool types are a 400). */
export function responsesTools(tools: unknown): ToolSpec[] | undefined {
    if (tools === undefined || tools === null) return undefined;
    if (!Array.isArray(tools))
        throw new HttpError(400, "tools: expected an array of { type: 'function', name, parameters }");
    const out = tools.map((t: Record<string, unknown>, k) => {
        if (!t || t.type !== "function" || typeof t.name !== "string" || t.name === "")
            throw new HttpError(
                400,
                `tools[${k}]: expected { type: 'function', name, description?, parameters? } (only function tools are served), got type ${JSON.stringify(t?.type)}`,
            );
        return {
            name: t.name,
            ...(typeof t.description === "string" ? { description: t.description } : {}),
            ...(t.parameters && typeof t.parameters === "object"
                ? { parameters: t.parameters as Record<string, unknown> }
                : {}),
        };
    });
    return out.length ? out : undefined;
}

/** POST /v1/responses. */
export async function responsesRoute(
    ctx: RouteContext,
    body: Record<string, unknown>,
    res: ServerResponse,
): Promise<void> {
    if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean")
        throw new HttpError(400, `stream: expected a boolean, got ${typeof body.stream}`);
    if (body.previous_response_id !== undefined && body.previous_response_id !== null)
        throw new HttpError(400, "previous_response_id: responses are not stored here; send the whole input");
    const messages = responsesMessages(body);
    const tools = responsesTools(body.tools);
    const { sampling, seed } = samplingOf(
        body,
        [
            ["temperature", "temperature"],
            ["top_p", "topP"],
            ["max_output_tokens", "maxTokens"],
            ["seed", "seed"],
        ],
        false,
    );
    const served = ctx.models.get(body.model);
    const abort = new AbortController();
    res.once("close", () => {
        if (!res.writableFinished) abort.abort(new Error("the client closed the connection"));
    });
    const [g] = await generateN(
        served.policy,
        { messages, sampling, ...(tools ? { tools } : {}) },
        seed,
        1,
        abort.signal,
    );
    const msg = assistantMessage(g!) as { content: string | null };
    const output: (Record<string, unknown> & { type: string; id: string })[] = [];
    if (msg.content)
        output.push({
            type: "message",
            id: id("msg"),
            status: "completed",
            role: "assistant",
            content: [{ type: "output_text", text: msg.content, annotations: [] }],
        });
    for (const c of g!.toolCalls ?? [])
        output.push({
            type: "function_call",
            id: id("fc"),
            call_id: c.id,
            name: c.name,
            arguments: c.arguments,
            status: "completed",
        });
    const truncated = g!.finishReason === "length";
    const response = {
        id: id("resp"),
        object: "response",
        created_at: Math.floor(Date.now() / 1000),
        status: truncated ? "incomplete" : "completed",
        incomplete_details: truncated ? { reason: "max_output_tokens" } : null,
        error: null,
        model: served.name,
        instructions: typeof body.instructions === "string" ? body.instructions : null,
        output,
        parallel_tool_calls: body.parallel_tool_calls !== false,
        tool_choice: body.tool_choice ?? "auto",
        tools: Array.isArray(body.tools) ? body.tools : [],
        temperature: sampling.temperature ?? null,
        top_p: sampling.topP ?? null,
        max_output_tokens: sampling.maxTokens ?? null,
        previous_response_id: null,
        text: { format: { type: "text" } },
        usage: {
            input_tokens: g!.usage.promptTokens,
            input_tokens_details: { cached_tokens: 0 },
            output_tokens: g!.usage.completionTokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: g!.usage.promptTokens + g!.usage.completionTokens,
        },
        ...(body.return_token_ids === true && g!.tokenIds
            ? { prompt_token_ids: g!.promptTokenIds, token_ids: g!.tokenIds }
            : {}),
    };
    if (body.stream === true) streamResponse(res, response);
    else send(res, 200, response);
}
