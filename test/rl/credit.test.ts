// credit.test.ts: MAPoRL's influence-aware reward and incentive terms, CoLLM's TD(0) advantages and MAGRPO's tree
// returns, against references written here from the formulas (docs/algorithms.md A.4, A.5, B.2–B.3, C.1).
import { describe, expect, it } from "vitest";

import {
    collaborationBonus,
    collaborationBonusAsync,
    influenceRewards,
    influenceRewardsAsync,
    tdAdvantages,
    tdAdvantagesAsync,
    treeReturns,
    treeReturnsAsync,
} from "../../lib/index.js";
import { rng } from "../helpers/rng.js";

function influenceRef(
    s: Float32Array,
    Q: number,
    T: number,
    A: number,
    d: number,
    rule: string,
    scope: string,
    last?: Int32Array,
) {
    const out = new Float64Array(Q * T * A);
    const S = (q: number, t: number, a: number) => s[(q * T + t) * A + a];
    const mean = (q: number, t: number) => {
        let m = 0;
        for (let j = 0; j < A; j++) m += S(q, t, j);
        return m / A;
    };
    for (let q = 0; q < Q; q++) {
        const x = last ? last[q] : T - 1;
        for (let t = 0; t < T; t++)
            for (let a = 0; a < A; a++) {
                let v: number;
                if (t > x) v = NaN;
                else if (rule === "current") v = scope === "all" ? mean(q, t) : S(q, t, a);
                else if (rule === "last") v = scope === "all" ? mean(q, x) : S(q, x, a);
                else {
                    let num = 0,
                        den = 0;
                    for (let u = t; u <= x; u++) {
                        const w = d ** (u - t);
                        den += w;
                        num += w * (u === t ? S(q, t, a) : scope === "all" ? mean(q, u) : S(q, u, a));
                    }
                    v = num / den;
                }
                out[(q * T + t) * A + a] = v;
            }
    }
    return out;
}

describe("influenceRewards", () => {
    it("matches the formula for every rule and scope, with early-stopped questions", () => {
        const next = rng(1);
        for (const [Q, T, A] of [
            [1, 1, 1],
            [3, 2, 2],
            [5, 3, 3],
            [4, 5, 4],
        ] as [number, number, number][]) {
            const s = Float32Array.from({ length: Q * T * A }, () => Math.round(next() * 4) / 4);
            const last = Int32Array.from({ length: Q }, () => Math.floor(next() * T));
            for (const rule of ["discounted-sum", "last", "current"] as const)
                for (const scope of ["all", "individual"] as const)
                    for (const d of [0, 0.3, 1])
                        for (const lt of [undefined, last]) {
                            const got = influenceRewards(
                                { scores: s, shape: [Q, T, A] },
                                { discount: d, rule, scope, lastTurn: lt },
                            );
                            const want = influenceRef(s, Q, T, A, d, rule, scope, lt);
                            for (let i = 0; i < want.length; i++)
                                if (Number.isNaN(want[i])) expect(got[i]).toBeNaN();
                                else expect(got[i]).toBeCloseTo(want[i], 6);
                        }
        }
    });

    it("hand-worked: Q=1, T=2, A=2, d=0.3", () => {
        // turn 0: agent 0 right (1), agent 1 wrong (0); turn 1: both right.
        const r = influenceRewards({ scores: new Float32Array([1, 0, 1, 1]), shape: [1, 2, 2] });
        expect(r[0]).toBeCloseTo((1 + 0.3 * 1) / 1.3, 6);
        expect(r[1]).toBeCloseTo((0 + 0.3 * 1) / 1.3, 6);
        expect([r[2], r[3]]).toEqual([1, 1]);
    });

    it("d = 0 gives the agent's own current score; constant scores give the constant", () => {
        const next = rng(2);
        const s = Float32Array.from({ length: 2 * 4 * 3 }, () => next());
        expect([...influenceRewards({ scores: s, shape: [2, 4, 3] }, { discount: 0 })]).toEqual([...s]);
        const c = new Float32Array(2 * 4 * 3).fill(0.7);
        for (const rule of ["discounted-sum", "last", "current"] as const)
            for (const scope of ["all", "individual"] as const)
                influenceRewards({ scores: c, shape: [2, 4, 3] }, { rule, scope }).forEach((x) =>
                    expect(x).toBeCloseTo(0.7, 6),
                );
    });

    it("rejects bad shapes, options and lastTurn", async () => {
        expect(() => influenceRewards({ scores: new Float32Array(4), shape: [1, 2] as never })).toThrow(RangeError);
        expect(() => influenceRewards({ scores: new Float32Array(4), shape: [1, 2, 2] }, { discount: 1.5 })).toThrow(
            /discount/,
        );
        expect(() =>
            influenceRewards({ scores: new Float32Array(4), shape: [1, 2, 2] }, { rule: "sum" as never }),
        ).toThrow(/rule/);
        expect(() =>
            influenceRewards({ scores: new Float32Array(4), shape: [1, 2, 2] }, { lastTurn: new Int32Array([2]) }),
        ).toThrow(/lastTurn\[0\]/);
        const ac = new AbortController();
        ac.abort();
        await expect(
            influenceRewardsAsync({ scores: new Float32Array(4), shape: [1, 2, 2] }, { signal: ac.signal }),
        ).rejects.toThrow();
        expect([...(await influenceRewardsAsync({ scores: new Float32Array(4), shape: [1, 2, 2] }))]).toEqual([
            0, 0, 0, 0,
        ]);
    });
});

