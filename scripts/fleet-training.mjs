// fleet-training.mjs: the figures of docs/training.md's "Rollouts on a fleet" tables. A tiny llama (make-model tiny)
// is warm-started once on the task (1600 SFT steps); then every setting co-trains LoRA adapters on that base for the
// same number of iterations, in process or with its rollouts on `maporl serve` processes the job starts
// (rolloutFleet), on-policy or asynchronous (asyncRollout.maxStaleness), with or without the token-level correction,
// on float32 or int8 servers (or an int8 base in process). Per run: iterations per minute of the co-training loop (from its first to its last
// iteration), the held-out majority accuracy at the last turn, the mean staleness and the mean mismatch k3.
//
//   npm run build:ts && node scripts/fleet-training.mjs [--task tool-lookup] [--algo maporl] [--iterations 20]
//                                                       [--seeds 0,1,2] [--only "name|name"] [--out DIR]
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { trainJob } from "../dist/train/job/job.js";

const { values: a } = parseArgs({
    options: {
        task: { type: "string", default: "tool-lookup" },
        algo: { type: "string", default: "maporl" },
        iterations: { type: "string", default: "20" },
        seeds: { type: "string", default: "0,1,2" },
        only: { type: "string", default: "" },
        out: { type: "string", default: "" },
        "sft-steps": { type: "string", default: "1600" },
    },
});
const root = a.out || mkdtempSync(join(tmpdir(), "maporl-fleet-training-"));
const cli = join(import.meta.dirname, "..", "dist", "cli.js");
const modelDir = join(root, "model");
if (!existsSync(join(modelDir, "config.json"))) {
    const r = spawnSync(process.execPath, [cli, "make-model", modelDir, "--shape", "tiny", "--seed", "0"], {
        stdio: "inherit",
    });
    if (r.status !== 0) process.exit(1);
}
const common = {
    task: a.task,
    model: { dir: modelDir, contextLength: 128 },
    lora: { rank: 8, alpha: 16 },
    lr: 1e-3,
    evalEpisodes: 100,
    controls: false,
};
// The warm start once: its trained base (models/base) is every setting's base.
const warm = join(root, `warm-${a.task}`);
if (!existsSync(join(warm, "models", "base", "config.json"))) {
    const t0 = performance.now();
    await trainJob({ out: warm, config: { ...common, sft: { steps: Number(a["sft-steps"]) }, iterations: 0 } });
    console.error(`warm start: ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}
const base = join(warm, "models", "base");

const TIS = { rolloutIs: "token", rolloutIsThreshold: 2 };
const SETTINGS = [
    ["in process", {}],
    ["in process, int8 base", { model: { ...common.model, dir: base, dtype: "int8" } }],
    ["fleet 2, on-policy", { rolloutFleet: { serve: 2 } }],
    ["fleet 2, d = 1", { rolloutFleet: { serve: 2 }, asyncRollout: { maxStaleness: 1 } }],
    ["fleet 2, d = 2", { rolloutFleet: { serve: 2 }, asyncRollout: { maxStaleness: 2 } }],
    ["fleet 2, d = 2, TIS", { rolloutFleet: { serve: 2 }, asyncRollout: { maxStaleness: 2 }, rolloutCorrection: TIS }],
    ["fleet 2 int8, on-policy", { rolloutFleet: { serve: 2, dtype: "int8" } }],
    ["fleet 2 int8, TIS", { rolloutFleet: { serve: 2, dtype: "int8" }, rolloutCorrection: TIS }],
    ["fleet 3, on-policy", { rolloutFleet: { serve: 3 } }],
    ["fleet 3, d = 2", { rolloutFleet: { serve: 3 }, asyncRollout: { maxStaleness: 2 } }],
];
// The untrained team (the warm-started base, no co-training) on the same held-out questions, per seed.
const untrained = [];
for (const seed of a.seeds.split(",").map(Number)) {
    const out = join(root, `untrained-s${seed}`);
    rmSync(out, { recursive: true, force: true });
    const s = await trainJob({
        out,
        config: { ...common, model: { ...common.model, dir: base }, iterations: 0, seed },
    });
    const row = s.rows.find((r) => r.name === "untrained team");
    untrained.push(row.majorityAccuracy[row.majorityAccuracy.length - 1].toFixed(3));
    rmSync(out, { recursive: true, force: true });
}
console.log(`untrained team (the warm-started base), seeds ${a.seeds}: ${untrained.join(", ")}`);
const only = a.only ? a.only.split("|") : null;
const mean = (xs) => xs.reduce((s, x) => s + x, 0) / Math.max(1, xs.length);
const f = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : "-");

console.log(
    `${a.task}, ${a.algo}, ${a.iterations} iterations, seeds ${a.seeds}\n` +
        "| setting | iterations / min (per seed) | mean | accuracy (per seed) | mean | staleness (mean) | mismatch k3 (mean) |\n" +
        "| --- | --- | --- | --- | --- | --- | --- |",
);
for (const [name, extra] of SETTINGS) {
    if (only && !only.some((o) => name.startsWith(o))) continue;
    const rates = [],
        accs = [],
        stale = [],
        k3 = [];
    for (const seed of a.seeds.split(",").map(Number)) {
        const out = join(root, `${name.replace(/[^\w]+/g, "-")}-s${seed}`);
        rmSync(out, { recursive: true, force: true });
        const marks = [];
        const s = await trainJob({
            out,
            config: {
                ...common,
                model: { ...common.model, dir: base },
                iterations: Number(a.iterations),
                algo: a.algo,
                seed,
                ...extra,
            },
            onProgress: (p) => {
                if (p.phase === "train") marks.push([p.step, p.elapsedMs]);
            },
        });
        const [s1, t1] = marks[0],
            [sn, tn] = marks[marks.length - 1];
        rates.push(((sn - s1) / (tn - t1)) * 60_000);
        const row = s.rows.find((r) => r.name.startsWith("team co-trained"));
        accs.push(row.majorityAccuracy[row.majorityAccuracy.length - 1]);
        const lines = readFileSync(join(out, "metrics.jsonl"), "utf8")
            .split("\n")
            .filter((l) => l.includes('"kind":"train"'))
            .map((l) => JSON.parse(l));
        stale.push(mean(lines.map((l) => l.stalenessMean ?? l.staleness ?? 0)));
        // (MAGRPO measures the mismatch only when it corrects: none measured is "-")
        const measured = lines.flatMap((l) => l.agents.map((g) => g.mismatchK3 ?? NaN).filter(Number.isFinite));
        k3.push(measured.length ? mean(measured) : NaN);
        rmSync(out, { recursive: true, force: true });
    }
    console.log(
        `| ${name} | ${rates.map((x) => f(x, 1)).join(", ")} | ${f(mean(rates), 1)} | ${accs.map((x) => f(x)).join(", ")} | ${f(mean(accs))} | ${f(mean(stale), 2)} | ${Number.isFinite(mean(k3)) ? mean(k3).toExponential(1) : "-"} |`,
    );
}
if (!a.out) rmSync(root, { recursive: true, force: true });
