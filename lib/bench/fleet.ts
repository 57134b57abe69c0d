// fleet.ts (bench): a load test of FleetPolicy on this machine against N local `maporl serve` processes (loopback, one
// model thread each): debates per second and completion tokens per second for 1, 2, 3 and 4 endpoints, against the same
// debates on the policy in-process (no HTTP, the machine's threads); then 3 endpoints with one killed (SIGKILL) a
// third of the way through: the throughput after the kill against the same stretch of the workload on 3 and on 2
// endpoints, and whether every transcript came back whole and equal to the in-process run (none lost, none
// duplicated). The model is the main job's GPT shape with random weights.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";

import { Debate } from "../debate/debate.js";
import type { Transcript } from "../debate/transcript.js";
import { FleetPolicy } from "../remote/fleet.js";
import { NativePolicy } from "../model/nativePolicy.js";
import { startServeProcess } from "../serve/serveProcess.js";
import type { Policy } from "../policy/types.js";
import { type BenchContext, type BenchRow } from "./types.js";

const Q = 24,
    TURNS = 3,
    AGENTS = 3,
    MAX_TOKENS = 32;
const items = Array.from({ length: Q }, (_, i) => ({
    id: `q${i}`,
    question: `What is ${i * 7} + ${i + 5}?`,
    reference: i * 8 + 5,
}));
const debate = (p: Policy) =>
    new Debate({
        agents: Array.from({ length: AGENTS }, () => p),
        turns: TURNS,
        sampling: { temperature: 1, maxTokens: MAX_TOKENS },
        seed: 1,
    });
const tokensOf = (ts: Transcript[]) =>
    ts.reduce((n, t) => n + t.turns.flat().reduce((m, e) => m + e.usage.completionTokens, 0), 0);
const key = (ts: Transcript[]) => JSON.stringify(ts.map((t) => t.turns.map((r) => r.map((e) => e.tokenIds))));

export async function benchFleet(ctx: BenchContext): Promise<BenchRow[]> {
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-fleet-"));
    const procs: ChildProcess[] = [];
    try {
        const model = await NativePolicy.create({
            contextLength: 2048,
            layers: 2,
            heads: 4,
            dModel: 64,
            seed: 0,
            name: "gpt",
        });
        await model.save(join(dir, "ckpt"));
        await debate(model).runBatch(items.slice(0, 2)); // warm-up
        const t0 = performance.now();
        const want = await debate(model).runBatch(items);
        const localMs = performance.now() - t0,
            tokens = tokensOf(want);
        await model.dispose();
        const size = `${Q} debates x ${AGENTS} agents x ${TURNS} turns, <= ${MAX_TOKENS} tokens, GPT 2x64`;
        const rate = (ms: number, n = tokens, q = Q) =>
            `${(q / (ms / 1e3)).toFixed(2)} debates/s, ${Math.round(n / (ms / 1e3))} tokens/s`;
        const rows: BenchRow[] = [
            {
                kernel: "fleet debates",
                size,
                impl: `in-process NativePolicy (${ctx.threads} threads, no HTTP)`,
                medianMs: localMs,
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: null,
                note: rate(localMs),
            },
        ];
        const servers = (
            await Promise.all([0, 1, 2, 3].map(() => startServeProcess(join(dir, "ckpt"), ["--threads", "1"])))
        ).map((s) => ({ url: s.baseUrl, proc: s.proc }));
        procs.push(...servers.map((s) => s.proc));
        // A run over `urls`, the completion tokens answered so far sampled every 20 ms; `kill` (tokens, process) kills
        // that server once that many tokens are answered.
        const timed = async (urls: string[], kill?: { after: number; proc: ChildProcess }) => {
            const fleet = new FleetPolicy({
                endpoints: urls,
                model: "gpt",
                healthCheckIntervalMs: 250,
                probeIntervalMs: 250,
            });
            await debate(fleet).runBatch(items.slice(0, 2)); // warm-up (and dialect detection)
            const base = fleet.stats().reduce((n, x) => n + x.completionTokens, 0),
                marks: { ms: number; tokens: number }[] = [];
            let killedAt = -1;
            const t = performance.now();
            const watch = setInterval(() => {
                const done = fleet.stats().reduce((n, x) => n + x.completionTokens, 0) - base;
                marks.push({ ms: performance.now() - t, tokens: done });
                if (kill && killedAt < 0 && done >= kill.after) {
                    killedAt = performance.now() - t;
                    kill.proc.kill("SIGKILL");
                }
            }, 20);
            const got = await debate(fleet).runBatch(items);
            const ms = performance.now() - t;
            clearInterval(watch);
            fleet.close();
            marks.push({ ms, tokens: tokensOf(got) });
            return { got, ms, marks, killedAt };
        };
        // Tokens per second from the moment `tokens` had been answered to the end of the run.
        const tail = (r: { ms: number; marks: { ms: number; tokens: number }[] }, tokens: number) => {
            const m = r.marks.find((x) => x.tokens >= tokens) ?? r.marks.at(-1)!;
            return (r.marks.at(-1)!.tokens - m.tokens) / ((r.ms - m.ms) / 1e3);
        };
        const runs = new Map<number, Awaited<ReturnType<typeof timed>>>();
        for (const n of [1, 2, 3, 4]) {
            const r = await timed(servers.slice(0, n).map((s) => s.url));
            runs.set(n, r);
            rows.push({
                kernel: "fleet debates",
                size,
                impl: `FleetPolicy, ${n} maporl serve endpoint${n > 1 ? "s" : ""} (1 thread each)`,
                medianMs: r.ms,
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: localMs,
                note: `${rate(r.ms, tokensOf(r.got))}; transcripts ${key(r.got) === key(want) ? "equal to" : "DIFFERENT FROM"} the in-process run`,
            });
        }
        // Three endpoints, one killed once a third of the tokens are answered; the rate after the kill against the same
        // stretch of the workload in the 3- and 2-endpoint runs.
        const k = await timed(
            servers.slice(0, 3).map((s) => s.url),
            { after: Math.round(tokens / 3), proc: servers[2]!.proc },
        );
        const at = k.marks.find((m) => m.ms >= k.killedAt)?.tokens ?? tokens;
        const errors = k.got.filter((x) => x.error).length,
            failovers = k.got.reduce((n, x) => n + x.turns.flat().filter((e) => (e.attempts ?? 1) > 1).length, 0);
        rows.push({
            kernel: "fleet debates",
            size,
            impl: "FleetPolicy, 3 endpoints, one SIGKILLed a third of the way",
            medianMs: k.ms,
            peakExtraBytes: null,
            bytesMoved: 0,
            baselineMs: localMs,
            note:
                `${rate(k.ms, tokensOf(k.got))}; after the kill ${Math.round(tail(k, at))} tokens/s, the same stretch with 3 endpoints ` +
                `${Math.round(tail(runs.get(3)!, at))}, with 2 ${Math.round(tail(runs.get(2)!, at))}; ${Q - errors}/${Q} debates whole, ${failovers} answers failed over, ` +
                `transcripts ${key(k.got) === key(want) ? "equal to" : "DIFFERENT FROM"} the in-process run`,
        });
        rows.forEach((r) => {
            r.note += `; ${cpus().length} cores`;
        });
        return rows;
    } finally {
        for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
        rmSync(dir, { recursive: true, force: true });
    }
}
