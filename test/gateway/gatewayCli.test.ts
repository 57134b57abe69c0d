// `maporl gateway` as a process: an in-process model with two agents (one from a saved adapter), calls recorded by
// episode, a rewarded episode and an open one (failed as the gateway stops) both written to --record.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import type { GatewayEpisode } from "../../lib/gateway/episodes.js";
import { startGatewayProcess } from "../../lib/serve/serveProcess.js";
import { readItems, rewardOf } from "../../lib/cli/trainGateway.js";
import { startServe, tinyHfModel } from "../helpers/serve.js";

const CLI = join(import.meta.dirname, "..", "..", "dist", "cli.js");
let work: string;
beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gwcli-"));
    await tinyHfModel(join(work, "m"), 5);
    const base = await NativePolicy.load(join(work, "m"));
    await (await base.withAdapter("solver", { rank: 4, seed: 9 })).saveAdapter(join(work, "solver"));
    await base.dispose();
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("maporl gateway", () => {
    it("records episodes of an in-process model's agents and writes each closed one to --record", async () => {
        const record = join(work, "out", "episodes.jsonl");
        const g = await startGatewayProcess(
            [
                "--model",
                join(work, "m"),
                "--agents",
                "researcher,solver",
                "--adapters",
                `solver=${join(work, "solver")}`,
                "--record",
                record,
                "--trace",
                join(work, "trace"),
                "--threads",
                "1",
                "--api-key",
                "k",
            ],
            CLI,
        );
        try {
            const root = g.baseUrl.replace(/\/v1$/, "");
            const c = (ep: string) => new OpenAI({ baseURL: `${root}/episodes/${ep}/v1`, apiKey: "k", maxRetries: 0 });
            const q = [{ role: "user" as const, content: "2 + 3?" }];
            await c("one").chat.completions.create({ model: "researcher", messages: q, max_tokens: 4 });
            await c("one").chat.completions.create({ model: "solver", messages: q, max_tokens: 4 });
            await c("two").chat.completions.create({ model: "solver", messages: q, max_tokens: 4 });
            const r = await fetch(`${root}/episodes/one/reward`, {
                method: "POST",
                headers: { authorization: "Bearer k" },
                body: JSON.stringify({ reward: 0.5 }),
            });
            expect(r.status).toBe(200);
            expect((await fetch(`${root}/episodes/one`, { headers: { authorization: "Bearer k" } })).status).toBe(404); // written, taken
        } finally {
            expect(await g.stop()).toBe(0);
        }
        const eps = readFileSync(record, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as GatewayEpisode);
        expect(eps.map((e) => [e.id, e.status, e.reward, e.calls.map((x) => x.agent)])).toEqual([
            ["one", "rewarded", 0.5, ["researcher", "solver"]],
            ["two", "failed", null, ["solver"]],
        ]);
        expect(eps[1].reason).toBe("the gateway closed");
        expect(eps[0].calls.every((x) => x.samples[0].tokenIdsExact && x.samples[0].tokenIds.length > 0)).toBe(true);
    }, 60_000);

    it("in front of maporl serve (--upstream): the recorded ids are the server's, equal to the in-process replay", async () => {
        const srv = await startServe(join(work, "m"), ["--served-model-name", "base"]);
        const g = await startGatewayProcess(
            [
                "--upstream",
                srv.baseUrl,
                "--upstream-model",
                "base",
                "--agents",
                "solver",
                "--record",
                join(work, "up.jsonl"),
            ],
            CLI,
        );
        const local = await NativePolicy.load(join(work, "m"));
        try {
            const root = g.baseUrl.replace(/\/v1$/, "");
            const c = new OpenAI({ baseURL: `${root}/episodes/up/v1`, apiKey: "none", maxRetries: 0 });
            const q = [{ role: "user" as const, content: "2 + 3?" }];
            const r = await c.chat.completions.create({ model: "solver", messages: q, max_tokens: 6, temperature: 1 });
            const ep = (await (await fetch(`${root}/episodes/up`)).json()) as GatewayEpisode;
            const s = ep.calls[0].samples[0];
            expect(s.text).toBe(r.choices[0].message.content);
            expect(s.tokenIdsExact).toBe(true);
            expect(s.endpoint).toBe(srv.baseUrl);
            const [again] = await local.generate([
                { messages: q, sampling: { temperature: 1, maxTokens: 6 }, seed: Number(s.seed) },
            ]);
            expect([s.promptTokenIds, s.tokenIds]).toEqual([again.promptTokenIds, again.tokenIds]);
            expect(s.logprobs.map((x) => x.toFixed(4))).toEqual(again.logprobs!.map((x) => x.toFixed(4)));
        } finally {
            await local.dispose();
            expect(await g.stop()).toBe(0);
            await srv.stop();
        }
    }, 60_000);

    it("maporl train --gateway: runs the program per episode, trains each agent's adapter, writes metrics and a summary", async () => {
        const items = join(work, "items.jsonl"),
            held = join(work, "held.json"),
            out = join(work, "run");
        writeFileSync(items, '"What is 2 + 3?"\n\n"What is 4 + 4?"\n');
        writeFileSync(held, JSON.stringify(["What is 1 + 1?"]));
        const agent = join(import.meta.dirname, "..", "fixtures", "gateway", "agent.mjs");
        const args = [CLI, "train", "--gateway", "--model", join(work, "m"), "--agents", "researcher,solver"];
        args.push("--items", items, "--eval-items", held, "--eval-runs", "2", "--iterations", "2", "--groups", "2");
        args.push("--lr", "0.05", "--lora-rank", "4", "--out", out, "--", process.execPath, agent);
        const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
            execFile(
                process.execPath,
                args,
                { env: { ...process.env, MAPORL_AGENT_MODE: "reward-distinct" }, timeout: 60_000 },
                (e, stdout, stderr) => resolve({ code: e ? ((e.code as number) ?? 1) : 0, stdout, stderr }),
            ),
        );
        expect({ code: r.code, stderr: r.stderr.slice(-2000) }).toEqual({
            code: 0,
            stderr: expect.not.stringMatching(/Error/),
        });
        expect(r.stdout).toMatch(/held-out reward: untrained \d+\.\d+ \(2\/2 episodes rewarded\), co-trained \d/);
        const lines = readFileSync(join(out, "metrics.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map(
                (l) =>
                    JSON.parse(l) as {
                        iteration: number;
                        episodes: number;
                        failed: number;
                        agents: Record<string, { rows: number; loss: number | null }>;
                    },
            );
        expect(lines.map((l) => [l.iteration, l.episodes, l.failed])).toEqual([
            [1, 4, 0],
            [2, 4, 0],
        ]);
        // (the fixture's reward is the answer's length plus a random fraction: it differs within every group, so both
        // agents take steps; with the length alone, an iteration whose groups all tied in length gave no step)
        for (const l of lines)
            for (const a of ["researcher", "solver"]) {
                expect(l.agents[a].rows).toBe(4);
                expect(Number.isFinite(l.agents[a].loss)).toBe(true);
            }
        const summary = JSON.parse(readFileSync(join(out, "summary.json"), "utf8")) as {
            iterations: number;
            heldOut: { before: number; after: number };
        };
        expect(summary.iterations).toBe(2);
        expect(Number.isFinite(summary.heldOut.before) && Number.isFinite(summary.heldOut.after)).toBe(true);
        // the saved adapters load, and are trained (they differ from a fresh one's answers)
        const base = await NativePolicy.load(join(work, "m"));
        try {
            const trained = await base.loadAdapter(join(out, "adapters", "solver"), { name: "solver" });
            const fresh = await base.withAdapter("fresh", { rank: 4, alpha: 32, seed: 1 });
            const req = [
                {
                    messages: [{ role: "user" as const, content: "hi" }],
                    sampling: { temperature: 1, maxTokens: 8 },
                    seed: 3,
                },
            ];
            const [t] = await trained.generate(req),
                [f] = await fresh.generate(req);
            expect(t.logprobs).not.toEqual(f.logprobs);
        } finally {
            await base.dispose();
        }
    }, 180_000);

    it("train --gateway's items and rewards: JSON lines or an array, bad lines named; exact and number rewards", () => {
        const f = join(work, "bad.jsonl");
        writeFileSync(f, '{"q": 1}\n{oops\n');
        expect(() => readItems(f, "--items")).toThrow(/--items .*bad\.jsonl: line 2 is not JSON: "\{oops"/);
        writeFileSync(f, "[]");
        expect(() => readItems(f, "--items")).toThrow(/expected 1 to 1000000 items, got 0/);
        writeFileSync(f, '[{"q": "a", "answer": 12}, 3]');
        expect(readItems(f, "--items")).toEqual([{ q: "a", answer: 12 }, 3]);
        const exact = rewardOf("exact")!,
            num = rewardOf("number")!;
        expect([exact({ answer: 12 }, " 12\n"), exact({ answer: 12 }, "12.0"), exact("yes", "yes")]).toEqual([1, 0, 1]);
        expect([
            num({ answer: "#### 1,234" }, "so it is 1234."),
            num({ answer: 5 }, "5 or 6"),
            num({ answer: 5 }, "none"),
        ]).toEqual([1, 0, 0]);
        expect(rewardOf("posted")).toBeUndefined();
    });
});
