// summary.ts: the job's before/after table (summary.json, the printed table) and what a trained compact model
// expects (maporl-task.json).
import type { TrainConfig } from "./config.js";
import type { EvalResult } from "./evaluate.js";
import type { TrainSummary } from "./types.js";
import { turnPrompt } from "../trainers/rollout.js";

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

export function summarize(cfg: TrainConfig, evals: Record<string, EvalResult>): TrainSummary {
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
