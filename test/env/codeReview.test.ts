// codeReview.test.ts: the code-review workflow (coder -> reviewer -> coder) against a scripted OpenAI-compatible
// server that answers with tool_calls, through OpenAICompatiblePolicy: the transcript holds every tool call, result and
// artifact version; run_tests runs node --test in a subprocess with a timeout and no network; loops are detected and
// end the episode; a crashing, hanging or misused tool is an error of the episode (a tool message), never of the
// process; a failing server loses only its own episode.
import { createServer, type Server } from "node:http";
import { type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    codeReviewWorkflow,
    networkIsolationAvailable,
    OpenAICompatiblePolicy,
    runCodeTests,
    type CodeTask,
    type Span,
    type Tool,
} from "../../lib/index.js";

// A scripted model: given the request body, returns the assistant message (content and/or tool calls).
type Reply = { content?: string; calls?: { name: string; args: unknown }[] } | { status: number };
type Script = (body: {
    model: string;
    messages: { role: string; content: string | null; tool_calls?: unknown[] }[];
    tools?: { function: { name: string } }[];
}) => Reply;

let server: Server,
    baseUrl = "";
const scripts = new Map<string, Script>();
const seenBodies: { model: string; tools: string[] }[] = [];

beforeAll(async () => {
    server = createServer((req, res) => {
        let raw = "";
        req.on("data", (c: Buffer) => {
            raw += c.toString();
        });
        req.on("end", () => {
            let body: Parameters<Script>[0];
            try {
                body = JSON.parse(raw) as Parameters<Script>[0];
            } catch {
                res.writeHead(400).end("not JSON");
                return;
            }
            seenBodies.push({ model: body.model, tools: (body.tools ?? []).map((t) => t.function.name) });
            const reply = scripts.get(body.model)!(body);
            if ("status" in reply) {
                res.writeHead(reply.status).end("scripted failure");
                return;
            }
            const toolCalls = (reply.calls ?? []).map((c, k) => ({
                id: `c${body.messages.length}-${k}`,
                type: "function",
                function: { name: c.name, arguments: typeof c.args === "string" ? c.args : JSON.stringify(c.args) },
            }));
            res.writeHead(200, { "content-type": "application/json" }).end(
                JSON.stringify({
                    id: "x",
                    object: "chat.completion",
                    model: body.model,
                    choices: [
                        {
                            index: 0,
                            finish_reason: toolCalls.length ? "tool_calls" : "stop",
                            message: {
                                role: "assistant",
                                content: reply.content ?? null,
                                ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
                            },
                        },
                    ],
                    usage: { prompt_tokens: 10, completion_tokens: 5 },
                }),
            );
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}, 30_000);
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const task: CodeTask = {
    id: "add",
    spec: "Export a function add(a, b) that returns a + b.",
    tests:
        `import { test } from "node:test"; import assert from "node:assert"; import { add } from "./solution.mjs";\n` +
        `test("adds", () => { assert.strictEqual(add(2, 3), 5); assert.strictEqual(add(-1, 1), 0); });\n`,
};
const buggy = "export function add(a, b) { return a - b; }\n",
    fixed = "export function add(a, b) { return a + b; }\n";
const policy = (model: string) => new OpenAICompatiblePolicy({ baseUrl, model, dialect: "openai", retries: 0 });
// The last tool message's content, and how many assistant messages the conversation holds.
const lastTool = (b: Parameters<Script>[0]) => [...b.messages].reverse().find((m) => m.role === "tool")?.content ?? "";
const lastUser = (b: Parameters<Script>[0]) => [...b.messages].reverse().find((m) => m.role === "user")?.content ?? "";
const afterTool = (b: Parameters<Script>[0]) => b.messages[b.messages.length - 1].role === "tool";

describe("code review workflow over a scripted OpenAI-compatible server", () => {
    it("coder -> reviewer -> coder -> reviewer: every tool call, result and artifact version in the transcript; approved, reward 1", async () => {
        scripts.set("coder-1", (b) => {
            if (afterTool(b)) return { content: "done" };
            return {
                calls: [
                    {
                        name: "write_solution",
                        args: { content: lastUser(b).includes("reviewer says") ? fixed : buggy },
                    },
                ],
            };
        });
        scripts.set("reviewer-1", (b) => {
            if (!afterTool(b))
                return {
                    calls: [
                        { name: "read_solution", args: {} },
                        { name: "run_tests", args: {} },
                    ],
                };
            return lastTool(b).startsWith("tests passed")
                ? { content: "APPROVE" }
                : { content: "add subtracts: use a + b." };
        });
        const spans: Span[] = [];
        const wf = codeReviewWorkflow(
            { coder: policy("coder-1"), reviewer: policy("reviewer-1") },
            { tracer: { span: (s) => spans.push(s), close: () => undefined } },
        );
        const ep = await wf.run(task);
        expect(ep.stoppedBy).toBe("done");
        expect(ep.reward).toBe(1);
        expect(ep.turns.map((t) => t.role)).toEqual(["coder", "reviewer", "coder", "reviewer"]);
        expect(ep.artifact.map((v) => [v.version, v.author, v.content])).toEqual([
            [0, "initial", ""],
            [1, "coder", buggy],
            [2, "coder", fixed],
        ]);
        expect(ep.turns.map((t) => [t.artifactSeen, t.artifactAfter])).toEqual([
            [0, 1],
            [1, 1],
            [1, 2],
            [2, 2],
        ]);
        expect(ep.turns[1].toolResults.map((r) => [r.name, r.ok])).toEqual([
            ["read_solution", true],
            ["run_tests", true],
        ]);
        expect(ep.turns[1].toolResults[0].content).toBe(`version 1\n${buggy}`);
        expect(ep.turns[1].toolResults[1].content).toMatch(/^tests failed \(version 1/);
        expect(ep.turns[3].toolResults[1].content).toMatch(/^tests passed \(version 2/);
        expect(ep.turns.map((t) => t.delegation)).toEqual([
            [],
            ["coder"],
            ["coder", "reviewer"],
            ["coder", "reviewer", "coder"],
        ]);
        expect(ep.shaped.reviewer).toBeCloseTo(0.1 + 0.1 + 0.2); // well-formed calls twice, the first passing run once
        expect(ep.loops).toEqual([]);
        // the coder is offered write_solution, the reviewer is not (artifactWriters); both get run_tests
        expect(seenBodies.find((b) => b.model === "coder-1")!.tools.sort()).toEqual([
            "read_solution",
            "run_tests",
            "write_solution",
        ]);
        expect(seenBodies.find((b) => b.model === "reviewer-1")!.tools.sort()).toEqual(["read_solution", "run_tests"]);
        // the trace: one span per turn with its tools, delegation depth and artifact versions
        expect(
            spans.map((s) => [s.role, s.parent, s.toolCalls?.length, s.toolErrors, s.artifactSeen, s.artifactAfter]),
        ).toEqual([
            ["coder", 0, 1, 0, 0, 1],
            ["reviewer", 1, 2, 0, 1, 1],
            ["coder", 2, 1, 0, 1, 2],
            ["reviewer", 3, 2, 0, 2, 2],
        ]);
    }, 60_000);

    it("a repeated identical tool call is a loop: detected, penalised, the episode ends", async () => {
        scripts.set("coder-2", (b) =>
            afterTool(b) ? { content: "done" } : { calls: [{ name: "write_solution", args: { content: buggy } }] },
        );
        scripts.set("reviewer-2", () => ({ calls: [{ name: "run_tests", args: {} }] })); // never stops testing
        const ep = await codeReviewWorkflow({ coder: policy("coder-2"), reviewer: policy("reviewer-2") }).run(task);
        expect(ep.stoppedBy).toBe("loop");
        expect(ep.loops).toEqual([{ kind: "tool", role: "reviewer", turn: 1, what: "run_tests({})", count: 3 }]);
        expect(ep.turns[1].toolResults.filter((r) => r.name === "run_tests").length).toBe(3);
        expect(ep.turns[1].shaped).toBeCloseTo(0.1 - 0.5);
        expect(ep.reward).toBe(0); // the final version still fails
    }, 60_000);

    it("the same message bounced back and forth is a loop", async () => {
        scripts.set("coder-3", (b) =>
            afterTool(b)
                ? { content: "I think it is fine." }
                : { calls: [{ name: "write_solution", args: { content: buggy } }] },
        );
        scripts.set("reviewer-3", () => ({ content: "Please fix add." }));
        const ep = await codeReviewWorkflow({ coder: policy("coder-3"), reviewer: policy("reviewer-3") }).run(task);
        expect(ep.stoppedBy).toBe("loop");
        // the coder rewrites the same file (no new version) and says the same thing again: a loop at turn 2
        expect(ep.loops).toEqual([{ kind: "message", role: "coder", turn: 2, what: "i think it is fine.", count: 2 }]);
        expect(ep.turns.map((t) => t.role)).toEqual(["coder", "reviewer", "coder"]);
        expect(ep.artifact.length).toBe(2);
    }, 60_000);

    it("a crashing tool, a hanging tool and malformed calls are tool errors the agent reads; the episode goes on", async () => {
        const crash: Tool<never> = {
            name: "lint",
            description: "lints",
            run: () => {
                throw new Error("linter crashed");
            },
        };
        const hang: Tool<never> = {
            name: "docs",
            description: "looks up docs",
            timeoutMs: 200,
            run: () => new Promise<string>(() => undefined),
        };
        scripts.set("coder-4", (b) => {
            if (afterTool(b)) return { content: "done" };
            return {
                calls: [
                    { name: "lint", args: {} },
                    { name: "docs", args: {} },
                    { name: "write_solution", args: "{not json" },
                    { name: "write_solution", args: { text: fixed } },
                    { name: "nope", args: {} },
                    { name: "write_solution", args: { content: fixed } },
                ],
            };
        });
        scripts.set("reviewer-4", () => ({ content: "APPROVE" }));
        const ep = await codeReviewWorkflow({
            coder: policy("coder-4"),
            reviewer: policy("reviewer-4"),
            tools: [crash, hang],
        }).run(task);
        expect(ep.stoppedBy).toBe("done");
        const r = ep.turns[0].toolResults;
        expect(r.map((x) => [x.name, x.ok, x.error])).toEqual([
            ["lint", false, "threw"],
            ["docs", false, "timeout"],
            ["write_solution", false, "arguments"],
            ["write_solution", false, "arguments"],
            ["nope", false, "unknown"],
            ["write_solution", true, undefined],
        ]);
        expect(r[0].content).toBe("error: 'lint' failed: linter crashed");
        expect(r[1].content).toBe("error: 'docs' did not finish within 200 ms");
        expect(r[3].content).toMatch(
            /invalid arguments for 'write_solution': arguments must have required property 'content'/,
        );
        expect(ep.reward).toBe(1);
    }, 60_000);

    it("a failing server loses only its own episode", async () => {
        scripts.set("coder-5", (b) =>
            b.messages.some((m) => m.content?.includes("FAIL"))
                ? { status: 500 }
                : afterTool(b)
                  ? { content: "done" }
                  : { calls: [{ name: "write_solution", args: { content: fixed } }] },
        );
        scripts.set("reviewer-5", () => ({ content: "APPROVE" }));
        const wf = codeReviewWorkflow({ coder: policy("coder-5"), reviewer: policy("reviewer-5") });
        const eps = await wf.runBatch([task, { ...task, id: "bad", spec: "FAIL" }, task]);
        expect(eps.map((e) => e.stoppedBy)).toEqual(["done", "error", "done"]);
        expect(eps[1].error).toMatchObject({ turn: 0, role: "coder" });
        expect(eps[1].error!.message).toMatch(/HTTP 500/);
        expect(eps.map((e) => e.reward)).toEqual([1, NaN, 1]);
    }, 60_000);
});

describe("run_tests's sandbox", () => {
    it("a test that never ends is killed at the timeout", async () => {
        const r = await runCodeTests("export const add = () => { while (true) {} };\n", task.tests, {
            timeoutMs: 1500,
        });
        expect(r.status).toBe("timeout");
        expect(r.ms).toBeLessThan(10_000);
    }, 30_000);

    it("no network inside: a test cannot reach a server on this machine's loopback", async () => {
        expect(networkIsolationAvailable()).toBe(true); // Linux with user namespaces (CI's machine): the isolation is required here
        const port = (server.address() as AddressInfo).port;
        const probe =
            `import { test } from "node:test"; import assert from "node:assert";\n` +
            `test("offline", async () => { await assert.rejects(fetch("http://127.0.0.1:${port}/v1/models")); });\n`;
        const r = await runCodeTests("export {};\n", probe, { timeoutMs: 8000, requireIsolation: true });
        expect(r.isolated).toBe(true);
        expect(r.status, r.output).toBe("passed");
        // while from outside the sandbox the server answers (the probe is not vacuous)
        expect((await fetch(`${baseUrl}/models`)).status).toBe(400);
    }, 30_000);
});
