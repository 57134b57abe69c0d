// docs.test.ts: `npm run docs` (TypeDoc over lib/index.ts, warnings are errors) builds the API reference from the
// TSDoc comments: it exits 0 and documents the main entry points.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const out = mkdtempSync(join(tmpdir(), "maporl-docs-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe("npm run docs", () => {
    it("builds the API reference without a warning", () => {
        const r = spawnSync(process.execPath, [join(root, "node_modules", "typedoc", "bin", "typedoc"), "--out", out], {
            cwd: root,
            encoding: "utf8",
            timeout: 240_000,
        });
        expect(r.status, r.stdout + r.stderr).toBe(0);
        expect(existsSync(join(out, "index.html"))).toBe(true);
        const pages = readdirSync(join(out, "functions")).concat(readdirSync(join(out, "classes")));
        for (const name of [
            "gae.html",
            "policyLoss.html",
            "trainJob.html",
            "NativePolicy.html",
            "Debate.html",
            "FleetPolicy.html",
        ])
            expect(pages).toContain(name);
    }, 240_000);
});
