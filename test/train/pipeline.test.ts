// pipeline.test.ts: asynchronous rollouts with bounded staleness. With maxStaleness d, iteration i trains on a rollout
// that a snapshot of version i - min(i, d) sampled: staleness 0, 1, .., d, then d for every later iteration; the
// snapshot's log-probs differ from the trainer's once the weights moved (mismatchK3 > 0 exactly where staleness > 0),
// the rollout correction reports its weights there, the run is deterministic, and a job writes staleness and the
// policy version to metrics.jsonl and traces.jsonl. Config errors name the key.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { trainJob } from "../../lib/index.js";
import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { RolloutPipeline } from "../../lib/train/trainers/pipeline.js";
import { stageModels } from "../../lib/train/trainers/stage.js";
import { tinyTeam } from "../helpers/team.js";

const work = mkdtempSync(join(tmpdir(), "maporl-pipeline-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function pipelined(algo: Algo, maxStaleness: number, iterations: number, extra: Record<string, unknown> = {}) {
    const { cfg, task, base } = await tinyTeam({
        algo,
        sampling: { temperature: 1, maxTokens: 10 },
        lr: 2e-2,
        asyncRollout: { maxStaleness },
        ...extra,
    });
    const m = await stageModels(cfg, "joint", base);
    const pipe = new RolloutPipeline(cfg, task, "joint", m, base, (it) => 1000 + it, iterations);
    const out = [];
    for (let it = 0; it < iterations; it++) out.push(await pipe.run(it));
    await pipe.close();
    return out;
}

describe("asynchronous rollouts", () => {
    for (const [algo, d] of [
        ["maporl", 1],
        ["maporl", 2],
        ["collm-dc", 1],
        ["magrpo", 1],
    ] as [Algo, number][])
        it(`${algo}, maxStaleness ${d}: staleness never exceeds the bound; the lag shows as a mismatch`, async () => {
            const runs = await pipelined(
                algo,
                d,
                4,
                // CoLLM and MAGRPO measure when correcting
                algo === "maporl" ? {} : { rolloutCorrection: { rolloutIs: "token" } },
            );
            const want = [0, 1, 2, 3].map((i) => Math.min(i, d));
            expect(runs.map((r) => r.staleness)).toEqual(want);
            expect(runs.map((r) => r.policyVersion)).toEqual(want.map((s, i) => i - s));
            for (const [i, r] of runs.entries()) {
                const k3 = r.stats[0].mismatchK3!;
                if (want[i] === 0) expect(k3, `iteration ${i}`).toBeLessThan(1e-6);
                else expect(k3, `iteration ${i}`).toBeGreaterThan(1e-6);
            }
        });

    it("is deterministic, and the correction reports its weights on stale rows", async () => {
        const a = await pipelined("maporl", 1, 3, { rolloutCorrection: { rolloutIs: "token", rolloutIsThreshold: 2 } });
        const b = await pipelined("maporl", 1, 3, { rolloutCorrection: { rolloutIs: "token", rolloutIsThreshold: 2 } });
        expect(a.map((r) => r.stats)).toEqual(b.map((r) => r.stats));
        expect(a[2].stats[0].isMean).toBeGreaterThan(0);
        expect(Number.isFinite(a[2].stats[0].isMean)).toBe(true);
    });

    it("a job writes staleness and the policy version per iteration", async () => {
        const out = join(work, "job");
        await trainJob({
            out,
            config: {
                iterations: 3,
                episodesPerIteration: 3,
                evalEpisodes: 4,
                evalEvery: 3,
                controls: false,
                sft: { steps: 5, batchSize: 8 },
                model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
                critic: { layers: 1, heads: 2, dModel: 32 },
                asyncRollout: { maxStaleness: 1 },
            },
        });
        const lines = readFileSync(join(out, "metrics.jsonl"), "utf8")
            .split("\n")
            .filter((l) => l.includes('"kind":"train"'))
            .map((l) => JSON.parse(l) as { staleness: number; policyVersion: number });
        expect(lines.map((l) => [l.staleness, l.policyVersion])).toEqual([
            [0, 0],
            [1, 0],
            [1, 1],
        ]);
        const traces = readFileSync(join(out, "traces.jsonl"), "utf8").trim().split("\n");
        expect(traces.map((l) => (JSON.parse(l) as { staleness: number }).staleness)).toEqual([0, 1, 1]);
    });

    it("config errors name the key", () => {
        expect(resolveConfig({ algo: "magrpo", asyncRollout: { maxStaleness: 1 } }).asyncRollout.maxStaleness).toBe(1);
        expect(() => resolveConfig({ asyncRollout: { maxStaleness: 9 } })).toThrow(
            /asyncRollout.maxStaleness: expected an integer in \[0, 8\]/,
        );
    });
});
