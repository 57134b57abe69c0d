// failures.test.ts: one failing agent never loses the batch. A loopback server answers three agents; for chosen
// (agent, question) pairs it answers HTTP 500, a malformed reply, or resets the connection, after the client's own
// retries. Debate.runBatch (3 agents, 5 questions, 3 turns) returns every other transcript complete and the failed
// one with its error and completed turns, with every answer's text in the trace; 'fail-fast' rejects with every
// transcript so far; 'retry' recovers a transient failure. JointRollout and the trainers' rollout drop the failed
// item only. The HTTP client: Retry-After honoured, no redirect to another origin, a deadline over all attempts.
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    Debate,
    DebateError,
    JointRollout,
    JsonlTracer,
    NativePolicy,
    OpenAICompatiblePolicy,
    type Policy,
} from "../../lib/index.js";
import { rolloutTeam } from "../../lib/train/trainers/rollout.js";
import { arithDebateTask } from "../../lib/train/tasks/tasks.js";

type Fault = "500" | "malformed" | "reset" | "hang" | null;
let server: Server,
    base = "";
// (model, question number) -> fault, and how many times it fires (Infinity: always).
const faults = new Map<string, { fault: Fault; times: number }>();
const hits = new Map<string, number>();

function answer(body: { model: string; messages: { content: string }[] }, res: ServerResponse) {
    const q = /What is (\d+)/.exec(body.messages[0].content)?.[1] ?? "x";
    const key = `${body.model}/${q}`,
        turn = (body.messages.length - 1) / 2;
    hits.set(key, (hits.get(key) ?? 0) + 1);
    const f = faults.get(key);
    const fault = f && f.times > 0 && (turn >= 1 || key.endsWith("/3")) ? f.fault : null; // q3 fails from turn 0; others at turn >= 1
    if (f && fault) f.times--;
    if (fault === "500") {
        res.writeHead(500);
        res.end("boom");
        return;
    }
    if (fault === "malformed") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end('{"choices": []}');
        return;
    }
    if (fault === "reset") {
        res.socket?.destroy();
        return;
    }
    if (fault === "hang") return;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
        JSON.stringify({
            choices: [
                {
                    index: 0,
                    finish_reason: "stop",
                    message: {
                        role: "assistant",
                        content: `${body.model} turn ${turn}: the answer is ${Number(q) * 2}`,
                    },
                },
            ],
            usage: { prompt_tokens: 5, completion_tokens: 7 },
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
            if (req.url === "/elsewhere/chat/completions") {
                res.writeHead(307, { location: "http://127.0.0.2:9/v1/chat/completions" });
                res.end();
                return;
            }
            if (req.url === "/moved/chat/completions") {
                res.writeHead(307, { location: "/v1/chat/completions" });
                res.end();
                return;
            }
            if (req.url === "/busy/chat/completions") {
                hits.set("busy", (hits.get("busy") ?? 0) + 1);
                if (hits.get("busy")! % 2 === 1) {
                    res.writeHead(503, { "retry-after": "1" });
                    res.end();
                    return;
                }
            }
            answer(JSON.parse(data), res);
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(
    () =>
        new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
        }),
);

const agents = () =>
    [1, 2, 3].map(
        (k) =>
            new OpenAICompatiblePolicy({
                baseUrl: `${base}/v1`,
                model: `agent-${k}`,
                retries: 1,
                backoffMs: 1,
                timeoutMs: 1500,
            }),
    );
const items = [0, 1, 2, 3, 4].map((i) => ({ id: `q${i}`, question: `What is ${i} + ${i}?`, reference: 2 * i }));

