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
    readdirSync,
    readFileSync,
    statSync,
    truncateSync,
    writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";

import { backend, setMatmulPrecision } from "../../backend.js";
import { MaporlError } from "../../errors.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import { fsyncFile, replaceFileDurable, writeFileDurable } from "../../durable.js";
import { sha256File } from "../../files.js";
import { loadModel, prefixSha256, readCheckpoint, writeCheckpoint } from "./checkpoint.js";
import { answersPerRollout, JobClock, type StageTiming } from "./clock.js";
import { resolveConfig, type TrainConfig } from "./config.js";
import { evaluateTeam, type EvalResult } from "./evaluate.js";
import { writeReport } from "./report.js";
import { sftWarmStart } from "../trainers/sft.js";
import { rolloutTeam, turnPrompt } from "../trainers/rollout.js";
import { ReplayBuffer, type ReplayState } from "../trainers/replay.js";
import { runIteration, scheduled, stageModels } from "../trainers/stage.js";
import { arithDebateTask, splitSumTask, type Task } from "../tasks/tasks.js";
import { gsm8kTask } from "../tasks/gsm8k.js";
import { lookupTask } from "../tasks/lookup.js";

export interface TrainJobOptions {
    /** A partial config (validated and completed with the defaults). Ignored with `resume`. */
    config?: unknown;
    /** The run directory. */
    out: string;
    /** Continue the run in `out` from its last checkpoint. */
    resume?: boolean;
    /** With resume: config keys (dotted, or a prefix such as "schedule") whose change since the run started is
     * accepted and logged; any other change is an error naming it. "model.dir" also accepts changed base weights. */
    allowConfigChange?: string[];
    signal?: AbortSignal;
    /** Progress lines (the CLI draws a bar from `onProgress`). Defaults to none. */
    log?: (line: string) => void;
    onProgress?: (p: JobProgress) => void;
}

/** Where a job stands: the step of its stage (SFT steps, iterations, or the answers of a held-out evaluation). */
export interface JobProgress {
    stage: string;
    /** 'eval': `step` / `total` count the answers of the evaluation running at iteration `iteration`. */
    phase: "sft" | "train" | "eval";
    step: number;
    total: number;
    /** The stage's iteration (or SFT step) the evaluation runs at; equals `step` outside evaluations. */
    iteration: number;
    reward: number;
    accuracy: number[];
    /** Since this process started the job. */
    elapsedMs: number;
    /** The whole job's stages in order, and the time its work left should take at the rates measured so far
     * (NaN until one is known). */
    job: { stages: string[]; etaMs: number };
}

export interface TrainSummary {
    config: TrainConfig;
    rows: { name: string; majorityAccuracy: number[]; gain: number; soloAccuracy: number; trainedAlone: number }[];
    evals: Record<string, EvalResult>;
    /** When each stage ran (a resumed stage counts the time of every process that worked on it). */
    stages?: StageTiming[];
    /** The process's memory: its peak RSS, and on a Hugging Face base (model.dir) the base's parameters and the
     * trainable parameters of every adapter the job held (agents and critics share the one base). */
    memory?: { peakRssBytes: number; baseParameters: number; adapters: Record<string, number> };
}

interface JobState {
    version: 1;
    stage: string;
    step: number;
    evals: Record<string, EvalResult>;
    metricsBytes: number;
    tracesBytes: number;
    /** SHA-256 of the logs' first metricsBytes / tracesBytes bytes (checked on resume; absent in older runs). */
    metricsSha256?: string;
    tracesSha256?: string;
    /** Stage timings so far (clock.ts). */
    timings?: Record<string, StageTiming>;
    /** The replay buffer of the current stage (replay.ts; config replay.enabled). */
    replay?: ReplayState | null;
    /** The resolved config the run started with (a resume compares config.json with it; absent in older runs). */
    config?: TrainConfig;
    /** SHA-256 of every file of model.dir when the run started (a resume compares; absent without model.dir). */
    modelFiles?: Record<string, string>;
}

/** SHA-256 of every regular file directly in model directory `dir` (weights, config, tokenizer), by name. */
function digestModelDir(dir: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const f of readdirSync(dir).sort()) if (statSync(join(dir, f)).isFile()) out[f] = sha256File(join(dir, f));
    return out;
}

/** The dotted keys whose values differ between two configs (JSON values compared). */
function configChanges(a: unknown, b: unknown, prefix = ""): string[] {
    if (
        a !== null &&
        b !== null &&
        typeof a === "object" &&
        typeof b === "object" &&
        !Array.isArray(a) &&
        !Array.isArray(b)
    ) {
        const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
        return keys.flatMap((k) =>
            configChanges(
                (a as Record<string, unknown>)[k],
                (b as Record<string, unknown>)[k],
                prefix ? `${prefix}.${k}` : k,
            ),
        );
    }
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}

