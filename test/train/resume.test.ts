// resume.test.ts: a run killed with SIGKILL mid-iteration (or stopped with Ctrl-C) resumes from its last
// checkpoint and ends with exactly the metrics, traces and summary of an uninterrupted run with the same seed.
// Runs the real CLI (dist/cli.js, built by `npm test`) on a small config.
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { readMetrics, summaryWithoutTimings } from "../helpers/runs.js";

const root = join(import.meta.dirname, "..", "..");
const cli = join(root, "dist", "cli.js");
const work = mkdtempSync(join(tmpdir(), "maporl-resume-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const config = {
    iterations: 5,
    episodesPerIteration: 6,
    evalEpisodes: 12,
    evalEvery: 2,
    sft: { steps: 30, batchSize: 16 },
    model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
    critic: { layers: 1, heads: 2, dModel: 32 },
    seed: 4,
};
const configFile = join(work, "config.json");
writeFileSync(configFile, JSON.stringify(config));

// Wall-clock records aside (the stage timings; each run must have them, for every stage, in order).
const read = (dir: string) => {
    const m = readMetrics(dir);
    expect(m.timed).toEqual(["sft", "maporl", "independent"]);
    return {
        metrics: m.metrics,
        traces: readFileSync(join(dir, "traces.jsonl"), "utf8"),
        summary: summaryWithoutTimings(readFileSync(join(dir, "summary.json"), "utf8")),
    };
};

function finish(args: string[]): { stdout: string; stderr: string } {
    const r = spawnSync(process.execPath, [cli, "train", ...args], { encoding: "utf8", timeout: 240_000 });
    expect(r.status, r.stderr).toBe(0);
    return r;
}

// Starts a run and sends `sig` once metrics.jsonl holds a training line of the method's stage for iteration >= 2.
function interrupted(out: string, sig: NodeJS.Signals): Promise<number | null> {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [cli, "train", "--config", configFile, "--out", out], {
            stdio: "ignore",
        });
        const timer = setInterval(() => {
            const f = join(out, "metrics.jsonl");
            if (!existsSync(f)) return;
            if (
                readFileSync(f, "utf8")
                    .split("\n")
                    .some((l) => l.includes('"kind":"train","stage":"maporl","iteration":2'))
            ) {
                clearInterval(timer);
                child.kill(sig);
            }
        }, 20);
        child.on("exit", (code, signal) => {
            clearInterval(timer);
            resolve(signal === "SIGKILL" ? null : code);
        });
        child.on("error", reject);
    });
}

