// trainCli.ts: `maporl train`: flags and config file -> trainJob, a progress bar on stderr (iteration, reward,
// per-turn accuracy, ETA), the before/after table at the end. Ctrl-C stops after the current step; the run
// directory then resumes with --resume.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import type { TrainArgs } from "../cliProgram.js";

import { configFromFlags, mergePartial, resolveConfig } from "./config.js";
import { formatSummary, trainJob } from "./job.js";

function fmtTime(ms: number): string {
    if (!Number.isFinite(ms) || ms < 0) return "?";
    const s = Math.round(ms / 1000);
    return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

/** `maporl train` with its parsed flags (lib/cliProgram.ts). */
export async function runTrain(args: TrainArgs): Promise<number> {
    const { flags, config: configFile, out, resume } = args;
    if (resume && (configFile || Object.keys(flags).length > 0))
        throw new RangeError(`train: --resume continues a run with the config it was started with; --config and the config flags (${[...(configFile ? ["--config"] : []), ...Object.keys(flags)].join(", ")}) are not taken with it`);
    let partial: Record<string, unknown> = {};
    if (configFile) {
        try { partial = JSON.parse(readFileSync(configFile, "utf8")) as Record<string, unknown>; } catch (e) {
            throw new Error(`train: --config ${configFile}: ${e instanceof SyntaxError ? "not valid JSON" : (e as Error).message}`);
        }
    }
    partial = mergePartial(partial, configFromFlags(flags));
    if (!resume) resolveConfig(partial);  // a bad value is reported before a run directory is named
    else if (!existsSync(join(resume, "config.json"))) throw new Error(`train: --resume ${resume}: no config.json there (not a run directory)`);
    const dir = resume ?? out ?? `runs/${new Date().toISOString().replace(/[:.]/g, "-")}`;
    const controller = new AbortController();
    const onSigint = () => { process.stderr.write("\nmaporl: stopping after this step; continue with --resume " + dir + "\n"); controller.abort(new Error("interrupted")); };
    process.once("SIGINT", onSigint);
    const tty = process.stderr.isTTY === true;
    let lastLine = 0, stage = "", stageStart = 0, stageFrom = 0;
    try {
        console.log(`maporl train: run directory ${dir}`);
        const summary = await trainJob({ out: dir, ...(resume ? { resume: true } : { config: partial }), signal: controller.signal,
            log: (l) => { if (tty) process.stderr.write("\r\x1b[K"); console.log(l); },
            onProgress: (p) => {
                if (p.stage !== stage) { stage = p.stage; stageStart = p.elapsedMs; stageFrom = p.step - 1; }
                const done = p.step - stageFrom, eta = done > 0 ? ((p.elapsedMs - stageStart) / done) * (p.total - p.step) : NaN;
                const frac = p.step / Math.max(1, p.total), bar = "#".repeat(Math.round(frac * 24)).padEnd(24, ".");
                const acc = p.accuracy.length ? ` acc/turn ${p.accuracy.map((x) => x.toFixed(2)).join("/")}` : "";
                const rew = Number.isFinite(p.reward) ? ` reward ${p.reward.toFixed(3)}` : "";
                const line = `${p.stage.padEnd(11)} [${bar}] ${p.step}/${p.total}${rew}${acc} elapsed ${fmtTime(p.elapsedMs)} ETA ${fmtTime(eta)}`;
                if (tty) process.stderr.write(`\r\x1b[K${line}`);
                else if (performance.now() - lastLine > 10_000 || p.step === p.total) { lastLine = performance.now(); process.stderr.write(line + "\n"); }
            } });
        if (tty) process.stderr.write("\r\x1b[K");
        console.log(`\n${formatSummary(summary)}\n\nreport: ${dir}/report.html   metrics: ${dir}/metrics.jsonl   models: ${dir}/models/`);
        return 0;
    } catch (e) {
        if (controller.signal.aborted) { console.error(`maporl: interrupted; resume with: npx maporl train --resume ${dir}`); return 130; }
        throw e;
    } finally {
        process.off("SIGINT", onSigint);
    }
}
