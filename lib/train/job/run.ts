// run.ts: one run of the main job (job.ts drives it through the stages): its directory and resolved config, the state
// the checkpoints record, the two logs, the clock and the progress it reports, and the held-out evaluations. A run is
// started (JobRun.start: a new directory) or opened (JobRun.resume: a checkpoint verified against the logs and the
// inputs as they are now).
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
import { setMaxListeners } from "node:events";
import { join } from "node:path";

import { backend, setMatmulPrecision } from "../../backend.js";
import { MaporlError } from "../../errors.js";
import type { NativePolicy } from "../../model/nativePolicy.js";
import { fsyncFile, writeFileDurable } from "../../durable.js";
import { prefixSha256, readCheckpoint, writeCheckpoint } from "./checkpoint.js";
import { answersPerRollout, JobClock } from "./clock.js";
import { agentSampling } from "./agentSettings.js";
import { resolveConfig, type TrainConfig } from "./config.js";
import { evaluateTeam, type EvalResult } from "./evaluate.js";
import { checkResumeInputs, digestModelDir } from "./resume.js";
import { mean } from "./summary.js";
import type { JobProgress, JobState, TrainJobOptions } from "./types.js";
import type { ReplayBuffer } from "../trainers/replay.js";
import { arithDebateTask, splitSumTask, type Task } from "../tasks/tasks.js";
import { gsm8kTask } from "../tasks/gsm8k.js";
import { lookupTask } from "../tasks/lookup.js";