describe("collaborationBonus", () => {
    const coef = { correctedAlone: 1, persuadedCorrectly: 2, wrongButUseful: 4, persuasive: 8 };
    const B = (rows: number[][], opts = {}) =>
        collaborationBonus(
            { correct: Uint8Array.from(rows.flat()), shape: [1, rows.length, rows[0].length] },
            { ...coef, ...opts },
        );

    it("no bonus at turn 0, and the backward terms", () => {
        // 3 agents. Agent 0: wrong -> right while others (t-1) wrong: +correctedAlone.
        let b = B([
            [0, 0, 0],
            [1, 0, 0],
        ]);
        expect([...b.slice(0, 3)]).toEqual([0, 0, 0]);
        expect(b[3]).toBe(1);
        // Agent 0: wrong -> right while others right: +persuadedCorrectly.
        b = B([
            [0, 1, 1],
            [1, 1, 1],
        ]);
        expect(b[3]).toBe(2);
        // Agent 0: right -> wrong while others right: -correctedAlone; while others wrong: -persuadedCorrectly.
        expect(
            B([
                [1, 1, 1],
                [0, 1, 1],
            ])[3],
        ).toBe(-1);
        expect(
            B([
                [1, 0, 0],
                [0, 0, 0],
            ])[3],
        ).toBe(-2);
        // Dead zone: 2 others with mean exactly 0.5 fire nothing.
        expect(
            B([
                [0, 1, 0],
                [1, 1, 0],
            ])[3],
        ).toBe(0);
    });

    it("forward terms with paper signs, reversed with the reference code's", () => {
        // T = 3, agent 0 right at t=1, others wrong at 1 and right at 2: +persuasive (paper).
        const rows = [
            [1, 0, 0],
            [1, 0, 0],
            [1, 1, 1],
        ];
        expect(B(rows)[3]).toBe(8);
        expect(B(rows, { signs: "reference-code" })[3]).toBe(-8);
        // Agent 0 wrong at t=1, others go wrong -> right: +wrongButUseful (paper).
        expect(
            B([
                [0, 0, 0],
                [0, 0, 0],
                [0, 1, 1],
            ])[3],
        ).toBe(4);
        // Others right -> wrong while agent 0 right: -wrongButUseful; while wrong: -persuasive.
        expect(
            B([
                [1, 1, 1],
                [1, 1, 1],
                [1, 0, 0],
            ])[3],
        ).toBe(-4);
        expect(
            B([
                [0, 1, 1],
                [0, 1, 1],
                [0, 0, 0],
            ])[3],
        ).toBe(-8);
        // No forward term at the last turn.
        expect(
            B([
                [1, 0, 0],
                [1, 1, 1],
            ])[3],
        ).toBe(0);
    });

    it("a single agent uses ±correctedAlone; bad values are refused", async () => {
        const b = collaborationBonus({ correct: new Uint8Array([0, 1, 0]), shape: [1, 3, 1] }, coef);
        expect([...b]).toEqual([0, 1, -1]);
        expect(() => collaborationBonus({ correct: new Float32Array([0, 0.5]), shape: [1, 2, 1] })).toThrow(
            /expected 0 or 1/,
        );
        expect(() =>
            collaborationBonus({ correct: new Uint8Array(2), shape: [1, 2, 1] }, { persuasiv: 1 } as never),
        ).toThrow(/Did you mean "persuasive"/);
        expect([
            ...(await collaborationBonusAsync({ correct: new Uint8Array([0, 1, 0]), shape: [1, 3, 1] }, coef)),
        ]).toEqual([0, 1, -1]);
    });
});

