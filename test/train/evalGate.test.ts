// evalGate.test.ts: `maporl eval` (the regression gate) and `maporl crossplay` on small real runs. The gate passes on
// the baseline itself with a drop of exactly 0 (every evaluation draws with the suite's seed), and fails, exit code
// 1 and a message naming the metric, when one agent is replaced by an untrained (randomly initialised) model of the
// same shape; cross-play's diagonal is each run's self-play figure.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { crossPlay, loadTeam, makeSuite, readSuite, regressionGate } from "../../lib/train/job/evalGate.js";
import { trainJob } from "../../lib/train/job/job.js";

const work = mkdtempSync(join(tmpdir(), "maporl-eval-"));
const cli = join(import.meta.dirname, "..", "..", "dist", "cli.js");
const runA = join(work, "a"),
    runB = join(work, "b"),
    suite = join(work, "suite"),
    random = join(work, "random");
const config = (seed: number) => ({
    seed,
    iterations: 2,
    episodesPerIteration: 6,
    evalEpisodes: 12,
    evalEvery: 2,
    controls: false,
    separateTurn0: false,
    sft: { steps: 400, batchSize: 32 },
    model: { layers: 1, heads: 2, dModel: 64 },
    critic: { layers: 1, heads: 2, dModel: 32 },
});

beforeAll(async () => {
    await trainJob({ out: runA, config: config(1) });
    await trainJob({ out: runB, config: config(2) });
    makeSuite(suite, { config: config(1), items: 60 });
    const c = JSON.parse(readFileSync(join(runA, "models", "maporl-actor-0", "config.json"), "utf8")) as {
        contextLength: number;
        layers: number;
        heads: number;
        dModel: number;
    };
    const p = await NativePolicy.create({
        contextLength: c.contextLength,
        layers: c.layers,
        heads: c.heads,
        dModel: c.dModel,
        seed: 99,
    });
    await p.save(random);
    await p.dispose();
}, 300_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("maporl eval: the regression gate", () => {
    it("passes on the baseline itself (drop exactly 0) and fails when one agent is replaced by an untrained one", async () => {
        const same = await regressionGate({ suite, baseline: { run: runA }, candidate: { run: runA }, metric: "solo" });
        expect([same.pass, same.drop]).toEqual([true, 0]);
        expect(same.baseline).toBeGreaterThan(0.1); // the warm start learned the task: a drop has room to show
        const worse = await regressionGate({
            suite,
            baseline: { run: runA },
            candidate: { run: runA, replace: { 0: random } },
            metric: "solo",
        });
        expect(worse.pass).toBe(false);
        expect(worse.drop).toBeGreaterThan(0.02);
        expect(worse.message).toMatch(
            /^solo: baseline [\d.]+ .*candidate [\d.]+ .*agents 0 replaced.*fell by [\d.]+, more than the threshold 0.02: regression$/,
        );
        // the command: exit 0 / exit 1 naming the metric
        const run = (...a: string[]) =>
            spawnSync(process.execPath, [cli, "eval", "--suite", suite, "--baseline", runA, "--metric", "solo", ...a], {
                encoding: "utf8",
                timeout: 120_000,
            });
        const ok = run();
        expect([ok.status, ok.stdout]).toEqual([0, expect.stringMatching(/solo: .* pass\n$/)]);
        const bad = run("--replace", `0=${random}`);
        expect(bad.status).toBe(1);
        expect(bad.stdout).toMatch(/solo: .* regression\n$/);
    }, 300_000);

    it("bad suites, teams and metrics are errors naming what is wrong", async () => {
        expect(() => readSuite(join(work, "nowhere"))).toThrow(/suite.json missing/);
        await expect(loadTeam({ run: work }, 3)).rejects.toThrow(/no config.json there \(not a run directory\)/);
        await expect(loadTeam({ run: runA, replace: { 0: work } }, 3)).rejects.toThrow(/not a model directory/);
        await expect(
            regressionGate({ suite, baseline: { run: runA }, candidate: { run: runA }, metric: "best" }),
        ).rejects.toThrow(/metric: expected 'majority@last'/);
        expect(readSuite(suite).items.length).toBe(60);
    });
});

describe("maporl crossplay", () => {
    it("agent 0 of each run with the partners of the other: the diagonal is self-play", async () => {
        const r = await crossPlay({ suite, teams: [{ run: runA }, { run: runB }] });
        expect(r.matrix.length).toBe(2);
        const selfA = await regressionGate({ suite, baseline: { run: runA }, candidate: { run: runA } });
        const selfB = await regressionGate({ suite, baseline: { run: runB }, candidate: { run: runB } });
        expect([r.matrix[0][0], r.matrix[1][1]]).toEqual([selfA.baseline, selfB.baseline]);
        expect(r.chemistry).toEqual([r.matrix[0][0] - r.matrix[1][0], r.matrix[1][1] - r.matrix[0][1]]); // per team (column)
        const cmd = spawnSync(process.execPath, [cli, "crossplay", "--suite", suite, runA, runB], {
            encoding: "utf8",
            timeout: 120_000,
        });
        expect(cmd.status, cmd.stderr).toBe(0);
        expect(cmd.stdout).toMatch(
            /cross-play \(majority@last\)[\s\S]*\[0\][\s\S]*\[1\][\s\S]*\n  chemistry +[+-][\d.]+ +[+-][\d.]+\n$/,
        );
    }, 300_000);
});
