// calibrate.ts: the rates the job's first estimate needs before its own work has measured them. An answer's cost
// depends on the batch it decodes in (on 2 cores, 2.9 ms an answer for 2 questions against 1.0 ms for 32: per-step
// overheads are shared by the rows), so the answers are timed at one iteration's batch, after a warm-up rollout that
// is not timed (thread pool, first allocations); and the warm start's steps are timed on a throwaway clone of the base
// (the base itself and every seed stay untouched, so results do not depend on the calibration); before the warm
// start, the answers' rate is scaled to the length of the answers it teaches. Costs about three iterations' rollouts and
// six SFT steps (under a second for the main job).
import type { NativePolicy } from "../../model/nativePolicy.js";
import type { Task, TaskItem } from "../tasks/tasks.js";
import { sftWarmStart } from "../trainers/sft.js";
import { protocolSolution, rolloutTeam } from "../trainers/rollout.js";
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
    // The median of three timed rollouts: one is at the mercy of whatever else the machine does for 0.1 s.
    const times: number[] = [];
    let r!: Awaited<ReturnType<typeof rollout>>;
    for (let k = 0; k < 3; k++) {
        const c0 = performance.now();
        r = await rollout(n);
        times.push(performance.now() - c0);
    }
    const ms = times.sort((a, b) => a - b)[1]!;
    // The warm start teaches the task's answers, which are shorter than an untrained model's (it writes to the token
    // limit): the rate is scaled by the answers' length after the warm start over the length measured here.
    let scale = 1;
    if (sft && cfg.sft.steps > 0 && !task.demonstration && !task.warmStart && !task.prompt) {
        const taught = items.slice(0, n).flatMap((it) => (it.solution ? [it.solution] : []));
        const written = r.entries.flat(2).map((e) => e.completion.length + (e.stopped ? 1 : 0));
        if (taught.length && written.length) {
            const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
            const after = mean(taught.map((t) => base.tokenizer.encode(protocolSolution(t)).length + 1));
            scale = Math.min(1, Math.max(0.25, after / Math.max(1, mean(written))));
        }
    }
    clock.calibrate(ms * scale, answersPerRollout(cfg, n, false));
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
        await sftWarmStart(probe, task, { ...o, steps: 2, ...(signal ? { signal } : {}) }); // (first steps allocate)
        const s0 = performance.now();
        await sftWarmStart(probe, task, { ...o, steps: 6, from: 2, ...(signal ? { signal } : {}) });
        clock.observeSft(performance.now() - s0, 4);
    } finally {
        await probe.dispose();
    }
}