describe("tdAdvantages", () => {
    it("targets and advantages over episodes of different lengths", async () => {
        const next = rng(3);
        const lengths = new Int32Array([1, 3, 2, 5]);
        const n = 11;
        const rewards = Float32Array.from({ length: n }, () => next());
        const values = Float32Array.from({ length: n }, () => next());
        const gamma = 0.9;
        const raw = tdAdvantages({ rewards, values, lengths }, { gamma, normalize: false });
        let i0 = 0;
        const want: number[] = [];
        for (const H of lengths) {
            for (let t = 0; t < H; t++) {
                const i = i0 + t;
                const y = t < H - 1 ? rewards[i] + gamma * values[i + 1] : rewards[i];
                expect(raw.targets[i]).toBeCloseTo(y, 6);
                expect(raw.advantages[i]).toBeCloseTo(y - values[i], 6);
                want.push(y - values[i]);
            }
            i0 += H;
        }
        const norm = await tdAdvantagesAsync(
            { rewards, values, lengths },
            { gamma, normalize: "batch", std: "unbiased" },
        );
        const mean = want.reduce((a, b) => a + b, 0) / n;
        const std = Math.sqrt(want.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
        norm.advantages.forEach((x, i) => expect(x).toBeCloseTo((want[i] - mean) / std, 5));
        // The default: within each turn index, the biased std (CoMLRL's _prepare_advantages per turn group).
        const byTurn = tdAdvantages({ rewards, values, lengths }, { gamma });
        const turnOf: number[] = [];
        for (const H of lengths) for (let t = 0; t < H; t++) turnOf.push(t);
        for (let t = 0; t < 5; t++) {
            const idx = turnOf.flatMap((u, i) => (u === t ? [i] : []));
            const xs = idx.map((i) => want[i]),
                m = xs.reduce((a, b) => a + b, 0) / xs.length;
            const sd = Math.max(Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length), 1e-6);
            idx.forEach((i) =>
                expect(byTurn.advantages[i]).toBeCloseTo(xs.length > 1 ? (want[i] - m) / sd : want[i], 5),
            );
        }
        // nextValues replaces the shifted values.
        const nv = Float32Array.from({ length: n }, () => 2);
        const withNext = tdAdvantages({ rewards, values, lengths, nextValues: nv }, { gamma, normalize: false });
        expect(withNext.targets[1]).toBeCloseTo(rewards[1] + gamma * 2, 6);
        expect(withNext.targets[0]).toBeCloseTo(rewards[0], 6); // a one-turn episode: y = r
    });

    it("a constant batch normalises to 0 (std floor 1e-6); bad lengths are refused", () => {
        const r = tdAdvantages(
            {
                rewards: new Float32Array(4).fill(1),
                values: new Float32Array(4),
                lengths: new Int32Array([1, 1, 1, 1]),
            },
            { gamma: 0 },
        );
        expect([...r.advantages]).toEqual([0, 0, 0, 0]);
        const one = tdAdvantages(
            { rewards: new Float32Array(4).fill(1), values: new Float32Array(4), lengths: new Int32Array([4]) },
            { gamma: 0 },
        );
        expect([...one.advantages]).toEqual([1, 1, 1, 1]); // each turn's group holds one: left as it is (CoMLRL)
        expect(() =>
            tdAdvantages({
                rewards: new Float32Array(2),
                values: new Float32Array(2),
                lengths: new Int32Array([0, 2]),
            }),
        ).toThrow(/lengths\[0\]/);
        expect(() =>
            tdAdvantages({ rewards: new Float32Array(3), values: new Float32Array(2), lengths: new Int32Array([2]) }),
        ).toThrow(RangeError);
        expect(() =>
            tdAdvantages({ rewards: new Float32Array(2), values: new Float32Array(2), lengths: [2] as never }),
        ).toThrow(TypeError);
    });
});

