// report.test.ts: a real (small) run's report.html opened in headless Chromium: the page loads offline with no
// console messages and no failed requests, and every chart has rendered lines (polylines with points in the
// live DOM), the before/after table and the transition matrices are there.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { trainJob } from "../../lib/train/job.js";

const work = mkdtempSync(join(tmpdir(), "maporl-report-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

describe("train: report.html", () => {
    it("renders in headless Chromium with every chart drawn and no console errors", async () => {
        expect(chromium, "Chromium is required (.ci/run installs Debian's chromium)").toBeDefined();
        const out = join(work, "run");
        await trainJob({ out, config: { iterations: 4, episodesPerIteration: 6, evalEpisodes: 12, evalEvery: 2, sft: { steps: 20, batchSize: 16 },
            model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 }, critic: { layers: 1, heads: 2, dModel: 32 } } });
        const html = readFileSync(join(out, "report.html"), "utf8");
        expect(html).not.toMatch(/<script|https?:\/\//);  // offline: nothing to fetch, nothing to run
        const r = spawnSync(chromium!, ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000", "--dump-dom", `file://${join(out, "report.html")}`],
        { encoding: "utf8", timeout: 120_000 });
        expect(r.status, r.stderr).toBe(0);
        const dom = r.stdout;
        // Console messages from the page appear as CONSOLE(...) lines; failed loads as net::ERR.
        expect(r.stderr.split("\n").filter((l) => /CONSOLE\(|Uncaught|net::ERR_/.test(l))).toEqual([]);
        const charts = [...dom.matchAll(/<svg class="chart"[\s\S]*?<\/svg>/g)].map((m) => m[0]);
        expect(charts.length).toBe(5);  // reward, accuracy per turn for each of 2 stages, KL, clip fraction
        for (const svg of charts) {
            const lines = [...svg.matchAll(/<polyline[^>]*points="([^"]*)"/g)].map((m) => m[1]!.trim().split(/\s+/).length);
            expect(lines.length).toBeGreaterThan(0);
            expect(Math.max(...lines)).toBeGreaterThanOrEqual(2);
        }
        expect(dom).toContain("untrained team");
        expect(dom).toContain("team co-trained by maporl");
        expect(dom).toContain("independent control");
        expect((dom.match(/class="tm"/g) ?? []).length).toBe(3 * 2);  // 3 evaluations x 2 turn transitions
    }, 300_000);
});