describe("train: resume", () => {
    it("a SIGKILL mid-iteration, then --resume, ends exactly as an uninterrupted run", async () => {
        const straight = join(work, "straight"),
            killed = join(work, "killed");
        const run = finish(["--config", configFile, "--out", straight]);
        // Progress on a pipe (not a terminal): plain lines naming the stage among the job's stages, the evaluations'
        // answers, and the whole job's ETA, known from the first line on (the calibration rollout).
        const progress = run.stderr.split("\n").filter((l) => l.startsWith("["));
        for (const stage of ["[1/3 sft]", "[2/3 maporl]", "[3/3 independent]"])
            expect(progress.some((l) => l.startsWith(stage))).toBe(true);
        expect(progress.some((l) => / eval \d+\/\d+ answers /.test(l))).toBe(true);
        for (const l of progress) expect(l).toMatch(/\| job \d+% elapsed \S+ ETA \d+(m\d\ds|s)$/);
        expect(run.stdout).toMatch(
            /estimated duration on this machine: about \d+ minutes? \(\d+ s; measured at the start, refined as it runs\)/,
        );
        // The share of the job done never goes back.
        const shares = progress.map((l) => Number(/\| job (\d+)%/.exec(l)![1]));
        shares.forEach((x, i) => expect(x).toBeGreaterThanOrEqual(shares[i - 1] ?? 0));
        expect(run.stdout).toMatch(/time: sft [\d.]+ s, maporl [\d.ms ]+, independent [\d.ms ]+ \(.* in all\)/);
        expect(await interrupted(killed, "SIGKILL")).toBeNull();
        expect(existsSync(join(killed, "summary.json"))).toBe(false);
        // The resumed process counts the time the killed one spent: its first share is not 0, its elapsed time not 0 s.
        const resumed = finish(["--resume", killed])
            .stderr.split("\n")
            .filter((l) => l.startsWith("["));
        expect(Number(/\| job (\d+)%/.exec(resumed[0])![1])).toBeGreaterThan(0);
        expect(resumed[0]).not.toMatch(/elapsed 0(\.0)?s /);
        const a = read(straight),
            b = read(killed);
        expect(b.metrics).toBe(a.metrics);
        expect(b.traces).toBe(a.traces);
        expect(b.summary).toEqual(a.summary);
        // The resumed run trained: the method's stage logged every iteration once.
        expect(b.metrics.split("\n").filter((l) => l.includes('"kind":"train","stage":"maporl"')).length).toBe(
            config.iterations,
        );
    }, 600_000);

    it("Ctrl-C stops with a resumable run directory; --resume completes it identically", async () => {
        const straight = join(work, "straight"),
            stopped = join(work, "stopped");
        expect(await interrupted(stopped, "SIGINT")).toBe(130);
        finish(["--resume", stopped]);
        expect(read(stopped)).toEqual(read(straight));
    }, 600_000);

    it("a config.json edited between the kill and the resume is refused, naming the change, unless accepted; a state.json without its checksum is damaged", async () => {
        const base = join(work, "edited");
        expect(await interrupted(base, "SIGINT")).toBe(130);
        const copy = (name: string) => {
            const d = join(work, name);
            cpSync(base, d, { recursive: true });
            return d;
        };
        const edit = (dir: string, f: (c: Record<string, unknown>) => void) => {
            const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
            f(c);
            writeFileSync(join(dir, "config.json"), JSON.stringify(c, null, 2));
        };
        const seed = copy("edited-seed");
        edit(seed, (c) => {
            c.seed = 5;
            (c.maporl as Record<string, unknown>).klCoef = 0.5;
            c.lr = (c.lr as number) * 10;
            c.iterations = (c.iterations as number) + 3;
        });
        const r1 = spawnSync(process.execPath, [cli, "train", "--resume", seed], { encoding: "utf8" });
        expect(r1.status).toBe(1);
        expect(r1.stderr).toMatch(
            /config\.json changed since the run started \(iterations 5 -> 8, lr 0\.0001 -> 0\.001\d*, maporl\.klCoef [\d.e-]+ -> 0\.5, seed 4 -> 5\)/,
        );
        expect(r1.stderr).toMatch(/--allow-config-change iterations,lr,maporl\.klCoef,seed/);
        // Accepting some of the changes is not enough; a key that is not one is an error.
        const r1b = spawnSync(
            process.execPath,
            [cli, "train", "--resume", seed, "--allow-config-change", "iterations,seed"],
            { encoding: "utf8" },
        );
        expect(r1b.status).toBe(1);
        expect(r1b.stderr).toMatch(
            /changed since the run started \(lr 0\.0001 -> 0\.001\d*, maporl\.klCoef [\d.e-]+ -> 0\.5\)/,
        );
        const r1c = spawnSync(
            process.execPath,
            [cli, "train", "--resume", seed, "--allow-config-change", "iteratons"],
            { encoding: "utf8" },
        );
        expect(r1c.status).toBe(1);
        expect(r1c.stderr).toMatch(/--allow-config-change iteratons: not a config key/);
        const more = copy("edited-iterations");
        edit(more, (c) => {
            c.iterations = (c.iterations as number) + 1;
        });
        const r2 = spawnSync(
            process.execPath,
            [cli, "train", "--resume", more, "--allow-config-change", "iterations"],
            { encoding: "utf8", timeout: 240_000 },
        );
        expect(r2.status, r2.stderr).toBe(0);
        expect(r2.stdout + r2.stderr).toMatch(/config change accepted \(--allow-config-change\): iterations 5 -> 6/);
        const unsigned = copy("unsigned");
        const st = join(unsigned, "checkpoint", "state.json");
        const { sha256: _drop, ...rest } = JSON.parse(readFileSync(st, "utf8")) as Record<string, unknown>;
        writeFileSync(st, JSON.stringify(rest));
        const r3 = spawnSync(process.execPath, [cli, "train", "--resume", unsigned], {
            encoding: "utf8",
            timeout: 240_000,
        });
        expect(r3.stdout + r3.stderr).toMatch(/state\.json: no sha256 of its own/);
    }, 600_000);

    it("refuses to overwrite a run and to resume a directory that holds none", () => {
        const r1 = spawnSync(
            process.execPath,
            [cli, "train", "--config", configFile, "--out", join(work, "straight")],
            { encoding: "utf8" },
        );
        expect(r1.status).toBe(1);
        expect(r1.stderr).toMatch(/already holds a run; use --resume/);
        const r2 = spawnSync(process.execPath, [cli, "train", "--resume", join(work, "nothing")], { encoding: "utf8" });
        expect(r2.status).toBe(1);
        expect(r2.stderr).toMatch(/no config.json there/);
        const bad = join(work, "bad.json");
        writeFileSync(bad, JSON.stringify({ iteratons: 3 }));
        const r3 = spawnSync(process.execPath, [cli, "train", "--config", bad, "--out", join(work, "bad")], {
            encoding: "utf8",
        });
        expect(r3.status).toBe(1);
        expect(r3.stderr).toMatch(/iteratons: unknown key \(did you mean iterations\?\)/);
    });
});
