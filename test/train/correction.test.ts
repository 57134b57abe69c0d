// correction.test.ts: the trainers' rollout correction. packRows carries the sampler's log-probs to the trained
// positions; an iteration measures the rollout/trainer mismatch (the embedded model sampling at temperature 1 is its
// own trainer: k3 ~ 0; at 1.6 it is not) and, with `rolloutCorrection`, reports the IS weights and rejections it
// applied, for MAPoRL, MAGRPO and CoLLM; a bad option in the config names its key.
import { describe, expect, it } from "vitest";

import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { packRows } from "../../lib/train/trainers/rollout.js";
import { runIteration, stageModels } from "../../lib/train/trainers/stage.js";
import { tinyTeam } from "../helpers/team.js";

describe("packRows and the sampler's log-probs", () => {
    it("places one log-prob per trained position (answer tokens and EOS); absent when any row lacks them", () => {
        const rows = [
            { prompt: [1, 5, 6], completion: [7, 8], stopped: true, logprobs: [-0.1, -0.2, -0.3] },
            { prompt: [1, 5], completion: [9], stopped: false, logprobs: [-0.4] },
        ];
        const b = packRows(rows, 2, 64);
        expect(Array.from(b.mask)).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0]);
        expect(Array.from(b.rolloutLogp!, (x) => +x.toFixed(3))).toEqual([
            0, 0, -0.1, -0.2, -0.3, 0, 0, -0.4, 0, 0, 0, 0,
        ]);
        expect(packRows([rows[0], { ...rows[1], logprobs: [] }], 2, 64).rolloutLogp).toBeUndefined();
        expect(packRows([rows[0], { prompt: [1], completion: [3], stopped: true }], 2, 64).rolloutLogp).toBeUndefined();
    });
});

async function iterate(algo: Algo, temperature: number, rolloutCorrection: Record<string, unknown> = {}) {
    const { cfg, task, base } = await tinyTeam({ algo, sampling: { temperature, maxTokens: 12 }, rolloutCorrection });
    const m = await stageModels(cfg, "independent", base);
    return runIteration(cfg, task, task.generate(3, 42), "independent", m, base, 0, 42);
}

describe("the trainers measure and correct the rollout/trainer mismatch", () => {
    it("MAPoRL: k3 ~ 0 when the sampler is the trainer (temperature 1), clearly > 0 at temperature 1.6", async () => {
        const same = await iterate("maporl", 1);
        const hot = await iterate("maporl", 1.6);
        expect(same.stats[0].mismatchK3).toBeGreaterThanOrEqual(0);
        expect(same.stats[0].mismatchK3).toBeLessThan(1e-6);
        expect(hot.stats[0].mismatchK3).toBeGreaterThan(1e-3);
        expect(same.stats[0].isMean).toBeUndefined(); // measured, not corrected
        expect(same.stats[1].mismatchK3).toBeUndefined(); // the frozen partner is not trained
    });

    it("MAPoRL with TIS and a k1 rejection: the weights' mean and the rejected share are reported", async () => {
        const r = await iterate("maporl", 1.6, {
            rolloutIs: "token",
            rolloutRs: "token_k1",
            rolloutRsThreshold: "0.97_1.03",
        });
        const s = r.stats[0];
        expect(s.isMean).toBeGreaterThan(0);
        expect(s.isCorrectedFraction).toBeGreaterThanOrEqual(0);
        expect(s.rsMaskedFraction).toBeGreaterThan(0);
        expect(s.rsMaskedFraction).toBeLessThan(1);
        for (const v of Object.values(s)) expect(Number.isFinite(v)).toBe(true);
    });

    for (const algo of ["magrpo", "collm-dc"] as Algo[])
        it(`${algo} with sequence-level IS: the figures are reported for the trained agent`, async () => {
            const r = await iterate(algo, 1.6, { rolloutIs: "sequence", rolloutIsThreshold: 5 });
            const s = r.stats[0];
            expect(s.mismatchK3).toBeGreaterThan(1e-3);
            expect(s.isMean).toBeGreaterThan(0);
            expect(s.isCorrectedFraction).toBeGreaterThanOrEqual(0);
            expect(r.stats[1].isMean).toBeUndefined();
        });

    it("a bad option in the config's rolloutCorrection names the key", () => {
        expect(() => resolveConfig({ rolloutCorrection: { rolloutIs: "tokens" } })).toThrow(
            /rolloutCorrection\.rolloutIs/,
        );
        expect(() => resolveConfig({ rolloutCorrection: { rolloutRs: "token_k9", rolloutRsThreshold: "2" } })).toThrow(
            /rolloutCorrection: rolloutRs\[0\]: expected one of/,
        );
        expect(() => resolveConfig({ rolloutCorrection: { rolloutRs: "token_k1" } })).toThrow(
            /rolloutCorrection: rolloutRsThreshold: expected a threshold/,
        );
    });
});
