// toolText.test.ts: tool calling in the Policy layer. OpenAI's wire form (tools, assistant tool_calls, role 'tool'
// with tool_call_id) for remote servers; the text protocol for models that decode here (tools in a system message,
// <tool_call>{...}</tool_call> in the answer, <tool_response> back); requests checked field by field.
import { describe, expect, it } from "vitest";

import { NativePolicy, type ChatMessage } from "../../lib/index.js";
import { chatBody, parseChat } from "../../lib/remote/openaiDialect.js";
import { parseToolText, toolTextMessages, withToolCalls } from "../../lib/policy/toolText.js";
import { requestMessages } from "../../lib/policy/types.js";

const tools = [
    { name: "run_tests", description: "runs the tests", parameters: { type: "object", properties: {} } },
    {
        name: "write_file",
        parameters: { type: "object", properties: { content: { type: "string" } }, required: ["content"] },
    },
];
const convo: ChatMessage[] = [
    { role: "system", content: "You are the coder." },
    { role: "user", content: "Write add." },
    {
        role: "assistant",
        content: "",
        toolCalls: [
            { id: "c1", name: "write_file", arguments: '{"content":"x"}' },
            { id: "c2", name: "run_tests", arguments: "{}" },
        ],
    },
    { role: "tool", toolCallId: "c1", name: "write_file", content: "version 1" },
    { role: "tool", toolCallId: "c2", name: "run_tests", content: "tests passed" },
];

describe("tool calling: OpenAI's wire form", () => {
    it("sends tools, tool_calls and tool messages as OpenAI does, and reads tool_calls back", () => {
        const { json } = chatBody("p", { messages: convo, tools }, 0, {
            model: "m",
            dialect: "openai",
            logprobs: false,
        });
        const b = JSON.parse(json) as { tools: unknown[]; messages: Record<string, unknown>[] };
        expect(b.tools).toEqual([
            {
                type: "function",
                function: {
                    name: "run_tests",
                    description: "runs the tests",
                    parameters: { type: "object", properties: {} },
                },
            },
            { type: "function", function: { name: "write_file", parameters: tools[1].parameters } },
        ]);
        expect(b.messages[2]).toEqual({
            role: "assistant",
            content: null,
            tool_calls: [
                { id: "c1", type: "function", function: { name: "write_file", arguments: '{"content":"x"}' } },
                { id: "c2", type: "function", function: { name: "run_tests", arguments: "{}" } },
            ],
        });
        expect(b.messages[3]).toEqual({ role: "tool", tool_call_id: "c1", content: "version 1", name: "write_file" });
        const reply = JSON.stringify({
            choices: [
                {
                    finish_reason: "tool_calls",
                    message: {
                        role: "assistant",
                        content: null,
                        tool_calls: [{ id: "x9", type: "function", function: { name: "run_tests", arguments: "{}" } }],
                    },
                },
            ],
        });
        const g = parseChat("p", reply, 1, { dialect: "openai" }).generation;
        expect([g.text, g.finishReason, g.toolCalls]).toEqual([
            "",
            "tool_calls",
            [{ id: "x9", name: "run_tests", arguments: "{}" }],
        ]);
        expect(() =>
            parseChat(
                "p",
                JSON.stringify({ choices: [{ message: { content: null, tool_calls: [{ function: {} }] } }] }),
                1,
                { dialect: "openai" },
            ),
        ).toThrow(/malformed reply: expected message.tool_calls\[0\].function.name/);
    });

    it("checks tool messages and tools by name", () => {
        expect(() => requestMessages("p", { messages: [{ role: "tool", content: "x" }] }, 0)).toThrow(
            /messages\[0\].toolCallId: expected the id of the call/,
        );
        expect(() => requestMessages("p", { messages: [{ role: "user", content: "x", toolCalls: [] }] }, 0)).toThrow(
            /toolCalls: expected only on an assistant message/,
        );
        expect(() =>
            requestMessages("p", { messages: [{ role: "user", content: "x" }], tools: [{ name: "bad name" }] }, 0),
        ).toThrow(/tools\[0\].name: expected 1-64 letters/);
        expect(() =>
            requestMessages(
                "p",
                { messages: [{ role: "user", content: "x" }], tools: [{ name: "a" }, { name: "a" }] },
                0,
            ),
        ).toThrow(/'a' is offered twice/);
        expect(() => requestMessages("p", { prompt: "x", tools: "all" as never }, 0)).toThrow(
            /tools: expected an array/,
        );
    });
});

