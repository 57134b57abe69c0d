// rolloutFleet.test.ts: the job's rollouts sampled on a fleet of `maporl serve` processes it starts on its base
// (config rolloutFleet), the agents' LoRA adapters trained in process and pushed after every update. On-policy on a
// float32 fleet the sampler is the trainer (the mismatch is rounding); with maxStaleness 1 the rows lag by at most one
// version; an int8 fleet samples a different policy and the mismatch says so; the servers are gone when the job ends.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { resolveConfig } from "../../lib/train/job/config.js";
import { trainJob } from "../../lib/train/job/job.js";
import { tinyHfModel } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-train-fleet-"));
const modelDir = join(work, "tiny-llama");
afterAll(() => rmSync(work, { recursive: true, force: true }));
beforeAll(() => tinyHfModel(modelDir, 3, { hidden_size: 64, intermediate_size: 128 }));

interface TrainLine {
    iteration: number;
    staleness: number;
    policyVersion: number;
    stalenessMean?: number;
    failed?: unknown[];
    agents: { mismatchK3?: number; updates: number }[];
}

async function fleetJob(
    name: string,
    extra: Record<string, unknown>,
): Promise<{ out: string; lines: TrainLine[]; logs: string[] }> {
    const out = join(work, name),
        logs: string[] = [];
    await trainJob({
        out,
        log: (s) => logs.push(s),
        config: {
            model: { dir: modelDir, contextLength: 256 },
            lora: { rank: 2, alpha: 4 },
            iterations: 4,
            episodesPerIteration: 4,
            evalEpisodes: 3,
            evalEvery: 100,
            agents: 2,
            turns: 2,
            controls: false,
            sampling: { temperature: 1, maxTokens: 6 },
            lr: 1e-2,
            seed: 2,
            ...extra,
        },
    });
    const lines = readFileSync(join(out, "metrics.jsonl"), "utf8")
        .split("\n")
        .filter((l) => l.includes('"kind":"train"'))
        .map((l) => JSON.parse(l) as TrainLine);
    return { out, lines, logs };
}

