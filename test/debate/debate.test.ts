// debate.test.ts: a 3-agent, 3-turn debate over OpenAICompatiblePolicy against a loopback server that speaks the
// chat-completions protocol with a scripted policy; the exact prompts of every (turn, agent) for the full and
// ring topologies against golden files (test/debate/golden; MAPORL_UPDATE_GOLDEN=1 rewrites them), verifier
// feedback where MAPoRL puts it, transcript JSON round trip, tracing, consensus stop, and the bad paths (a
// malformed reply, a timeout, a 500 then success, an aborted run).
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    collaborationBonus,
    influenceRewards,
    transcriptScores,
    Debate,
    gsm8kVerifier,
    JsonlTracer,
    OpenAICompatiblePolicy,
    topologyMatrix,
    transcriptFromJSON,
    transcriptToJSON,
    type ChatMessage,
} from "../../lib/index.js";

type Handler = (body: { model: string; messages: ChatMessage[] }, res: ServerResponse) => void;
let server: Server;
let base = "";
const overrides: Handler[] = [];

// The scripted policy: agent k (model "agent-k") at turn t answers (t + 1) * 10 + k, so answers differ by agent
// and turn; the reply carries token log-probs like vLLM's.
function scripted(body: { model: string; messages: ChatMessage[] }, res: ServerResponse) {
    const k = Number(body.model.split("-")[1]);
    const t = (body.messages.length - 1) / 2;
    const content = `Agent ${k} reasoning at turn ${t}. Answer: \\boxed{${(t + 1) * 10 + k}}`;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
        JSON.stringify({
            choices: [
                {
                    index: 0,
                    finish_reason: "stop",
                    message: { role: "assistant", content },
                    logprobs: {
                        content: [
                            { token: "Agent", logprob: -0.5 },
                            { token: " 1", logprob: -1.25 },
                        ],
                    },
                },
            ],
            usage: { prompt_tokens: body.messages.length * 7, completion_tokens: 2 },
        }),
    );
}

