// doctor.test.ts: `maporl doctor` on this machine: every check passes, every SIMD level the CPU has is covered, and
// without a GPU the CUDA part says why it did not run (the real command, text and JSON).
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { backend } from "../../lib/index.js";
import { doctor } from "../../lib/doctor.js";

describe("maporl doctor", () => {
    it("passes on this installation and covers every SIMD level", async () => {
        const lines: string[] = [];
        const r = await doctor({ log: (l) => lines.push(l) });
        expect(r.failed).toBe(0);
        expect(r.passed).toBeGreaterThanOrEqual(6 * r.simd.length + 2);
        for (const level of r.simd)
            expect(r.checks.some((c) => c.name === `gae (${level})` && c.status === "pass")).toBe(true);
        expect(lines.at(-1)).toMatch(/doctor: \d+ passed, 0 failed/);
        if (backend().cuda.devices.length === 0) expect(r.checks.find((c) => c.name === "CUDA")?.status).toBe("skip");
        else expect(r.checks.filter((c) => c.name.startsWith("CUDA ")).length).toBeGreaterThanOrEqual(8);
    });

    it("the command prints a report to paste, or JSON, and exits 0", () => {
        const cli = join(import.meta.dirname, "..", "..", "dist", "cli.js");
        const text = spawnSync(process.execPath, [cli, "doctor"], { encoding: "utf8", timeout: 120_000 });
        expect(text.status).toBe(0);
        expect(text.stdout).toMatch(/^maporl \d+\.\d+\.\d+, node v/);
        expect(text.stdout).toMatch(/PASS {2}policyLoss ppo/);
        const json = spawnSync(process.execPath, [cli, "doctor", "--json"], { encoding: "utf8", timeout: 120_000 });
        expect(json.status).toBe(0);
        const r = JSON.parse(json.stdout) as { failed: number; checks: unknown[] };
        expect(r.failed).toBe(0);
        expect(r.checks.length).toBeGreaterThan(10);
    });
});
