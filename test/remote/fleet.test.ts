// fleet.test.ts: a debate over a FleetPolicy of three `maporl serve` processes on 127.0.0.1, one of them killed
// (SIGKILL) mid-run and another, behind a proxy, answering 500 to every generation while its /health says it is
// fine (a flapping server). Every episode completes, each answer exactly once: the transcripts equal a run on the
// policy itself with the same seeds, and the answered attempts over all endpoints number the answers. The dead and
// the failing endpoints are ejected; the per-endpoint figures are in the trace and agree with stats(). Sticky
// routing keeps each agent's turns of an episode on one server; requests that fail everywhere fail alone.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Debate, FleetPolicy, JsonlTracer, NativePolicy, type Span, type Transcript } from "../../lib/index.js";
import { startServe, tinyCheckpoint, type ServeProcess } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-fleet-"));
let local: NativePolicy;
const procs: ServeProcess[] = [];
const servers: Server[] = [];

beforeAll(async () => {
    local = await tinyCheckpoint(join(work, "ckpt"), 4096, 11);
    procs.push(...(await Promise.all([0, 1, 2].map(() => startServe(join(work, "ckpt"))))));
});
afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    for (const s of servers) {
        s.closeAllConnections();
        s.close();
    }
    await local?.dispose();
    rmSync(work, { recursive: true, force: true });
});

