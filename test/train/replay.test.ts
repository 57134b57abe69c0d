// replay.test.ts: the replay buffer of successful team trajectories and its offline phase (config replay): only
// episodes whose last-turn majority is right enter it, only their trained turns, oldest out first; the offline phase
// changes the policy (the run diverges from the same run without replay right after the first phase, and the saved
// weights differ); a run stopped mid-stage resumes with its buffer and ends with the uninterrupted run's metrics;
// with MAPoRL and with MAGRPO (whose buffer takes the first path of each joint-action tree).
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { trainJob } from "../../lib/train/job/job.js";
import { ReplayBuffer } from "../../lib/train/trainers/replay.js";
import type { TeamRollout } from "../../lib/train/trainers/rollout.js";
import { readMetrics } from "../helpers/runs.js";

const work = mkdtempSync(join(tmpdir(), "maporl-replay-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const config = (replay: boolean, algo = "maporl") => ({
    algo,
    seed: 2,
    iterations: 4,
    episodesPerIteration: 16,
    evalEpisodes: 12,
    evalEvery: 4,
    controls: false,
    sft: { steps: 400, batchSize: 32 },
    model: { layers: 1, heads: 2, dModel: 64 },
    critic: { layers: 1, heads: 2, dModel: 32 },
    replay: { enabled: replay, every: 2, steps: 2, batchSize: 8, capacity: 64 },
});
const lines = (dir: string) =>
    readMetrics(dir)
        .metrics.split("\n")
        .filter((l) => l.includes('"kind":"train"'))
        .map(
            (l) =>
                JSON.parse(l) as {
                    iteration: number;
                    reward: number;
                    agents: unknown;
                    replay?: { successful: number; size: number; offlineLoss?: number | null };
                },
        );

describe("replay buffer", () => {
    it("keeps only the trained turns of successful episodes, oldest out first", () => {
        const e = (correct: boolean, tag: number) => ({
            prompt: [tag],
            completion: [tag, tag],
            stopped: true,
            text: "",
            extracted: null,
            correct,
            score: correct ? 1 : 0,
        });
        // two episodes, 2 turns, 3 agents: the first right at the last turn by majority (2 of 3), the second not
        const r = {
            entries: [
                [
                    [e(false, 1), e(false, 2), e(true, 3)],
                    [e(true, 4), e(true, 5), e(false, 6)],
                ],
                [
                    [e(true, 7), e(true, 8), e(true, 9)],
                    [e(true, 10), e(false, 11), e(false, 12)],
                ],
            ],
        } as unknown as TeamRollout;
        const b = new ReplayBuffer("maporl", 3, null);
        expect(
            b.add(
                r,
                (t) => t > 0,
                () => true,
                1,
            ),
        ).toBe(1); // turn 0 is not trained (separate turn-0 model)
        expect(b.toJSON().samples.map((s) => [s.agent, s.prompt[0]])).toEqual([
            [0, 4],
            [1, 5],
            [2, 6],
        ]);
        b.add(
            r,
            () => true,
            (a) => a === 0,
            2,
        ); // agent 0 alone trained: its turns 0 and 1 of the successful episode
        expect(b.toJSON().samples.map((s) => s.prompt[0])).toEqual([6, 1, 4]); // capacity 3: the oldest went out
        expect(new ReplayBuffer("independent", 3, b.toJSON()).size).toBe(0); // another stage starts empty
        expect(new ReplayBuffer("maporl", 3, b.toJSON()).size).toBe(3);
    });

    for (const algo of ["maporl", "magrpo"])
        it(`${algo}: the offline phase changes the policy; a stopped run resumes with its buffer to the same metrics`, async () => {
            const on = join(work, `${algo}-on`),
                off = join(work, `${algo}-off`),
                stopped = join(work, `${algo}-stopped`);
            await trainJob({ out: on, config: config(true, algo) });
            await trainJob({ out: off, config: config(false, algo) });
            const a = lines(on),
                b = lines(off);
            expect(a[0].replay!.size).toBeGreaterThan(0); // successful episodes from the first iteration on
            expect(a[1].replay!.offlineLoss).toEqual(expect.any(Number)); // the phase after iteration 2
            expect(a[3].replay!.offlineLoss).toEqual(expect.any(Number));
            // identical up to the first phase, different after it
            for (const k of [0, 1]) expect([a[k].reward, a[k].agents]).toEqual([b[k].reward, b[k].agents]);
            expect(a[2].agents).not.toEqual(b[2].agents);
            const w = (dir: string) => readFileSync(join(dir, "models", `${algo}-actor-0`, "model.safetensors"));
            expect(Buffer.compare(w(on), w(off))).not.toBe(0);
            // stopped after iteration 3 (past a phase, buffer non-empty), resumed: the uninterrupted run's metrics
            const ctl = new AbortController();
            await expect(
                trainJob({
                    out: stopped,
                    config: config(true, algo),
                    signal: ctl.signal,
                    onProgress: (p) => {
                        if (p.stage === algo && p.phase === "train" && p.step === 3) ctl.abort(new Error("stop"));
                    },
                }),
            ).rejects.toThrow();
            expect(existsSync(join(stopped, "summary.json"))).toBe(false);
            const state = JSON.parse(readFileSync(join(stopped, "checkpoint", "state.json"), "utf8")) as {
                state?: { replay?: { samples: unknown[] } };
                replay?: { samples: unknown[] };
            };
            expect((state.state ?? state).replay!.samples.length).toBeGreaterThan(0);
            await trainJob({ out: stopped, resume: true });
            expect(readMetrics(stopped).metrics).toBe(readMetrics(on).metrics);
        }, 300_000);
});
