// acceptance.test.ts: co-training works, on a small budget of the main job (the full figures come from the
// default `npx maporl train`; see the README). On arith-debate with 3 agents and 3 turns, held out:
//   - MAPoRL co-training raises the final-turn majority accuracy over the untrained team, and raises the gain
//     from turn 1 to turn 3;
//   - the independent control (agent 0 trained against frozen partners) gains clearly less;
//   - each agent's solo accuracy moves far less than the team's.
// Margins are several standard errors of the 150-question evaluation (about 0.04).
// The same run holds the job's clock to what a user reads: the first estimate (measured before the warm start) is
// within 2x of the time the job took, and the share of the job done never goes back.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { trainJob } from "../../lib/train/job/job.js";
import { formatSummary } from "../../lib/train/job/summary.js";

const work = mkdtempSync(join(tmpdir(), "maporl-accept-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("train: co-training on arith-debate (3 agents, 3 turns)", () => {
    it("MAPoRL beats the untrained team and the independent control; solo accuracy barely moves", async () => {
        const logs: string[] = [],
            shares: number[] = [];
        const t0 = performance.now();
        const s = await trainJob({
            out: join(work, "run"),
            log: (l) => logs.push(l),
            onProgress: (p) => shares.push(p.job.share),
            config: {
                iterations: 60,
                episodesPerIteration: 32,
                evalEpisodes: 150,
                evalEvery: 1000,
                sft: { steps: 800, batchSize: 32, lr: 2e-3 },
            },
        });
        const tookS = (performance.now() - t0) / 1000;
        console.log(formatSummary(s));
        const est = logs.map((l) => /^estimated duration on this machine: .*\((\d+) s;/.exec(l)).find((m) => m);
        expect(est, logs.join("\n")).toBeTruthy();
        const estS = Number(est![1]);
        console.log(`first estimate ${estS} s, took ${tookS.toFixed(1)} s`);
        expect(estS).toBeGreaterThan(tookS / 2);
        expect(estS).toBeLessThan(tookS * 2);
        expect(shares.length).toBeGreaterThan(50);
        for (let i = 1; i < shares.length; i++) expect(shares[i]).toBeGreaterThanOrEqual(shares[i - 1]);
        expect(shares.at(-1)!).toBeGreaterThan(0.9);
        expect(shares.at(-1)!).toBeLessThanOrEqual(1);
        const [untrained, maporl, independent] = s.rows;
        expect(s.rows.map((r) => r.name)).toEqual([
            "untrained team",
            "team co-trained by maporl",
            "independent control",
        ]);
        const final = (r: typeof untrained) => r.majorityAccuracy[2];
        expect(final(maporl) - final(untrained)).toBeGreaterThan(0.1);
        expect(maporl.gain - untrained.gain).toBeGreaterThan(0.1);
        expect(maporl.gain - independent.gain).toBeGreaterThan(0.06);
        const teamMove = final(maporl) - final(untrained),
            soloMove = Math.abs(maporl.soloAccuracy - untrained.soloAccuracy);
        expect(soloMove).toBeLessThan(teamMove / 3);
    }, 900_000);
});
