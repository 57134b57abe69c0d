// damaged.test.ts: resume never goes on silently from damaged state. A small run completes; copies of its run
// directory are damaged as a disk or a hostile user would (64 bytes flipped inside a model's weights, state.json
// truncated or without its own sha256, metrics.jsonl shortened or edited) and resumed through the real CLI: a
// damaged newest checkpoint falls back to checkpoint.old (which verifies; the run then ends with the undamaged run's
// summary and logs, saying which file was damaged), and when no checkpoint verifies, or a log is not what the
// checkpoint recorded, the CLI stops with an error naming the file.
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { metricsWithoutTimings, summaryWithoutTimings } from "../helpers/runs.js";

const root = join(import.meta.dirname, "..", "..");
const cli = join(root, "dist", "cli.js");
const work = mkdtempSync(join(tmpdir(), "maporl-damaged-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const config = {
    iterations: 2,
    episodesPerIteration: 4,
    evalEpisodes: 8,
    evalEvery: 2,
    controls: false,
    sft: { steps: 20, batchSize: 8 },
    model: { layers: 1, heads: 2, dModel: 16, contextLength: 64 },
    critic: { layers: 1, heads: 2, dModel: 16 },
    seed: 2,
};
const done = join(work, "done");

function train(args: string[]) {
    return spawnSync(process.execPath, [cli, "train", ...args], { encoding: "utf8", timeout: 240_000 });
}
const read = (dir: string, f: string) => readFileSync(join(dir, f), "utf8");
// The logs without their wall-clock records (stage timings), which differ between any two runs.
const same = (dir: string, f: "summary.json" | "metrics.jsonl") =>
    f === "summary.json" ? summaryWithoutTimings(read(dir, f)) : metricsWithoutTimings(read(dir, f));

function copy(name: string): string {
    const dir = join(work, name);
    cpSync(done, dir, { recursive: true });
    rmSync(join(dir, "summary.json")); // the resumed run writes it again
    return dir;
}

function flip(file: string, at: number, n = 64) {
    const b = readFileSync(file);
    for (let i = at; i < at + n; i++) b[i] = b[i] ^ 0x5a;
    writeFileSync(file, b);
}

beforeAll(() => {
    writeFileSync(join(work, "config.json"), JSON.stringify(config));
    const r = train(["--config", join(work, "config.json"), "--out", done]);
    expect(r.status, r.stderr).toBe(0);
}, 240_000);

describe("train: resume from damaged state", () => {
    it("64 flipped bytes in a model's weights: the checkpoint is refused, checkpoint.old is used, the run ends as the undamaged one", () => {
        const dir = copy("flipped");
        flip(join(dir, "checkpoint", "base", "model.safetensors"), 2000);
        const r = train(["--resume", dir]);
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout + r.stderr).toMatch(
            /checkpoint\/base\/model\.safetensors: SHA-256 does not match.*resuming from .*checkpoint\.old/,
        );
        expect(same(dir, "summary.json")).toEqual(same(done, "summary.json"));
        expect(same(dir, "metrics.jsonl")).toBe(same(done, "metrics.jsonl"));
    });

    // Deleting state.json's own "sha256" once turned every check off ("written before checksums"), so a flipped
    // weight byte was trained on. A state.json without it is damaged like any other.
    const unsign = (file: string) => {
        const { sha256: _drop, ...rest } = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
        writeFileSync(file, JSON.stringify(rest));
    };
    it("state.json's sha256 deleted and a weight byte flipped: the checkpoint is damaged, checkpoint.old is used, the run ends as the undamaged one", () => {
        const dir = copy("unsigned");
        unsign(join(dir, "checkpoint", "state.json"));
        flip(join(dir, "checkpoint", "base", "model.safetensors"), 2000, 1);
        const r = train(["--resume", dir]);
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout + r.stderr).toMatch(
            /checkpoint\/state\.json: no sha256 of its own \(every checkpoint is written with one: damaged or edited\).*resuming from .*checkpoint\.old/,
        );
        expect(same(dir, "summary.json")).toEqual(same(done, "summary.json"));
        expect(same(dir, "metrics.jsonl")).toBe(same(done, "metrics.jsonl"));
    });

    it("both state.json files without their sha256: an error naming both, nothing resumed", () => {
        const dir = copy("unsigned-both");
        unsign(join(dir, "checkpoint", "state.json"));
        unsign(join(dir, "checkpoint.old", "state.json"));
        const before = read(dir, "metrics.jsonl");
        const r = train(["--resume", dir]);
        expect(r.status).toBe(1);
        expect(r.stderr).toMatch(
            /no checkpoint verifies, refusing to resume \(.*checkpoint\/state\.json: no sha256 of its own.*checkpoint\.old\/state\.json: no sha256 of its own/,
        );
        expect(read(dir, "metrics.jsonl")).toBe(before);
    });

    it("both checkpoints damaged: an error naming the files, nothing resumed", () => {
        const dir = copy("both");
        flip(join(dir, "checkpoint", "base", "model.safetensors"), 3000);
        truncateSync(join(dir, "checkpoint.old", "state.json"), 40);
        const before = read(dir, "metrics.jsonl");
        const r = train(["--resume", dir]);
        expect(r.status).not.toBe(0);
        expect(r.stderr).toMatch(
            /no checkpoint verifies, refusing to resume \(.*checkpoint\/base\/model\.safetensors: SHA-256 does not match.*checkpoint\.old\/state\.json: not valid JSON/,
        );
        expect(read(dir, "metrics.jsonl")).toBe(before); // the logs are left as they were
    });

    it("a truncated state.json: checkpoint.old is used, saying so", () => {
        const dir = copy("state");
        truncateSync(join(dir, "checkpoint", "state.json"), 100);
        const r = train(["--resume", dir]);
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout + r.stderr).toMatch(
            /checkpoint\/state\.json: not valid JSON \(truncated or damaged\).*resuming from/,
        );
        expect(same(dir, "summary.json")).toEqual(same(done, "summary.json"));
    });

    it("a metrics.jsonl shorter than recorded, or edited: an error naming it", () => {
        const short = copy("short");
        const m = join(short, "metrics.jsonl");
        truncateSync(m, readFileSync(m).length - 300);
        const r = train(["--resume", short]);
        expect(r.status).not.toBe(0);
        expect(r.stderr).toMatch(/metrics\.jsonl is \d+ bytes, shorter than the \d+ its checkpoint records/);
        expect(readFileSync(m).includes(0)).toBe(false); // never padded with NUL bytes
        const edited = copy("edited");
        flip(join(edited, "metrics.jsonl"), 10, 1);
        const e = train(["--resume", edited]);
        expect(e.status).not.toBe(0);
        expect(e.stderr).toMatch(/metrics\.jsonl do not match its checkpoint's SHA-256/);
    });
});
