// serverTools.ts: OpenAI's tool calling on `maporl serve`: the request's tools and its wire-form messages (assistant
// tool_calls, role 'tool' with tool_call_id) become a GenerateRequest (NativePolicy renders them with its text
// protocol, toolText.ts), and a generation's parsed calls go back as message.tool_calls with finish_reason
// 'tool_calls'. Malformed input is a 400 naming the field.
import { wireMessages, wireToolCalls } from "../remote/openaiDialect.js";
import { HttpError } from "./serverModels.js";
import type { ChatMessage, Generation, ToolSpec } from "../policy/types.js";

/** OpenAI wire-form messages as ChatMessages (checked). */
export function wireToChat(messages: unknown): ChatMessage[] {
    if (!Array.isArray(messages) || messages.length === 0)
        throw new HttpError(400, "messages: expected a non-empty array of { role, content }");
    return messages.map((m: Record<string, unknown>, j) => {
        const at = `messages[${j}]`;
        if (!m || typeof m !== "object") throw new HttpError(400, `${at}: expected an object`);
        const role = m.role;
        if (role === "tool") {
            if (typeof m.tool_call_id !== "string" || m.tool_call_id === "")
                throw new HttpError(400, `${at}.tool_call_id: expected the id of the call it answers`);
            if (typeof m.content !== "string") throw new HttpError(400, `${at}.content: expected a string`);
            return {
                role,
                content: m.content,
                toolCallId: m.tool_call_id,
                ...(typeof m.name === "string" ? { name: m.name } : {}),
            };
        }
        if (role !== "system" && role !== "user" && role !== "assistant")
            throw new HttpError(
                400,
                `${at}.role: expected 'system', 'user', 'assistant' or 'tool', got ${JSON.stringify(role)}`,
            );
        const calls = m.tool_calls;
        if (role === "assistant" && Array.isArray(calls) && calls.length > 0) {
            const toolCalls = wireToolCalls(
                calls,
                "required",
                (k) =>
                    new HttpError(
                        400,
                        `${at}.tool_calls[${k}]: expected { id, type: 'function', function: { name, arguments } }`,
                    ),
            );
            if (m.content !== null && m.content !== undefined && typeof m.content !== "string")
                throw new HttpError(400, `${at}.content: expected a string or null`);
            return { role, content: typeof m.content === "string" ? m.content : "", toolCalls };
        }
        if (typeof m.content !== "string") throw new HttpError(400, `${at}.content: expected a string`);
        return { role, content: m.content };
    });
}

/** The request's tools (OpenAI's [{ type: 'function', function: { name, description, parameters } }]), or undefined. */
export function wireTools(tools: unknown): ToolSpec[] | undefined {
    if (tools === undefined || tools === null) return undefined;
    if (!Array.isArray(tools))
        throw new HttpError(400, "tools: expected an array of { type: 'function', function: { name, parameters } }");
    return tools.map(
        (t: { type?: unknown; function?: { name?: unknown; description?: unknown; parameters?: unknown } }, k) => {
            if (!t || t.type !== "function" || !t.function || typeof t.function.name !== "string")
                throw new HttpError(
                    400,
                    `tools[${k}]: expected { type: 'function', function: { name, description?, parameters? } }`,
                );
            const f = t.function;
            return {
                name: f.name as string,
                ...(typeof f.description === "string" ? { description: f.description } : {}),
                ...(f.parameters && typeof f.parameters === "object"
                    ? { parameters: f.parameters as Record<string, unknown> }
                    : {}),
            };
        },
    );
}

/** A generation's assistant message in OpenAI's form (content null when it only calls tools). */
export function assistantMessage(g: Generation): Record<string, unknown> {
    return wireMessages([
        { role: "assistant", content: g.text, ...(g.toolCalls?.length ? { toolCalls: g.toolCalls } : {}) },
    ])[0]!;
}
