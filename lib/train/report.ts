// report.ts: report.html of a run: self-contained (inline SVG and CSS, no script, no network), so it opens
// offline in any browser. Charts: reward per iteration, training accuracy per turn over iterations, KL and clip
// fraction; the before/after table; the held-out turn-to-turn transition matrices.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import type { TrainSummary } from "./job.js";

interface Series { label: string; points: [number, number][] }

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** A line chart as inline SVG; non-finite points are skipped. */
export function lineChart(title: string, series: Series[], yLabel: string): string {
    const W = 560, H = 260, L = 56, R = 150, T = 28, B = 36;
    const pts = series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (!pts.length) return `<figure><figcaption>${esc(title)}</figcaption><p>no data</p></figure>`;
    let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const sx = (x: number) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y: number) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => y0 + f * (y1 - y0));
    const grid = ticks.map((y) => `<line x1="${L}" x2="${W - R}" y1="${sy(y).toFixed(1)}" y2="${sy(y).toFixed(1)}" class="grid"/>` +
        `<text x="${L - 6}" y="${(sy(y) + 4).toFixed(1)}" text-anchor="end">${y.toPrecision(3)}</text>`).join("");
    const lines = series.map((s, i) => {
        const p = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
        const c = COLORS[i % COLORS.length];
        return `<polyline fill="none" stroke="${c}" stroke-width="1.6" points="${p.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ")}"/>` +
            `<rect x="${W - R + 10}" y="${T + i * 18}" width="12" height="3" fill="${c}"/><text x="${W - R + 26}" y="${T + i * 18 + 5}">${esc(s.label)}</text>`;
    }).join("");
    return `<figure><figcaption>${esc(title)}</figcaption><svg class="chart" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">` +
        `${grid}<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" class="axis"/>` +
        `<text x="${L}" y="${H - 10}">${x0}</text><text x="${W - R}" y="${H - 10}" text-anchor="end">${x1} (iteration)</text>` +
        `<text x="12" y="${T - 10}">${esc(yLabel)}</text>${lines}</svg></figure>`;
}

function readJsonl(file: string): Record<string, unknown>[] {
    return readFileSync(file, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as Record<string, unknown>);
}

type TrainLine = { stage: string; iteration: number; reward: number; accuracy: number[]; agents: { kl: number; clipFrac: number; updates: number }[] };

export function writeReport(out: string, s: TrainSummary): void {
    const lines = readJsonl(join(out, "metrics.jsonl"));
    const train = lines.filter((l) => l.kind === "train") as unknown as TrainLine[];
    const stages = [...new Set(train.map((l) => l.stage))];
    const smooth = (pts: [number, number][], k = 5): [number, number][] =>
        pts.map(([x], i) => { const w = pts.slice(Math.max(0, i - k + 1), i + 1); return [x, w.reduce((a, p) => a + p[1], 0) / w.length]; });
    const by = (f: (l: TrainLine) => number, stage: string): [number, number][] =>
        smooth(train.filter((l) => l.stage === stage).map((l) => [l.iteration, f(l)]));
    const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    const trained = (l: TrainLine) => l.agents.filter((a) => a.updates > 0);  // frozen partners would dilute the means
    const charts = [
        lineChart("Reward per iteration (mean over agents, 5-iteration moving average)", stages.map((st) => ({ label: st, points: by((l) => l.reward, st) })), "reward"),
        ...stages.map((st) => lineChart(`Training accuracy per turn, ${st} (majority vote, moving average)`,
            Array.from({ length: s.config.turns }, (_, t) => ({ label: `turn ${t + 1}`, points: by((l) => l.accuracy[t] ?? NaN, st) })), "accuracy")),
        lineChart("KL to the reference policy (per token, trained agents)", stages.map((st) => ({ label: st, points: by((l) => avg(trained(l).map((a) => a.kl)), st) })), "KL"),
        lineChart("Clip fraction (trained agents)", stages.map((st) => ({ label: st, points: by((l) => avg(trained(l).map((a) => a.clipFrac)), st) })), "clip fraction"),
    ];
    const T = s.config.turns;
    const table = `<table><tr><th>team</th>${Array.from({ length: T }, (_, t) => `<th>turn ${t + 1}</th>`).join("")}<th>gain 1&rarr;${T}</th><th>solo</th><th>trained alone</th></tr>` +
        s.rows.map((r) => `<tr><td>${esc(r.name)}</td>${r.majorityAccuracy.map((x) => `<td>${x.toFixed(3)}</td>`).join("")}` +
            `<td>${r.gain >= 0 ? "+" : ""}${r.gain.toFixed(3)}</td><td>${r.soloAccuracy.toFixed(3)}</td><td>${r.trainedAlone.toFixed(3)}</td></tr>`).join("") +
        "</table><p>solo: each agent answering alone (turn 0). trained alone: with a separate turn-0 model, the trained discussion model " +
        "answering alone, which separates what it learned about the task from what it learned about the discussion.</p>";
    const transitions = Object.entries(s.evals).map(([name, e]) => {
        const cells = e.transitions.map((x, t) => {
            const n = x.rightToRight + x.rightToWrong + x.wrongToRight + x.wrongToWrong || 1;
            const cell = (v: number) => `<td style="background:rgba(31,119,180,${(v / n).toFixed(2)})">${v} (${(100 * v / n).toFixed(0)}%)</td>`;
            return `<table class="tm"><caption>turn ${t + 1} &rarr; ${t + 2}</caption><tr><th></th><th>&rarr; right</th><th>&rarr; wrong</th></tr>` +
                `<tr><th>right</th>${cell(x.rightToRight)}${cell(x.rightToWrong)}</tr><tr><th>wrong</th>${cell(x.wrongToRight)}${cell(x.wrongToWrong)}</tr></table>`;
        }).join("");
        return `<h3>${esc(name)}</h3><div class="row">${cells}</div>`;
    }).join("");
    const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>maporl run report</title><style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}figure{display:inline-block;margin:8px}
figcaption{font-weight:600;margin-bottom:4px}svg text{font-size:11px;fill:#333}.grid{stroke:#ddd}.axis{stroke:#888}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}
.row{display:flex;gap:16px;flex-wrap:wrap}.tm caption{font-weight:600}pre{background:#f6f6f6;padding:8px;overflow:auto}
</style></head><body><h1>maporl training report</h1>
<p>Task ${esc(s.config.task)}, ${s.config.agents} agents, ${T} turns, algorithm ${esc(s.config.algo)}, schedule ${esc(s.config.schedule)}; held-out evaluation on ${s.config.evalEpisodes} questions.</p>
<h2>Before and after (held-out majority accuracy per turn)</h2>${table}
<h2>Training curves</h2>${charts.join("")}
<h2>Turn-to-turn transitions of every agent's answer (held out)</h2>${transitions}
<h2>Configuration</h2><pre>${esc(JSON.stringify(s.config, null, 2))}</pre></body></html>`;
    writeFileSync(join(out, "report.html"), html);
}
