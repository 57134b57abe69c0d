// pipelineResume.test.ts: an asynchronous run (asyncRollout.maxStaleness d) interrupted mid-stage resumes exactly: its
// checkpoint holds the snapshots of the versions its rollouts in flight were launched at (state.json `pipeline`,
// models pipeline-v<version>-<name>), the resumed run relaunches them on those versions, and the run ends with the
// metrics, traces and summary of an uninterrupted one, byte for byte. For the embedded GPT (full models) and for
// LoRA adapters on a Hugging Face llama.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { trainJob } from "../../lib/index.js";
import { resolveConfig } from "../../lib/train/job/config.js";
import { restorePipeline } from "../../lib/train/job/resume.js";
import type { JobState } from "../../lib/train/job/types.js";
import type { NativePolicy } from "../../lib/model/nativePolicy.js";
import type { StageModels } from "../../lib/train/trainers/stage.js";
import { metricsWithoutTimings, summaryWithoutTimings } from "../helpers/runs.js";
import { tinyHfModel } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-pipeline-resume-"));
const llama = join(work, "tiny-llama");
beforeAll(() => tinyHfModel(llama, 3, { hidden_size: 64, intermediate_size: 128 }));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const versionsOf = (names: string[]) =>
    [...new Set(names.map((f) => Number(/^pipeline-v(\d+)-/.exec(f)![1])))].sort((x, y) => x - y);

// (the summary's peak resident memory is the process's, not the run's)
const read = (dir: string) => {
    const summary = summaryWithoutTimings(readFileSync(join(dir, "summary.json"), "utf8")) as {
        memory?: { peakRssBytes?: number };
    };
    delete summary.memory?.peakRssBytes;
    return {
        metrics: metricsWithoutTimings(readFileSync(join(dir, "metrics.jsonl"), "utf8")),
        traces: readFileSync(join(dir, "traces.jsonl"), "utf8"),
        summary,
    };
};

/** Runs `config` straight, then again stopped once iteration `stopAt` has trained, then resumed; returns both runs'
 * logs and the interrupted run's checkpoint state. */
async function interrupted(name: string, config: Record<string, unknown>, stopAt: number) {
    const straight = join(work, `${name}-straight`),
        stopped = join(work, `${name}-stopped`);
    await trainJob({ out: straight, config });
    const ac = new AbortController();
    let error: unknown = null;
    try {
        await trainJob({
            out: stopped,
            config,
            signal: ac.signal,
            onProgress: (p) => {
                if (p.phase === "train" && p.step >= stopAt) ac.abort(new Error("stopped by the test"));
            },
        });
    } catch (e) {
        error = e;
    }
    expect(error, "the run was stopped").not.toBeNull();
    expect(existsSync(join(stopped, "summary.json"))).toBe(false);
    const state = JSON.parse(readFileSync(join(stopped, "checkpoint", "state.json"), "utf8")) as {
        step: number;
        pipeline?: { start: number; maxStaleness: number; versions: number[] } | null;
    };
    const snapshots = readdirSync(join(stopped, "checkpoint")).filter((f) => f.startsWith("pipeline-v"));
    await trainJob({ out: stopped, resume: true });
    return { a: read(straight), b: read(stopped), state, snapshots };
}

