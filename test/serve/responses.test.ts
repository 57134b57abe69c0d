// POST /v1/responses on maporl serve: the same answer as chat completions for the same messages and seed, input
// items (messages with text parts, function calls and their outputs) read as chat messages, and bad requests named.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, servePolicy, type RunningServer } from "../../lib/index.js";
import { responsesMessages } from "../../lib/serve/responses.js";

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
        expect(await post({ model: "tiny", input: "x", stream: true })).toEqual([
            400,
            expect.stringMatching(/stream/) as string,
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
