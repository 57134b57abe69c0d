// dapo.test.ts: DAPO's soft overlong punishment at the buffer's edges (hand-computed from the paper's formula and
// verl's min(-exceed / len * factor, 0)), and the group filter's "no signal" rule.
import { describe, expect, it } from "vitest";

import { groupHasSignal, overlongPenalty } from "../../lib/rl/dapo.js";

describe("overlongPenalty", () => {
    it("is 0 up to maxTokens - buffer, then falls linearly to -penaltyFactor at maxTokens", () => {
        const o = { maxTokens: 20, buffer: 4 };
        const got = [0, 10, 16, 17, 18, 19, 20].map((n) => overlongPenalty(n, o));
        expect(got).toEqual([0, 0, 0, -0.25, -0.5, -0.75, -1]);
        expect(overlongPenalty(20, { ...o, penaltyFactor: 0.5 })).toBe(-0.5);
        expect(overlongPenalty(18, { ...o, penaltyFactor: 2 })).toBe(-1);
        // verl does not clamp below: a length past maxTokens keeps falling (a sampler that stops at maxTokens never gives one)
        expect(overlongPenalty(22, o)).toBe(-1.5);
        // buffer 0 is off; buffer = maxTokens penalises from the first token
        expect(overlongPenalty(20, { maxTokens: 20, buffer: 0 })).toBe(0);
        expect(overlongPenalty(5, { maxTokens: 20, buffer: 20 })).toBe(-0.25);
    });

    it("rejects bad arguments, naming them", () => {
        expect(() => overlongPenalty(-1, { maxTokens: 20, buffer: 4 })).toThrow(
            /length: expected a finite number >= 0/,
        );
        expect(() => overlongPenalty(NaN, { maxTokens: 20, buffer: 4 })).toThrow(/length/);
        expect(() => overlongPenalty(3, { maxTokens: 20, buffer: 21 })).toThrow(
            /buffer: expected a number in \[0, 20\]/,
        );
        expect(() => overlongPenalty(3, { maxTokens: 0, buffer: 0 })).toThrow(/maxTokens/);
        expect(() => overlongPenalty(3, { maxTokens: 20, buffer: 4, penaltyFactor: -1 })).toThrow(/penaltyFactor/);
    });
});

describe("groupHasSignal", () => {
    it("is false exactly when every reward is equal (no group-relative advantage)", () => {
        expect(groupHasSignal([1, 1, 1])).toBe(false);
        expect(groupHasSignal([0.5, 0.5, 0.25])).toBe(true);
        expect(groupHasSignal([0, -0])).toBe(false);
        expect(groupHasSignal([NaN, NaN])).toBe(false);
        expect(groupHasSignal([NaN, 1])).toBe(true);
        expect(groupHasSignal([7])).toBe(false);
        expect(groupHasSignal([])).toBe(false);
    });
});
