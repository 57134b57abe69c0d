// train.ts: `maporl train`: flags and config file -> trainJob, a progress bar on stderr (iteration, reward,
// per-turn accuracy, ETA), the before/after table at the end. Ctrl-C stops after the current step; the run
// directory then resumes with --resume.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { type Command, InvalidArgumentError, Option } from "commander";

import { collect, integer } from "../parse.js";
import { GATEWAY_REWARDS, type GatewayTrainArgs, runGatewayTraining } from "../trainGateway.js";

import {
    ALGOS,
    configFromFlags,
    DEFAULT_CONFIG,
    DEVICES,
    mergePartial,
    resolveConfig,
    SCHEDULES,
    TASKS,
} from "../../train/job/config.js";
import { trainJob } from "../../train/job/job.js";
import { formatSummary } from "../../train/job/summary.js";
import type { JobProgress } from "../../train/job/types.js";

export interface TrainArgs {
    /** Config keys from the flags (dotted for nested ones), as strings: the config validates and converts them. */
    flags: Record<string, string>;
    config?: string;
    out?: string;
    resume?: string;
    /** With resume: config keys whose change since the run started is accepted. */
    allowConfigChange?: string[];
    /** `--gateway`: co-train an agent program through the gateway instead of a built-in task (the other fields are
     * then empty). */
    gateway?: GatewayTrainArgs;
}

// The flags of the built-in tasks' job that --gateway does not take.
const JOB_ONLY = [
    "task",
    "algo",
    "turns",
    "schedule",
    "dtype",
    "data",
    "device",
    "config",
    "set",
    "resume",
    "allowConfigChange",
];

const positive = (v: string) => {
    const x = Number(v);
    if (v.trim() === "" || !Number.isFinite(x) || x <= 0)
        throw new InvalidArgumentError(`expected a positive number, got ${JSON.stringify(v)}.`);
    return x;
};

