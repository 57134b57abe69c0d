// calibrate.ts: the rates the job's first estimate needs before its own work has measured them. An answer's cost
// depends on the batch it decodes in (on 2 cores, 2.9 ms an answer for 2 questions against 1.0 ms for 32: per-step
// overheads are shared by the rows), so the answers are timed at one iteration's batch, after a warm-up rollout that
// is not timed (thread pool, first allocations); and the warm start's steps are timed on a throwaway clone of the base
// (the base itself and every seed stay untouched, so results do not depend on the calibration). Costs about one
// iteration's rollout and three SFT steps.
import type { NativePolicy } from "../../model/nativePolicy.js";
import type { Task, TaskItem } from "../tasks/tasks.js";
import { sftWarmStart } from "../trainers/sft.js";
import { rolloutTeam } from "../trainers/rollout.js";
import { answersPerRollout, type JobClock } from "./clock.js";
import type { TrainConfig } from "./config.js";

export async function calibrateClock(
    clock: JobClock,
    cfg: TrainConfig,
    task: Task,
    base: NativePolicy,
    items: TaskItem[],
    sft: boolean,
    signal?: AbortSignal,
): Promise<void> {
    const team = [...Array(cfg.agents)].map(() => base);
    const rollout = (n: number) =>
        rolloutTeam(task, items.slice(0, n), team, {
            turns: cfg.turns,
            temperature: cfg.sampling.temperature,
            maxTokens: cfg.sampling.maxTokens,
            seed: 1,
            ...(signal ? { signal } : {}),
        });
    await rollout(2);
    const n = Math.max(1, Math.min(cfg.episodesPerIteration, items.length));
    const c0 = performance.now();
    await rollout(n);
    clock.calibrate(performance.now() - c0, answersPerRollout(cfg, n, false));
    if (!sft) return;
    const probe = await base.clone("calibration");
    try {
        const o = {
            batchSize: cfg.sft.batchSize,
            lr: cfg.sft.lr,
            turns: cfg.turns,
            seed: cfg.seed,
            feedback: cfg.feedback,
        };
        await sftWarmStart(probe, task, { ...o, steps: 1, ...(signal ? { signal } : {}) });
        const s0 = performance.now();
        await sftWarmStart(probe, task, { ...o, steps: 3, from: 1, ...(signal ? { signal } : {}) });
        clock.observeSft(performance.now() - s0, 2);
    } finally {
        await probe.dispose();
    }
}