beforeAll(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
        let data = "";
        req.on("data", (c) => (data += c));
        req.on("end", () => {
            if (req.method === "GET") {
                // /v1/models, as OpenAI answers it (the client detects the dialect from it)
                res.writeHead(200, { "content-type": "application/json" });
                res.end(
                    JSON.stringify({ object: "list", data: [{ id: "agent-1", object: "model", owned_by: "openai" }] }),
                );
                return;
            }
            const body = JSON.parse(data);
            const h = overrides.shift();
            (h ?? scripted)(body, res);
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const agents = () =>
    [1, 2, 3].map(
        (k) =>
            new OpenAICompatiblePolicy({
                baseUrl: base,
                model: `agent-${k}`,
                retries: 1,
                backoffMs: 5,
                timeoutMs: 2000,
            }),
    );
const item = { id: "janet", question: "Janet has 16 eggs and eats 3. How many are left?", reference: 13 };

function golden(name: string, prompts: ChatMessage[][][]) {
    const file = new URL(`./golden/${name}.json`, import.meta.url);
    const text = JSON.stringify(prompts, null, 1) + "\n";
    if (process.env.MAPORL_UPDATE_GOLDEN === "1" || !existsSync(file)) writeFileSync(file, text);
    expect(text).toBe(readFileSync(file, "utf8"));
}

describe("Debate over the OpenAI-compatible backend", () => {
    for (const topology of ["full", "ring"] as const)
        it(`sends the expected prompts at every turn (${topology})`, async () => {
            const d = new Debate({
                agents: agents(),
                turns: 3,
                topology,
                sampling: { temperature: 0.7, maxTokens: 64 },
                seed: 1,
            });
            const tr = await d.run(item);
            expect(tr.turns.length).toBe(3);
            golden(
                `debate-${topology}`,
                tr.turns.map((row) => row.map((e) => e.prompt)),
            );
            // structure: turn t has 2t + 1 messages; answers are the scripted ones; extraction found them
            tr.turns.forEach((row, t) =>
                row.forEach((e, a) => {
                    expect(e.prompt.length).toBe(2 * t + 1);
                    expect(e.extracted).toBe(String((t + 1) * 10 + a + 1));
                    expect(e.logprobs).toEqual([-0.5, -1.25]);
                }),
            );
            const seen = (t: number, a: number) => tr.turns[t][a].prompt.at(-1)!.content;
            if (topology === "full") {
                expect(seen(1, 0)).toContain("Agent 2 solution: ```Agent 2 reasoning at turn 0");
                expect(seen(1, 0)).toContain("Agent 3 solution:");
            } else {
                // ring: agent 1 sees agent 3 (its predecessor) only
                expect(seen(1, 0)).toContain("Agent 3 solution:");
                expect(seen(1, 0)).not.toContain("Agent 2 solution:");
            }
            expect(seen(2, 1)).not.toContain("turn 2"); // simultaneous moves: only turn-1 answers
        });

    it("puts verifier feedback where MAPoRL does, and records scores and spans", async () => {
        const dir = mkdtempSync(join(tmpdir(), "maporl-trace-"));
        const tracer = new JsonlTracer(dir);
        const d = new Debate({
            agents: agents(),
            turns: 2,
            verifier: gsm8kVerifier(),
            feedback: true,
            tracer,
            runId: "r1",
        });
        const tr = await d.run({ ...item, reference: 12 }); // agent 2's turn-0 answer (12) is right
        tracer.close();
        expect(tr.turns[0].map((e) => e.score)).toEqual([0, 1, 0]);
        const msg = tr.turns[1][0].prompt.at(-1)!.content;
        expect(
            msg.startsWith(
                "Reward from a verifier of your answer: 0.000 out of 1.0, which means your answer is highly likely wrong.",
            ),
        ).toBe(true);
        expect(msg).toContain(
            "Agent 2 solution: ```Agent 2 reasoning at turn 0. Answer: \\boxed{12}```\n\nReward associated with agent 2's solution calculated by verifier: 1.000 out of 1.0.",
        );
        const spans = readFileSync(tracer.file, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l));
        expect(spans.length).toBe(6);
        expect(spans[0]).toMatchObject({
            name: "debate.turn",
            runId: "r1",
            episode: "janet",
            turn: 0,
            parent: 0,
            finishReason: "stop",
            completionTokens: 2,
        });
        const back = transcriptFromJSON(
            transcriptToJSON({ ...tr, turns: [[{ ...tr.turns[0][0], logprobs: [-Infinity, -1] }]] }),
        );
        expect(back.turns[0][0].logprobs).toEqual([-Infinity, -1]);
        expect(transcriptFromJSON(transcriptToJSON(tr))).toEqual(tr);
    });

    it("turns transcripts into the [Q, T, A] tensors of influenceRewards and collaborationBonus", async () => {
        const d = new Debate({ agents: agents(), turns: 2, verifier: gsm8kVerifier() });
        const trs = [await d.run({ ...item, reference: 12 }), await d.run({ ...item, reference: 21 })];
        const { scores, correct, shape, lastTurn } = transcriptScores(trs);
        expect(shape).toEqual([2, 2, 3]);
        expect(Array.from(scores)).toEqual([0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]); // 12 = agent 2 at turn 0; 21 = agent 1 at turn 1
        expect(Array.from(lastTurn)).toEqual([1, 1]);
        // discount 0: each agent's own current score (Definition 1)
        expect(Array.from(influenceRewards({ scores, shape }, { discount: 0, lastTurn }))).toEqual(Array.from(scores));
        expect(collaborationBonus({ correct, shape }).length).toBe(12);
    });

    it("stops early on consensus and validates its options", async () => {
        const same = [1, 2, 3].map(() => new OpenAICompatiblePolicy({ baseUrl: base, model: "agent-0" }));
        const tr = await new Debate({ agents: same, turns: 3, consensus: { share: 1 } }).run(item);
        expect(tr.stoppedEarly).toBe(true);
        expect(tr.turns.length).toBe(1);
        expect(() => new Debate({ agents: [], turns: 2 })).toThrow(/agents: expected a non-empty array/);
        expect(() => new Debate({ agents: agents(), turns: 0 })).toThrow(/turns: expected an integer >= 1/);
        expect(() => new Debate({ agents: agents(), turns: 2, feedback: true })).toThrow(/feedback: needs a verifier/);
        expect(() => new Debate({ agents: agents(), turns: 2, topology: [[true]] })).toThrow(/3 x 3 boolean matrix/);
        expect(() => new Debate({ agents: agents(), turns: 2, sampling: { topP: 1.5 } })).toThrow(
            /Debate: sampling\.topP: expected a number in \[0, 1\], got 1.5/,
        );
        expect(() => new Debate({ agents: agents(), turns: 2, sampling: { maxToken: 5 } as never })).toThrow(
            /unknown option "maxToken". Did you mean "maxTokens"\?/,
        );
        expect(() => new Debate({ agents: agents(), turns: 2, seed: "7" as never })).toThrow(
            /Debate: seed: expected an integer, got "7"/,
        );
        expect(
            () => new Debate({ agents: agents(), turns: 2, consensus: { share: 0.5, minScore: "1" as never } }),
        ).toThrow(/consensus\.minScore: expected a number/);
        expect(() => new Debate({ agents: agents(), turns: 2, runId: 3 as never })).toThrow(
            /runId: expected a string, got 3/,
        );
        expect(topologyMatrix("star", 3)).toEqual([
            [false, true, true],
            [true, false, false],
            [true, false, false],
        ]);
    });

    it("keeps at most `concurrency` requests in flight", async () => {
        let inFlight = 0,
            peak = 0;
        const delayed: Handler = (body, res) => {
            inFlight++;
            peak = Math.max(peak, inFlight);
            setTimeout(() => {
                inFlight--;
                scripted(body, res);
            }, 30);
        };
        overrides.push(delayed, delayed, delayed, delayed, delayed, delayed);
        const p = new OpenAICompatiblePolicy({ baseUrl: base, model: "agent-1", concurrency: 2 });
        const out = await p.generate(Array.from({ length: 6 }, (_, i) => ({ prompt: `p${i}`, seed: i })));
        expect(out.length).toBe(6);
        expect(peak).toBe(2);
    });

    it("survives a 500 then success, reports a malformed reply and a timeout, and aborts promptly", async () => {
        const p = new OpenAICompatiblePolicy({
            baseUrl: base,
            model: "agent-1",
            retries: 1,
            backoffMs: 5,
            timeoutMs: 300,
        });
        overrides.push((_, res) => {
            res.writeHead(500);
            res.end("overloaded");
        });
        const [ok] = await p.generate([{ prompt: "hi" }]);
        expect(ok.text).toContain("Answer: \\boxed{11}");
        overrides.push((_, res) => {
            res.writeHead(200);
            res.end(JSON.stringify({ choices: [{ message: {} }] }));
        });
        await expect(p.generate([{ prompt: "hi" }])).rejects.toThrow(
            /malformed reply: expected choices\[0\].message.content/,
        );
        overrides.push(
            () => {
                /* hangs */
            },
            () => {
                /* hangs */
            },
        );
        await expect(p.generate([{ prompt: "hi" }])).rejects.toThrow(/failed after 2 attempts: timed out after 300 ms/);
        // An aborted debate resolves promptly; the trace has only whole lines.
        const dir = mkdtempSync(join(tmpdir(), "maporl-abort-"));
        const tracer = new JsonlTracer(dir);
        const slow = [1, 2, 3].map(
            (k) => new OpenAICompatiblePolicy({ baseUrl: base, model: `agent-${k}`, timeoutMs: 60_000 }),
        );
        overrides.push(
            scripted,
            scripted,
            scripted,
            () => {
                /* hangs */
            },
            () => {
                /* hangs */
            },
            () => {
                /* hangs */
            },
        );
        const ac = new AbortController();
        const run = new Debate({ agents: slow, turns: 3, tracer }).run(item, { signal: ac.signal });
        setTimeout(() => ac.abort(new Error("user stop")), 150);
        const t0 = Date.now();
        await expect(run).rejects.toThrow(/user stop/);
        expect(Date.now() - t0).toBeLessThan(1000);
        tracer.close();
        const lines = readFileSync(tracer.file, "utf8")
            .split("\n")
            .filter((l) => l);
        expect(lines.length).toBe(3);
        for (const l of lines) expect(() => JSON.parse(l)).not.toThrow();
        overrides.length = 0;
    });
});
