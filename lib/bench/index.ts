// index.ts (bench): the benchmark harness behind `npm run bench` / `npx maporl bench [kernel...]`. Times this
// package's kernels and the PyTorch baselines in the same run, at fixed sizes, with the same thread count;
// prints a table of medians, ratios (baseline / ours), peak memory and the memory floor (bytes moved over a
// copy bandwidth measured at the start), and writes the JSON to bench/results/.
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";

import { backend, setThreads } from "../backend.js";
import { native } from "../native.js";
import { crossCheckBaselines, type CrossCheck } from "./crosscheck.js";
import { benchGae } from "./gae.js";
import { benchFleet } from "./fleet.js";
import { benchGpt } from "./gpt.js";
import { benchLlama } from "./llama.js";
import { benchLora } from "./lora.js";
import { benchGroupAdvantages } from "./groupAdvantages.js";
import { benchFusedPolicyLoss, benchPolicyLoss } from "./policyLoss.js";
import { benchReinforceReturns } from "./reinforceReturns.js";
import { benchRolloutCorrection } from "./rolloutCorrection.js";
import { benchSampling } from "./sampling.js";
import { benchServe } from "./serve.js";
import { benchGateway } from "./gateway.js";
import { type BenchContext, type BenchRow } from "./types.js";

export type { BenchContext, BenchRow } from "./types.js";

export const BENCHMARKS: Record<string, (ctx: BenchContext) => Promise<BenchRow[]>> = {
    gae: benchGae,
    groupAdvantages: benchGroupAdvantages,
    reinforceReturns: benchReinforceReturns,
    policyLoss: benchPolicyLoss,
    fusedPolicyLoss: benchFusedPolicyLoss,
    rolloutCorrection: benchRolloutCorrection,
    sample: benchSampling,
    gpt: benchGpt,
    llama: benchLlama,
    lora: benchLora,
    fleet: benchFleet,
    serve: benchServe,
    gateway: benchGateway,
};

export interface BenchOptions {
    kernels?: string[];
    threads?: number;
    reps?: number;
    pythonReps?: number;
    python?: boolean;
    /** Directory for the JSON results. Defaults to `bench/results`. */
    outDir?: string;
    log?: (line: string) => void;
}

export interface BenchReport {
    date: string;
    machine: {
        cpu: string;
        threads: number;
        simd: string;
        node: string;
        copyBandwidthGBps: number;
        readBandwidthGBps: number;
    };
    /** The baselines checked against our results on a small batch before timing. */
    baselineCheck: CrossCheck;
    rows: (BenchRow & { ratio: number | null; floorMs: number; xFloor: number | null })[];
    file: string;
}

const fmt = (x: number | null, d = 3) => (x === null ? "-" : x.toFixed(d));

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
    const log = options.log ?? ((l: string) => console.log(l));
    const kernels = options.kernels && options.kernels.length ? options.kernels : Object.keys(BENCHMARKS);
    for (const k of kernels)
        if (!(k in BENCHMARKS))
            throw new RangeError(`bench: unknown kernel "${k}". Registered: ${Object.keys(BENCHMARKS).join(", ")}`);
    const threads = setThreads(options.threads ?? 2);
    const ctx: BenchContext = {
        threads,
        reps: options.reps ?? 30,
        pythonReps: options.pythonReps ?? 5,
        python: options.python ?? true,
        log,
    };
    const copyBps = native.measureCopyBandwidth(256 << 20, 9);
    const readBps = native.measureReadBandwidth(256 << 20, 9);
    const info = backend();
    const machine = {
        cpu: cpus()[0]?.model ?? "unknown",
        threads,
        simd: info.simd,
        node: process.version,
        copyBandwidthGBps: copyBps / 1e9,
        readBandwidthGBps: readBps / 1e9,
    };
    log(
        `maporl ${info.version} bench: ${machine.cpu}, ${threads} threads, SIMD ${info.simd}, copy bandwidth ${(copyBps / 1e9).toFixed(1)} GB/s (read+write), ` +
            `read ${(readBps / 1e9).toFixed(1)} GB/s`,
    );
    const baselineCheck: CrossCheck = ctx.python
        ? crossCheckBaselines()
        : { ok: false, error: "skipped (--no-python)" };
    if (baselineCheck.ok) {
        const worst = Object.entries(baselineCheck.maxAbsDiff!)
            .map(([k, d]) => `${k} ${d.toExponential(1)}`)
            .join(", ");
        log(`baselines agree with maporl on a ragged 6x40 batch (max |diff|): ${worst}`);
        if (Object.values(baselineCheck.maxAbsDiff!).some((d) => !(d < 1e-4)))
            log("WARNING: a baseline disagrees with maporl by more than 1e-4; its timing compares different work");
    } else log(`baseline check: ${baselineCheck.error}`);
    const rows: BenchReport["rows"] = [];
    for (const k of kernels) {
        const k0 = performance.now();
        log(`${k}: running${ctx.python ? " (with its PyTorch baselines)" : ""}...`);
        const got = await BENCHMARKS[k]!(ctx);
        for (const r of got)
            log(
                `  ${r.kernel} ${r.size}, ${r.impl}: ${r.medianMs === null ? (r.note ?? "not run") : `${r.medianMs.toFixed(3)} ms`}`,
            );
        log(`${k}: done in ${((performance.now() - k0) / 1000).toFixed(1)} s`);
        for (const r of got) {
            const floorMs = (r.bytesMoved / (r.readOnly ? readBps : copyBps)) * 1e3;
            rows.push({
                ...r,
                ratio: r.medianMs !== null && r.baselineMs !== null ? r.baselineMs / r.medianMs : null,
                floorMs,
                xFloor: r.medianMs === null || floorMs === 0 ? null : r.medianMs / floorMs,
            });
        }
    }
    const header = [
        "kernel",
        "size",
        "implementation",
        "median ms",
        "baseline/ours",
        "peak extra MB",
        "floor ms",
        "x floor",
    ];
    const table = rows.map((r) => [
        r.kernel,
        r.size,
        r.impl,
        fmt(r.medianMs),
        r.ratio === null ? "-" : r.ratio.toFixed(1) + "x",
        r.peakExtraBytes === null ? "-" : (r.peakExtraBytes / 2 ** 20).toFixed(1),
        fmt(r.floorMs),
        r.xFloor === null ? "-" : r.xFloor.toFixed(2),
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
    const line = (cells: string[]) => "| " + cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ") + " |";
    log(line(header));
    log("|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|");
    for (const row of table) log(line(row));
    for (const r of rows) if (r.note) log(`  ${r.impl}: ${r.note}`);
    const outDir = options.outDir ?? join(process.cwd(), "bench", "results");
    mkdirSync(outDir, { recursive: true });
    const date = new Date().toISOString();
    const file = join(outDir, `${date.replace(/[:.]/g, "-")}-${kernels.join("-")}.json`);
    const report: BenchReport = { date, machine, baselineCheck, rows, file };
    writeFileSync(file, JSON.stringify(report, null, 2) + "\n");
    log(`results: ${file}`);
    return report;
}
