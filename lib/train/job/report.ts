// report.ts: report.html of a run: one self-contained file (inline SVG and CSS, no script, no network) that opens
// offline in any browser. The charts are Vega-Lite specifications rendered to static SVG in Node by Vega itself
// (vega-lite compiles, vega's headless View draws: axes with round ticks, titles, legends): held-out accuracy over
// the iterations (the curve that matters), reward, training accuracy per turn, and KL and clip fraction where the
// method has them (MAGRPO's are zero by construction and left out). Then the before/after table, the stage timings,
// the held-out turn-to-turn transition matrices and the configuration (collapsed).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { parse, View } from "vega";
import { compile, type TopLevelSpec } from "vega-lite";

import type { TrainSummary } from "./types.js";

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** Series colours in order: hues told apart at a glance (category10 without its red next to orange). */
export const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];

/** One point of a chart: x, y, the series it belongs to and (optional) a second grouping drawn as the line's dash. */
export interface ChartPoint {
    x: number;
    y: number;
    series: string;
    dash?: string;
}

/**
 * A line chart as static SVG (Vega-Lite rendered by Vega, no script): quantitative x (`xTitle`) and y (`yTitle`), a
 * colour per series and, when points carry `dash`, a dash pattern per dash value. Non-finite points are dropped; with
 * none left the figure says "no data".
 */
export async function lineChart(
    title: string,
    points: ChartPoint[],
    xTitle: string,
    yTitle: string,
    yDomain?: [number, number],
    colors: Record<string, string> = {},
): Promise<string> {
    const values = points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
    if (!values.length) return `<figure><figcaption>${esc(title)}</figcaption><p>no data</p></figure>`;
    const dashed = values.some((p) => p.dash !== undefined);
    const series = [...new Set(values.map((p) => p.series))];
    // A flat chart (every value equal, e.g. accuracy 0 throughout) gets a domain around its value, not an empty one.
    const ys = values.map((p) => p.y),
        lo = Math.min(...ys),
        hi = Math.max(...ys);
    if (!yDomain && hi - lo < 1e-12)
        yDomain = [lo === 0 ? 0 : lo - 0.1 * Math.abs(lo), hi === 0 ? 1 : hi + 0.1 * Math.abs(hi)];
    const spec: TopLevelSpec = {
        width: 460,
        height: 220,
        background: "white",
        data: { values },
        mark: { type: "line", point: values.length <= 60, strokeWidth: 1.6 },
        encoding: {
            x: { field: "x", type: "quantitative", title: xTitle, axis: { tickMinStep: 1 } },
            y: {
                field: "y",
                type: "quantitative",
                title: yTitle,
                ...(yDomain ? { scale: { domain: yDomain } } : { scale: { zero: false } }),
            },
            color: {
                field: "series",
                type: "nominal",
                title: null,
                legend: { orient: "right" },
                scale: { domain: series, range: series.map((x, i) => colors[x] ?? PALETTE[i % PALETTE.length]!) },
            },
            ...(dashed
                ? {
                      // (the dash legend's swatches are drawn in a neutral colour: a line style, not a series)
                      strokeDash: {
                          field: "dash",
                          type: "nominal",
                          title: null,
                          // (both colours: with points on the line, vega-lite otherwise strokes the swatch transparent)
                          legend: {
                              symbolType: "stroke",
                              symbolSize: 400,
                              symbolStrokeWidth: 2,
                              symbolStrokeColor: "#444",
                              symbolFillColor: "#444",
                          },
                      },
                      detail: { field: "dash" },
                  }
                : {}),
        },
        config: {
            font: "system-ui, sans-serif",
            axis: { labelFontSize: 11, titleFontSize: 12 },
            legend: { labelFontSize: 11 },
        },
    };
    const view = new View(parse(compile(spec).spec), { renderer: "none" });
    const svg = (await view.toSVG()).replace(/ xmlns(:xlink)?="[^"]*"/g, ""); // inline in HTML: no namespaces needed
    view.finalize();
    return `<figure><figcaption>${esc(title)}</figcaption>${svg.replace("<svg ", `<svg role="img" aria-label="${esc(title)}" `)}</figure>`;
}

function readJsonl(file: string): Record<string, unknown>[] {
    return readFileSync(file, "utf8")
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Record<string, unknown>);
}

type TrainLine = {
    stage: string;
    iteration: number;
    reward: number;
    accuracy: number[];
    agents: {
        kl: number;
        clipFrac: number;
        updates: number;
        mismatchK3?: number;
        isCorrectedFraction?: number;
        rsMaskedFraction?: number;
    }[];
    /** Iterations between the policy that sampled and the one trained (asynchronous rollouts). */
    staleness?: number;
};
type EvalLine = { stage: string; name: string; iteration: number; majorityAccuracy: number[] };

const EVERY_STAGE = "every stage";

const fmtMs = (ms: number) =>
    ms >= 60_000
        ? `${Math.floor(ms / 60_000)} min ${String(Math.round(ms / 1000) % 60).padStart(2, "0")} s`
        : `${(ms / 1000).toFixed(1)} s`;