/** Declares `maporl train` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: TrainArgs) => Promise<void>): void {
    cmd.description(
        "co-train a team of agents (the main job: warm start, co-training, the independent control, a before/after table; about 3 minutes on 2 cores)",
    )
        .addOption(new Option("--task <task>", "the task").choices(TASKS).default(DEFAULT_CONFIG.task))
        .addOption(new Option("--algo <algo>", "the algorithm").choices(ALGOS).default(DEFAULT_CONFIG.algo))
        .option("--agents <n>", "agents in the team (2-8; default 3)")
        .option("--turns <n>", "discussion turns (1-8; default 3)")
        .option("--iterations <n>", "co-training iterations (default 120)")
        .option("--seed <n>", "the seed of everything (default 0)")
        .addOption(
            new Option("--schedule <schedule>", "which agents train when")
                .choices(SCHEDULES)
                .default(DEFAULT_CONFIG.schedule),
        )
        .option(
            "--model <dir>",
            "a Hugging Face model directory (llama, mistral, qwen2, qwen3): every agent and critic a LoRA adapter on its one base",
        )
        .option("--lora-rank <n>", "the adapters' rank (with --model; default 16)")
        .option("--lora-alpha <x>", "the adapters' alpha (with --model; default 32)")
        .addOption(
            new Option(
                "--dtype <dtype>",
                "the base's matrices in memory (with --model): float32, bfloat16 (frozen, half the memory) or int8 (frozen, Q8_0 blocks, about a quarter)",
            ).choices(["float32", "bfloat16", "int8"]),
        )
        .option("--data <dir>", "gsm8k: a directory with train.jsonl and test.jsonl (default the shipped copy)")
        .addOption(
            new Option("--device <device>", "where the models live (cuda needs a GPU and a CUDA build)")
                .choices(DEVICES)
                .default(DEFAULT_CONFIG.device),
        )
        .option(
            "--config <file>",
            'a JSON config: any keys of docs/training.md\'s "Config keys" table, nested as their dots (unknown keys are errors)',
        )
        .option(
            "--set <key=value>",
            "any config key, dotted for nested ones (e.g. --set maporl.klCoef=0.01); repeatable",
            collect,
            [],
        )
        .option("--out <dir>", "the run directory (default runs/<time>)")
        .option(
            "--gateway",
            "co-train the agents of an unchanged program through the gateway: maporl train --gateway --model DIR --agents a,b --items FILE -- node agent.mjs (docs/gateway.md)",
        )
        .argument("[program...]", "with --gateway: the agent program and its arguments, after --")
        .option("--items <file>", "with --gateway: the training items (JSON lines, or a JSON array)")
        .option("--eval-items <file>", "with --gateway: held-out items, evaluated before and after")
        .option("--eval-runs <n>", "with --gateway: runs of each held-out item", integer(1, 1024), 1)
        .option("--groups <n>", "with --gateway: runs of each item per iteration (MAGRPO's group)", integer(2, 1024), 4)
        .option("--lr <x>", "with --gateway: the learning rate", positive, 1e-4)
        .option("--concurrency <n>", "with --gateway: programs running at once", integer(1, 4096), 8)
        .addOption(
            new Option(
                "--reward <how>",
                "with --gateway: posted (the program posts to MAPORL_REWARD_URL), exact (its output equals the item's answer), number (the last numbers match)",
            )
                .choices(GATEWAY_REWARDS)
                .default("posted"),
        )
        .addOption(
            new Option(
                "--credit <credit>",
                "with --gateway: magrpo (a group-relative return per episode), influence (MAPoRL's per turn, from the milestones posted on each call) or critic (CoLLM-DC: a critic adapter per agent)",
            )
                .choices(["magrpo", "influence", "critic"])
                .default("magrpo"),
        )
        .option("--program-timeout <ms>", "with --gateway: one run's time limit", integer(1, 2 ** 31 - 1), 600000)
        .option(
            "--resume <dir>",
            "continue a killed or interrupted run, with identical results (a changed config.json or base model is refused)",
        )
        .option(
            "--allow-config-change <keys>",
            "with --resume: config keys (comma-separated, dotted) whose change since the run started is accepted and logged; model.dir accepts changed base weights",
        )
        .action(async (program: string[], o: Record<string, unknown>, cmd: Command) => {
            const flags: Record<string, string> = {};
            // Only what was given on the command line (a default must not override the config file).
            const given = (k: string) => cmd.getOptionValueSource(k) === "cli";
            if (o.gateway) return act({ flags, gateway: gatewayArgs(program, o, given) });
            if (program.length)
                throw new RangeError(
                    `train: ${JSON.stringify(program.join(" "))}: a program is taken with --gateway only`,
                );
            for (const k of [
                "items",
                "evalItems",
                "evalRuns",
                "groups",
                "lr",
                "concurrency",
                "reward",
                "credit",
                "programTimeout",
            ])
                if (given(k))
                    throw new RangeError(
                        `train: --${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} goes with --gateway`,
                    );
            const map: Record<string, string> = {
                task: "task",
                algo: "algo",
                agents: "agents",
                turns: "turns",
                iterations: "iterations",
                seed: "seed",
                schedule: "schedule",
                model: "model.dir",
                loraRank: "lora.rank",
                loraAlpha: "lora.alpha",
                dtype: "model.dtype",
                data: "taskOptions.data",
                device: "device",
            };
            for (const [k, key] of Object.entries(map)) if (given(k)) flags[key] = String(o[k]);
            for (const kv of o.set as string[]) {
                const eq = kv.indexOf("=");
                if (eq <= 0) throw new RangeError(`train: --set: expected key=value, got ${JSON.stringify(kv)}`);
                flags[kv.slice(0, eq)] = kv.slice(eq + 1);
            }
            if (o.resume !== undefined && o.out !== undefined)
                throw new RangeError("train: --resume DIR continues DIR; --out names a new run: give one of them");
            await act({
                flags,
                ...(o.config ? { config: o.config as string } : {}),
                ...(o.out ? { out: o.out as string } : {}),
                ...(o.resume ? { resume: o.resume as string } : {}),
                ...(o.allowConfigChange
                    ? {
                          allowConfigChange: String(o.allowConfigChange)
                              .split(",")
                              .map((k) => k.trim())
                              .filter((k) => k),
                      }
                    : {}),
            });
        });
}

// --gateway's arguments, checked (the job's own flags refused by name).
function gatewayArgs(program: string[], o: Record<string, unknown>, given: (k: string) => boolean): GatewayTrainArgs {
    for (const k of JOB_ONLY)
        if (given(k) || (k === "set" && (o.set as string[]).length))
            throw new RangeError(
                `train: --${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} is for the built-in tasks' job; not taken with --gateway`,
            );
    if (program.length === 0)
        throw new RangeError("train --gateway: expected the agent program after --, e.g. -- node agent.mjs");
    if (typeof o.model !== "string") throw new RangeError("train --gateway: --model DIR: expected the base model");
    if (typeof o.items !== "string") throw new RangeError("train --gateway: --items FILE: expected the items");
    const agents = String(o.agents ?? "")
        .split(",")
        .map((x) => x.trim())
        .filter((x) => x !== "");
    if (
        agents.length === 0 ||
        new Set(agents).size !== agents.length ||
        agents.some((a) => !/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(a))
    )
        throw new RangeError(
            `train --gateway: --agents: expected the agents' names (1 to 64 letters, digits, '.', '_', '-'), comma-separated and distinct, got ${JSON.stringify(o.agents ?? "")}`,
        );
    // (decimal digits only: no '', no 0x10, no 1e3)
    const digits = (k: string, d: number) => (o[k] === undefined ? d : /^\d+$/.test(String(o[k])) ? Number(o[k]) : NaN);
    const int = (k: string, d: number, max: number) => {
        const v = digits(k, d);
        if (!Number.isSafeInteger(v) || v < 1 || v > max)
            throw new RangeError(
                `train --gateway: --${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}: expected an integer in [1, ${max}], got ${String(o[k])}`,
            );
        return v;
    };
    const seed = digits("seed", 0);
    if (!Number.isSafeInteger(seed) || seed < 0)
        throw new RangeError(`train --gateway: --seed: expected an integer >= 0, got ${String(o.seed)}`);
    return {
        program,
        model: o.model,
        agents,
        items: o.items,
        ...(typeof o.evalItems === "string" ? { evalItems: o.evalItems } : {}),
        evalRuns: o.evalRuns as number,
        iterations: int("iterations", 20, 1 << 20),
        groups: o.groups as number,
        lr: o.lr as number,
        concurrency: o.concurrency as number,
        reward: o.reward as GatewayTrainArgs["reward"],
        credit: o.credit as GatewayTrainArgs["credit"],
        loraRank: int("loraRank", 16, 4096),
        loraAlpha: int("loraAlpha", 32, 1 << 20),
        seed,
        programTimeout: o.programTimeout as number,
        ...(typeof o.out === "string" ? { out: o.out } : {}),
    };
}

function fmtTime(ms: number): string {
    if (!Number.isFinite(ms) || ms < 0) return "?";
    const s = Math.round(ms / 1000);
    return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

// Elapsed time: tenths of a second under 10 s (a short job's first lines are not all "0s").
const fmtElapsed = (ms: number): string =>
    Number.isFinite(ms) && ms >= 0 && ms < 9950 ? `${(ms / 1000).toFixed(1)}s` : fmtTime(ms);

/**
 * One progress line: the stage among the job's stages, the stage's bar (iterations, SFT steps, or the answers of a
 * held-out evaluation), reward and per-turn accuracy, and the whole job's elapsed time and ETA.
 */