/** A resumed run's config and base model against what the run started with: an error naming every change that
 * `allowed` (config keys, or a key's prefix) does not accept; the accepted changes are logged. Returns the base
 * model's digests now (model.dir), for the checkpoints to come. */
function checkResumeInputs(
    out: string,
    state: JobState,
    cfg: TrainConfig,
    allowed: readonly string[],
    log: (l: string) => void,
): Record<string, string> | undefined {
    const get = (c: unknown, k: string) =>
        k.split(".").reduce<unknown>((x, p) => (x as Record<string, unknown> | undefined)?.[p], c);
    for (const k of allowed)
        if (get(cfg, k) === undefined && get(state.config, k) === undefined)
            throw new RangeError(`train: --allow-config-change ${k}: not a config key`);
    const digests = () => (cfg.model.dir !== "" ? digestModelDir(cfg.model.dir) : undefined);
    if (state.config === undefined) {
        log(
            `train: --resume ${out}: this checkpoint records no config (written by an older version): config.json and model.dir are not compared`,
        );
        return digests();
    }
    const changes = configChanges(state.config, cfg);
    const show = (k: string) => `${k} ${JSON.stringify(get(state.config, k))} -> ${JSON.stringify(get(cfg, k))}`;
    const ok = (k: string) => allowed.some((a) => k === a || k.startsWith(`${a}.`));
    const refused = changes.filter((k) => !ok(k));
    if (refused.length > 0)
        throw new Error(
            `train: --resume ${out}: config.json changed since the run started (${refused.map(show).join(", ")}); a resumed run continues the run it ` +
                `was, so this is refused. To accept a change on purpose: --allow-config-change ${refused.join(",")}`,
        );
    for (const k of changes) log(`train: --resume ${out}: config change accepted (--allow-config-change): ${show(k)}`);
    const now = digests();
    if (state.modelFiles !== undefined && now !== undefined) {
        const was = state.modelFiles;
        const diff = [...new Set([...Object.keys(was), ...Object.keys(now)])]
            .sort()
            .filter((f) => was[f] !== now[f])
            .map((f) => `${f} ${now[f] === undefined ? "removed" : was[f] === undefined ? "added" : "modified"}`);
        if (diff.length > 0 && !ok("model.dir"))
            throw new Error(
                `train: --resume ${out}: the base model in ${cfg.model.dir} changed since the run started (${diff.join(", ")}); refusing to resume ` +
                    "(--allow-config-change model.dir accepts it)",
            );
        if (diff.length > 0)
            log(
                `train: --resume ${out}: base model change accepted (--allow-config-change model.dir): ${diff.join(", ")}`,
            );
    }
    return now;
}

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
        ckpt: ReturnType<typeof readCheckpoint> = null;
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
    const progress = (p: Omit<JobProgress, "elapsedMs" | "job">, inEval: number | null = null) =>
        o.onProgress?.({
            ...p,
            elapsedMs: performance.now() - t0,
            job: { stages: names, etaMs: clock.remainingMs(p.stage, p.iteration, inEval) },
        });
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
    const base =
        ckpt && existsSync(join(ckpt.dir, "base", "config.json"))
            ? await loadModel(ckpt.dir, "base", cfg.device)
            : hfBase
              ? await NativePolicy.load(cfg.model.dir, {
                    contextLength: cfg.model.contextLength,
                    name: "base",
                    device: cfg.device,
                    dtype: cfg.model.dtype,
                })
              : await NativePolicy.create({ ...ctx, seed: cfg.seed + 1, name: "base", device: cfg.device });
    const baseOf = (): Record<string, NativePolicy> => (hfBase && cfg.sft.steps === 0 ? {} : { base });
    const adapters: Record<string, number> = {};
    if (!hfBase && state.stage !== "done") {
        // the rate of answers until an evaluation measures it (a real model's answers are too slow to spare)
        const c0 = performance.now(),
            few = evalItems.slice(0, 2);
        await rolloutTeam(
            task,
            few,
            [...Array(cfg.agents)].map(() => base),
            {
                turns: cfg.turns,
                temperature: cfg.sampling.temperature,
                maxTokens: cfg.sampling.maxTokens,
                seed: 1,
                ...(signal ? { signal } : {}),
            },
        );
        clock.calibrate(performance.now() - c0, answersPerRollout(cfg, few.length, false));
        const inSft = state.stage === "sft" && cfg.sft.steps > state.step; // its rate is unknown until a step has run
        const est = clock.remainingMs(state.stage, inSft ? cfg.sft.steps : state.step);
        if (Number.isFinite(est)) {
            const min = est / 60_000;
            log(
                `estimated duration on this machine: about ${min < 1 ? "1" : Math.round(min)} minute${min < 1.5 ? "" : "s"}` +
                    `${inSft ? ` after the warm start's ${cfg.sft.steps - state.step} steps` : ""} (refined as it runs)`,
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
        for (let it = resuming ? state.step : 0; it < cfg.iterations; it++) {
            signal?.throwIfAborted();
            const i0 = performance.now();
            const seed = cfg.seed * 1_000_003 + (k + 1) * 100_003 + it;
            const items = task.generate(cfg.episodesPerIteration, seed);
            const r = await runIteration(cfg, task, items, st.schedule, m, base, it, seed, signal);
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
                ...(failed ? { failed } : {}),
                ...replayed,
            });
            appendFileSync(tracesFile, JSON.stringify({ stage: st.name, iteration: it + 1, ...r.trace }) + "\n");
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

/** What a model trained on a compact task expects (written beside it in models/; `maporl serve` prints it). */
export function taskProtocol(cfg: TrainConfig): Record<string, unknown> {
    const example = cfg.task === "split-sum" ? "a=7" : "7+2*3-4";
    return {
        task: cfg.task,
        protocol: "compact",
        agents: cfg.agents,
        turns: cfg.turns,
        feedback: cfg.feedback,
        example: turnPrompt(example, 0, cfg.agents, null, cfg.feedback ? "empty" : undefined),
        answer: "<working>;<answer in 3 digits>, e.g. 2*3=6,7+6=13,13-4=9;009",
        debate:
            `new Debate({ agents, turns: ${cfg.turns}, ...compactDebate({ agents: ${cfg.agents}, feedback: ${cfg.feedback} }), verifier, ` +
            `sampling: { temperature: 0, maxTokens: ${cfg.sampling.maxTokens} } })`,
    };
}

/** The mean (NaN for none): the job's tables and the regression gate's metrics read it alike. */
export function mean(xs: number[]): number {
    return xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN;
}

function summarize(cfg: TrainConfig, evals: Record<string, EvalResult>): TrainSummary {
    const names: [string, string][] = [
        ["untrained", "untrained team"],
        [cfg.algo, `team co-trained by ${cfg.algo}`],
        ["independent", "independent control"],
    ];
    const rows = names
        .filter(([k]) => evals[k])
        .map(([k, name]) => {
            const e = evals[k]!;
            return {
                name,
                majorityAccuracy: e.majorityAccuracy,
                gain: e.gain,
                soloAccuracy: mean(e.soloAccuracy),
                trainedAlone: e.trainedAlone ? mean(e.trainedAlone) : mean(e.soloAccuracy),
            };
        });
    return { config: cfg, rows, evals };
}

/** The before/after table as text. */
export function formatSummary(s: TrainSummary): string {
    const T = s.config.turns;
    const head = [
        "team",
        ...Array.from({ length: T }, (_, t) => `turn ${t + 1}`),
        `gain 1->${T}`,
        "solo",
        "trained alone",
    ];
    const body = s.rows.map((r) => [
        r.name,
        ...r.majorityAccuracy.map((x) => x.toFixed(3)),
        (r.gain >= 0 ? "+" : "") + r.gain.toFixed(3),
        r.soloAccuracy.toFixed(3),
        r.trainedAlone.toFixed(3),
    ]);
    const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
    const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ");
    const out = [line(head), line(w.map((n) => "-".repeat(n))), ...body.map(line)];
    if (s.stages?.length) {
        const f = (ms: number) =>
            ms >= 60_000
                ? `${Math.floor(ms / 60_000)}m${String(Math.round(ms / 1000) % 60).padStart(2, "0")}s`
                : `${(ms / 1000).toFixed(1)} s`;
        const total = s.stages.reduce((x, t) => x + t.durationMs, 0);
        out.push("", `time: ${s.stages.map((t) => `${t.stage} ${f(t.durationMs)}`).join(", ")} (${f(total)} in all)`);
    }
    if (s.memory) {
        const n = Object.values(s.memory.adapters),
            sum = n.reduce((x, y) => x + y, 0);
        out.push(
            "",
            `memory: peak RSS ${(s.memory.peakRssBytes / 2 ** 30).toFixed(2)} GiB; one base of ${(s.memory.baseParameters / 1e6).toFixed(1)}M parameters ` +
                `shared by ${n.length} LoRA adapters (agents and critics, ${(sum / 1e6).toFixed(2)}M trainable parameters in all)`,
        );
    }
    return out.join("\n");
}