// A proxy to `target` that answers 500 to generation requests (and passes /health and /v1/models through).
async function failing(target: string): Promise<string> {
    const s = createServer((req, res) => {
        let data = "";
        req.on("data", (c) => (data += c));
        const reply = async () => {
            if (req.method === "POST") {
                res.writeHead(500, { "content-type": "application/json" });
                res.end('{"error":{"message":"injected"}}');
                return;
            }
            const r = await fetch(`${target.replace(/\/v1$/, "")}${req.url}`);
            res.writeHead(r.status, { "content-type": "application/json" });
            res.end(await r.text());
        };
        req.on("end", () => void reply().catch(() => res.destroy()));
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}/v1`;
}

// A proxy to `target` that counts the generation requests it holds at once (the most in `peak.max`).
async function counting(target: string, peak: { now: number; max: number }): Promise<string> {
    const s = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on("data", (c: Buffer) => chunks.push(c));
        const post = req.method === "POST";
        const reply = async () => {
            if (post) peak.max = Math.max(peak.max, ++peak.now);
            try {
                const r = await fetch(`${target.replace(/\/v1$/, "")}${req.url}`, {
                    method: req.method,
                    headers: { "content-type": "application/json" },
                    ...(post ? { body: Buffer.concat(chunks) } : {}),
                });
                res.writeHead(r.status, { "content-type": "application/json" });
                res.end(await r.text());
            } finally {
                if (post) peak.now--;
            }
        };
        req.on("end", () => void reply().catch(() => res.destroy()));
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}/v1`;
}

const items = Array.from({ length: 16 }, (_, i) => ({
    id: `q${i}`,
    question: `What is ${i} + ${i + 3}?`,
    reference: 2 * i + 3,
}));
const debate = (agents: FleetPolicy | NativePolicy, tracer?: JsonlTracer) =>
    new Debate({
        agents: [agents, agents, agents],
        turns: 3,
        sampling: { temperature: 1, maxTokens: 8 },
        seed: 5,
        ...(tracer ? { tracer } : {}),
    });
const answers = (ts: Transcript[]) =>
    ts.map((t) => t.turns.map((row) => row.map((e) => [e.text, e.tokenIds, e.logprobs])));

describe("FleetPolicy over maporl serve processes", () => {
    it("a debate survives a server killed mid-run and one answering 500s: every answer once, figures in the trace", async () => {
        const [a, b] = procs as [ServeProcess, ServeProcess, ServeProcess];
        const bad = await failing(procs[2].baseUrl);
        const tracer = new JsonlTracer(join(work, "trace"));
        const fleet = new FleetPolicy({
            endpoints: [a.baseUrl, b.baseUrl, bad],
            model: "tiny",
            concurrency: 4,
            failureThreshold: 2,
            probeIntervalMs: 150,
            healthCheckIntervalMs: 200,
            timeoutMs: 10_000,
            maxAttempts: 3,
            tracer,
        });
        let killed = false;
        const watch = setInterval(() => {
            // kill b once it has answered a few requests: mid-run
            const s = fleet.stats().find((x) => x.url === b.baseUrl)!;
            if (!killed && s.ok >= 6) {
                killed = true;
                b.proc.kill("SIGKILL");
            }
        }, 2);
        let got: Transcript[];
        try {
            got = await debate(fleet, tracer).runBatch(items);
        } finally {
            clearInterval(watch);
            fleet.close();
            tracer.close();
        }
        expect(killed).toBe(true);
        expect(got.map((t) => t.error)).toEqual(items.map(() => undefined));
        const want = await debate(local).runBatch(items);
        expect(answers(got)).toEqual(answers(want)); // exactly the policy's answers: none lost, none duplicated or mixed
        const entries = got.flatMap((t) => t.turns.flat());
        expect(entries.every((e) => e.tokenIdsExact && e.endpoint !== bad)).toBe(true);
        expect(entries.some((e) => (e.attempts ?? 1) > 1)).toBe(true); // failovers happened and are counted
        const stats = fleet.stats(),
            of = (u: string) => stats.find((x) => x.url === u)!;
        expect(stats.reduce((n, s) => n + s.ok, 0)).toBe(entries.length); // one answered attempt per answer
        expect(of(bad).ok).toBe(0); // (its /health passes, so probes may have re-admitted it: a flapping server)
        expect(of(bad).errors).toBeGreaterThanOrEqual(2);
        expect(of(bad).ejections).toBeGreaterThanOrEqual(1);
        expect(of(b.baseUrl)).toMatchObject({ healthy: false });
        expect(of(b.baseUrl).ok).toBeGreaterThanOrEqual(6);
        expect(of(a.baseUrl).ok).toBeGreaterThan(0);
        // The trace: one fleet.attempt span per attempt (endpoint, latency, tokens, error), agreeing with stats().
        const spans = readFileSync(join(work, "trace", "trace.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as Span);
        for (const s of stats) {
            const mine = spans.filter((x) => x.name === "fleet.attempt" && x.endpoint === s.url);
            expect(mine.filter((x) => !x.error).length).toBe(s.ok);
            expect(mine.filter((x) => x.error).length).toBe(s.errors);
            expect(mine.filter((x) => !x.error).reduce((n, x) => n + x.completionTokens, 0)).toBe(s.completionTokens);
        }
        expect(
            spans.filter((x) => x.name === "debate.turn").every((x) => x.endpoint !== undefined && x.attempts! >= 1),
        ).toBe(true);
    });

    it("a batch larger than the fleet's slots: at most `concurrency` requests in flight per endpoint, every one answered", async () => {
        for (const sticky of [false, true]) {
            const peak = { now: 0, max: 0 };
            const fleet = new FleetPolicy({
                endpoints: [await counting(procs[0].baseUrl, peak)],
                model: "tiny",
                concurrency: 3,
                healthCheckIntervalMs: 0,
            });
            const reqs = Array.from({ length: 40 }, (_, i) => ({
                prompt: `q${i}`,
                sampling: { maxTokens: 3 },
                seed: i,
                ...(sticky ? { routingKey: `k${i % 5}` } : {}),
            }));
            const out = await fleet.generateSettled(reqs);
            fleet.close();
            expect(out.every((o) => o.ok)).toBe(true);
            // (counted after the slot's await, every request of the batch was sent at once: 40 in flight)
            expect(peak.max).toBeLessThanOrEqual(3);
            expect(peak.max).toBeGreaterThan(0);
        }
    });

    it("sticky routing: an agent's turns of an episode go to one server; keys spread over the servers", async () => {
        const [a, , c] = procs;
        // (slots for every key of a turn: a busy key's endpoint with as many requests waiting as it takes at once
        // spills to another, by design)
        const fleet = new FleetPolicy({
            endpoints: [a.baseUrl, c.baseUrl],
            model: "tiny",
            concurrency: 24,
            healthCheckIntervalMs: 0,
        });
        const got = await debate(fleet).runBatch(items.slice(0, 8));
        fleet.close();
        const byKey = new Map<string, Set<string>>();
        for (const t of got)
            for (const row of t.turns)
                for (const e of row) {
                    const k = `${t.id}/${e.agent}`;
                    byKey.set(k, (byKey.get(k) ?? new Set()).add(e.endpoint!));
                }
        expect([...byKey.values()].every((s) => s.size === 1)).toBe(true);
        const used = new Set([...byKey.values()].map((s) => [...s][0]));
        expect(used.size).toBe(2);
        expect(answers(got)).toEqual(answers(await debate(local).runBatch(items.slice(0, 8))));
    });

    it("an endpoint list from a function: refresh() adds the new endpoints and retires the ones gone", async () => {
        let list = [procs[0].baseUrl];
        const fleet = new FleetPolicy({
            endpoints: () => list,
            model: "tiny",
            healthCheckIntervalMs: 0,
            refreshIntervalMs: 60_000,
        });
        try {
            const reqs = Array.from({ length: 6 }, (_, i) => ({
                prompt: `q${i}`,
                sampling: { maxTokens: 3 },
                seed: i,
                routingKey: `k${i}`,
            }));
            expect(new Set((await fleet.generate(reqs)).map((g) => g.endpoint))).toEqual(new Set([procs[0].baseUrl]));
            list = [procs[2].baseUrl];
            await fleet.refresh();
            expect(fleet.endpoints).toEqual([procs[2].baseUrl]);
            const after = await fleet.generate(reqs);
            expect(new Set(after.map((g) => g.endpoint))).toEqual(new Set([procs[2].baseUrl]));
            expect(after.map((g) => g.tokenIds)).toEqual((await local.generate(reqs)).map((g) => g.tokenIds));
            expect(fleet.stats().map((x) => [x.url, x.healthy])).toEqual([
                [procs[0].baseUrl, false],
                [procs[2].baseUrl, true],
            ]);
            list = [42 as never];
            await expect(fleet.refresh()).rejects.toThrow(/endpoints\(\): expected an array of base URLs/);
        } finally {
            fleet.close();
        }
    });

    it("a request no endpoint can answer fails alone, naming every attempt; bad options are named", async () => {
        const bad = await failing(procs[0].baseUrl);
        const fleet = new FleetPolicy({
            endpoints: [bad, "http://127.0.0.1:9/v1"],
            model: "tiny",
            maxAttempts: 2,
            failureThreshold: 5,
            timeoutMs: 2000,
            healthCheckIntervalMs: 0,
            dialect: "vllm",
        });
        const out = await fleet.generateSettled([{ prompt: "hi", sampling: { maxTokens: 2 } }]);
        fleet.close();
        expect(out[0].ok).toBe(false);
        expect((out[0] as { error: Error }).error.message).toMatch(
            /failed on 2 attempts: .*HTTP 500.* \| .*127\.0\.0\.1:9/,
        );
        expect(() => new FleetPolicy({ endpoints: [], model: "m" })).toThrow(/endpoints: expected a non-empty array/);
        expect(() => new FleetPolicy({ endpoints: ["nope"], model: "m" })).toThrow(/endpoints: not a URL: "nope"/);
        expect(() => new FleetPolicy({ endpoints: [bad], model: "m", concurrency: 0 })).toThrow(
            /concurrency: expected an integer >= 1, got 0/,
        );
        await expect(fleet.generate([{ prompt: "x", sampling: { temperature: -1 } }])).rejects.toThrow(
            /requests\[0\]\.sampling\.temperature/,
        );
    });
});