describe("rollouts on a fleet (rolloutFleet)", () => {
    it("on-policy on a float32 fleet: every row sampled by the version that trains it, the mismatch below 1e-10", async () => {
        const { out, lines, logs } = await fleetJob("onpolicy", { rolloutFleet: { serve: 2 } });
        expect(lines.map((l) => [l.staleness, l.policyVersion])).toEqual([
            [0, 0],
            [0, 1],
            [0, 2],
            [0, 3],
        ]);
        for (const l of lines) {
            expect(l.failed).toBeUndefined();
            const k3 = l.agents[0].mismatchK3!;
            expect(k3, `iteration ${l.iteration}`).toBeLessThan(1e-10); // measured: 0 to 1.4e-14
            expect(l.agents[0].updates).toBeGreaterThan(0);
        }
        expect(existsSync(join(out, "fleet"))).toBe(false); // the pushed adapters are removed, the servers stopped
        // every trace names the served version that sampled each trained answer: iteration i + 1 trains on policy
        // version i, the fleet's (i + 1)-th push of the adapter ("actor-0-v<i + 1>-<id>")
        const traces = readFileSync(join(out, "traces.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as { iteration: number; turns: { model?: string }[][] });
        for (const t of traces) {
            const served = t.turns.slice(1).flatMap((turn) => turn.map((e) => e.model));
            expect(served.length).toBeGreaterThan(0);
            for (const m of served) expect(m).toMatch(new RegExp(`^actor-0-v${t.iteration}-[0-9a-f]{8}$`));
            // turn 0 is the frozen base's (separateTurn0), served as "base"
            expect(t.turns[0].map((e) => e.model)).toEqual(["base", "base"]);
        }
        expect(logs.join("\n")).toMatch(
            /rollout fleet: 2 maporl serve process\(es\) on .* \(float32, 1 thread\(s\) each\)/,
        );
    }, 120_000);

    it("maxStaleness 1: rows lag by at most one version, and the lag is what the mismatch measures", async () => {
        // turn 0 trained too: a rollout launched ahead asks for the version current at its launch for its first turn
        const { lines } = await fleetJob("async", {
            rolloutFleet: { serve: 2 },
            separateTurn0: false,
            asyncRollout: { maxStaleness: 1 },
            rolloutCorrection: { rolloutIs: "token", rolloutIsThreshold: 2 },
        });
        expect(lines.map((l) => l.staleness)).toEqual([0, 1, 1, 1]);
        for (const l of lines) {
            expect(l.staleness).toBeGreaterThanOrEqual(0);
            expect(l.staleness).toBeLessThanOrEqual(1);
            expect(l.policyVersion).toBe(l.iteration - 1 - l.staleness);
            expect(l.stalenessMean!).toBeLessThanOrEqual(l.staleness);
            // an on-policy iteration's rows are the trainer's to rounding; a stale one's are not
            const k3 = l.agents[0].mismatchK3!;
            if (l.stalenessMean === 0) expect(k3).toBeLessThan(1e-5);
            else expect(k3).toBeGreaterThan(1e-6);
        }
    }, 120_000);

    it("MAGRPO on a fleet: the joint-action trees sampled by the served versions, on-policy then one version behind", async () => {
        const magrpo = {
            algo: "magrpo",
            iterations: 3,
            magrpo: { generations: 2 },
            separateTurn0: false,
            // the random model's answers all score 0: DAPO's length penalty gives the trees rewards to compare, so
            // every update moves the adapter
            overlong: { buffer: 5, penaltyFactor: 1 },
            // MAGRPO measures the mismatch when it corrects (one more forward)
            rolloutCorrection: { rolloutIs: "token", rolloutIsThreshold: 2 },
        };
        const on = await fleetJob("magrpo-onpolicy", { ...magrpo, rolloutFleet: { serve: 2 } });
        expect(on.lines.map((l) => [l.staleness, l.policyVersion])).toEqual([
            [0, 0],
            [0, 1],
            [0, 2],
        ]);
        for (const l of on.lines) {
            expect(l.failed).toBeUndefined();
            for (const a of l.agents) {
                expect(a.updates).toBeGreaterThan(0);
                // every answer of every tree sampled by the version that trains on it: rounding only
                expect(a.mismatchK3!, `iteration ${l.iteration}`).toBeLessThan(1e-10);
            }
        }
        // the traces' answers (each tree's first path) name iteration i + 1's version of the agents' shared adapter
        const traces = readFileSync(join(on.out, "traces.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as { iteration: number; turns: { model?: string }[][] });
        for (const t of traces)
            for (const turn of t.turns)
                for (const e of turn) expect(e.model).toMatch(new RegExp(`^actor-0-v${t.iteration}-[0-9a-f]{8}$`));

        const lag = await fleetJob("magrpo-async", {
            ...magrpo,
            rolloutFleet: { serve: 2 },
            asyncRollout: { maxStaleness: 1 },
        });
        expect(lag.lines.map((l) => l.staleness)).toEqual([0, 1, 1]);
        for (const l of lag.lines) {
            expect(l.policyVersion).toBe(l.iteration - 1 - l.staleness);
            const k3 = Math.max(...l.agents.map((a) => a.mismatchK3!));
            if (l.stalenessMean === 0) expect(k3).toBeLessThan(1e-5);
            else expect(k3).toBeGreaterThan(1e-6);
        }
    }, 180_000);

    it("an int8 fleet samples another policy than the float32 trainer: the mismatch is measured", async () => {
        const { lines } = await fleetJob("int8", { iterations: 2, rolloutFleet: { serve: 1, dtype: "int8" } });
        for (const l of lines) {
            expect(l.staleness).toBe(0);
            // measured (W8A8 servers): 1.6e-6 and 1.1e-6 per token, against at most 1.4e-14 for the float32 fleet above
            expect(l.agents[0].mismatchK3!).toBeGreaterThan(1e-8);
        }
    }, 120_000);

    it("a server the job started stops when the job's process is killed (MAPORL_EXIT_WITH_PARENT)", async () => {
        // a parent that starts one server as the job does, prints its pid, and waits to be killed
        const script = `
            import { startServeProcess } from ${JSON.stringify(join(import.meta.dirname, "..", "..", "dist", "serve", "serveProcess.js"))};
            const s = await startServeProcess(${JSON.stringify(modelDir)}, ["--threads", "1"], undefined, { MAPORL_EXIT_WITH_PARENT: "1" });
            console.log("child " + s.proc.pid);
            setInterval(() => {}, 1000);`;
        const parent = spawn(process.execPath, ["--input-type=module", "-e", script], {
            stdio: ["ignore", "pipe", "inherit"],
        });
        const pid = await new Promise<number>((res, rej) => {
            let out = "";
            parent.stdout.on("data", (c: Buffer) => {
                out += c.toString();
                const m = /child (\d+)/.exec(out);
                if (m) res(Number(m[1]));
            });
            parent.once("exit", () => rej(new Error(`parent exited first: ${out}`)));
        });
        const alive = () => {
            try {
                process.kill(pid, 0);
                return true;
            } catch {
                return false;
            }
        };
        expect(alive()).toBe(true);
        parent.kill("SIGKILL");
        const t0 = Date.now();
        while (alive() && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 100));
        const gone = !alive();
        if (!gone) process.kill(pid, "SIGKILL");
        expect(gone).toBe(true);
    }, 60_000);

    it("config errors name the key", () => {
        expect(() => resolveConfig({ rolloutFleet: { serve: 2 } })).toThrow(
            /rolloutFleet: a fleet samples LoRA adapters on a Hugging Face base; give model.dir/,
        );
        expect(() => resolveConfig({ rolloutFleet: { endpoints: ["ftp://x"] } })).toThrow(
            /rolloutFleet.endpoints: expected an array of at most 64 http\(s\) base URLs/,
        );
        expect(() => resolveConfig({ rolloutFleet: { endpoints: "http://x/v1" } })).toThrow(/rolloutFleet.endpoints/);
        expect(() => resolveConfig({ rolloutFleet: { serve: 17 } })).toThrow(
            /rolloutFleet.serve: expected an integer in \[0, 16\]/,
        );
        expect(() => resolveConfig({ rolloutFleet: { dtype: "fp8" } })).toThrow(/rolloutFleet.dtype: expected one of/);
        expect(() =>
            resolveConfig({
                model: { dir: modelDir },
                sft: { steps: 10 },
                rolloutFleet: { endpoints: ["http://h/v1"] },
            }),
        ).toThrow(/rolloutFleet.endpoints: your servers serve model.dir, and the warm start/);
    });
});
