// fresh.ts (bench): the default call (no `out`) of each kernel as a user's first script meets it: in a fresh node
// process, at the benchmark's sizes, timed three ways. "event loop" yields to the event loop between calls (a training
// loop awaiting anything at all), so the output pool (lib/alloc.ts) gets the outputs V8 collected back;
// "synchronous loop" never yields, so no output can come back before it ends and every call meets fresh memory; and
// the call into reused `out` buffers in the same process and manner, the row the default call is held against.
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
import { fusedBatch, gaeBatch, grpoBatch, policyLossBatch, reinforceBatch } from "./batches.js";

/** The default call and the call into reused `out` buffers at the benchmark's sizes, by kernel name (the names of
 * lib/bench/index.ts). */
const CALLS: Record<string, () => { call: () => unknown; reused: () => unknown }> = {
    gae: () => {
        const batch = gaeBatch(),
            n = batch.rewards.length,
            opts = { gamma: 1, lambda: 0.95, whiten: true, device: "cpu" as const };
        const out = { advantages: new Float32Array(n), returns: new Float32Array(n) };
        return { call: () => gae(batch, opts), reused: () => gae(batch, { ...opts, out }) };
    },
    reinforceReturns: () => {
        const batch = reinforceBatch(),
            n = batch.rewards.length,
            opts = { gamma: 1, whiten: true, device: "cpu" as const };
        const out = { returns: new Float32Array(n), advantages: new Float32Array(n) };
        return { call: () => reinforceReturns(batch, opts), reused: () => reinforceReturns(batch, { ...opts, out }) };
    },
    groupAdvantages: () => {
        const batch = grpoBatch(1 << 20, 16, "adjacent"),
            out = new Float32Array(1 << 20);
        return {
            call: () => groupAdvantages(batch, { device: "cpu" }),
            reused: () => groupAdvantages(batch, { device: "cpu", out }),
        };
    },
    policyLoss: () => {
        const batch = policyLossBatch(),
            opts = { kl: { coef: 0.001, estimator: "k3" as const }, device: "cpu" as const };
        const out = { gradLogp: new Float32Array(batch.logp.length) };
        return { call: () => policyLoss(batch, opts), reused: () => policyLoss(batch, { ...opts, out }) };
    },
    fusedPolicyLoss: () => {
        const batch = fusedBatch(),
            [N, V] = batch.shape;
        const out = {
            gradLogits: new Float32Array(N * V),
            logp: new Float32Array(N),
            entropy: new Float32Array(N),
            gradLogp: new Float32Array(N),
        };
        return {
            call: () => fusedPolicyLoss(batch, { device: "cpu" }),
            reused: () => fusedPolicyLoss(batch, { device: "cpu", out }),
        };
    },
};

export interface FreshTiming {
    /** The default call, the event loop turning between calls. */
    eventLoopMs: number;
    /** The default call in a loop that never yields (first, while the process is fresh). */
    syncMs: number;
    /** The call into reused `out` buffers, the event loop turning between calls: the row the others compare with. */
    reusedMs: number;
}

/** Times `kernel`'s calls in a fresh process; `{ error }` (the child's last words) when it failed. */
export function timeFreshProcess(kernel: string, reps: number, threads: number): FreshTiming | { error: string } {
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), kernel, String(reps), String(threads)], {
        encoding: "utf8",
        timeout: 600_000,
    });
    const last = (r.stdout ?? "").trim().split("\n").pop() ?? "";
    try {
        return JSON.parse(last) as FreshTiming;
    } catch {
        return {
            error: `fresh-process run of ${kernel} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split("\n").pop()}`,
        };
    }
}

async function child(kernel: string, reps: number, threads: number): Promise<void> {
    const make = CALLS[kernel];
    if (make === undefined)
        throw new RangeError(`fresh: kernel: expected one of ${Object.keys(CALLS).join(", ")}, got "${kernel}"`);
    setThreads(threads);
    const { call, reused } = make();
    const time = (f: () => unknown) => {
        const t0 = process.hrtime.bigint();
        f();
        return Number(process.hrtime.bigint() - t0) / 1e6;
    };
    const sync: number[] = []; // first, while the process is fresh
    for (let i = 0; i < reps; i++) sync.push(time(call));
    const turns = async (f: () => unknown) => {
        const ms: number[] = [];
        for (let i = 0; i < reps; i++) {
            await new Promise((resolve) => setImmediate(resolve));
            ms.push(time(f));
        }
        return median(ms);
    };
    const eventLoopMs = await turns(call),
        reusedMs = await turns(reused);
    console.log(JSON.stringify({ eventLoopMs, syncMs: median(sync), reusedMs }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
    const [kernel, reps, threads] = process.argv.slice(2);
    await child(kernel ?? "", Number(reps ?? 30), Number(threads ?? 2));
}
