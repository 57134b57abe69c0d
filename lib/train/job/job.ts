// job.ts: `maporl train`, the main job. Stages, each resumable from the run directory's checkpoint:
//   sft            the warm start of the base model on the task's solutions;
//   <algo>         co-training of the team from the base (config.schedule, 'joint' by default), with held-out
//                  evaluations before, every `evalEvery` iterations and after;
//   independent    the negative control: agent 0 trained the same way against frozen partners (config.controls);
// then the before/after table, summary.json and report.html. The run directory holds config.json (resolved),
// metrics.jsonl, traces.jsonl, checkpoint/ and models/. Every random draw comes from (seed, stage, step), and the
// checkpoint after every step records the byte length of the two logs, so `resume` truncates what a killed
// process wrote after it and continues with the same numbers as an uninterrupted run.
import {
    appendFileSync,
    existsSync,
    mkdirSync,
    readFileSync,
    rmSync,
    statSync,
    truncateSync,
    writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";

import { backend, setMatmulPrecision } from "../../backend.js";
import { MaporlError } from "../../errors.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import { fsyncFile, replaceFileDurable, writeFileDurable } from "../../durable.js";
import { loadModel, prefixSha256, readCheckpoint, writeCheckpoint } from "./checkpoint.js";
import { calibrateClock } from "./calibrate.js";
import { answersPerRollout, JobClock } from "./clock.js";
import { resolveConfig, type TrainConfig } from "./config.js";
import { evaluateTeam } from "./evaluate.js";
import { writeReport } from "./report.js";
import { checkResumeInputs, digestModelDir } from "./resume.js";
import { mean, summarize, taskProtocol } from "./summary.js";
import type { JobProgress, JobState, TrainJobOptions, TrainSummary } from "./types.js";
import { sftWarmStart } from "../trainers/sft.js";
import { ReplayBuffer } from "../trainers/replay.js";
import { runIteration, scheduled, stageModels } from "../trainers/stage.js";
import { RolloutPipeline } from "../trainers/pipeline.js";
import { arithDebateTask, splitSumTask, type Task } from "../tasks/tasks.js";
import { gsm8kTask } from "../tasks/gsm8k.js";
import { lookupTask } from "../tasks/lookup.js";

export function makeTask(cfg: TrainConfig): Task {
    if (cfg.task === "gsm8k") return gsm8kTask({ agents: cfg.agents, dataDir: cfg.taskOptions.data });
    if (cfg.task === "tool-lookup")
        return lookupTask({ keyUse: cfg.taskOptions.keyUse, padUse: cfg.taskOptions.padUse });
    if (cfg.task === "split-sum")
        return splitSumTask({
            agents: cfg.agents,
            digits: cfg.taskOptions.digits,
            peerUse: cfg.taskOptions.peerUse,
            format: "compact",
        });
    return arithDebateTask({
        agents: cfg.agents,
        steps: cfg.taskOptions.steps,
        maxOperand: cfg.taskOptions.maxOperand,
        format: "compact",
    });
}

const size = (f: string) => (existsSync(f) ? statSync(f).size : 0);

// 'cuda' without a usable GPU fails here, before a run directory exists (the models would fail at creation).
function requireDevice(cfg: TrainConfig): void {
    if (cfg.device !== "cuda") return;
    const b = backend();
    if (b.cuda.devices.length === 0)
        throw new MaporlError(
            `train: device: 'cuda' requested, but ${
                b.cuda.compiled
                    ? "no CUDA device is visible (no GPU, or no driver)"
                    : "this build of maporl has no CUDA support (reinstall with MAPORL_CUDA=1)"
            }`,
            "MAPORL_ERR_NO_DEVICE",
        );
}

export async function trainJob(o: TrainJobOptions): Promise<TrainSummary> {
    const out = o.out,
        log = o.log ?? (() => undefined),
        signal = o.signal;
    const metricsFile = join(out, "metrics.jsonl"),
        tracesFile = join(out, "traces.jsonl");
    let cfg: TrainConfig,
        state: JobState,
        ckpt: ReturnType<typeof readCheckpoint> = null,
        madeOut = false;
    if (o.resume) {
        if (!existsSync(join(out, "config.json")))
            throw new Error(`train: --resume ${out}: no config.json there (not a run directory?)`);
        cfg = resolveConfig(JSON.parse(readFileSync(join(out, "config.json"), "utf8")), `${out}/config.json`);
        requireDevice(cfg);
        setMatmulPrecision(cfg.matmulPrecision);
        ckpt = readCheckpoint(out); // throws, naming the files, when checkpoints exist and none verifies
        for (const why of ckpt?.skipped ?? [])
            log(`the newest checkpoint is damaged (${why}); resuming from ${ckpt!.dir}`);
        if (!ckpt) log(`${out} has no checkpoint yet: starting the run over`);
        state = ckpt
            ? (ckpt.state as unknown as JobState)
            : { version: 1, stage: "sft", step: 0, evals: {}, metricsBytes: 0, tracesBytes: 0 };
        // The inputs as they are now are what the next checkpoints record (an accepted change is not asked for again).
        const modelFiles = ckpt
            ? checkResumeInputs(out, state, cfg, o.allowConfigChange ?? [], log)
            : cfg.model.dir !== ""
              ? digestModelDir(cfg.model.dir)
              : undefined;
        const { modelFiles: _was, ...rest } = state;
        state = { ...rest, config: cfg, ...(modelFiles ? { modelFiles } : {}) };
        // The logs must hold what the checkpoint recorded, unchanged: shorter (truncateSync would pad it with NUL bytes)
        // or different is an error naming the file, never a silent repair.
        for (const [f, n, h] of [
            [metricsFile, state.metricsBytes, state.metricsSha256],
            [tracesFile, state.tracesBytes, state.tracesSha256],
        ] as const) {
            const have = existsSync(f) ? statSync(f).size : 0;
            if (have < n)
                throw new Error(
                    `train: --resume ${out}: ${f} is ${have} bytes, shorter than the ${n} its checkpoint records (truncated or damaged); refusing to resume`,
                );
            if (h !== undefined && prefixSha256(f, n) !== h)
                throw new Error(
                    `train: --resume ${out}: the first ${n} bytes of ${f} do not match its checkpoint's SHA-256 (modified or damaged); refusing to resume`,
                );
            if (existsSync(f)) truncateSync(f, n);
        }
        log(`resuming ${out} at stage ${state.stage}, step ${state.step}`);
    } else {
        cfg = resolveConfig(o.config ?? {});
        requireDevice(cfg);
        setMatmulPrecision(cfg.matmulPrecision);
        if (existsSync(join(out, "config.json")))
            throw new Error(`train: ${out} already holds a run; use --resume ${out} or another --out`);
        madeOut = !existsSync(out);
        mkdirSync(out, { recursive: true });
        writeFileDurable(join(out, "config.json"), JSON.stringify(cfg, null, 2), true);
        writeFileSync(metricsFile, "");
        writeFileSync(tracesFile, "");
        state = {
            version: 1,
            stage: "sft",
            step: 0,
            evals: {},
            metricsBytes: 0,
            tracesBytes: 0,
            config: cfg,
            ...(cfg.model.dir !== "" ? { modelFiles: digestModelDir(cfg.model.dir) } : {}),
        };
    }
    const task = makeTask(cfg);
    const metric = (x: object) => appendFileSync(metricsFile, JSON.stringify(x) + "\n");
    let replay: ReplayBuffer | null = null;
    const save = async (models: Record<string, NativePolicy>, stage: string, step: number) => {
        fsyncFile(metricsFile); // the logs' part that the checkpoint covers is on disk before it
        fsyncFile(tracesFile);
        const metricsBytes = size(metricsFile),
            tracesBytes = size(tracesFile);
        clock.update();
        state = {
            ...state,
            stage,
            step,
            timings: clock.timings,
            ...(cfg.replay.enabled ? { replay: replay?.toJSON() ?? null } : {}),
            metricsBytes,
            tracesBytes,
            metricsSha256: prefixSha256(metricsFile, metricsBytes),
            tracesSha256: prefixSha256(tracesFile, tracesBytes),
        };
        await writeCheckpoint(out, models, state);
    };
    const t0 = performance.now();
    const stages: { name: string; schedule: TrainConfig["schedule"] }[] = [{ name: cfg.algo, schedule: cfg.schedule }];
    if (cfg.controls && cfg.schedule !== "independent") stages.push({ name: "independent", schedule: "independent" });
    const clock = new JobClock(
        cfg,
        stages.map((x) => x.name),
        state.timings,
    );
    const names = ["sft", ...stages.map((x) => x.name)];
    // The job's share done counts the time earlier processes of a resumed run spent, and never goes back (a rate
    // measured anew can lengthen the time left).
    const priorMs = Object.values(state.timings ?? {}).reduce((a, t) => a + t.durationMs, 0);
    let share = 0;
    const progress = (p: Omit<JobProgress, "elapsedMs" | "job">, inEval: number | null = null) => {
        const elapsedMs = performance.now() - t0,
            etaMs = clock.remainingMs(p.stage, p.iteration, inEval);
        if (Number.isFinite(etaMs))
            share = Math.max(share, (priorMs + elapsedMs) / Math.max(1, priorMs + elapsedMs + etaMs));
        o.onProgress?.({ ...p, elapsedMs, job: { stages: names, etaMs, priorMs, share } });
    };
    const endStage = () => {
        const t = clock.finish();
        metric({ kind: "timing", ...t });
        log(`  ${t.stage}: ${(t.durationMs / 1000).toFixed(1)} s`);
    };
    const evalItems = task.heldOut
        ? task.heldOut(cfg.evalEpisodes)
        : task.generate(cfg.evalEpisodes, cfg.seed * 7 + 999_983);
    // `at`: the step of the stage the evaluation runs at (progress only; the untrained team's is recorded at iteration 0).
    const evaluate = async (name: string, agents: NativePolicy[], iteration: number, stage: string, at = iteration) => {
        const turn0 = cfg.separateTurn0 ? agents.map(() => base) : undefined;
        const total =
            answersPerRollout(cfg, evalItems.length, false) +
            (turn0 && turn0.some((m, a) => m !== agents[a]) ? evalItems.length * cfg.agents : 0);
        let done = 0;
        const e0 = performance.now();
        const step = (p: number) =>
            progress({ stage, phase: "eval", step: p, total, iteration: at, reward: NaN, accuracy: [] }, p / total);
        step(0);
        const r = await evaluateTeam(task, evalItems, agents, {
            turns: cfg.turns,
            temperature: cfg.sampling.temperature,
            maxTokens: cfg.sampling.maxTokens,
            seed: cfg.seed * 13 + 500_009,
            feedback: cfg.feedback,
            ...(turn0 ? { turn0 } : {}),
            ...(signal ? { signal } : {}),
            onAnswers: (n) => {
                done += n;
                step(done);
            },
        });
        clock.observeEval(performance.now() - e0, done);
        metric({ kind: "eval", stage, name, iteration, ...r });
        log(
            `  eval ${name.padEnd(24)} majority accuracy by turn ${r.majorityAccuracy.map((x) => x.toFixed(3)).join(" / ")}, solo ${mean(r.soloAccuracy).toFixed(3)}` +
                (r.trainedAlone ? `, trained model alone ${mean(r.trainedAlone).toFixed(3)}` : ""),
        );
        return r;
    };

    // Stage 1: the warm start.
    const ctx = {
        contextLength: cfg.model.contextLength,
        layers: cfg.model.layers,
        heads: cfg.model.heads,
        dModel: cfg.model.dModel,
    };
    // A Hugging Face base (model.dir) is saved in the checkpoint only once the warm start has trained it; untrained,
    // it is read again from model.dir (a real model's weights are never copied into every checkpoint).
    const hfBase = cfg.model.dir !== "";
    const base = await (
        ckpt && existsSync(join(ckpt.dir, "base", "config.json"))
            ? loadModel(ckpt.dir, "base", cfg.device)
            : hfBase
              ? NativePolicy.load(cfg.model.dir, {
                    contextLength: cfg.model.contextLength,
                    name: "base",
                    device: cfg.device,
                    dtype: cfg.model.dtype,
                })
              : NativePolicy.create({ ...ctx, seed: cfg.seed + 1, name: "base", device: cfg.device })
    ).catch((e: unknown) => {
        // A new run whose model does not load (a context past its positions, a damaged file) leaves nothing behind.
        if (!o.resume) for (const f of [join(out, "config.json"), metricsFile, tracesFile]) rmSync(f, { force: true });
        if (!o.resume && madeOut) rmSync(out, { recursive: true, force: true });
        throw e;
    });
    const baseOf = (): Record<string, NativePolicy> => (hfBase && cfg.sft.steps === 0 ? {} : { base });
    const adapters: Record<string, number> = {};
    if (!hfBase && state.stage !== "done") {
        // the rates of answers and SFT steps until the job's work measures them (a real model's are too slow to spare)
        const inSft = state.stage === "sft" && cfg.sft.steps > state.step;
        await calibrateClock(clock, cfg, task, base, evalItems, inSft, signal);
        const est = clock.remainingMs(state.stage, state.step);
        if (Number.isFinite(est)) {
            const min = est / 60_000;
            log(
                `estimated duration on this machine: about ${min < 1 ? "1" : Math.round(min)} minute${min < 1.5 ? "" : "s"}` +
                    ` (${Math.round(est / 1000)} s; measured at the start, refined as it runs)`,
            );
            if (min > 15)
                log(
                    `  that is long for a first run: fewer iterations (--iterations), questions per iteration (--set episodesPerIteration=N) ` +
                        `or evaluation questions (--set evalEpisodes=N) shorten it`,
                );
        }
    }
    if (state.stage === "sft") {
        clock.enter("sft");
        log(`sft: ${cfg.sft.steps} steps of ${cfg.sft.batchSize} solutions (${base.parameterCount} parameters)`);
        const every = Math.max(1, Math.floor(cfg.sft.steps / 20));
        for (let s = state.step; s < cfg.sft.steps; s += every) {
            const end = Math.min(cfg.sft.steps, s + every);
            let last = 0;
            const s0 = performance.now();
            await sftWarmStart(base, task, {
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
                ...(signal ? { signal } : {}),
            });
            clock.observeSft(performance.now() - s0, end - s);
            metric({ kind: "sft", step: end, loss: last });
            progress({
                stage: "sft",
                phase: "sft",
                step: end,
                total: cfg.sft.steps,
                iteration: end,
                reward: NaN,
                accuracy: [],
            });
            await save({ base }, "sft", end);
        }
        state.evals.untrained = await evaluate(
            "untrained team",
            [...Array(cfg.agents)].map(() => base),
            0,
            "sft",
            cfg.sft.steps,
        );
        endStage();
        await save(baseOf(), cfg.algo, 0);
    }
    // A Hugging Face base the warm start trained goes to models/base (a Hugging Face directory), and the adapters
    // written to models/ name it as their base_model_name_or_path: they load on what they were trained on.
    const trainedBase = hfBase && cfg.sft.steps > 0 ? resolve(out, "models", "base") : null;
    if (trainedBase && state.stage !== "sft" && !existsSync(join(trainedBase, "config.json")))
        await base.save(trainedBase);
    // Stages 2 and 3: the method, then the control.
    const at =
        state.stage === "done"
            ? stages.length
            : Math.max(
                  0,
                  stages.findIndex((x) => x.name === state.stage),
              );
    for (const [k, st] of stages.entries()) {
        if (at > k) continue;
        const resuming = state.stage === st.name && state.step > 0 && ckpt !== null;
        clock.enter(st.name);
        replay = cfg.replay.enabled
            ? new ReplayBuffer(st.name, cfg.replay.capacity, resuming ? state.replay : null)
            : null;
        const m = await stageModels(
            cfg,
            st.schedule,
            base,
            resuming ? (n) => loadModel(ckpt!.dir, n, cfg.device, base) : undefined,
        );
        if (hfBase)
            for (const [name, model] of Object.entries(m.named)) adapters[`${st.name}/${name}`] = model.parameterCount;
        const label = st.name === "independent" ? "independent control" : `co-trained (${cfg.algo}, ${st.schedule})`;
        log(`${st.name}: ${cfg.iterations} iterations of ${cfg.episodesPerIteration} debates, ${label}`);
        const seedOf = (it: number) => cfg.seed * 1_000_003 + (k + 1) * 100_003 + it;
        const pipe =
            cfg.asyncRollout.maxStaleness > 0
                ? new RolloutPipeline(cfg, task, st.schedule, m, base, seedOf, cfg.iterations, signal)
                : null;
        for (let it = resuming ? state.step : 0; it < cfg.iterations; it++) {
            signal?.throwIfAborted();
            const i0 = performance.now();
            const seed = seedOf(it);
            const items = task.generate(cfg.episodesPerIteration, seed);
            const piped = pipe ? await pipe.run(it) : null;
            const r = piped ?? (await runIteration(cfg, task, items, st.schedule, m, base, it, seed, signal));
            const lag = piped ? { staleness: piped.staleness, policyVersion: piped.policyVersion } : {};
            const reward = mean(r.stats.map((s) => s.reward));
            const failed = r.failed?.map((f) => ({
                question: f.item.question,
                turn: f.turn,
                agent: f.agent,
                error: f.error,
            }));
            if (failed)
                log(
                    `  ${st.name} iteration ${it + 1}: ${failed.length} of ${items.length} episodes failed and were skipped (first: ${failed[0]!.error})`,
                );
            let replayed: Record<string, unknown> = {};
            if (replay && r.rollout) {
                // the buffer takes this iteration's successful episodes; every `every` iterations, the offline phase
                const sc = scheduled(cfg, st.schedule, m, it);
                const ok = replay.add(r.rollout, sc.trainTurn, (a) => sc.trainable[a] !== null, it + 1);
                const phase =
                    (it + 1) % cfg.replay.every === 0
                        ? await replay.offline(sc.trainable, {
                              steps: cfg.replay.steps,
                              batchSize: cfg.replay.batchSize,
                              lr: cfg.replay.lr,
                              seed: seed * 7 + 3,
                              ...(signal ? { signal } : {}),
                          })
                        : undefined;
                replayed = {
                    replay: {
                        successful: ok,
                        size: replay.size,
                        ...(phase !== undefined ? { offlineLoss: phase } : {}),
                    },
                };
            }
            metric({
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
            appendFileSync(
                tracesFile,
                JSON.stringify({ stage: st.name, iteration: it + 1, ...lag, ...r.trace }) + "\n",
            );
            clock.observeIteration(st.name, performance.now() - i0);
            progress({
                stage: st.name,
                phase: "train",
                step: it + 1,
                total: cfg.iterations,
                iteration: it + 1,
                reward,
                accuracy: r.train.majorityAccuracy,
            });
            if ((it + 1) % cfg.evalEvery === 0 && it + 1 < cfg.iterations)
                await evaluate(label, m.agents, it + 1, st.name);
            await save({ ...baseOf(), ...m.named }, st.name, it + 1);
        }
        await pipe?.close();
        state.evals[st.name] = await evaluate(label, m.agents, cfg.iterations, st.name);
        for (const [name, model] of Object.entries(m.named)) {
            await model.save(join(out, "models", `${st.name}-${name}`), trainedBase ? { baseModel: trainedBase } : {});
            if (!task.prompt && !name.startsWith("critic"))
                writeFileSync(
                    join(out, "models", `${st.name}-${name}`, "maporl-task.json"),
                    JSON.stringify(taskProtocol(cfg), null, 2) + "\n",
                );
        }
        endStage();
        const next = stages[k + 1]?.name ?? "done";
        await save(baseOf(), next, 0);
        for (const model of new Set(Object.values(m.named))) await model.dispose();
        if (hfBase) for (const name of base.adapters) await base.deleteAdapter(name); // the next stage starts from the base
    }
    const summary = summarize(cfg, state.evals);
    summary.stages = names.flatMap((n) => (clock.timings[n] ? [clock.timings[n]] : []));
    if (hfBase)
        summary.memory = {
            peakRssBytes: process.resourceUsage().maxRSS * 1024,
            baseParameters: base.parameterCount,
            adapters,
        };
    replaceFileDurable(join(out, "summary.json"), JSON.stringify(summary, null, 2));
    await writeReport(out, summary);
    await base.dispose();
    return summary;
}
