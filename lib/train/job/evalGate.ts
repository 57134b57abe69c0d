// evalGate.ts: the evaluation a team needs before a checkpoint ships.
//   - a scenario suite: a directory with suite.json (the task and how to run it) and scenarios.jsonl (fixed items with
//     their golden answers, scored by the task's verifier); makeSuite writes one from a task's held-out items;
//   - a team: the agents of a training run directory (models/<stage>-actor-N, the warm-started base for turn 0 when
//     the run used a separate turn-0 model), with any agent replaced by another checkpoint (`replace`);
//   - the regression gate: the suite on a baseline team and on a candidate team, compared on one metric; it fails
//     when the candidate falls more than `threshold` below the baseline (`maporl eval` exits 1 naming the metric);
//   - cross-play: every trained agent with partners it did not train with; the drop from self-play is "chemistry".
// Every evaluation draws with the suite's seed, so the same team on the same suite gives the same figures.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { NativePolicy } from "../../model/nativePolicy.js";
import { resolveConfig, type TrainConfig } from "./config.js";
import { evaluateTeam, type EvalResult } from "./evaluate.js";
import { makeTask } from "./job.js";
import { mean } from "./summary.js";
import type { TaskItem } from "../tasks/tasks.js";

export interface SuiteConfig {
    /** The training config the scenarios belong to (task, agents, turns, feedback; resolved like a run's). */
    config: Record<string, unknown>;
    /** Sampling of the evaluation and its seed. */
    temperature: number;
    maxTokens: number;
    seed: number;
}

export interface Suite extends SuiteConfig {
    dir: string;
    items: TaskItem[];
    resolved: TrainConfig;
}

/** Writes a suite: `items` of the run config's task (its held-out split when it has one), with golden answers. */
export function makeSuite(
    dir: string,
    o: {
        config?: Record<string, unknown>;
        items?: number;
        seed?: number;
        temperature?: number;
        maxTokens?: number;
    } = {},
): Suite {
    const resolved = resolveConfig(o.config ?? {}, "makeSuite: config");
    const task = makeTask(resolved),
        n = o.items ?? 100,
        seed = o.seed ?? 4242;
    if (!Number.isInteger(n) || n < 1)
        throw new RangeError(`makeSuite: items: expected an integer >= 1, got ${String(n)}`);
    const items = task.heldOut ? task.heldOut(n) : task.generate(n, seed * 7 + 999_983);
    const cfg: SuiteConfig = {
        config: o.config ?? {},
        temperature: o.temperature ?? resolved.sampling.temperature,
        maxTokens: o.maxTokens ?? resolved.sampling.maxTokens,
        seed,
    };
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "suite.json"), JSON.stringify(cfg, null, 2) + "\n");
    writeFileSync(join(dir, "scenarios.jsonl"), items.map((it) => JSON.stringify(it)).join("\n") + "\n");
    return { ...cfg, dir, items, resolved };
}

/** Reads a suite directory; errors name the file and the field. */
export function readSuite(dir: string): Suite {
    const f = join(dir, "suite.json"),
        s = join(dir, "scenarios.jsonl");
    for (const p of [f, s])
        if (!existsSync(p))
            throw new Error(`eval: --suite ${dir}: ${p} missing (make one with maporl eval --make-suite)`);
    let cfg: SuiteConfig;
    try {
        cfg = JSON.parse(readFileSync(f, "utf8")) as SuiteConfig;
    } catch {
        throw new SyntaxError(`eval: ${f}: not valid JSON`);
    }
    for (const k of ["temperature", "maxTokens", "seed"] as const)
        if (typeof cfg[k] !== "number" || !Number.isFinite(cfg[k]))
            throw new TypeError(`eval: ${f}: ${k}: expected a number, got ${JSON.stringify(cfg[k])}`);
    const resolved = resolveConfig(cfg.config ?? {}, `${f}: config`);
    const items = readFileSync(s, "utf8")
        .split("\n")
        .filter((l) => l.trim())
        .map((l, k) => {
            let it: TaskItem;
            try {
                it = JSON.parse(l) as TaskItem;
            } catch {
                throw new SyntaxError(`eval: ${s}: line ${k + 1}: not valid JSON`);
            }
            if (
                typeof it?.question !== "string" ||
                typeof it.reference !== "string" ||
                !Array.isArray(it.views) ||
                it.views.length !== resolved.agents
            )
                throw new TypeError(
                    `eval: ${s}: line ${k + 1}: expected { id, question, views (${resolved.agents}), reference }`,
                );
            return it;
        });
    if (items.length === 0) throw new RangeError(`eval: ${s}: no scenarios`);
    return { ...cfg, dir, items, resolved };
}

