// responsesStream.ts (serve): a Responses API answer as the server-sent events of `stream: true`: response.created
// and response.in_progress (status in_progress, no output yet); per output item, response.output_item.added, then for a
// message its content part added, one response.output_text.delta with the text, output_text.done and content_part.done,
// for a function call one response.function_call_arguments.delta and .done; response.output_item.done; then
// response.completed (response.incomplete when cut at max_output_tokens) with the whole response. Each event is
// `event: <type>` + `data: <json>` with its sequence_number. The answer is generated before the first event: the text
// arrives in one delta (a client reads the same events as from a token-by-token stream).
import type { ServerResponse } from "node:http";

type Item = Record<string, unknown> & { type: string; id: string };

/** Writes `response` (a whole Responses API answer) as its stream of events and ends the reply. */
export function streamResponse(res: ServerResponse, response: Record<string, unknown> & { output: Item[] }): void {
    res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        connection: "keep-alive",
    });
    let seq = 0;
    const event = (type: string, data: Record<string, unknown>) =>
        res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
    const pending = { ...response, status: "in_progress", incomplete_details: null, output: [], usage: null };
    event("response.created", { response: pending });
    event("response.in_progress", { response: pending });
    response.output.forEach((item, output_index) => {
        const at = { item_id: item.id, output_index };
        if (item.type === "message") {
            const text = (item.content as { text: string }[])[0]!.text;
            event("response.output_item.added", {
                output_index,
                item: { ...item, status: "in_progress", content: [] },
            });
            const part = { type: "output_text", text: "", annotations: [] };
            event("response.content_part.added", { ...at, content_index: 0, part });
            event("response.output_text.delta", { ...at, content_index: 0, delta: text, logprobs: [] });
            event("response.output_text.done", { ...at, content_index: 0, text, logprobs: [] });
            event("response.content_part.done", { ...at, content_index: 0, part: { ...part, text } });
        } else {
            const args = String(item.arguments);
            event("response.output_item.added", {
                output_index,
                item: { ...item, status: "in_progress", arguments: "" },
            });
            event("response.function_call_arguments.delta", { ...at, delta: args });
            event("response.function_call_arguments.done", { ...at, name: item.name, arguments: args });
        }
        event("response.output_item.done", { output_index, item });
    });
    event(response.status === "incomplete" ? "response.incomplete" : "response.completed", { response });
    res.end();
}
