// fuzz.test.ts: 10,000+ randomized calls at the public API per SIMD level (test/fuzz/driver.mjs: every kernel and
// its async twin, a NativePolicy, the debate layer over failing policies and a failing loopback server), each
// level in a child process under a timeout. A crash (a signal or an unexpected exit), a hang (the timeout), a
// thrown non-Error or a result of the wrong shape fails the test and prints the reproducer: the call the driver
// wrote before making it. Only the levels this CPU has are listed (a higher one would run the CPU's level again).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { backend } from "../../lib/index.js";

const driver = join(import.meta.dirname, "driver.mjs");
const levels = ["scalar", "avx2", "avx512"];
const best = levels.indexOf(backend().simd);
const CALLS = 10_000;

describe("fuzz at the public API", () => {
    for (const [k, simd] of levels.slice(0, best + 1).entries())
        it(`${simd}: ${CALLS} kernel calls, a NativePolicy and failing debates: no crash, no hang`, () => {
            const repro = join(mkdtempSync(join(tmpdir(), "maporl-fuzz-")), "repro.jsonl");
            const r = spawnSync(process.execPath, [driver, String(17 + k), String(CALLS), repro], {
                encoding: "utf8",
                timeout: 300_000,
                killSignal: "SIGKILL",
                env: { ...process.env, MAPORL_SIMD: simd },
            });
            const last = existsSync(repro) ? readFileSync(repro, "utf8").trim().split("\n").at(-1) : "(none)";
            const why = r.error?.message.includes("ETIMEDOUT")
                ? "hung (killed after 300 s)"
                : r.signal
                  ? `crashed (${r.signal})`
                  : `exited ${r.status}`;
            expect(
                r.status,
                `${simd}: ${why}; stderr: ${r.stderr.slice(-2000)}\nreproducer (the last call made): ${last}`,
            ).toBe(0);
            const counts = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as {
                calls: number;
                ok: number;
                threw: number;
                simd: string;
                seconds: number;
            };
            console.log(`fuzz ${simd}: ${JSON.stringify(counts)}`);
            expect(counts.simd).toBe(simd);
            expect(counts.calls).toBeGreaterThanOrEqual(CALLS);
            expect(counts.ok).toBeGreaterThan(counts.calls / 4); // most calls reach the kernels, not only the argument checks
        }, 320_000);
});
