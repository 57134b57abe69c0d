// toolText.ts: tool calling for models that decode here (NativePolicy), through a text protocol their chat format
// carries, in the shape Qwen2.5 / Hermes models were trained on: the tools are described in a system message, a call
// is a line `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the assistant's text, and a tool's answer
// comes back as a user message `<tool_response name="...">...</tool_response>`. Messages in OpenAI's form (assistant
// toolCalls, role 'tool') are rendered into that text before the chat template, and the generated text is parsed
// back into Generation.toolCalls. Remote servers use OpenAI's own fields instead (openaiDialect.ts).
import type { ChatMessage, Generation, ToolCall, ToolSpec } from "./types.js";

const OPEN = "<tool_call>",
    CLOSE = "</tool_call>";

/** The system text that tells a model of `tools` and of the call format. */
export function toolSystemText(tools: readonly ToolSpec[]): string {
    const lines = tools.map((t) =>
        JSON.stringify({
            name: t.name,
            ...(t.description ? { description: t.description } : {}),
            parameters: t.parameters ?? { type: "object" },
        }),
    );
    return (
        `You may call tools. Available tools, one JSON object each:\n${lines.join("\n")}\n` +
        `To call one, write a line ${OPEN}{"name": <tool name>, "arguments": <JSON object>}${CLOSE}; the answer comes back as ` +
        `<tool_response name="..."> ... </tool_response>.`
    );
}

/** `messages` (with tool calls and tool messages) as plain system / user / assistant text for a chat template. */
export function toolTextMessages(
    messages: readonly ChatMessage[],
    tools: readonly ToolSpec[] | undefined,
): ChatMessage[] {
    const out: ChatMessage[] = [];
    const system = tools && tools.length ? toolSystemText(tools) : null;
    for (const m of messages) {
        if (m.role === "tool") {
            const body = `<tool_response name="${m.name ?? ""}">\n${m.content}\n</tool_response>`;
            const last = out[out.length - 1];
            if (last && last.role === "user" && last.content.endsWith("</tool_response>"))
                last.content += `\n${body}`; // answers of one turn together
            else out.push({ role: "user", content: body });
        } else if (m.role === "assistant" && m.toolCalls?.length) {
            const calls = m.toolCalls.map(
                (c) => `${OPEN}{"name": ${JSON.stringify(c.name)}, "arguments": ${c.arguments || "{}"}}${CLOSE}`,
            );
            out.push({ role: "assistant", content: [m.content, ...calls].filter((x) => x !== "").join("\n") });
        } else out.push({ role: m.role, content: m.content });
    }
    if (system !== null) {
        if (out[0]?.role === "system") out[0] = { role: "system", content: `${out[0].content}\n\n${system}` };
        else out.unshift({ role: "system", content: system });
    }
    return out;
}

/**
 * The tool calls in a generated text: each `<tool_call>{...}</tool_call>` whose JSON names a tool; the text keeps what
 * lies outside them. A block that is not JSON, or names no tool, stays in the text (the model answered, badly) and is
 * not a call. `idPrefix` makes the ids unique within a request's answers.
 */
export function parseToolText(text: string, idPrefix: string): { text: string; toolCalls: ToolCall[] } {
    const calls: ToolCall[] = [];
    let rest = "",
        at = 0;
    for (;;) {
        const open = text.indexOf(OPEN, at);
        if (open < 0) break;
        const close = text.indexOf(CLOSE, open + OPEN.length);
        if (close < 0) break;
        const body = text.slice(open + OPEN.length, close).trim();
        let call: ToolCall | null = null;
        try {
            const j = JSON.parse(body) as { name?: unknown; arguments?: unknown };
            if (j && typeof j.name === "string" && j.name !== "")
                call = {
                    id: `${idPrefix}-${calls.length}`,
                    name: j.name,
                    arguments: typeof j.arguments === "string" ? j.arguments : JSON.stringify(j.arguments ?? {}),
                };
        } catch {
            /* not a call */
        }
        rest += text.slice(at, call ? open : close + CLOSE.length);
        if (call) calls.push(call);
        at = close + CLOSE.length;
    }
    rest += text.slice(at);
    return { text: calls.length ? rest.trim() : text, toolCalls: calls };
}

/** A native generation with its tool calls parsed out (finishReason 'tool_calls' when there are any). */
export function withToolCalls(g: Generation, idPrefix: string): Generation {
    const { text, toolCalls } = parseToolText(g.text, idPrefix);
    return toolCalls.length ? { ...g, text, toolCalls, finishReason: "tool_calls" } : g;
}

/** A request's messages as a native model's chat template reads them: through the text protocol when the request
 * offers tools or carries tool calls / tool messages, else as they are. */
export function nativeChat(
    messages: readonly ChatMessage[],
    tools: readonly ToolSpec[] | undefined,
): readonly ChatMessage[] {
    const uses =
        (tools !== undefined && tools.length > 0) ||
        messages.some((m) => m.role === "tool" || (m.toolCalls?.length ?? 0) > 0);
    return uses ? toolTextMessages(messages, tools) : messages;
}