describe("tool calling: the text protocol of native models", () => {
    it("renders tools into the system message, calls as <tool_call> lines, answers as one <tool_response> user message", () => {
        const m = toolTextMessages(convo, tools);
        expect(m.map((x) => x.role)).toEqual(["system", "user", "assistant", "user"]);
        expect(m[0].content).toMatch(
            /^You are the coder\.\n\nYou may call tools\. Available tools, one JSON object each:\n\{"name":"run_tests",/,
        );
        expect(m[2].content).toBe(
            '<tool_call>{"name": "write_file", "arguments": {"content":"x"}}</tool_call>\n<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>',
        );
        expect(m[3].content).toBe(
            '<tool_response name="write_file">\nversion 1\n</tool_response>\n<tool_response name="run_tests">\ntests passed\n</tool_response>',
        );
    });

    it("parses calls out of the text; a block that is not a call stays text", () => {
        const text =
            'Let me test.\n<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>\n<tool_call>not json</tool_call>' +
            '<tool_call>{"name": "write_file", "arguments": {"content": "a"}}</tool_call> ok';
        const r = parseToolText(text, "q");
        expect(r.toolCalls).toEqual([
            { id: "q-0", name: "run_tests", arguments: "{}" },
            { id: "q-1", name: "write_file", arguments: '{"content":"a"}' },
        ]);
        expect(r.text).toBe("Let me test.\n\n<tool_call>not json</tool_call> ok");
        expect(parseToolText("no calls here", "q")).toEqual({ text: "no calls here", toolCalls: [] });
        const g = withToolCalls(
            { text, finishReason: "stop", usage: { promptTokens: 1, completionTokens: 1 }, latencyMs: 0 },
            "q",
        );
        expect([g.finishReason, g.toolCalls?.length]).toEqual(["tool_calls", 2]);
    });

    it("a native model reads the protocol: the prompt it decodes holds the tools and the tool exchange", async () => {
        const p = await NativePolicy.create({ contextLength: 1024, layers: 1, heads: 2, dModel: 16, seed: 3 });
        const [g] = await p.generate([{ messages: convo, tools, sampling: { temperature: 0, maxTokens: 4 }, seed: 1 }]);
        const prompt = p.tokenizer.decode(g.promptTokenIds!);
        expect(prompt).toContain("You may call tools.");
        expect(prompt).toContain('<tool_call>{"name": "write_file", "arguments": {"content":"x"}}</tool_call>');
        expect(prompt).toContain('<tool_response name="run_tests">\ntests passed\n</tool_response>');
        await p.dispose();
    });
});

describe("tool calling through maporl serve", () => {
    it("reads tools and tool messages in OpenAI's form, renders them as NativePolicy does, and answers tool_calls", async () => {
        const { servePolicy, OpenAICompatiblePolicy } = await import("../../lib/index.js");
        const p = await NativePolicy.create({
            contextLength: 1024,
            layers: 1,
            heads: 2,
            dModel: 16,
            seed: 3,
            name: "tiny",
        });
        const s = await servePolicy(p, { port: 0 });
        try {
            const remote = new OpenAICompatiblePolicy({
                baseUrl: s.baseUrl,
                model: "tiny",
                dialect: "vllm",
                retries: 0,
            });
            const req = { messages: convo, tools, sampling: { temperature: 0, maxTokens: 6 }, seed: 5 };
            const [here] = await p.generate([req]);
            const [there] = await remote.generate([req]);
            expect(there.promptTokenIds).toEqual(here.promptTokenIds); // the same rendering of the tools and the exchange
            expect(there.tokenIds).toEqual(here.tokenIds);
            // a streamed request with tools is refused whole, naming the field
            const r = await fetch(`${s.baseUrl}/chat/completions`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({
                    model: "tiny",
                    stream: true,
                    messages: [{ role: "user", content: "x" }],
                    tools: [{ type: "function", function: { name: "t" } }],
                }),
            });
            expect(r.status).toBe(400);
            expect(await r.text()).toMatch(/stream: tool calling is answered whole/);
            const bad = await fetch(`${s.baseUrl}/chat/completions`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({ model: "tiny", messages: [{ role: "tool", content: "x" }] }),
            });
            expect([bad.status, /messages\[0\].tool_call_id/.test(await bad.text())]).toEqual([400, true]);
        } finally {
            await s.close();
            await p.dispose();
        }
        // a policy that calls a tool: the server answers OpenAI's tool_calls, and the client reads them back
        const caller = {
            name: "caller",
            generate: async () => [
                {
                    text: "",
                    toolCalls: [{ id: "t1", name: "run_tests", arguments: "{}" }],
                    finishReason: "tool_calls",
                    usage: { promptTokens: 1, completionTokens: 1 },
                    latencyMs: 0,
                },
            ],
        };
        const s2 = await servePolicy(caller, { port: 0 });
        try {
            const raw = (await (
                await fetch(`${s2.baseUrl}/chat/completions`, {
                    method: "POST",
                    headers: { "content-type": "application/json" },
                    body: JSON.stringify({
                        model: "caller",
                        messages: [{ role: "user", content: "go" }],
                        tools: [{ type: "function", function: { name: "run_tests" } }],
                    }),
                })
            ).json()) as { choices: { finish_reason: string; message: unknown }[] };
            expect(raw.choices[0]).toMatchObject({
                finish_reason: "tool_calls",
                message: {
                    role: "assistant",
                    content: null,
                    tool_calls: [{ id: "t1", type: "function", function: { name: "run_tests", arguments: "{}" } }],
                },
            });
            const [g] = await new OpenAICompatiblePolicy({
                baseUrl: s2.baseUrl,
                model: "caller",
                dialect: "openai",
                retries: 0,
            }).generate([{ messages: [{ role: "user", content: "go" }], tools: [{ name: "run_tests" }] }]);
            expect(g.toolCalls).toEqual([{ id: "t1", name: "run_tests", arguments: "{}" }]);
        } finally {
            await s2.close();
        }
    });
});
