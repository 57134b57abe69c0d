// types.ts: the job's options, progress, summary and checkpointed state (job.ts runs it; report.ts, summary.ts and
// resume.ts read them).
import type { StageTiming } from "./clock.js";
import type { TrainConfig } from "./config.js";
import type { EvalResult } from "./evaluate.js";
import type { ReplayState } from "../trainers/replay.js";

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
    /** The whole job: its stages in order; the time its work left should take at the rates measured so far (NaN until
     * one is known); the time earlier processes of a resumed run spent on it; and the share of it done, (prior +
     * elapsed) / (prior + elapsed + eta), never lower than a share reported before (0 until an ETA is known). */
    job: { stages: string[]; etaMs: number; priorMs: number; share: number };
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

/** @internal checkpoint/state.json of a run. */
export interface JobState {
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
    /** An asynchronous stage's pipeline at this checkpoint (pipeline.ts; null or absent: none to restore). */
    pipeline?: PipelineState | null;
}

/** What a checkpoint records of an in-process rollout pipeline (lib/train/trainers/pipeline.ts): the iteration it
 * started at, its bound, and the versions whose snapshots the checkpoint holds (models `pipeline-v<version>-<name>`). */
export interface PipelineState {
    start: number;
    maxStaleness: number;
    versions: number[];
}
