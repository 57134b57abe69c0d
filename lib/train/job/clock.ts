// clock.ts: how long a training job takes. Two parts:
//   - stage timings: when each stage (sft, the method, the control) started and ended and how long it ran, kept in the
//     checkpoint's state so that a resumed stage adds its time to what ran before the interruption (durationMs counts
//     the time a process worked on the stage; endedAt - startedAt includes the time the run was stopped);
//   - the whole job's ETA: the work left (SFT steps, iterations of every stage still to run, held-out evaluations)
//     times the rates measured so far: seconds per SFT step, per generated answer in an evaluation, per iteration of
//     each stage. An iteration's rate before any iteration ran is the evaluation's rate for the answers an iteration
//     generates times 1 + TRAINED_AGENT_OVER_ROLLOUT per agent it trains (training adds scoring, backward passes and
//     the critic), and before any evaluation ran it comes from the calibration at the start (calibrate.ts).
import type { TrainConfig } from "./config.js";

/** When a stage ran: ISO times, and the milliseconds processes spent on it. */
export interface StageTiming {
    stage: string;
    startedAt: string;
    endedAt?: string;
    durationMs: number;
}

/** Each agent an iteration trains adds about this many times the generation of the iteration's answers (its PPO
 * updates of the actor and critic over its share of them). Measured on 2 cores, main job (MAPoRL, 3 agents, 3
 * turns), against the calibrated rollout (161 ms): an iteration of the joint stage (3 agents trained) took 0.81 s,
 * 5.0 times it, one of the independent control (agent 0 trained) 0.42 s, 2.6 times. */
export const TRAINED_AGENT_OVER_ROLLOUT = 1.5;

/** The agents a stage trains in an iteration (stage.ts's schedules; the control trains agent 0). */
export function trainedAgents(cfg: TrainConfig, stage: string): number {
    const schedule = stage === "independent" ? "independent" : cfg.schedule;
    if (schedule === "independent") return 1;
    if (schedule === "alternating") return Math.max(1, cfg.agents - 1);
    return cfg.agents;
}

/** The answers one rollout of `episodes` questions generates under `cfg` (MAGRPO: G per agent and state, aligned). */
export function answersPerRollout(cfg: TrainConfig, episodes: number, training: boolean): number {
    if (!training || cfg.algo !== "magrpo") return episodes * cfg.agents * cfg.turns;
    const G = cfg.magrpo.generations,
        perLevel = cfg.magrpo.joint === "cross" ? G ** cfg.agents : G;
    let states = 1,
        answers = 0;
    for (let t = 0; t < cfg.turns; t++) {
        answers += states * G * cfg.agents;
        states *= perLevel;
    }
    return episodes * answers;
}

export class JobClock {
    private sftStepMs = NaN;
    private answerMs = NaN;
    private calibratedAnswerMs = NaN;
    private readonly iterationMs = new Map<string, { ms: number; n: number }>();
    readonly timings: Record<string, StageTiming>;
    private segment: { stage: string; t0: number; base: number } | null = null;

    constructor(
        private readonly cfg: TrainConfig,
        private readonly stages: string[],
        timings: Record<string, StageTiming> = {},
    ) {
        this.timings = structuredClone(timings);
    }

    /** Marks `stage` as the one this process works on now (its first start is recorded once). */
    enter(stage: string): void {
        const t = (this.timings[stage] ??= { stage, startedAt: new Date().toISOString(), durationMs: 0 });
        this.segment = { stage, t0: performance.now(), base: t.durationMs };
    }

    /** Brings the current stage's duration up to now (called before every checkpoint). */
    update(): void {
        if (!this.segment) return;
        this.timings[this.segment.stage]!.durationMs = Math.round(
            this.segment.base + performance.now() - this.segment.t0,
        );
    }

    /** Ends the current stage; returns its timing. */
    finish(): StageTiming {
        this.update();
        const t = this.timings[this.segment!.stage]!;
        t.endedAt = new Date().toISOString();
        this.segment = null;
        return t;
    }

    calibrate(ms: number, answers: number): void {
        this.calibratedAnswerMs = ms / Math.max(1, answers);
    }
    observeSft(ms: number, steps: number): void {
        if (steps > 0) this.sftStepMs = ms / steps;
    }
    observeEval(ms: number, answers: number): void {
        if (answers > 0) this.answerMs = ms / answers;
    }
    observeIteration(stage: string, ms: number): void {
        // the stage's mean so far: single iterations vary a lot
        const prev = this.iterationMs.get(stage) ?? { ms: 0, n: 0 };
        this.iterationMs.set(stage, { ms: prev.ms + ms, n: prev.n + 1 });
    }

    private evalMs(): number {
        const a = Number.isFinite(this.answerMs) ? this.answerMs : this.calibratedAnswerMs;
        const t0 = this.cfg.separateTurn0 ? this.cfg.evalEpisodes * this.cfg.agents : 0; // "trained alone" rollout
        return a * (answersPerRollout(this.cfg, this.cfg.evalEpisodes, false) + t0);
    }

    private iterMs(stage: string): number {
        const own = this.iterationMs.get(stage);
        if (own !== undefined) return own.ms / own.n;
        const weight = (s: string) => 1 + TRAINED_AGENT_OVER_ROLLOUT * trainedAgents(this.cfg, s);
        // Another stage's measured rate, scaled by the agents each trains (the control trains one).
        const [other, any] = [...this.iterationMs.entries()][0] ?? [];
        if (other !== undefined && any !== undefined) return ((any.ms / any.n) * weight(stage)) / weight(other);
        const a = Number.isFinite(this.answerMs) ? this.answerMs : this.calibratedAnswerMs;
        return a * answersPerRollout(this.cfg, this.cfg.episodesPerIteration, true) * weight(stage);
    }

    /**
     * Milliseconds of work left from a position: in `stage` with `step` steps (SFT steps or iterations) done, and
     * `inEval` the fraction done of the held-out evaluation running at that step (null outside one: an evaluation due at
     * `step` is then still to come). NaN while a needed rate is still unknown.
     */
    remainingMs(stage: string, step: number, inEval: number | null = null): number {
        const c = this.cfg,
            order = ["sft", ...this.stages],
            evalMs = this.evalMs();
        const at = Math.max(0, order.indexOf(stage));
        const current = inEval === null ? 0 : (1 - inEval) * evalMs;
        let ms = 0;
        for (let k = at; k < order.length; k++) {
            const s = order[k]!,
                done = k === at ? step : 0;
            if (s === "sft") {
                ms += Math.max(0, c.sft.steps - done) * (c.sft.steps > done ? this.sftStepMs : 0);
                ms += k === at && inEval !== null ? current : evalMs; // the untrained team's evaluation
                continue;
            }
            let evals = 0; // periodic evaluations still to start, and the final one
            for (let it = Math.max(1, inEval === null || k !== at ? done : done + 1); it < c.iterations; it++)
                if (it % c.evalEvery === 0) evals += 1;
            if (!(k === at && inEval !== null && done >= c.iterations)) evals += 1;
            ms += (c.iterations - done) * this.iterMs(s) + evals * evalMs + (k === at && inEval !== null ? current : 0);
        }
        return ms;
    }
}
