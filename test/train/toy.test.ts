// toy.test.ts: MAPoRL §2's collaborate-or-act-alone game, learned through the package's kernels, against the
// closed forms of Observations 1 and 2 (lib/train/tasks/toy.ts gives the payoff model and the derivations):
//   - co-learners reach a collaboration rate >= 0.9 where Observation 2 predicts collaboration, at T = 10 and 20;
//   - one learner against a fixed partner falls to <= 0.1 where Observation 1 predicts defection;
//   - over a grid of payoffs (and partner probabilities), the learned side agrees with the closed form on >= 95%.
import { describe, expect, it } from "vitest";

import { observation1, observation2, toyGame, type ToyPayoffs } from "../../lib/index.js";

const FAST = { episodes: 32, iterations: 120, lr: 1 } as const;

function grid(): ToyPayoffs[] {
    const out: ToyPayoffs[] = [];
    for (const rCol of [0, 0.3, 0.6, 0.85])
        for (let k = 0; k < 6; k++) out.push({ rCol, rInd: 1, rSyn: 1.1 + 0.5 * k });
    return out;
}

describe("toy game (MAPoRL §2)", () => {
    for (const T of [10, 20]) {
        it(`T=${T}: co-learners collaborate where Observation 2 says so; a lone learner defects where Observation 1 says so`, () => {
            const p = { rCol: 0.3, rInd: 1, rSyn: 2.6 };
            expect(observation2(p, "team")).toBe(true);
            expect(observation2(p, "own")).toBe(true);
            for (const reward of ["team", "own"] as const)
                expect(toyGame({ payoffs: p, turns: T, reward, seed: 11 }).rate).toBeGreaterThanOrEqual(0.9);
            // The same payoffs against a partner at pi = 0.3: (2.6 - 1) * 0.3 = 0.48 < 1 - 0.3, so defect.
            expect(observation1(p, 0.3)).toBe(false);
            const lone = toyGame({ payoffs: p, turns: T, mode: "fixed-partner", partnerPi: 0.3, seed: 12 });
            expect(lone.rate).toBeLessThanOrEqual(0.1);
            expect(lone.perTurn.length).toBe(1);
            // The curve starts at the uniform policy and is recorded every 10 iterations.
            expect(lone.curve[0]).toEqual({ iteration: 0, rate: 0.5 });
            expect(lone.curve.at(-1)!.iteration).toBe(300);
        });

        it(`T=${T}: the learned behaviour agrees with the closed forms on >= 95% of a payoff grid`, () => {
            let agree = 0,
                total = 0;
            const misses: string[] = [];
            const check = (what: string, rate: number, predicted: boolean) => {
                total++;
                if (rate >= 0.5 === predicted) agree++;
                else misses.push(`${what}: rate ${rate.toFixed(2)}, predicted ${predicted ? "collaborate" : "defect"}`);
            };
            grid().forEach((p, i) => {
                for (const reward of ["team", "own"] as const)
                    check(
                        `${reward} ${JSON.stringify(p)}`,
                        toyGame({ payoffs: p, turns: T, reward, seed: 100 + i, ...FAST }).rate,
                        observation2(p, reward),
                    );
                for (const pi of [0.3, 0.7])
                    check(
                        `pi ${pi} ${JSON.stringify(p)}`,
                        toyGame({ payoffs: p, turns: T, mode: "fixed-partner", partnerPi: pi, seed: 200 + i, ...FAST })
                            .rate,
                        observation1(p, pi),
                    );
            });
            expect(total).toBe(96);
            expect(agree / total, misses.join("\n")).toBeGreaterThanOrEqual(0.95);
        });
    }

    it("the closed forms: Observation 2 as transcribed is the team-reward condition; the selfish one is stricter", () => {
        // R_col < R_ind makes 2 R_ind - R_col the binding term of max(3 R_col - 2 R_ind, 2 R_ind - R_col).
        expect(observation2({ rCol: 0.5, rInd: 1, rSyn: 1.51 }, "team")).toBe(true);
        expect(observation2({ rCol: 0.5, rInd: 1, rSyn: 1.49 }, "team")).toBe(false);
        // Selfish co-learners need risk dominance: R_syn > 3 R_ind - 2 R_col = 2.
        expect(observation2({ rCol: 0.5, rInd: 1, rSyn: 1.9 }, "own")).toBe(false);
        expect(observation2({ rCol: 0.5, rInd: 1, rSyn: 2.1 }, "own")).toBe(true);
        expect(observation1({ rCol: 0, rInd: 1, rSyn: 3 }, 0.6)).toBe(true);
        expect(observation1({ rCol: 0, rInd: 1, rSyn: 3 }, 0.4)).toBe(false);
    });

    it("rejects bad input naming the parameter", () => {
        const p = { rCol: 0, rInd: 1, rSyn: 2 };
        expect(() => toyGame({ payoffs: { rCol: 1, rInd: 1, rSyn: 2 } })).toThrow(
            /payoffs: expected rCol < rInd < rSyn, got 1, 1, 2/,
        );
        expect(() => toyGame({ payoffs: { rCol: NaN, rInd: 1, rSyn: 2 } })).toThrow(/payoffs.rCol: expected a number/);
        expect(() => toyGame({ payoffs: { rInd: 1, rSyn: 2 } as ToyPayoffs })).toThrow(/payoffs.rCol/);
        expect(() => toyGame({ payoffs: p, turns: 0 })).toThrow(/turns: expected an integer in \[1, 1000\], got 0/);
        expect(() => toyGame({ payoffs: p, threshold: 2 })).toThrow(/threshold: expected an integer in \[0, 1\]/);
        expect(() => toyGame({ payoffs: p, mode: "solo" as "co-train" })).toThrow(/mode/);
        expect(() => toyGame({ payoffs: p, partnerPi: 1.5 })).toThrow(/partnerPi: expected a number in \[0, 1\]/);
        expect(() => toyGame({ payoffs: p, turn: 3 } as never)).toThrow(/turn/);
    });
});
