// fresh.ts (bench): the default call (no `out`) of each kernel as a user's first script meets it: in a fresh node
// process, at the benchmark's sizes, timed two ways. "event loop" yields to the event loop between calls (a training
// loop awaiting anything at all), so the output pool (lib/alloc.ts) gets the outputs V8 collected back;
// "synchronous loop" never yields, so no output can come back before it ends and every call meets fresh memory.
// The child is this file run as a script: `node dist/bench/fresh.js <kernel> <reps> <threads>`.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

import { setThreads } from "../backend.js";
import { fusedPolicyLoss } from "../rl/logits.js";
import { gae } from "../rl/gae.js";
import { groupAdvantages } from "../rl/groupAdvantages.js";
import { policyLoss } from "../rl/policyLoss.js";
import { reinforceReturns } from "../rl/reinforceReturns.js";
import { median } from "./measure.js";
import { fusedBatch, policyLossBatch } from "./policyLoss.js";
import { gaeBatch } from "./gae.js";
import { grpoBatch } from "./groupAdvantages.js";
import { reinforceBatch } from "./reinforceReturns.js";

/** The default calls at the benchmark's sizes, by kernel name (the names of lib/bench/index.ts). */
const CALLS: Record<string, () => () => unknown> = {
    gae: () => {
        const batch = gaeBatch();
        return () => gae(batch, { gamma: 1, lambda: 0.95, whiten: true, device: "cpu" });
    },
    reinforceReturns: () => {
        const batch = reinforceBatch();
        return () => reinforceReturns(batch, { gamma: 1, whiten: true, device: "cpu" });
    },
    groupAdvantages: () => {
        const batch = grpoBatch(1 << 20, 16, "adjacent");
        return () => groupAdvantages(batch, { device: "cpu" });
    },
    policyLoss: () => {
        const batch = policyLossBatch();
        return () => policyLoss(batch, { kl: { coef: 0.001, estimator: "k3" }, device: "cpu" });
    },
    fusedPolicyLoss: () => {
        const batch = fusedBatch();
        return () => fusedPolicyLoss(batch, { device: "cpu" });
    },
};

export interface FreshTiming {
    eventLoopMs: number;
    syncMs: number;
}

/** Times `kernel`'s default call in a fresh process; null (with the reason) when the child failed. */
export function timeFreshProcess(kernel: string, reps: number, threads: number): FreshTiming | { error: string } {
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), kernel, String(reps), String(threads)],
        { encoding: "utf8", timeout: 600_000 });
    const last = (r.stdout ?? "").trim().split("\n").pop() ?? "";
    try {
        return JSON.parse(last) as FreshTiming;
    } catch {
        return { error: `fresh-process run of ${kernel} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split("\n").pop()}` };
    }
}

async function child(kernel: string, reps: number, threads: number): Promise<void> {
    const make = CALLS[kernel];
    if (make === undefined) throw new RangeError(`fresh: kernel: expected one of ${Object.keys(CALLS).join(", ")}, got "${kernel}"`);
    setThreads(threads);
    const call = make();
    const time = () => {
        const t0 = process.hrtime.bigint();
        call();
        return Number(process.hrtime.bigint() - t0) / 1e6;
    };
    const sync: number[] = [];  // first, while the process is fresh
    for (let i = 0; i < reps; i++) sync.push(time());
    const eventLoop: number[] = [];
    for (let i = 0; i < reps; i++) {
        await new Promise((resolve) => setImmediate(resolve));
        eventLoop.push(time());
    }
    console.log(JSON.stringify({ eventLoopMs: median(eventLoop), syncMs: median(sync) }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
    const [kernel, reps, threads] = process.argv.slice(2);
    await child(kernel ?? "", Number(reps ?? 30), Number(threads ?? 2));
}

/** Kernels with a fresh-process row. */
export const FRESH_KERNELS = Object.keys(CALLS);