export async function writeReport(out: string, s: TrainSummary): Promise<void> {
    const lines = readJsonl(join(out, "metrics.jsonl"));
    const train = lines.filter((l) => l.kind === "train") as unknown as TrainLine[];
    const evals = lines.filter((l) => l.kind === "eval") as unknown as EvalLine[];
    const stages = [...new Set(train.map((l) => l.stage))];
    const T = s.config.turns;
    // A k-point moving average over the finite values of the window (an iteration without the figure is skipped, not
    // spread over the next k points).
    const smooth = (pts: [number, number][], k = 5): [number, number][] =>
        pts.map(([x, y], i) => {
            const w = pts.slice(Math.max(0, i - k + 1), i + 1).filter((p) => Number.isFinite(p[1]));
            return [x, Number.isFinite(y) && w.length ? w.reduce((a, p) => a + p[1], 0) / w.length : NaN];
        });
    const by = (
        f: (l: TrainLine) => number,
        stage: string,
        series = stage,
    ): { x: number; y: number; series: string }[] =>
        smooth(train.filter((l) => l.stage === stage).map((l) => [l.iteration, f(l)])).map(([x, y]) => ({
            x,
            y,
            series,
        }));
    const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    const trained = (l: TrainLine) => l.agents.filter((a) => a.updates > 0); // frozen partners would dilute the means
    // Held-out accuracy: every stage starts from the untrained team's evaluation (iteration 0).
    const untrained = evals.find((e) => e.stage === "sft");
    const heldOutOf = (st: string, t: number) =>
        [...(untrained ? [untrained] : []), ...evals.filter((e) => e.stage === st)].map((e) => ({
            x: e.iteration,
            y: e.majorityAccuracy[t] ?? NaN,
            series: st,
            dash: `turn ${t + 1}`,
        }));
    // Turn 1 is the same line for every stage when a frozen model answers it (separateTurn0): drawn once, in grey, as
    // "every stage" (one stage's line would hide the others').
    const first = stages.map((st) => heldOutOf(st, 0));
    const sameFirst =
        first.length > 1 &&
        first.every(
            (l) =>
                l.length === first[0]!.length && l.every((p, i) => p.x === first[0]![i]!.x && p.y === first[0]![i]!.y),
        );
    const heldOut = [
        ...(sameFirst ? first[0]!.map((p) => ({ ...p, series: EVERY_STAGE })) : first.flat()),
        ...(T > 1 ? stages.flatMap((st) => heldOutOf(st, T - 1)) : []),
    ];
    const nonzero = (f: (l: TrainLine) => number) =>
        train.some((l) => {
            const v = f(l);
            return Number.isFinite(v) && v !== 0;
        });
    const kl = (l: TrainLine) => avg(trained(l).map((a) => a.kl)),
        clip = (l: TrainLine) => avg(trained(l).map((a) => a.clipFrac));
    // The rollout / trainer mismatch and what the correction did: figures of the agents that report them (NaN, so not
    // drawn, where none does).
    const figure = (k: "mismatchK3" | "isCorrectedFraction" | "rsMaskedFraction") => (l: TrainLine) => {
        const xs = trained(l).flatMap((a) => (a[k] === undefined ? [] : [a[k]]));
        return xs.length ? avg(xs) : NaN;
    };
    // On-policy, the mismatch is the rounding between sampler and trainer (k3 below 1e-6 for the embedded model at
    // temperature 1): drawn only once some iteration reaches 1e-5.
    const material = (f: (l: TrainLine) => number) => train.some((l) => f(l) >= 1e-5);
    const mismatch = figure("mismatchK3"),
        corrected = figure("isCorrectedFraction"),
        rejected = figure("rsMaskedFraction"),
        staleness = (l: TrainLine) => l.staleness ?? NaN;
    const charts = await Promise.all([
        lineChart(
            `Held-out majority accuracy (${s.config.evalEpisodes} questions), turn 1 and turn ${T}`,
            heldOut,
            "iteration",
            "accuracy",
            undefined,
            { [EVERY_STAGE]: "#7f7f7f" },
        ),
        lineChart(
            "Reward per iteration (mean over agents, 5-iteration moving average)",
            stages.flatMap((st) => by((l) => l.reward, st)),
            "iteration",
            "reward",
        ),
        ...stages.map((st) =>
            lineChart(
                `Training accuracy per turn, ${st} (majority vote, moving average)`,
                Array.from({ length: T }, (_, t) => by((l) => l.accuracy[t] ?? NaN, st, `turn ${t + 1}`)).flat(),
                "iteration",
                "accuracy",
            ),
        ),
        ...(nonzero(kl)
            ? [
                  lineChart(
                      "KL to the reference policy (per token, trained agents)",
                      stages.flatMap((st) => by(kl, st)),
                      "iteration",
                      "KL",
                  ),
              ]
            : []),
        ...(nonzero(clip)
            ? [
                  lineChart(
                      "Clip fraction (trained agents)",
                      stages.flatMap((st) => by(clip, st)),
                      "iteration",
                      "clip fraction",
                  ),
              ]
            : []),
        ...(material(mismatch)
            ? [
                  lineChart(
                      "Rollout / trainer mismatch: k3 estimate of KL(sampler || trainer) per token (trained agents, moving average)",
                      stages.flatMap((st) => by(mismatch, st)),
                      "iteration",
                      "k3 KL",
                  ),
              ]
            : []),
        ...(nonzero(corrected) || nonzero(rejected)
            ? [
                  lineChart(
                      "Rollout correction: share of tokens whose IS weight was truncated or masked, and share rejected (moving average)",
                      stages.flatMap((st) => [
                          ...(nonzero(corrected) ? by(corrected, st, `${st}, IS corrected`) : []),
                          ...(nonzero(rejected) ? by(rejected, st, `${st}, rejected`) : []),
                      ]),
                      "iteration",
                      "share of tokens",
                  ),
              ]
            : []),
        ...(nonzero(staleness)
            ? [
                  lineChart(
                      "Staleness of the rollouts: policy versions between sampling and training (moving average)",
                      stages.flatMap((st) => by(staleness, st)),
                      "iteration",
                      "staleness",
                  ),
              ]
            : []),
    ]);
    const table =
        `<table><tr><th>team</th>${Array.from({ length: T }, (_, t) => `<th>turn ${t + 1}</th>`).join("")}<th>gain 1&rarr;${T}</th><th>solo</th><th>trained alone</th></tr>` +
        s.rows
            .map(
                (r) =>
                    `<tr><td>${esc(r.name)}</td>${r.majorityAccuracy.map((x) => `<td>${x.toFixed(3)}</td>`).join("")}` +
                    `<td>${r.gain >= 0 ? "+" : ""}${r.gain.toFixed(3)}</td><td>${r.soloAccuracy.toFixed(3)}</td><td>${r.trainedAlone.toFixed(3)}</td></tr>`,
            )
            .join("") +
        "</table><p>solo: each agent answering alone (turn 0). trained alone: with a separate turn-0 model, the trained discussion model " +
        "answering alone, which separates what it learned about the task from what it learned about the discussion.</p>";
    const timings = s.stages?.length
        ? `<table class="timing"><tr><th>stage</th><th>started</th><th>ended</th><th>duration</th></tr>` +
          s.stages
              .map(
                  (t) =>
                      `<tr><td>${esc(t.stage)}</td><td>${esc(t.startedAt)}</td><td>${esc(t.endedAt ?? "")}</td><td>${fmtMs(t.durationMs)}</td></tr>`,
              )
              .join("") +
          `<tr><td>all</td><td></td><td></td><td>${fmtMs(s.stages.reduce((x, t) => x + t.durationMs, 0))}</td></tr></table>` +
          "<p>duration: the time processes worked on the stage (a resumed stage adds the time before the interruption).</p>"
        : "";
    const transitions = Object.entries(s.evals)
        .map(([name, e]) => {
            const cells = e.transitions
                .map((x, t) => {
                    const n = x.rightToRight + x.rightToWrong + x.wrongToRight + x.wrongToWrong || 1;
                    const cell = (v: number) =>
                        `<td style="background:rgba(31,119,180,${(v / n).toFixed(2)})">${v} (${((100 * v) / n).toFixed(0)}%)</td>`;
                    return (
                        `<table class="tm"><caption>turn ${t + 1} &rarr; ${t + 2}</caption><tr><th></th><th>&rarr; right</th><th>&rarr; wrong</th></tr>` +
                        `<tr><th>right</th>${cell(x.rightToRight)}${cell(x.rightToWrong)}</tr><tr><th>wrong</th>${cell(x.wrongToRight)}${cell(x.wrongToWrong)}</tr></table>`
                    );
                })
                .join("");
            return `<h3>${esc(name)}</h3><div class="row">${cells}</div>`;
        })
        .join("");
    const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>maporl run report</title><style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}figure{display:inline-block;margin:8px;vertical-align:top}
figcaption{font-weight:600;margin-bottom:4px;max-width:560px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}
.row{display:flex;gap:16px;flex-wrap:wrap}.tm caption{font-weight:600}pre{background:#f6f6f6;padding:8px;overflow:auto}
summary{cursor:pointer;font-weight:600}
</style></head><body><h1>maporl training report</h1>
<p>Task ${esc(s.config.task)}, ${s.config.agents} agents, ${T} turns, algorithm ${esc(s.config.algo)}, schedule ${esc(s.config.schedule)}; held-out evaluation on ${s.config.evalEpisodes} questions.</p>
<h2>Before and after (held-out majority accuracy per turn)</h2>${table}
<h2>Curves</h2>${charts.join("")}
${timings ? `<h2>Time</h2>${timings}` : ""}
<h2>Turn-to-turn transitions of every agent's answer (held out)</h2>${transitions}
<details><summary>Configuration</summary><pre>${esc(JSON.stringify(s.config, null, 2))}</pre></details></body></html>`;
    writeFileSync(join(out, "report.html"), html);
}
