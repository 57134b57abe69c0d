// job.ts: `maporl train`, the main job. Stages, each resumable from the run directory's checkpoint:
//   sft            the warm start of the base model on the task's solutions;
//   <algo>         co-training of the team from the base (config.schedule, 'joint' by default), with held-out
//                  evaluations before, every `evalEvery` iterations and after;
//   independent    the negative control: agent 0 trained the same way against frozen partners (config.controls);
// then the before/after table, summary.json and report.html. The run directory holds config.json (resolved),
// metrics.jsonl, traces.jsonl, checkpoint/ and models/. Every random draw comes from (seed, stage, step), and the
// checkpoint after every step records the byte length of the two logs, so `resume` truncates what a killed
// process wrote after it and continues with the same numbers as an uninterrupted run.
import { existsSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

import { NativePolicy } from "../../model/nativePolicy.js";
import { replaceFileDurable } from "../../durable.js";
import { loadModel } from "./checkpoint.js";
import { restorePipeline } from "./resume.js";
import { calibrateClock } from "./calibrate.js";
import { JobRun, type JobStage } from "./run.js";
import { mean, summarize, taskProtocol } from "./summary.js";
import type { TrainJobOptions, TrainSummary } from "./types.js";
import { writeReport } from "./report.js";
import { sftWarmStart } from "../trainers/sft.js";
import { ReplayBuffer } from "../trainers/replay.js";
import { runIteration, scheduled, stageModels, type StageModels } from "../trainers/stage.js";
import { RolloutPipeline } from "../trainers/pipeline.js";
import { fleetActive, RolloutFleet } from "../trainers/fleetRollout.js";

export { makeTask } from "./run.js";

/**
 * The main job, `maporl train`: a new run in o.out, or the run there resumed (o.resume). Returns the summary it writes
 * (summary.json, report.html).
 */
export async function trainJob(o: TrainJobOptions): Promise<TrainSummary> {
    const run = o.resume ? JobRun.resume(o) : JobRun.start(o);
    const base = await loadBase(run);
    run.base = base;
    await estimateDuration(run, base);
    if (run.state.stage === "sft") await warmStart(run, base);
    const trainedBase = await saveTrainedBase(run, base);
    const adapters: Record<string, number> = {};
    const first = run.firstStage();
    const fleet = fleetActive(run.cfg)
        ? await RolloutFleet.open(
              run.cfg,
              run.o.out,
              trainedBase ?? run.cfg.model.dir,
              (s) => run.log(s),
              base.tokenizer.vocabSize,
          )
        : null;
    try {
        for (const [k, stage] of run.stages.entries())
            if (k >= first) await coTrain(run, base, k, stage, trainedBase, adapters, fleet);
    } finally {
        await fleet?.close();
    }
    return finish(run, base, adapters);
}

// A Hugging Face base (model.dir) is saved in the checkpoint only once the warm start has trained it; untrained, it is
// read again from model.dir (a real model's weights are never copied into every checkpoint).
const hfBase = (run: JobRun) => run.cfg.model.dir !== "";
const baseOf = (run: JobRun, base: NativePolicy): Record<string, NativePolicy> =>
    hfBase(run) && run.cfg.sft.steps === 0 ? {} : { base };

// The base model: the checkpoint's, the Hugging Face directory's, or a new embedded GPT. A new run whose model does not
// load (a context past its positions, a damaged file) leaves nothing behind.
async function loadBase(run: JobRun): Promise<NativePolicy> {
    const cfg = run.cfg;
    const load =
        run.ckpt && existsSync(join(run.ckpt.dir, "base", "config.json"))
            ? loadModel(run.ckpt.dir, "base", cfg.device)
            : hfBase(run)
              ? NativePolicy.load(cfg.model.dir, {
                    contextLength: cfg.model.contextLength,
                    name: "base",
                    device: cfg.device,
                    dtype: cfg.model.dtype,
                })
              : NativePolicy.create({
                    contextLength: cfg.model.contextLength,
                    layers: cfg.model.layers,
                    heads: cfg.model.heads,
                    dModel: cfg.model.dModel,
                    seed: cfg.seed + 1,
                    name: "base",
                    device: cfg.device,
                });
    return load.catch((e: unknown) => {
        run.discardNew();
        throw e;
    });
}

// The first estimate of the job's duration: the rates of answers and SFT steps measured on the base until the job's
// work measures them (a real model's are too slow to spare).
async function estimateDuration(run: JobRun, base: NativePolicy): Promise<void> {
    const { cfg, state, clock } = run;
    if (hfBase(run) || state.stage === "done") return;
    const inSft = state.stage === "sft" && cfg.sft.steps > state.step;
    await calibrateClock(clock, cfg, run.task, base, run.evalItems, inSft, run.signal);
    const est = clock.remainingMs(state.stage, state.step);
    if (!Number.isFinite(est)) return;
    const min = est / 60_000;
    run.log(
        `estimated duration on this machine: about ${min < 1 ? "1" : Math.round(min)} minute${min < 1.5 ? "" : "s"}` +
            ` (${Math.round(est / 1000)} s; measured at the start, refined as it runs)`,
    );
    if (min > 15)
        run.log(
            `  that is long for a first run: fewer iterations (--iterations), questions per iteration (--set episodesPerIteration=N) ` +
                `or evaluation questions (--set evalEpisodes=N) shorten it`,
        );
}

// Stage 1: the warm start of the base on the task's solutions, a checkpoint every twentieth of it, then the untrained
// team's evaluation.
async function warmStart(run: JobRun, base: NativePolicy): Promise<void> {
    const { cfg, clock } = run;
    clock.enter("sft");
    run.log(`sft: ${cfg.sft.steps} steps of ${cfg.sft.batchSize} solutions (${base.parameterCount} parameters)`);
    const every = Math.max(1, Math.floor(cfg.sft.steps / 20));
    for (let s = run.state.step; s < cfg.sft.steps; s += every) {
        const end = Math.min(cfg.sft.steps, s + every);
        let last = 0;
        const s0 = performance.now();
        await sftWarmStart(base, run.task, {
            steps: end,
            from: s,
            batchSize: cfg.sft.batchSize,
            lr: cfg.sft.lr,
            turns: cfg.turns,
            seed: cfg.seed,
            feedback: cfg.feedback,
            onStep: (_k, loss) => {
                last = loss;
            },
            ...(run.signal ? { signal: run.signal } : {}),
        });
        clock.observeSft(performance.now() - s0, end - s);
        run.metric({ kind: "sft", step: end, loss: last });
        run.progress({
            stage: "sft",
            phase: "sft",
            step: end,
            total: cfg.sft.steps,
            iteration: end,
            reward: NaN,
            accuracy: [],
        });
        await run.save({ base }, "sft", end);
    }
    run.state.evals.untrained = await run.evaluate(
        "untrained team",
        [...Array(cfg.agents)].map(() => base),
        0,
        "sft",
        cfg.sft.steps,
    );
    run.endStage();
    await run.save(baseOf(run, base), cfg.algo, 0);
}

// A Hugging Face base the warm start trained goes to models/base (a Hugging Face directory), and the adapters written
// to models/ name it as their base_model_name_or_path: they load on what they were trained on. Null otherwise.
async function saveTrainedBase(run: JobRun, base: NativePolicy): Promise<string | null> {
    const trainedBase = hfBase(run) && run.cfg.sft.steps > 0 ? resolve(run.o.out, "models", "base") : null;
    if (trainedBase && run.state.stage !== "sft" && !existsSync(join(trainedBase, "config.json")))
        await base.save(trainedBase);
    return trainedBase;
}

// Stages 2 and 3: the method, then the control. Each iteration is checkpointed; the stage ends with its evaluation
// and its models written to models/.
async function coTrain(
    run: JobRun,
    base: NativePolicy,
    k: number,
    st: JobStage,
    trainedBase: string | null,
    adapters: Record<string, number>,
    fleet: RolloutFleet | null,
): Promise<void> {
    const { cfg, state, ckpt } = run;
    const resuming = state.stage === st.name && state.step > 0 && ckpt !== null;
    run.clock.enter(st.name);
    run.replay = cfg.replay.enabled
        ? new ReplayBuffer(st.name, cfg.replay.capacity, resuming ? state.replay : null)
        : null;
    const m = await stageModels(
        cfg,
        st.schedule,
        base,
        resuming ? (n) => loadModel(ckpt.dir, n, cfg.device, base) : undefined,
    );
    if (hfBase(run))
        for (const [name, model] of Object.entries(m.named)) adapters[`${st.name}/${name}`] = model.parameterCount;
    const label = st.name === "independent" ? "independent control" : `co-trained (${cfg.algo}, ${st.schedule})`;
    run.log(`${st.name}: ${cfg.iterations} iterations of ${cfg.episodesPerIteration} debates, ${label}`);
    const seedOf = (it: number) => cfg.seed * 1_000_003 + (k + 1) * 100_003 + it;
    const start = resuming ? state.step : 0;
    // on a fleet, the stage's adapters as they are now are version `start` (updates done); the pipeline pushes the next
    await fleet?.push(m, start);
    const pipe =
        cfg.asyncRollout.maxStaleness > 0 || fleet
            ? new RolloutPipeline(
                  cfg,
                  run.task,
                  st.schedule,
                  m,
                  base,
                  seedOf,
                  cfg.iterations,
                  run.signal,
                  fleet,
                  resuming && !fleet ? await restorePipeline(state, cfg, ckpt.dir, m, base, start, run.log) : undefined,
              )
            : null;
    try {
        for (let it = start; it < cfg.iterations; it++) {
            run.signal?.throwIfAborted();
            await trainIteration(run, base, st, m, pipe, seedOf(it), it);
            if ((it + 1) % cfg.evalEvery === 0 && it + 1 < cfg.iterations)
                await run.evaluate(label, m.agents, it + 1, st.name);
            // an asynchronous run's checkpoint holds the snapshots its rollouts in flight were launched on
            const piped = it + 1 < cfg.iterations ? await pipe?.checkpoint(it + 1) : null;
            run.state.pipeline = piped?.state ?? null;
            await run.save({ ...baseOf(run, base), ...m.named, ...piped?.models }, st.name, it + 1);
        }
    } finally {
        await pipe?.close(); // (after a failure: the rollouts launched ahead are stopped, not left to run)
        run.state.pipeline = null;
    }
    run.state.evals[st.name] = await run.evaluate(label, m.agents, cfg.iterations, st.name);
    for (const [name, model] of Object.entries(m.named)) {
        const dir = join(run.o.out, "models", `${st.name}-${name}`);
        await model.save(dir, trainedBase ? { baseModel: trainedBase } : {});
        if (!run.task.prompt && !name.startsWith("critic"))
            writeFileSync(join(dir, "maporl-task.json"), JSON.stringify(taskProtocol(cfg), null, 2) + "\n");
    }
    run.endStage();
    await run.save(baseOf(run, base), run.stages[k + 1]?.name ?? "done", 0);
    for (const model of new Set(Object.values(m.named))) await model.dispose();
    if (hfBase(run)) for (const name of base.adapters) await base.deleteAdapter(name); // the next stage starts from the base
}

// One iteration of a stage: the rollouts (this iteration's, or the pipeline's sampled ahead), the training steps, the
// replay buffer's share, and the metrics and traces lines.
async function trainIteration(
    run: JobRun,
    base: NativePolicy,
    st: JobStage,
    m: StageModels,
    pipe: RolloutPipeline | null,
    seed: number,
    it: number,
): Promise<void> {
    const { cfg, task } = run;
    const i0 = performance.now();
    const items = task.generate(cfg.episodesPerIteration, seed);
    const piped = pipe ? await pipe.run(it) : null;
    const r = piped ?? (await runIteration(cfg, task, items, st.schedule, m, base, it, seed, run.signal));
    const lag = piped
        ? {
              staleness: piped.staleness,
              policyVersion: piped.policyVersion,
              ...(piped.stalenessMean !== undefined ? { stalenessMean: piped.stalenessMean } : {}),
          }
        : {};
    const reward = mean(r.stats.map((s) => s.reward));
    const failed = r.failed?.map((f) => ({ question: f.item.question, turn: f.turn, agent: f.agent, error: f.error }));
    if (failed)
        run.log(
            `  ${st.name} iteration ${it + 1}: ${failed.length} of ${items.length} episodes failed and were skipped (first: ${failed[0]?.error})`,
        );
    let replayed: Record<string, unknown> = {};
    if (run.replay && r.rollout) {
        // the buffer takes this iteration's successful episodes; every `every` iterations, the offline phase
        const sc = scheduled(cfg, st.schedule, m, it);
        const ok = run.replay.add(r.rollout, sc.trainTurn, (a) => sc.trainable[a] !== null, it + 1);
        const phase =
            (it + 1) % cfg.replay.every === 0
                ? await run.replay.offline(sc.trainable, {
                      steps: cfg.replay.steps,
                      batchSize: cfg.replay.batchSize,
                      lr: cfg.replay.lr,
                      seed: seed * 7 + 3,
                      ...(run.signal ? { signal: run.signal } : {}),
                  })
                : undefined;
        replayed = {
            replay: { successful: ok, size: run.replay.size, ...(phase !== undefined ? { offlineLoss: phase } : {}) },
        };
    }
    run.metric({
        kind: "train",
        stage: st.name,
        iteration: it + 1,
        reward,
        accuracy: r.train.majorityAccuracy,
        agents: r.stats,
        ...lag,
        ...(failed ? { failed } : {}),
        ...replayed,
    });
    run.trace({ stage: st.name, iteration: it + 1, ...lag, ...r.trace });
    run.clock.observeIteration(st.name, performance.now() - i0);
    run.progress({
        stage: st.name,
        phase: "train",
        step: it + 1,
        total: cfg.iterations,
        iteration: it + 1,
        reward,
        accuracy: r.train.majorityAccuracy,
    });
}

// The summary (the before/after table, stage timings, memory for a Hugging Face base), summary.json and report.html.
async function finish(run: JobRun, base: NativePolicy, adapters: Record<string, number>): Promise<TrainSummary> {
    const summary = summarize(run.cfg, run.state.evals);
    summary.stages = run.names.flatMap((n) => (run.clock.timings[n] ? [run.clock.timings[n]] : []));
    if (hfBase(run))
        summary.memory = {
            peakRssBytes: process.resourceUsage().maxRSS * 1024,
            baseParameters: base.parameterCount,
            adapters,
        };
    replaceFileDurable(join(run.o.out, "summary.json"), JSON.stringify(summary, null, 2));
    await writeReport(run.o.out, summary);
    await base.dispose();
    return summary;
}
