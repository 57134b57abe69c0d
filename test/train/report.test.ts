// report.test.ts: a real (small) run's report.html opened in headless Chromium: the page loads offline with no
// console messages and no failed requests, every chart (Vega-Lite rendered to static SVG) has drawn lines with round
// axis ticks in the live DOM, held-out accuracy over the iterations is the first chart, the before/after table, the
// stage timings and the transition matrices are there, the config is collapsed. And a MAGRPO run's report leaves out
// the KL and clip-fraction charts, which are zero by construction there.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { resolveConfig } from "../../lib/train/job/config.js";
import { trainJob } from "../../lib/train/job/job.js";
import { writeReport } from "../../lib/train/job/report.js";

const work = mkdtempSync(join(tmpdir(), "maporl-report-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

describe("train: report.html", () => {
    it("renders in headless Chromium with every chart drawn and no console errors", async () => {
        expect(chromium, "Chromium is required (.ci/run installs Debian's chromium)").toBeDefined();
        const out = join(work, "run");
        await trainJob({
            out,
            config: {
                iterations: 4,
                episodesPerIteration: 6,
                evalEpisodes: 12,
                evalEvery: 2,
                sft: { steps: 20, batchSize: 16 },
                model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
                critic: { layers: 1, heads: 2, dModel: 32 },
            },
        });
        const html = readFileSync(join(out, "report.html"), "utf8");
        expect(html).not.toMatch(/<script|https?:\/\//); // offline: nothing to fetch, nothing to run
        const r = spawnSync(
            chromium!,
            [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=2000",
                "--dump-dom",
                `file://${join(out, "report.html")}`,
            ],
            { encoding: "utf8", timeout: 120_000 },
        );
        expect(r.status, r.stderr).toBe(0);
        const dom = r.stdout;
        // Console messages from the page appear as CONSOLE(...) lines; failed loads as net::ERR.
        expect(r.stderr.split("\n").filter((l) => /CONSOLE\(|Uncaught|net::ERR_/.test(l))).toEqual([]);
        const charts = [...dom.matchAll(/<figure><figcaption>([^<]*)<\/figcaption><svg[\s\S]*?<\/svg><\/figure>/g)];
        // held-out accuracy, reward, accuracy per turn for each of 2 stages, KL, clip fraction
        expect(charts.map((m) => m[1].split(" ")[0])).toEqual([
            "Held-out",
            "Reward",
            "Training",
            "Training",
            "KL",
            "Clip",
        ]);
        for (const [svg] of charts) {
            const paths = [...svg.matchAll(/class="mark-line role-mark[^"]*"[^>]*>([\s\S]*?)<\/g>/g)].flatMap((m) =>
                [...m[1].matchAll(/ d="M([^"]*)"/g)].map((d) => d[1].split("L").length),
            );
            expect(paths.length).toBeGreaterThan(0);
            expect(Math.max(...paths)).toBeGreaterThanOrEqual(2);
            const ticks = [...svg.matchAll(/role-axis-label[\s\S]*?<\/g>/g)].flatMap((m) =>
                [...m[0].matchAll(/>(-?[0-9.]+)<\/text>/g)].map((t) => t[1]),
            );
            expect(ticks.length).toBeGreaterThan(3);
            for (const t of ticks) expect(t.replace(/^-?\d+\.?/, "").length, `tick ${t}`).toBeLessThanOrEqual(4); // round ticks
        }
        // The first chart: a legend swatch for each line style, drawn in a colour (they were invisible); turn 1, answered
        // by the frozen turn-0 model in both stages (separateTurn0), drawn once as "every stage" (one stage's line hid
        // the other's); each series in its own colour.
        const first = charts[0][0];
        const dashLegend = first.slice(first.indexOf("Symbol legend for strokeDash"));
        const swatches = [...dashLegend.matchAll(/role-legend-symbol[^>]*><path [^>]*stroke="(#[0-9a-f]+)"/g)];
        expect(swatches.map((m) => m[1])).toEqual(["#444", "#444"]);
        expect(first).toContain(">every stage</text>");
        const colours = (svg: string) =>
            new Set(
                [...svg.matchAll(/class="mark-line role-mark[^"]*"[^>]*>([\s\S]*?)<\/g>/g)].flatMap((m) =>
                    [...m[1].matchAll(/ stroke="(#[0-9a-f]+)"/g)].map((c) => c[1]),
                ),
            );
        expect(colours(first).size).toBe(3); // every stage, maporl, independent
        expect(colours(charts[2][0]).size).toBe(3); // turns 1, 2, 3
        expect(colours(charts[2][0]).has("#d62728")).toBe(false); // no red beside orange
        expect(dom).toMatch(/<details><summary>Configuration<\/summary>/);
        expect(dom).toMatch(
            /<table class="timing">[\s\S]*<td>sft<\/td>[\s\S]*<td>maporl<\/td>[\s\S]*<td>independent<\/td>/,
        );
        expect(dom).toContain("untrained team");
        expect(dom).toContain("team co-trained by maporl");
        expect(dom).toContain("independent control");
        expect((dom.match(/class="tm"/g) ?? []).length).toBe(3 * 2); // 3 evaluations x 2 turn transitions
    }, 300_000);

    it("leaves out KL and clip fraction where they are zero by construction (MAGRPO)", async () => {
        const out = join(work, "magrpo");
        mkdirSync(out);
        const acc = (x: number) => [x, x + 0.1];
        const metrics = [
            { kind: "eval", stage: "sft", name: "untrained team", iteration: 0, majorityAccuracy: acc(0.3) },
            ...[1, 2, 3, 4].map((it) => ({
                kind: "train",
                stage: "magrpo",
                iteration: it,
                reward: 0.1 * it,
                accuracy: acc(0.1 * it),
                agents: [
                    { kl: 0, clipFrac: 0, updates: 1 },
                    { kl: 0, clipFrac: 0, updates: 1 },
                ],
            })),
            { kind: "eval", stage: "magrpo", name: "co-trained", iteration: 2, majorityAccuracy: acc(0.4) },
            { kind: "eval", stage: "magrpo", name: "co-trained", iteration: 4, majorityAccuracy: acc(0.5) },
        ];
        writeFileSync(join(out, "metrics.jsonl"), metrics.map((m) => JSON.stringify(m)).join("\n") + "\n");
        const config = { ...resolveConfig({ algo: "magrpo", turns: 2, agents: 2 }) };
        await writeReport(out, { config, rows: [], evals: {} });
        const html = readFileSync(join(out, "report.html"), "utf8");
        const titles = [...html.matchAll(/<figcaption>([^<]*)<\/figcaption>/g)].map((m) => m[1]);
        expect(titles.map((t) => t.split(" ")[0])).toEqual(["Held-out", "Reward", "Training"]);
        // the held-out curve: iterations 0 (the untrained team), 2 and 4, for turn 1 and turn 2
        const held = html.slice(html.indexOf("Held-out"), html.indexOf("Reward"));
        expect(
            [...held.matchAll(/class="mark-line role-mark[^"]*"[^>]*>([\s\S]*?)<\/g>/g)].flatMap((m) =>
                [...m[1].matchAll(/ d="M([^"]*)"/g)].map((d) => d[1].split("L").length),
            ),
        ).toEqual([3, 3]);
    });

    it("draws the rollout / trainer mismatch, the correction and the staleness where a run has them", async () => {
        const out = join(work, "offpolicy");
        mkdirSync(out);
        const acc = (x: number) => [x, x + 0.1];
        const agent = (it: number, measured: boolean) => ({
            kl: 0.01,
            clipFrac: 0.1,
            updates: 1,
            ...(measured ? { isCorrectedFraction: 0.01 * it, rsMaskedFraction: 0.005 } : {}),
            ...(measured && it !== 2 ? { mismatchK3: 0.002 * it } : {}), // iteration 2 without the figure
        });
        const metrics = [
            { kind: "eval", stage: "sft", name: "untrained team", iteration: 0, majorityAccuracy: acc(0.3) },
            ...[1, 2, 3, 4].map((it) => ({
                kind: "train",
                stage: "maporl",
                iteration: it,
                reward: 0.1 * it,
                accuracy: acc(0.1 * it),
                staleness: it === 1 ? 0 : 1,
                agents: [agent(it, true), agent(it, false)], // the second agent reports no figures: not counted
            })),
            { kind: "eval", stage: "maporl", name: "co-trained", iteration: 4, majorityAccuracy: acc(0.5) },
        ];
        writeFileSync(join(out, "metrics.jsonl"), metrics.map((m) => JSON.stringify(m)).join("\n") + "\n");
        await writeReport(out, { config: resolveConfig({ turns: 2, agents: 2 }), rows: [], evals: {} });
        const html = readFileSync(join(out, "report.html"), "utf8");
        const titles = [...html.matchAll(/<figcaption>([^<]*)<\/figcaption>/g)].map((m) => m[1] ?? "");
        expect(titles.map((t) => t.split(/[ :]/)[0])).toEqual([
            "Held-out",
            "Reward",
            "Training",
            "KL",
            "Clip",
            "Rollout",
            "Rollout",
            "Staleness",
        ]);
        // the iteration without a mismatch figure is left out, not spread over the moving average's next points
        const mm = html.slice(html.indexOf("Rollout / trainer mismatch"), html.indexOf("Rollout correction"));
        expect(
            [...mm.matchAll(/class="mark-line role-mark[^"]*"[^>]*>([\s\S]*?)<\/g>/g)].flatMap((m) =>
                [...(m[1] ?? "").matchAll(/ d="M([^"]*)"/g)].map((d) => (d[1] ?? "").split("L").length),
            ),
        ).toEqual([3]);
        // the correction chart has two series (IS corrected, rejected) for the one stage
        const chart = html.slice(html.indexOf("Rollout correction"), html.indexOf("Staleness"));
        expect(chart).toContain("maporl, IS corrected");
        expect(chart).toContain("maporl, rejected");
        // on-policy figures (k3 at float rounding) draw no mismatch chart
        const quiet = join(work, "onpolicy");
        mkdirSync(quiet);
        writeFileSync(
            join(quiet, "metrics.jsonl"),
            metrics
                .map((m) =>
                    m.kind === "train" && "agents" in m
                        ? {
                              ...m,
                              staleness: undefined,
                              agents: [{ kl: 0.01, clipFrac: 0.1, updates: 1, mismatchK3: 3e-7 }],
                          }
                        : m,
                )
                .map((m) => JSON.stringify(m))
                .join("\n") + "\n",
        );
        await writeReport(quiet, { config: resolveConfig({ turns: 2, agents: 2 }), rows: [], evals: {} });
        const q = readFileSync(join(quiet, "report.html"), "utf8");
        const quietTitles = [...q.matchAll(/<figcaption>([^<]*)<\/figcaption>/g)].map(
            (m) => (m[1] ?? "").split(/[ :]/)[0],
        );
        expect(quietTitles).toEqual(["Held-out", "Reward", "Training", "KL", "Clip"]);
    });
});