export function makeTask(cfg: TrainConfig): Task {
    if (cfg.task === "gsm8k") return gsm8kTask({ agents: cfg.agents, dataDir: cfg.taskOptions.data });
    if (cfg.task === "tool-lookup")
        return lookupTask({
            keyUse: cfg.taskOptions.keyUse,
            padUse: cfg.taskOptions.padUse,
            hops: cfg.taskOptions.hops,
        });
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

/** A stage after the warm start: the method, or the independent control. */
export interface JobStage {
    name: string;
    schedule: TrainConfig["schedule"];
}

type Checkpoint = NonNullable<ReturnType<typeof readCheckpoint>>;

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

export class JobRun {
    readonly metricsFile: string;
    readonly tracesFile: string;
    readonly log: (line: string) => void;
    readonly signal: AbortSignal | undefined;
    readonly task: Task;
    readonly stages: JobStage[];
    /** "sft" and the stages, in order. */
    readonly names: string[];
    readonly clock: JobClock;
    readonly evalItems: ReturnType<Task["generate"]>;
    /** The base model, once loaded (evaluations answer turn 0 with it when config.separateTurn0). */
    base: NativePolicy | null = null;
    /** The current stage's replay buffer (config.replay), recorded with every checkpoint. */
    replay: ReplayBuffer | null = null;
    private readonly t0 = performance.now();
    private readonly priorMs: number;
    private share = 0;

    private constructor(
        readonly o: TrainJobOptions,
        readonly cfg: TrainConfig,
        public state: JobState,
        readonly ckpt: Checkpoint | null,
        /** Whether this run made its directory (a new run whose model does not load removes it). */
        readonly madeOut: boolean,
    ) {
        this.metricsFile = join(o.out, "metrics.jsonl");
        this.tracesFile = join(o.out, "traces.jsonl");
        this.log = o.log ?? (() => undefined);
        // (a signal of its own: every request, tool call and step in flight listens to it, hundreds at once)
        this.signal = o.signal ? AbortSignal.any([o.signal]) : undefined;
        if (this.signal) setMaxListeners(0, this.signal);
        this.task = makeTask(cfg);
        this.stages = [{ name: cfg.algo, schedule: cfg.schedule }];
        if (cfg.controls && cfg.schedule !== "independent")
            this.stages.push({ name: "independent", schedule: "independent" });
        this.names = ["sft", ...this.stages.map((x) => x.name)];
        this.clock = new JobClock(
            cfg,
            this.stages.map((x) => x.name),
            state.timings,
        );
        // The job's share done counts the time earlier processes of a resumed run spent, and never goes back (a rate
        // measured anew can lengthen the time left).
        this.priorMs = Object.values(state.timings ?? {}).reduce((a, t) => a + t.durationMs, 0);
        this.evalItems = this.task.heldOut
            ? this.task.heldOut(cfg.evalEpisodes)
            : this.task.generate(cfg.evalEpisodes, cfg.seed * 7 + 999_983);
    }

    /** A new run in o.out: config.json (resolved) and empty logs. */
    static start(o: TrainJobOptions): JobRun {
        const cfg = resolveConfig(o.config ?? {});
        requireDevice(cfg);
        setMatmulPrecision(cfg.matmulPrecision);
        if (existsSync(join(o.out, "config.json")))
            throw new Error(`train: ${o.out} already holds a run; use --resume ${o.out} or another --out`);
        const madeOut = !existsSync(o.out);
        mkdirSync(o.out, { recursive: true });
        writeFileDurable(join(o.out, "config.json"), JSON.stringify(cfg, null, 2), true);
        writeFileSync(join(o.out, "metrics.jsonl"), "");
        writeFileSync(join(o.out, "traces.jsonl"), "");
        const state: JobState = {
            version: 1,
            stage: "sft",
            step: 0,
            evals: {},
            metricsBytes: 0,
            tracesBytes: 0,
            config: cfg,
            ...(cfg.model.dir !== "" ? { modelFiles: digestModelDir(cfg.model.dir) } : {}),
        };
        return new JobRun(o, cfg, state, null, madeOut);
    }

    /** The run in o.out from its newest checkpoint that verifies, the logs cut back to what it records. */
    static resume(o: TrainJobOptions): JobRun {
        const out = o.out,
            log = o.log ?? (() => undefined);
        if (!existsSync(join(out, "config.json")))
            throw new Error(`train: --resume ${out}: no config.json there (not a run directory?)`);
        const cfg = resolveConfig(JSON.parse(readFileSync(join(out, "config.json"), "utf8")), `${out}/config.json`);
        requireDevice(cfg);
        setMatmulPrecision(cfg.matmulPrecision);
        const ckpt = readCheckpoint(out); // throws, naming the files, when checkpoints exist and none verifies
        for (const why of ckpt?.skipped ?? [])
            log(`the newest checkpoint is damaged (${why}); resuming from ${ckpt?.dir}`);
        if (!ckpt) log(`${out} has no checkpoint yet: starting the run over`);
        let state: JobState = ckpt
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
            [join(out, "metrics.jsonl"), state.metricsBytes, state.metricsSha256],
            [join(out, "traces.jsonl"), state.tracesBytes, state.tracesSha256],
        ] as const) {
            const have = size(f);
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
        return new JobRun(o, cfg, state, ckpt, false);
    }

    /** Removes what a new run wrote (its model did not load); a resumed run keeps everything. */
    discardNew(): void {
        if (this.o.resume) return;
        for (const f of [join(this.o.out, "config.json"), this.metricsFile, this.tracesFile])
            rmSync(f, { force: true });
        if (this.madeOut) rmSync(this.o.out, { recursive: true, force: true });
    }

    /** The index of the first stage (after the warm start) still to run; stages.length when done. */
    firstStage(): number {
        if (this.state.stage === "done") return this.stages.length;
        return Math.max(
            0,
            this.stages.findIndex((x) => x.name === this.state.stage),
        );
    }

    metric(x: object): void {
        appendFileSync(this.metricsFile, JSON.stringify(x) + "\n");
    }

    trace(x: object): void {
        appendFileSync(this.tracesFile, JSON.stringify(x) + "\n");
    }

    /** A checkpoint of `models` at (stage, step), covering the logs as they are (on disk first). */
    async save(models: Record<string, NativePolicy>, stage: string, step: number): Promise<void> {
        fsyncFile(this.metricsFile);
        fsyncFile(this.tracesFile);
        const metricsBytes = size(this.metricsFile),
            tracesBytes = size(this.tracesFile);
        this.clock.update();
        this.state = {
            ...this.state,
            stage,
            step,
            timings: this.clock.timings,
            ...(this.cfg.replay.enabled ? { replay: this.replay?.toJSON() ?? null } : {}),
            metricsBytes,
            tracesBytes,
            metricsSha256: prefixSha256(this.metricsFile, metricsBytes),
            tracesSha256: prefixSha256(this.tracesFile, tracesBytes),
        };
        await writeCheckpoint(this.o.out, models, this.state);
    }

    progress(p: Omit<JobProgress, "elapsedMs" | "job">, inEval: number | null = null): void {
        const elapsedMs = performance.now() - this.t0,
            etaMs = this.clock.remainingMs(p.stage, p.iteration, inEval);
        if (Number.isFinite(etaMs))
            this.share = Math.max(
                this.share,
                (this.priorMs + elapsedMs) / Math.max(1, this.priorMs + elapsedMs + etaMs),
            );
        this.o.onProgress?.({
            ...p,
            elapsedMs,
            job: { stages: this.names, etaMs, priorMs: this.priorMs, share: this.share },
        });
    }

    endStage(): void {
        const t = this.clock.finish();
        this.metric({ kind: "timing", ...t });
        this.log(`  ${t.stage}: ${(t.durationMs / 1000).toFixed(1)} s`);
    }

    /** The team on the held-out items, logged and recorded. `at`: the step of the stage it runs at (progress only). */
    async evaluate(
        name: string,
        agents: NativePolicy[],
        iteration: number,
        stage: string,
        at = iteration,
    ): Promise<EvalResult> {
        const cfg = this.cfg,
            base = this.base;
        const turn0 = cfg.separateTurn0 && base ? agents.map(() => base) : undefined;
        const total =
            answersPerRollout(cfg, this.evalItems.length, false) +
            (turn0 && turn0.some((m, a) => m !== agents[a]) ? this.evalItems.length * cfg.agents : 0);
        let done = 0;
        const e0 = performance.now();
        const step = (p: number) =>
            this.progress(
                { stage, phase: "eval", step: p, total, iteration: at, reward: NaN, accuracy: [] },
                p / total,
            );
        step(0);
        const r = await evaluateTeam(this.task, this.evalItems, agents, {
            turns: cfg.turns,
            temperature: cfg.sampling.temperature,
            maxTokens: cfg.sampling.maxTokens,
            seed: cfg.seed * 13 + 500_009,
            feedback: cfg.feedback,
            ...(turn0 ? { turn0 } : {}),
            ...(this.signal ? { signal: this.signal } : {}),
            // each agent answers with its own sampling settings, stop strings included, as in training
            ...(cfg.agentSettings.length ? { agentSampling: agentSampling(cfg, cfg.agents) } : {}),
            onAnswers: (n) => {
                done += n;
                step(done);
            },
        });
        this.clock.observeEval(performance.now() - e0, done);
        this.metric({ kind: "eval", stage, name, iteration, ...r });
        this.log(
            `  eval ${name.padEnd(24)} majority accuracy by turn ${r.majorityAccuracy.map((x) => x.toFixed(3)).join(" / ")}, solo ${mean(r.soloAccuracy).toFixed(3)}` +
                (r.trainedAlone ? `, trained model alone ${mean(r.trainedAlone).toFixed(3)}` : ""),
        );
        return r;
    }
}
