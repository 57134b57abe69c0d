// trainCli.ts: `maporl train`: flags and config file -> trainJob, a progress bar on stderr (iteration, reward,
// per-turn accuracy, ETA), the before/after table at the end. Ctrl-C stops after the current step; the run
// directory then resumes with --resume.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import type { TrainArgs } from "../cliProgram.js";

import { configFromFlags, mergePartial, resolveConfig } from "./job/config.js";
import { formatSummary, trainJob, type JobProgress } from "./job/job.js";

function fmtTime(ms: number): string {
    if (!Number.isFinite(ms) || ms < 0) return "?";
    const s = Math.round(ms / 1000);
    return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

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
        pct = Number.isFinite(eta) ? ` ${Math.round((100 * p.elapsedMs) / Math.max(1, p.elapsedMs + eta))}%` : "";
    return `[${k}/${p.job.stages.length} ${p.stage}] [${bar}] ${what}${rew}${acc} | job${pct} elapsed ${fmtTime(p.elapsedMs)} ETA ${fmtTime(eta)}`;
}

/** `maporl train` with its parsed flags (lib/cliProgram.ts). */
export async function runTrain(args: TrainArgs): Promise<number> {
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
