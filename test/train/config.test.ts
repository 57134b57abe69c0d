// config.test.ts: the training config is validated key by key: an unknown or misspelled key is an error naming its
// path (with the closest known key), and wrong types, ranges and combinations are errors naming the parameter.
import { describe, expect, it } from "vitest";

import { spawnSync } from "node:child_process";
import { mkdtempSync, existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { backend } from "../../lib/backend.js";
import {
    configFromFlags,
    DEFAULT_CONFIG,
    MAGRPO_DEFAULTS,
    mergePartial,
    resolveConfig,
} from "../../lib/train/job/config.js";
import { trainJob } from "../../lib/train/job/job.js";

describe("train config", () => {
    it("docs/training.md's Config keys table lists every key with its default, and nothing else", () => {
        const doc = readFileSync(
            join(dirname(fileURLToPath(import.meta.url)), "..", "..", "docs", "training.md"),
            "utf8",
        );
        const rows = new Map([...doc.matchAll(/^\| `([\w.]+)` \| `([^`]*)` \|/gm)].map((m) => [m[1], m[2]] as const));
        const leaves: [string, string][] = [];
        const walk = (o: object, prefix: string) => {
            for (const [k, v] of Object.entries(o) as [string, unknown][])
                if (v !== null && typeof v === "object" && !Array.isArray(v)) walk(v, `${prefix}${k}.`);
                else leaves.push([`${prefix}${k}`, JSON.stringify(v)]);
        };
        walk(DEFAULT_CONFIG, "");
        expect(leaves.length).toBeGreaterThan(60);
        expect([...rows.keys()].sort()).toEqual(leaves.map(([k]) => k).sort());
        for (const [k, v] of leaves) expect(rows.get(k), k).toBe(v);
    });

    it("fills the defaults and keeps what is given", () => {
        expect(resolveConfig({})).toEqual(DEFAULT_CONFIG);
        const c = resolveConfig({ algo: "magrpo", maporl: { klCoef: 0.01 }, model: { layers: 3 } });
        expect(c.algo).toBe("magrpo");
        expect(c.maporl.klCoef).toBe(0.01);
        expect(c.maporl.discount).toBe(DEFAULT_CONFIG.maporl.discount);
        expect(c.model).toEqual({ ...DEFAULT_CONFIG.model, layers: 3 });
    });

    it("magrpo gets its own defaults (16 questions, G = 2) where the config leaves them, and keeps what is given", () => {
        const d = resolveConfig({ algo: "magrpo" });
        expect([d.episodesPerIteration, d.magrpo.generations]).toEqual([
            MAGRPO_DEFAULTS.episodesPerIteration,
            MAGRPO_DEFAULTS.generations,
        ]);
        const g = resolveConfig({ algo: "magrpo", episodesPerIteration: 32, magrpo: { generations: 4 } });
        expect([g.episodesPerIteration, g.magrpo.generations]).toEqual([32, 4]);
        expect(resolveConfig({ algo: "maporl" }).episodesPerIteration).toBe(DEFAULT_CONFIG.episodesPerIteration);
    });

    it("tool-lookup: its own defaults where unset (2 agents, 2 turns, turn 0 trained); its shape checked", () => {
        expect(resolveConfig({ task: "tool-lookup" })).toMatchObject({ agents: 2, turns: 2, separateTurn0: false });
        expect(resolveConfig({ task: "tool-lookup", turns: 3, separateTurn0: true })).toMatchObject({
            turns: 3,
            separateTurn0: true,
        });
        expect(() => resolveConfig({ task: "tool-lookup", agents: 3 })).toThrow(
            /agents: tool-lookup has two roles \(researcher, solver\), got 3/,
        );
        expect(() => resolveConfig({ task: "tool-lookup", turns: 1 })).toThrow(/turns: tool-lookup needs turns >= 2/);
        expect(() => resolveConfig({ taskOptions: { keyUse: 1.5 } })).toThrow(/taskOptions\.keyUse/);
    });

    it("replay: off by default, its keys checked, accepted by every algorithm", () => {
        expect(DEFAULT_CONFIG.replay.enabled).toBe(false);
        expect(resolveConfig({ replay: { enabled: true, every: 3 } }).replay).toEqual({
            ...DEFAULT_CONFIG.replay,
            enabled: true,
            every: 3,
        });
        expect(() => resolveConfig({ replay: { every: 0 } })).toThrow(/replay\.every/);
        expect(resolveConfig({ algo: "magrpo", replay: { enabled: true } }).replay.enabled).toBe(true);
    });

    it("rejects unknown or misspelled keys by path, suggesting the closest", () => {
        expect(() => resolveConfig({ iteration: 5 })).toThrow(
            /config: iteration: unknown key \(did you mean iterations\?\)/,
        );
        expect(() => resolveConfig({ maporl: { klcoef: 1 } })).toThrow(
            /config: maporl\.klcoef: unknown key \(did you mean klCoef\?\)/,
        );
        expect(() => resolveConfig({ maporl: { bonus: { persuade: 1 } } })).toThrow(
            /maporl\.bonus\.persuade: unknown key/,
        );
        expect(() => resolveConfig({ zzzzzzzz: 1 })).toThrow(/zzzzzzzz: unknown key; known: task,/);
    });

    it("rejects wrong types, ranges and combinations naming the parameter", () => {
        expect(() => resolveConfig({ agents: 1 })).toThrow(/agents: expected an integer in \[2, 8\], got 1/);
        expect(() => resolveConfig({ lr: NaN })).toThrow(/lr: expected a number in \[0, 1\], got NaN/);
        expect(() => resolveConfig({ lr: "0.1" })).toThrow(/lr: expected a number in \[0, 1\], got "0.1"/);
        expect(() => resolveConfig({ algo: "ppo" })).toThrow(
            /algo: expected one of 'maporl', 'magrpo', 'collm-cc', 'collm-dc', got "ppo"/,
        );
        expect(() => resolveConfig({ controls: 1 })).toThrow(/controls: expected true or false, got 1/);
        expect(() => resolveConfig({ model: 3 })).toThrow(/model: expected an object, got number/);
        expect(() => resolveConfig({ model: { dModel: 66, heads: 4 } })).toThrow(
            /model\.dModel: expected a multiple of model\.heads \(4\), got 66/,
        );
        expect(() => resolveConfig({ schedule: "alternating" })).toThrow(
            /'alternating' freezes one agent at a time and needs shareParameters: false/,
        );
        expect(resolveConfig({ schedule: "alternating", shareParameters: false }).schedule).toBe("alternating");
        expect(() => resolveConfig({ schedule: "turn-based", turns: 1, separateTurn0: false })).toThrow(
            /'turn-based' needs turns >= 2/,
        );
        expect(() => resolveConfig({ turns: 1 })).toThrow(/separateTurn0: needs turns >= 2/);
        expect(() => resolveConfig({ task: "split-sum" })).toThrow(
            /agents: split-sum.s warm start is written for 2 agents, got 3/,
        );
        expect(resolveConfig({ task: "split-sum", agents: 2 }).task).toBe("split-sum");
        expect(resolveConfig({ turns: 1, separateTurn0: false }).turns).toBe(1);
        expect(() => resolveConfig([])).toThrow(/^config: expected an object, got an array$/);
    });

    it("CLI flags: dotted keys reach nested ones, numbers and booleans are parsed", () => {
        const p = configFromFlags({ "maporl.klCoef": "0.01", agents: "2", controls: "false", algo: "collm-cc" });
        expect(p).toEqual({ maporl: { klCoef: 0.01 }, agents: 2, controls: false, algo: "collm-cc" });
        const merged = mergePartial({ maporl: { discount: 0.5 }, seed: 3 }, p);
        expect(resolveConfig(merged).maporl).toMatchObject({ klCoef: 0.01, discount: 0.5 });
        expect(() => resolveConfig(configFromFlags({ "maporl.klCoeff": "1" }))).toThrow(
            /maporl\.klCoeff: unknown key \(did you mean klCoef\?\)/,
        );
    });

    it("device: cpu by default, cuda and auto accepted, anything else named; cuda without a GPU fails before the run directory", async () => {
        expect(resolveConfig({}).device).toBe("cpu");
        expect(resolveConfig({ device: "auto" }).device).toBe("auto");
        expect(() => resolveConfig(configFromFlags({ device: "gpu" }))).toThrow(
            /device: expected one of 'cpu', 'cuda', 'auto', got "gpu"/,
        );
        expect(resolveConfig({}).matmulPrecision).toBe("highest");
        expect(resolveConfig(configFromFlags({ matmulPrecision: "high" })).matmulPrecision).toBe("high");
        expect(() => resolveConfig({ matmulPrecision: "medium" })).toThrow(
            /matmulPrecision: expected one of 'highest', 'high', got "medium"/,
        );
        // The CLI reports a bad value before it names (or makes) a run directory.
        const cwd = mkdtempSync(join(tmpdir(), "maporl-cli-"));
        const cli = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist", "cli.js");
        const r = spawnSync(process.execPath, [cli, "train", "--iterations", "abc"], {
            cwd,
            encoding: "utf8",
            timeout: 60_000,
        });
        expect(r.status).not.toBe(0);
        expect(r.stderr + r.stdout).toMatch(/iterations: expected an integer in \[0, 10000000\], got "abc"/);
        expect(r.stdout).not.toMatch(/run directory/);
        expect(existsSync(join(cwd, "runs"))).toBe(false);
        if (backend().cuda.devices.length > 0) return; // (a GPU machine can run it; the trainers' tests cover the rest)
        const out = join(mkdtempSync(join(tmpdir(), "maporl-dev-")), "run");
        await expect(trainJob({ out, config: { device: "cuda", iterations: 1 } })).rejects.toMatchObject({
            code: "MAPORL_ERR_NO_DEVICE",
        });
        expect(existsSync(out)).toBe(false);
    });
});