export function progressLine(p: JobProgress): string {
    const k = p.job.stages.indexOf(p.stage) + 1;
    const frac = p.step / Math.max(1, p.total),
        bar = "#".repeat(Math.round(frac * 20)).padEnd(20, ".");
    const what =
        p.phase === "eval"
            ? `eval ${p.step}/${p.total} answers`
            : `${p.phase === "sft" ? "step" : "iteration"} ${p.step}/${p.total}`;
    const acc = p.accuracy.length ? ` acc/turn ${p.accuracy.map((x) => x.toFixed(2)).join("/")}` : "";
    const rew = Number.isFinite(p.reward) ? ` reward ${p.reward.toFixed(3)}` : "";
    const eta = p.job.etaMs,
        pct = Number.isFinite(eta) ? ` ${Math.floor(100 * p.job.share)}%` : "";
    return `[${k}/${p.job.stages.length} ${p.stage}] [${bar}] ${what}${rew}${acc} | job${pct} elapsed ${fmtElapsed(p.job.priorMs + p.elapsedMs)} ETA ${fmtTime(eta)}`;
}

/** `maporl train` with its parsed flags: the exit code. */
export async function run(args: TrainArgs): Promise<number> {
    if (args.gateway) return runGatewayTraining(args.gateway);
    const { flags, config: configFile, out, resume, allowConfigChange } = args;
    if (allowConfigChange && !resume) throw new RangeError("train: --allow-config-change goes with --resume DIR");
    if (resume && (configFile || Object.keys(flags).length > 0))
        throw new RangeError(
            `train: --resume continues a run with the config it was started with; --config and the config flags (${[...(configFile ? ["--config"] : []), ...Object.keys(flags)].join(", ")}) are not taken with it`,
        );
    let partial: Record<string, unknown> = {};
    if (configFile) {
        try {
            partial = JSON.parse(readFileSync(configFile, "utf8")) as Record<string, unknown>;
        } catch (e) {
            throw new Error(
                `train: --config ${configFile}: ${e instanceof SyntaxError ? "not valid JSON" : (e as Error).message}`,
            );
        }
    }
    partial = mergePartial(partial, configFromFlags(flags));
    if (!resume)
        resolveConfig(partial); // a bad value is reported before a run directory is named
    else if (!existsSync(join(resume, "config.json")))
        throw new Error(`train: --resume ${resume}: no config.json there (not a run directory)`);
    const dir = resume ?? out ?? `runs/${new Date().toISOString().replace(/[:.]/g, "-")}`;
    const controller = new AbortController();
    const onSigint = () => {
        process.stderr.write("\nmaporl: stopping after this step; continue with --resume " + dir + "\n");
        controller.abort(new Error("interrupted"));
    };
    process.once("SIGINT", onSigint);
    const tty = process.stderr.isTTY === true;
    let lastLine = 0,
        lastKey = "";
    try {
        console.log(`maporl train: run directory ${dir}`);
        const summary = await trainJob({
            out: dir,
            ...(resume ? { resume: true, ...(allowConfigChange ? { allowConfigChange } : {}) } : { config: partial }),
            signal: controller.signal,
            log: (l) => {
                if (tty) process.stderr.write("\r\x1b[K");
                console.log(l);
            },
            onProgress: (p) => {
                const line = progressLine(p);
                if (tty)
                    process.stderr.write(`\r\x1b[K${line.slice(0, Math.max(20, (process.stderr.columns ?? 120) - 1))}`);
                else {
                    // logs: a line every 10 s, and at every change of stage or phase
                    const key = `${p.stage}/${p.phase}`;
                    if (key !== lastKey || performance.now() - lastLine > 10_000 || p.step === p.total) {
                        lastKey = key;
                        lastLine = performance.now();
                        process.stderr.write(line + "\n");
                    }
                }
            },
        });
        if (tty) process.stderr.write("\r\x1b[K");
        console.log(
            `\n${formatSummary(summary)}\n\nreport: ${dir}/report.html   metrics: ${dir}/metrics.jsonl   models: ${dir}/models/`,
        );
        return 0;
    } catch (e) {
        if (controller.signal.aborted) {
            console.error(`maporl: interrupted; resume with: npx maporl train --resume ${dir}`);
            return 130;
        }
        throw e;
    } finally {
        process.off("SIGINT", onSigint);
    }
}
