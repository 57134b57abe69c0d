// lookupTeam.test.ts: the demonstration workflow learns, and the team's evaluation sees it. tool-lookup (a researcher
// that alone may call the lookup tool, a solver that alone knows the operand) co-trained by MAPoRL for 120
// iterations, held out on 200 questions:
//   - the trained hand-off beats the untrained team and the independent control (the researcher trained against the
//     frozen warm-started solver) at turn 2, and turn 1 (the solver before any lookup) stays at chance;
//   - cross-play against the untrained base shows the chemistry: the trained researcher with the untrained solver,
//     and the untrained researcher with the trained solver, both fall far below the trained pair;
//   - the regression gate passes on the team itself and fails when the solver is replaced by the untrained base.
// Calibration at AVX2 (the test pins it, as splitsum.test does, so every x86-64 machine draws the same): untrained
// .190 at turn 2, co-trained .940, control .285 (AVX-512, the README's run: .185, .920, .315); cross-play on the suite
// [[.945, .370], [.390, .185]] (rows: the researcher's team, columns: the solver's; 0 = co-trained, 1 = untrained
// base). Thresholds leave about half of each measured gap (the smallest, 0.555, is ~12 standard errors of a
// 200-question difference).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { backend, setSimd } from "../../lib/index.js";
import { crossPlay, makeSuite, regressionGate, teamArg } from "../../lib/train/job/evalGate.js";
import { trainJob } from "../../lib/train/job/job.js";
import { formatSummary } from "../../lib/train/job/summary.js";

const work = mkdtempSync(join(tmpdir(), "maporl-lookup-team-"));
afterAll(() => {
    rmSync(work, { recursive: true, force: true });
    setSimd("best");
});

describe("train: tool-lookup (researcher -> solver, a tool only the researcher may call)", () => {
    it("the co-trained hand-off beats the untrained team and the control; cross-play and the gate see the chemistry", async () => {
        if (backend().simd !== "scalar") setSimd("avx2");
        const run = join(work, "run"),
            suite = join(work, "suite");
        const s = await trainJob({ out: run, config: { task: "tool-lookup", iterations: 120, evalEvery: 1000 } });
        console.log(formatSummary(s));
        const [untrained, maporl, independent] = s.rows.map((r) => r.majorityAccuracy);
        const chance = 0.1;
        for (const r of [untrained, maporl, independent]) expect(r[0]).toBeLessThan(chance + 0.06);
        expect(maporl[1] - untrained[1]).toBeGreaterThan(0.4);
        expect(maporl[1] - independent[1]).toBeGreaterThan(0.3);

        makeSuite(suite, { config: s.config as unknown as Record<string, unknown>, items: 200 });
        const c = await crossPlay({ suite, teams: [teamArg(run), teamArg(`${run}@base`)] });
        console.log(JSON.stringify(c.matrix));
        const [[self, researcherOnly], [solverOnly, base]] = c.matrix as [[number, number], [number, number]];
        expect(self - researcherOnly).toBeGreaterThan(0.3);
        expect(self - solverOnly).toBeGreaterThan(0.3);
        expect(self - base).toBeGreaterThan(0.4);
        expect(c.chemistry[0]).toBeGreaterThan(0.3);

        const same = await regressionGate({ suite, baseline: { run }, candidate: { run } });
        expect([same.pass, same.drop]).toEqual([true, 0]);
        const swapped = await regressionGate({
            suite,
            baseline: { run },
            candidate: { run, replace: { 1: join(run, "checkpoint", "base") } },
        });
        expect(swapped.pass).toBe(false);
        expect(swapped.message).toMatch(
            /^majority@last: .*agents 1 replaced.*more than the threshold 0.02: regression$/,
        );
    }, 900_000);
});