describe("an asynchronous run resumes exactly", () => {
    it("embedded GPT, MAPoRL, maxStaleness 2: the rollouts in flight relaunched on their versions", async () => {
        const { a, b, state, snapshots } = await interrupted(
            "gpt",
            {
                iterations: 6,
                episodesPerIteration: 3,
                evalEpisodes: 4,
                evalEvery: 100,
                controls: false,
                sft: { steps: 5, batchSize: 8 },
                model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
                critic: { layers: 1, heads: 2, dModel: 32 },
                lr: 2e-2,
                asyncRollout: { maxStaleness: 2 },
            },
            3,
        );
        // stopped after iteration s: the rollouts of s + 1 and s + 2 are in flight, launched at versions s - 2 and s - 1
        // (s updates done), whose snapshots the checkpoint holds
        expect(state.pipeline).toEqual({ start: 0, maxStaleness: 2, versions: [state.step - 2, state.step - 1] });
        expect(versionsOf(snapshots)).toEqual([state.step - 2, state.step - 1]);
        expect(b.metrics).toBe(a.metrics);
        expect(b.traces).toBe(a.traces);
        expect(b.summary).toEqual(a.summary);
        expect(a.metrics).toContain('"staleness":2');
    }, 240_000);

    it("LoRA adapters on a llama, MAGRPO, maxStaleness 1", async () => {
        const { a, b, state, snapshots } = await interrupted(
            "lora",
            {
                algo: "magrpo",
                model: { dir: llama, contextLength: 256 },
                lora: { rank: 2, alpha: 4 },
                iterations: 4,
                episodesPerIteration: 3,
                evalEpisodes: 3,
                evalEvery: 100,
                agents: 2,
                turns: 2,
                controls: false,
                separateTurn0: false,
                magrpo: { generations: 2 },
                sampling: { temperature: 1, maxTokens: 6 },
                // the random model scores 0 everywhere: the length penalty gives its trees rewards to compare
                overlong: { buffer: 5, penaltyFactor: 1 },
                lr: 1e-2,
                asyncRollout: { maxStaleness: 1 },
            },
            2,
        );
        expect(state.pipeline).toEqual({ start: 0, maxStaleness: 1, versions: [state.step - 1] });
        // the agents share one adapter (shareParameters): one snapshot, an adapter directory
        expect(snapshots).toEqual([`pipeline-v${state.step - 1}-actor-0`]);
        expect(b.metrics).toBe(a.metrics);
        expect(b.traces).toBe(a.traces);
        expect(b.summary).toEqual(a.summary);
    }, 240_000);

    it("a checkpoint's pipeline record is checked before it is used; a changed bound starts the pipeline again", async () => {
        const cfg = resolveConfig({ asyncRollout: { maxStaleness: 2 } });
        const m = { agents: [], trainable: [], critics: [], named: {} } as StageModels;
        const base = {} as NativePolicy;
        const logs: string[] = [];
        const restore = (pipeline: unknown, d = cfg) =>
            restorePipeline({ pipeline } as JobState, d, "/ckpt", m, base, 5, (l) => logs.push(l));
        await expect(restore({ start: 6, maxStaleness: 2, versions: [] })).rejects.toThrow(
            /state.json: pipeline.start: expected an integer in \[0, 5\], got 6/,
        );
        await expect(restore({ start: 0, maxStaleness: 2, versions: [3, 5] })).rejects.toThrow(
            /pipeline.versions: expected at most 2 distinct integers in \[0, 4\], got \[3,5\]/,
        );
        await expect(restore({ start: 0, maxStaleness: 2, versions: [1, 2, 3] })).rejects.toThrow(/pipeline.versions/);
        await expect(restore({ start: 0, maxStaleness: "2", versions: [] })).rejects.toThrow(/pipeline.maxStaleness/);
        await expect(restore("x")).rejects.toThrow(/pipeline: expected an object/);
        await expect(restore({ start: 0, maxStaleness: 2, versions: [3, 3] })).rejects.toThrow(
            /pipeline.versions: expected at most 2 distinct integers/,
        );
        // resumed with more iterations than the checkpoint planned for: a version it does not hold restarts the
        // pipeline (rollouts 5 and 6 need versions 3 and 4; the checkpoint, written for 6 iterations, holds 3)
        const more = resolveConfig({ iterations: 10, asyncRollout: { maxStaleness: 2 } });
        expect(await restore({ start: 0, maxStaleness: 2, versions: [3] }, more)).toBeUndefined();
        expect(logs.join("\n")).toMatch(
            /holds no snapshot of version\(s\) 4 \(iterations changed since it was written\)/,
        );
        expect(await restore(null)).toBeUndefined();
        // resumed with another bound (--allow-config-change asyncRollout): the rollouts start again, and it says so
        expect(await restore({ start: 0, maxStaleness: 1, versions: [4] })).toBeUndefined();
        expect(logs.join("\n")).toMatch(
            /asyncRollout.maxStaleness is 2, the checkpoint's pipeline ran at 1: its rollouts start again at iteration 6/,
        );
    });
});