describe("a failed agent never loses the batch", () => {
    it("Debate.runBatch: the others complete, the failed episodes carry their error, the trace holds every answer", async () => {
        faults.clear();
        faults.set("agent-2/2", { fault: "500", times: Infinity });
        faults.set("agent-3/3", { fault: "malformed", times: Infinity });
        faults.set("agent-1/4", { fault: "reset", times: Infinity });
        const dir = mkdtempSync(join(tmpdir(), "maporl-fail-"));
        const tracer = new JsonlTracer(dir);
        const out = await new Debate({ agents: agents(), turns: 3, tracer }).runBatch(items);
        tracer.close();
        expect(out.length).toBe(5);
        for (const i of [0, 1]) {
            expect(out[i].error).toBeUndefined();
            expect(out[i].turns.length).toBe(3);
        }
        expect(out[2].error).toMatchObject({ turn: 1, agent: 1, attempts: 1 });
        expect(out[2].error!.message).toMatch(/agent-2.*HTTP 500/);
        expect(out[2].turns.length).toBe(1);
        expect(out[3].error).toMatchObject({ turn: 0, agent: 2 });
        expect(out[3].error!.message).toMatch(/malformed reply/);
        expect(out[3].turns.length).toBe(0);
        expect(out[4].error).toMatchObject({ turn: 1, agent: 0 });
        const spans = readFileSync(join(dir, "trace.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l));
        // 2 x 9 + (3 + 2 ok + 1 failed) + (2 ok + 1 failed) + (3 + 2 ok + 1 failed) spans
        expect(spans.length).toBe(18 + 6 + 3 + 6);
        const ok = spans.filter((s) => !s.error);
        expect(ok.every((s) => typeof s.text === "string" && s.text.includes("the answer is"))).toBe(true);
        // the answers of the failing turn that did succeed are kept in the trace
        expect(
            ok
                .filter((s) => s.episode === "q2" && s.turn === 1)
                .map((s) => s.agent)
                .sort(),
        ).toEqual([0, 2]);
        expect(
            spans
                .filter((s) => s.error)
                .map((s) => `${s.episode}/${s.turn}/${s.agent}`)
                .sort(),
        ).toEqual(["q2/1/1", "q3/0/2", "q4/1/0"]);
    });

    it("'fail-fast' rejects with every transcript so far; 'retry' recovers a transient failure; run() rejects", async () => {
        faults.clear();
        faults.set("agent-2/2", { fault: "500", times: Infinity });
        const err = await new Debate({ agents: agents(), turns: 3, onError: "fail-fast" })
            .runBatch(items)
            .catch((e) => e);
        expect(err).toBeInstanceOf(DebateError);
        expect(err.message).toMatch(/episode q2: turn 1, agent 1: .*HTTP 500/);
        expect(err.transcripts.length).toBe(5);
        expect(err.transcripts[0].turns.length).toBe(2); // turns 0 and 1 done when turn 1 failed
        await expect(new Debate({ agents: agents(), turns: 2 }).run(items[2])).rejects.toThrow(
            /episode q2: turn 1, agent 1/,
        );
        faults.set("agent-2/2", { fault: "500", times: 2 }); // both attempts of one request: the episode's first try fails
        const out = await new Debate({ agents: agents(), turns: 3, onError: "retry", retries: 2 }).runBatch(items);
        expect(out.every((t) => !t.error && t.turns.length === 3)).toBe(true);
        faults.set("agent-2/2", { fault: "500", times: Infinity });
        const gaveUp = await new Debate({ agents: agents(), turns: 3, onError: "retry", retries: 1 }).runBatch(items);
        expect(gaveUp[2].error).toMatchObject({ turn: 1, agent: 1, attempts: 2 });
        expect(gaveUp.filter((t) => !t.error).length).toBe(4);
        expect(() => new Debate({ agents: agents(), turns: 1, onError: "ignore" as never })).toThrow(
            /onError: expected 'fail-fast', 'skip', 'retry', got "ignore"/,
        );
    });

    it("JointRollout.runBatch: the failed item's tree carries its error, the others are whole", async () => {
        faults.clear();
        faults.set("agent-2/1", { fault: "500", times: Infinity });
        const roll = new JointRollout<number>({
            agents: agents().slice(0, 2),
            generations: 2,
            turns: 2,
            prompt: (q) => `What is ${q} + ${q}?`,
            transition: ({ item, completions }) =>
                completions.map((c) => [
                    { role: "user" as const, content: `What is ${item} + ${item}?` },
                    { role: "assistant" as const, content: c },
                    { role: "user" as const, content: "again" },
                ]),
            reward: () => 1,
        });
        const trees = await roll.runBatch([0, 1, 2]);
        expect(trees[1].error).toMatchObject({ depth: 1, agent: 1 });
        expect(trees[1].actions.length).toBe(2); // the first depth's joint actions
        for (const i of [0, 2]) {
            expect(trees[i].error).toBeUndefined();
            expect(trees[i].actions.length).toBe(2 + 4);
        }
        await expect(roll.run(1)).rejects.toThrow(/depth 1, agent 1: openai:agent-2: .*HTTP 500/);
    });

    it("the trainers' rollout drops the failed episode and trains on the others", async () => {
        const task = arithDebateTask();
        const good = await NativePolicy.create({
            contextLength: 256,
            layers: 1,
            heads: 2,
            dModel: 16,
            seed: 3,
            name: "good",
        });
        const bad = await good.clone("bad");
        const items = task.generate(4, 11);
        const orig = bad.generate.bind(bad);
        bad.generate = async (reqs, o) => {
            if (reqs.some((r) => String(r.messages?.[0]?.content).startsWith(items[2].views[1] + "|")))
                throw new Error("model server gone");
            return orig(reqs, o);
        };
        const r = await rolloutTeam(task, items, [good, bad], { turns: 2, temperature: 1, maxTokens: 4, seed: 1 });
        expect(r.items.length).toBe(3);
        expect(r.failed).toEqual([{ item: items[2], turn: 0, agent: 1, error: "bad: model server gone" }]);
        expect(
            r.entries.every(
                (ep) =>
                    ep.length === 2 &&
                    ep.every((row) => row.length === 2 && row.every((e) => typeof e.text === "string")),
            ),
        ).toBe(true);
        bad.generate = async () => {
            throw new Error("down");
        };
        await expect(
            rolloutTeam(task, items, [good, bad], { turns: 1, temperature: 1, maxTokens: 4, seed: 1 }),
        ).rejects.toThrow(/every episode failed \(4\).*down/);
        await good.dispose();
        await bad.dispose();
    });
});

describe("the HTTP client", () => {
    const one = (path: string, o: object = {}) =>
        new OpenAICompatiblePolicy({
            baseUrl: `${base}${path}`,
            model: "m",
            retries: 2,
            backoffMs: 1,
            timeoutMs: 1000,
            ...o,
        }).generate([{ prompt: "What is 1 + 1?" }]);

    it("waits as long as a 503's Retry-After asks", async () => {
        hits.delete("busy");
        const t0 = performance.now();
        const [g] = await one("/busy");
        expect(g.text).toMatch(/answer is 2/);
        expect(performance.now() - t0).toBeGreaterThanOrEqual(950);
        expect(hits.get("busy")).toBe(2);
    });

    it("never follows a redirect to another origin; follows a same-origin 307", async () => {
        await expect(one("/elsewhere")).rejects.toThrow(
            /HTTP 307 redirecting to http:\/\/127\.0\.0\.2:9\/v1\/chat\/completions: another origin, not followed/,
        );
        const [g] = await one("/moved");
        expect(g.text).toMatch(/answer is 2/);
    });

    it("bounds a hung server by the request's deadline", async () => {
        faults.clear();
        faults.set("m/1", { fault: "hang", times: Infinity });
        const t0 = performance.now();
        const p: Policy = new OpenAICompatiblePolicy({
            baseUrl: `${base}/v1`,
            model: "m",
            retries: 10,
            backoffMs: 1,
            timeoutMs: 400,
            totalTimeoutMs: 900,
        });
        await expect(
            p.generate([
                {
                    messages: [
                        { role: "user", content: "What is 1 + 1?" },
                        { role: "assistant", content: "?" },
                        { role: "user", content: "again" },
                    ],
                },
            ]),
        ).rejects.toThrow(/failed after 3 attempts: timed out/);
        const ms = performance.now() - t0;
        expect(ms).toBeGreaterThan(850);
        expect(ms).toBeLessThan(1500);
    });
});