describe("treeReturns", () => {
    it("hand-worked 2 agents, 2 turns, G = 2 (aligned): 2 joint actions, each branching into 2", () => {
        // Nodes 0, 1: turn-1 joint actions at the first state; 2, 3 children of 0; 4, 5 children of 1.
        const parent = new Int32Array([-1, -1, 0, 0, 1, 1]);
        const rewards = new Float32Array([1, 0, 2, 4, 0, 1]);
        const { returns, advantages, depth } = treeReturns({ parent, rewards }, { gamma: 0.5 });
        // R2..R5 = r; R0 = 1 + 0.5 * mean(2, 4) = 2.5; R1 = 0 + 0.5 * mean(0, 1) = 0.25.
        expect([...returns]).toEqual([2.5, 0.25, 2, 4, 0, 1]);
        expect([...depth]).toEqual([0, 0, 1, 1, 1, 1]);
        // Mean baseline within sibling sets: {0,1}: ±1.125; {2,3}: ∓1; {4,5}: ∓0.5.
        expect([...advantages]).toEqual([1.125, -1.125, -1, 1, -0.5, 0.5]);
        const mx = treeReturns({ parent, rewards }, { gamma: 0.5, baseline: "max" });
        expect([...mx.advantages]).toEqual([0, -2.25, -2, 0, -1, 0]);
    });

    it("random trees (some branches stopped early) match a recursive reference", async () => {
        const next = rng(4);
        for (let trial = 0; trial < 20; trial++) {
            const parent: number[] = [],
                rewards: number[] = [];
            const grow = (p: number, depth: number) => {
                const G = 2 + Math.floor(next() * 2);
                const ids: number[] = [];
                for (let g = 0; g < G; g++) {
                    ids.push(parent.length);
                    parent.push(p);
                    rewards.push(Math.round(next() * 8) / 4);
                }
                for (const id of ids) if (depth < 3 && next() < 0.6) grow(id, depth + 1); // else: terminated leaf
            };
            grow(-1, 0);
            const gamma = 0.9;
            const R = (i: number): number => {
                const kids = parent.map((p, j) => (p === i ? j : -1)).filter((j) => j >= 0);
                return rewards[i] + (kids.length ? (gamma * kids.map(R).reduce((a, b) => a + b, 0)) / kids.length : 0);
            };
            const out = await treeReturnsAsync(
                { parent: Int32Array.from(parent), rewards: Float32Array.from(rewards) },
                { gamma },
            );
            parent.forEach((_, i) => expect(out.returns[i]).toBeCloseTo(R(i), 5));
            for (const p of new Set(parent)) {
                const sib = parent.map((q, j) => (q === p ? j : -1)).filter((j) => j >= 0);
                const m = sib.reduce((a, j) => a + out.returns[j], 0) / sib.length;
                for (const j of sib) expect(out.advantages[j]).toBeCloseTo(out.returns[j] - m, 5);
            }
        }
    });

    it("refuses cycles and bad parents", () => {
        expect(() => treeReturns({ parent: new Int32Array([1, 0]), rewards: new Float32Array(2) })).toThrow(/cycle/);
        expect(() => treeReturns({ parent: new Int32Array([-1, 5]), rewards: new Float32Array(2) })).toThrow(
            /parent\[1\]/,
        );
        expect(() => treeReturns({ parent: new Int32Array([-1, 1]), rewards: new Float32Array(2) })).toThrow(
            /parent\[1\]/,
        );
        expect(() => treeReturns({ parent: new Int32Array([-1]), rewards: new Float32Array(2) })).toThrow(RangeError);
    });
});