/** A team: a run directory's agents, with agents replaced by other checkpoints (agent index -> model directory). */
export interface TeamSpec {
    run: string;
    /** The stage whose models to take (default: the run's algorithm, e.g. 'maporl'; 'independent' for the control;
     * 'base' for the run's warm-started, untrained base in every seat). */
    stage?: string;
    replace?: Record<number, string>;
}

export interface Team {
    agents: NativePolicy[];
    turn0?: NativePolicy[];
    label: string;
    dispose(): Promise<void>;
}

/** Loads a team for `agents` seats (the suite's), checking every directory before loading any. */
export async function loadTeam(spec: TeamSpec, agents: number): Promise<Team> {
    const cfgFile = join(spec.run, "config.json");
    if (!existsSync(cfgFile)) throw new Error(`eval: ${spec.run}: no config.json there (not a run directory)`);
    const cfg = resolveConfig(JSON.parse(readFileSync(cfgFile, "utf8")), cfgFile);
    const stage = spec.stage ?? cfg.algo;
    // The warm-started base: saved in the checkpoint once the warm start trained it; a Hugging Face base without a warm
    // start is the model directory itself.
    const saved = join(spec.run, "checkpoint", "base");
    const baseDir = existsSync(join(saved, "config.json")) || !cfg.model.dir ? saved : cfg.model.dir;
    // The control trains agent 0 against the frozen warm-started base; a method's agents share actor-0 or have their own.
    const own = (a: number) =>
        stage === "base"
            ? baseDir
            : stage === "independent"
              ? a === 0
                  ? join(spec.run, "models", "independent-actor-0")
                  : baseDir
              : join(spec.run, "models", `${stage}-actor-${cfg.shareParameters ? 0 : a}`);
    const dirs = Array.from({ length: agents }, (_, a) => spec.replace?.[a] ?? own(a));
    for (const [k] of Object.entries(spec.replace ?? {}))
        if (!(Number.isInteger(Number(k)) && Number(k) >= 0 && Number(k) < agents))
            throw new RangeError(`eval: replace: agent ${k}: expected an index in [0, ${agents})`);
    const turn0Dir = cfg.separateTurn0 ? baseDir : null;
    for (const d of [...dirs, ...(turn0Dir ? [turn0Dir] : [])])
        if (!existsSync(join(d, "config.json")) && !existsSync(join(d, "adapter_config.json")))
            throw new Error(`eval: ${d}: not a model directory`);
    const cache = new Map<string, NativePolicy>();
    const load = async (d: string) => {
        let p = cache.get(d);
        if (!p) {
            p = await NativePolicy.load(d);
            cache.set(d, p);
        }
        return p;
    };
    const team = await Promise.all(dirs.map(load));
    const base = turn0Dir ? await load(turn0Dir) : null;
    const replaced = Object.keys(spec.replace ?? {});
    return {
        agents: team,
        ...(base ? { turn0: team.map(() => base) } : {}),
        label: `${spec.run} (${stage}${replaced.length ? `, agents ${replaced.join(", ")} replaced` : ""})`,
        dispose: async () => {
            for (const p of cache.values()) await p.dispose();
        },
    };
}

/** A team named on the command line: a run directory, optionally `@stage` (e.g. `runs/a@base`, `runs/a@independent`). */
export function teamArg(arg: string, stage?: string): TeamSpec {
    const m = /^(.+)@([A-Za-z0-9-]+)$/.exec(arg);
    if (m && !existsSync(arg)) return { run: m[1]!, stage: m[2]! };
    return { run: arg, ...(stage ? { stage } : {}) };
}

/** The suite on a team. */
export async function evaluateSuite(suite: Suite, team: Team): Promise<EvalResult> {
    const task = makeTask(suite.resolved);
    return evaluateTeam(task, suite.items, team.agents, {
        turns: suite.resolved.turns,
        temperature: suite.temperature,
        maxTokens: suite.maxTokens,
        seed: suite.seed,
        feedback: suite.resolved.feedback,
        ...(team.turn0 ? { turn0: team.turn0 } : {}),
    });
}

