// POST /v1/responses on maporl serve: the same answer as chat completions for the same messages and seed, input
// items (messages with text parts, function calls and their outputs) read as chat messages, and bad requests named.
import type { ServerResponse } from "node:http";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, servePolicy, type RunningServer } from "../../lib/index.js";
import { responsesMessages } from "../../lib/serve/responses.js";
import { streamResponse } from "../../lib/serve/responsesStream.js";

let policy: NativePolicy, srv: RunningServer;
beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 256, layers: 1, heads: 2, dModel: 16, seed: 4 });
    srv = await servePolicy(policy, { port: 0, model: "tiny" });
});
afterAll(async () => {
    await srv.close();
    await policy.dispose();
});

describe("the Responses API", () => {
    it("answers as chat completions do for the same messages and seed (the official client)", async () => {
        const c = new OpenAI({ baseURL: srv.baseUrl, apiKey: "none", maxRetries: 0 });
        const r = await c.responses.create({
            model: "tiny",
            instructions: "Be brief.",
            input: [{ role: "user", content: [{ type: "input_text", text: "2 + 2?" }] }],
            temperature: 1,
            max_output_tokens: 6,
            // @ts-expect-error (not in the client's types: vLLM's and ours)
            seed: 11,
        });
        const chat = await c.chat.completions.create({
            model: "tiny",
            messages: [
                { role: "system", content: "Be brief." },
                { role: "user", content: "2 + 2?" },
            ],
            temperature: 1,
            max_tokens: 6,
            seed: 11,
        });
        expect(r.output_text).toBe(chat.choices[0].message.content);
        expect(r.status).toBe(chat.choices[0].finish_reason === "length" ? "incomplete" : "completed");
        expect(r.usage!.output_tokens).toBe(chat.usage!.completion_tokens);
        expect(r.usage!.input_tokens).toBe(chat.usage!.prompt_tokens);
    });

    it("stream: true: the Responses API's events in order, the text and the final response the whole answer's", async () => {
        const c = new OpenAI({ baseURL: srv.baseUrl, apiKey: "none", maxRetries: 0 });
        const req = {
            model: "tiny",
            input: "3 + 4?",
            temperature: 1,
            max_output_tokens: 8,
            seed: 5,
        } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming;
        const whole = await c.responses.create(req);
        const events = await c.responses.create({ ...req, stream: true });
        const types: string[] = [];
        let text = "",
            last: OpenAI.Responses.Response | null = null,
            seq = -1;
        for await (const e of events) {
            types.push(e.type);
            expect(e.sequence_number).toBe(seq + 1);
            seq = e.sequence_number;
            if (e.type === "response.output_text.delta") text += e.delta;
            if (e.type === "response.completed" || e.type === "response.incomplete") last = e.response;
        }
        const end = whole.status === "incomplete" ? "response.incomplete" : "response.completed";
        expect(types).toEqual([
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            end,
        ]);
        expect(text).toBe(whole.output_text);
        expect(last!.output_text ?? text).toBe(whole.output_text);
        expect(last!.usage).toEqual(whole.usage);
        // the client's stream helper assembles the same final response
        const final = await c.responses.stream(req as never).finalResponse();
        expect(final.output_text).toBe(whole.output_text);
    });

    it("a streamed function call: its arguments in one delta, then done with the name; an incomplete answer ends so", () => {
        let out = "";
        const res = {
            writeHead: () => res,
            write: (x: string) => void (out += x),
            end: () => undefined,
        } as unknown as ServerResponse;
        const call = {
            type: "function_call",
            id: "fc_1",
            call_id: "call_0",
            name: "lookup",
            arguments: '{"key":"3"}',
            status: "completed",
        };
        streamResponse(res, { id: "resp_1", status: "incomplete", output: [call] });
        const events = out
            .trim()
            .split("\n\n")
            .map((block) => {
                const [ev, data] = block.split("\n");
                const d = JSON.parse(data.slice("data: ".length)) as Record<string, unknown>;
                expect(ev).toBe(`event: ${String(d.type)}`);
                return d;
            });
        expect(events.map((e) => e.type)).toEqual([
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.incomplete",
        ]);
        expect(events[2]).toMatchObject({ output_index: 0, item: { ...call, status: "in_progress", arguments: "" } });
        expect(events[3]).toMatchObject({ item_id: "fc_1", delta: '{"key":"3"}' });
        expect(events[4]).toMatchObject({ name: "lookup", arguments: '{"key":"3"}' });
        expect(events[5]).toMatchObject({ item: call });
        expect(events[0]).toMatchObject({ response: { status: "in_progress", output: [] } });
        expect(events.map((e) => e.sequence_number)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    });

    it("reads input items as chat messages", () => {
        expect(
            responsesMessages({
                instructions: "sys",
                input: [
                    { role: "developer", content: "dev" },
                    {
                        type: "message",
                        role: "user",
                        content: [
                            { type: "input_text", text: "a" },
                            { type: "input_text", text: "b" },
                        ],
                    },
                    { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
                    { type: "function_call", call_id: "c2", name: "g", arguments: '{"x":1}' },
                    { type: "function_call_output", call_id: "c1", output: "r1" },
                    { type: "reasoning", summary: [] },
                ],
            }),
        ).toEqual([
            { role: "system", content: "sys" },
            { role: "system", content: "dev" },
            { role: "user", content: "ab" },
            {
                role: "assistant",
                content: "",
                toolCalls: [
                    { id: "c1", name: "f", arguments: "{}" },
                    { id: "c2", name: "g", arguments: '{"x":1}' },
                ],
            },
            { role: "tool", toolCallId: "c1", content: "r1" },
        ]);
    });

    it("names what it refuses", async () => {
        const post = async (body: unknown) => {
            const r = await fetch(`${srv.baseUrl}/responses`, { method: "POST", body: JSON.stringify(body) });
            return [r.status, ((await r.json()) as { error: { message: string } }).error.message] as const;
        };
        expect(await post({ model: "tiny", input: "x", stream: "yes" })).toEqual([
            400,
            "stream: expected a boolean, got string",
        ]);
        expect(await post({ model: "tiny", input: "x", previous_response_id: "resp_1" })).toEqual([
            400,
            expect.stringMatching(/previous_response_id: responses are not stored/) as string,
        ]);
        expect(
            (await post({ model: "tiny", input: [{ role: "user", content: [{ type: "input_image" }] }] }))[1],
        ).toMatch(/input\[0\].content\[0\]: expected .*only text/);
        expect((await post({ model: "tiny", input: [{ type: "web_search_call" }] }))[1]).toMatch(/input\[0\].type/);
        expect((await post({ model: "tiny", input: "x", tools: [{ type: "web_search" }] }))[1]).toMatch(
            /only function tools/,
        );
        expect((await post({ model: "tiny", input: 5 }))[1]).toMatch(/input: expected a string or an array/);
        expect((await post({ model: "tiny", instructions: "only", input: [] }))[1]).toMatch(/at least one message/);
        expect((await post({ model: "tiny", input: "x", temperature: "hot" }))[1]).toMatch(
            /temperature: expected a number/,
        );
        expect((await post({ model: "nope", input: "x" }))[0]).toBe(404);
    });
});