/** Metric names: 'majority@last' (default), 'majority@N' (turn N, 1-based), 'solo', 'gain'. */
export function metricOf(r: EvalResult, metric: string): number {
    if (metric === "majority@last") return r.majorityAccuracy[r.majorityAccuracy.length - 1]!;
    const m = /^majority@(\d+)$/.exec(metric);
    if (m) {
        const t = Number(m[1]);
        if (t < 1 || t > r.majorityAccuracy.length)
            throw new RangeError(`eval: metric: turn ${t} is outside 1..${r.majorityAccuracy.length}`);
        return r.majorityAccuracy[t - 1]!;
    }
    if (metric === "solo") return mean(r.soloAccuracy);
    if (metric === "gain") return r.gain;
    throw new RangeError(`eval: metric: expected 'majority@last', 'majority@N', 'solo' or 'gain', got '${metric}'`);
}

export interface GateResult {
    metric: string;
    baseline: number;
    candidate: number;
    drop: number;
    threshold: number;
    pass: boolean;
    message: string;
    evals: { baseline: EvalResult; candidate: EvalResult };
}

/** The regression gate: fails when the candidate's metric is more than `threshold` below the baseline's. */
export async function regressionGate(o: {
    suite: string;
    baseline: TeamSpec;
    candidate: TeamSpec;
    metric?: string;
    threshold?: number;
}): Promise<GateResult> {
    const suite = readSuite(o.suite),
        metric = o.metric ?? "majority@last",
        threshold = o.threshold ?? 0.02;
    if (!(Number.isFinite(threshold) && threshold >= 0))
        throw new RangeError(`eval: threshold: expected a number >= 0, got ${String(threshold)}`);
    const run = async (spec: TeamSpec) => {
        const team = await loadTeam(spec, suite.resolved.agents);
        try {
            return { label: team.label, r: await evaluateSuite(suite, team) };
        } finally {
            await team.dispose();
        }
    };
    const b = await run(o.baseline),
        c = await run(o.candidate);
    const vb = metricOf(b.r, metric),
        vc = metricOf(c.r, metric),
        drop = vb - vc,
        pass = !(drop > threshold);
    const message =
        `${metric}: baseline ${vb.toFixed(3)} (${b.label}), candidate ${vc.toFixed(3)} (${c.label}); ` +
        (pass
            ? `within ${threshold} of the baseline: pass`
            : `fell by ${drop.toFixed(3)}, more than the threshold ${threshold}: regression`);
    return {
        metric,
        baseline: vb,
        candidate: vc,
        drop,
        threshold,
        pass,
        message,
        evals: { baseline: b.r, candidate: c.r },
    };
}

/**
 * Cross-play: for every pair of teams (row, column), agent 0 of the row team with the partners of the column team
 * (turn 0 answered as the column team does). The diagonal is self-play; a team's "chemistry" figure is its self-play
 * minus the mean of its column off the diagonal: what the team loses when its agent 0 is swapped for one trained
 * elsewhere. Values are the metric (default majority@last).
 */
export async function crossPlay(o: {
    suite: string;
    teams: TeamSpec[];
    metric?: string;
}): Promise<{ labels: string[]; matrix: number[][]; chemistry: number[] }> {
    const suite = readSuite(o.suite),
        metric = o.metric ?? "majority@last",
        A = suite.resolved.agents;
    const teams = await Promise.all(o.teams.map((t) => loadTeam(t, A)));
    try {
        const matrix = await Promise.all(
            teams.map(async (row) => {
                const out: number[] = [];
                for (const col of teams) {
                    const mixed: Team = {
                        agents: [row.agents[0]!, ...col.agents.slice(1)],
                        ...(col.turn0 ? { turn0: col.turn0 } : {}),
                        label: "",
                        dispose: async () => undefined,
                    };
                    out.push(metricOf(await evaluateSuite(suite, mixed), metric));
                }
                return out;
            }),
        );
        // Per team (column j): its self-play minus the mean with another run's agent 0 swapped in, "swapping a new agent
        // breaks chemistry" (a row-wise difference would mix in the partners' own strength).
        const chemistry = matrix.map(
            (_, j) =>
                matrix[j]![j]! -
                matrix.filter((_, i) => i !== j).reduce((s, r) => s + r[j]!, 0) / Math.max(1, matrix.length - 1),
        );
        return { labels: teams.map((t) => t.label), matrix, chemistry };
    } finally {
        for (const t of teams) await t.dispose();
    }
}
