// policyLoss.test.ts: every loss type, KL estimator (plain and straight-through) and aggregation against the float64
// reference written from the formulas (test/reference/policyLoss.ref.ts), on batches with masked tokens (NaN
// there), an empty row and ratios far outside the clip range, at every SIMD level; the properties the issue
// names (ratio 1 gives -A, zero gradient where a clip is active, micro-batches with a global normalizer sum to
// the full batch); the value loss; async twins; errors. Gradients against finite differences of the loss run in
// float64 in C++ (test/native/rl/test_policy_loss.cpp).
import { afterAll, describe, expect, it } from "vitest";

import {
    policyLoss,
    policyLossAsync,
    setSimd,
    valueLoss,
    valueLossAsync,
    type LossAggregation,
    type PolicyLossType,
    type SimdLevel,
} from "../../lib/index.js";
import { firstMismatch, rng } from "../helpers/rng.js";
import { policyLossReference, type RefOptions } from "../reference/policyLoss.ref.js";

afterAll(() => setSimd("best"));

const TYPES: PolicyLossType[] = ["ppo", "gspo", "cispo", "reinforce"];
const AGGS: LossAggregation[] = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"];
const levels = (["scalar", "avx2", "avx512"] as SimdLevel[]).filter((l) => {
    try {
        setSimd(l);
        return true;
    } catch {
        return false;
    } finally {
        setSimd("best");
    }
});

function makeBatch(B: number, T: number, seed: number, f32Mask = false, perSeq = false) {
    const next = rng(seed);
    const n = B * T;
    const logp = new Float32Array(n),
        oldLogp = new Float32Array(n),
        refLogp = new Float32Array(n),
        entropy = new Float32Array(n);
    const mask = f32Mask ? new Float32Array(n) : new Uint8Array(n);
    const advantages = new Float32Array(perSeq ? B : n);
    for (let i = 0; i < advantages.length; i++) advantages[i] = 4 * (next() - 0.5);
    for (let i = 0; i < n; i++) {
        const b = Math.floor(i / T);
        mask[i] = b === 2 ? 0 : next() < 0.8 ? 1 : 0;
        logp[i] = -0.05 - 3 * next();
        oldLogp[i] = logp[i] + 6 * (next() - 0.5); // ratios from e^-3 to e^3
        refLogp[i] = logp[i] + 4 * (next() - 0.5);
        entropy[i] = 3 * next();
        if (!mask[i]) {
            logp[i] = NaN;
            oldLogp[i] = NaN;
            refLogp[i] = NaN;
            entropy[i] = NaN;
        }
    }
    return { logp, oldLogp, refLogp, entropy, mask, advantages, shape: [B, T] as [number, number] };
}

type Batch = ReturnType<typeof makeBatch>;

function refOf(x: Batch, o: Partial<RefOptions>) {
    const opts: RefOptions = {
        type: "ppo",
        clipLow: 0.2,
        clipHigh: 0.2,
        dualClip: 3,
        logRatioClamp: 20,
        kl: null,
        entropyCoef: 0,
        aggregation: "token-mean",
        normalizer: null,
        ...o,
    };
    return policyLossReference({ ...x, B: x.shape[0], T: x.shape[1] }, opts);
}

function expectStats(got: Record<string, number>, want: Record<string, number>, ctx: string) {
    for (const k of Object.keys(want)) {
        const w = want[k],
            g = got[k];
        expect(Math.abs(g - w) <= 1e-6 + 2e-5 * Math.abs(w), `${ctx}: stats.${k} ${g} vs ${w}`).toBe(true);
    }
}

describe("policyLoss", () => {
    for (const level of levels) {
        it(`matches the float64 reference for every type, KL estimator and aggregation (SIMD ${level})`, () => {
            setSimd(level);
            let seed = 100;
            for (const type of TYPES)
                for (const est of [null, "k1", "abs", "k2", "k3"] as const)
                    for (const st of est ? [false, true] : [false])
                        for (const aggregation of AGGS) {
                            const perSeq = seed % 3 === 0,
                                f32 = seed % 2 === 0;
                            const x = makeBatch(5, 37, seed++, f32, perSeq);
                            const kl = est ? { coef: 0.3, estimator: est, straightThrough: st } : null;
                            const opts = {
                                type,
                                clip: { low: 0.2, high: 0.28 },
                                aggregation,
                                entropyCoef: 0.01,
                                kl: est ? { coef: 0.3, estimator: (est + (st ? "+" : "")) as "k3" } : null,
                            };
                            const got = policyLoss(x, { ...opts, device: "cpu" });
                            const want = refOf(x, {
                                type,
                                clipHigh: 0.28,
                                aggregation,
                                entropyCoef: 0.01,
                                kl,
                                logRatioClamp: type === "gspo" ? 10 : 20,
                            });
                            const ctx = `${type} kl=${est}${st ? "+" : ""} ${aggregation} perSeq=${perSeq} f32=${f32}`;
                            expect(
                                Math.abs(got.loss - want.loss) <= 1e-6 + 2e-5 * Math.abs(want.loss),
                                `${ctx}: loss ${got.loss} vs ${want.loss}`,
                            ).toBe(true);
                            expect(firstMismatch(got.gradLogp, want.grad, 2e-5, 1e-12, want.gradScale), ctx).toBeNull();
                            expect(firstMismatch(got.gradEntropy!, want.gradEnt, 1e-6, 1e-12), ctx).toBeNull();
                            expectStats(got.stats as unknown as Record<string, number>, want.stats, ctx);
                        }
        });
    }

    it("at ratio 1 the ppo loss is -A (token mean) and the gradient -A / tokens", () => {
        const x = makeBatch(4, 50, 7);
        const logp = x.oldLogp.slice();
        const r = policyLoss({ ...x, logp }, {});
        let s = 0,
            n = 0;
        for (let i = 0; i < logp.length; i++)
            if (x.mask[i]) {
                s -= x.advantages[i];
                n++;
            }
        expect(r.loss).toBeCloseTo(s / n, 6);
        for (let i = 0; i < logp.length; i++)
            expect(r.gradLogp[i]).toBeCloseTo(x.mask[i] ? -x.advantages[i] / n : 0, 7);
        expect(r.stats.clipFrac).toBe(0);
        expect(r.stats.ratioMean).toBe(1);
    });

    it("gives zero gradient wherever a clip is active, and counts it", () => {
        // ratio e^0.5 > 1.2 with A > 0; e^-0.5 < 0.8 with A < 0; dual clip: ratio e^2 > 3 with A < 0; and unclipped ones.
        const d = [0.5, -0.5, 2.0, 0.1, -0.1],
            a = [1, -1, -1, 1, -1];
        const logp = new Float32Array(d.map(() => -1)),
            oldLogp = new Float32Array(d.map((v) => -1 - v));
        const r = policyLoss({
            logp,
            oldLogp,
            advantages: new Float32Array(a),
            mask: new Uint8Array(5).fill(1),
            shape: [1, 5],
        });
        expect(Array.from(r.gradLogp.slice(0, 3))).toEqual([0, 0, 0]);
        expect(r.gradLogp[3]).toBeCloseTo(-Math.exp(0.1) / 5, 6);
        expect(r.gradLogp[4]).toBeCloseTo(Math.exp(-0.1) / 5, 6);
        expect(r.stats.clipFrac).toBeCloseTo(2 / 5, 7);
        expect(r.stats.clipFracLower).toBeCloseTo(1 / 5, 7);
        expect(r.loss).toBeCloseTo((-1.2 + 0.8 + 3 - Math.exp(0.1) + Math.exp(-0.1)) / 5, 6);
    });

    for (const type of TYPES)
        it(`micro-batches with a global normalizer sum to the full batch (${type}, every aggregation)`, () => {
            const x = makeBatch(9, 41, 31, false, type === "gspo");
            const [B, T] = x.shape;
            for (const aggregation of AGGS) {
                const full = policyLoss(x, {
                    type,
                    aggregation,
                    kl: { coef: 0.1, estimator: "k3" },
                    entropyCoef: 0.02,
                });
                const normalizer =
                    aggregation === "token-mean"
                        ? full.stats.tokens
                        : aggregation === "seq-mean-token-sum-norm"
                          ? 512
                          : full.stats.sequences;
                const ref =
                    aggregation === "seq-mean-token-sum-norm"
                        ? policyLoss(x, {
                              type,
                              aggregation,
                              kl: { coef: 0.1, estimator: "k3" },
                              entropyCoef: 0.02,
                              normalizer,
                          })
                        : full;
                let loss = 0;
                const grad = new Float32Array(B * T);
                for (const [b0, b1] of [
                    [0, 2],
                    [2, 3],
                    [3, 9],
                ] as const) {
                    const sl = <A extends Float32Array | Uint8Array>(a: A, per = T) =>
                        a.subarray(b0 * per, b1 * per) as A;
                    const part = policyLoss(
                        {
                            logp: sl(x.logp),
                            oldLogp: sl(x.oldLogp),
                            refLogp: sl(x.refLogp),
                            entropy: sl(x.entropy),
                            mask: sl(x.mask),
                            advantages: sl(x.advantages, type === "gspo" ? 1 : T),
                            shape: [b1 - b0, T],
                        },
                        {
                            type,
                            aggregation,
                            kl: { coef: 0.1, estimator: "k3" },
                            entropyCoef: 0.02,
                            normalizer,
                            ...(type === "gspo" ? { sequenceNormalizer: full.stats.sequences } : {}),
                        },
                    );
                    loss += part.loss;
                    grad.set(part.gradLogp, b0 * T);
                }
                expect(Math.abs(loss - ref.loss), `${type} ${aggregation}`).toBeLessThan(
                    1e-6 + 1e-5 * Math.abs(ref.loss),
                );
                expect(firstMismatch(grad, ref.gradLogp, 1e-6, 1e-12), `${type} ${aggregation}`).toBeNull();
            }
        });

    it("without a normalizer a micro-batch uses its own counts (the bug the normalizer fixes)", () => {
        const x = makeBatch(6, 20, 5);
        const full = policyLoss(
            { logp: x.logp, oldLogp: x.oldLogp, mask: x.mask, advantages: x.advantages, shape: x.shape },
            {},
        );
        const first = {
            logp: x.logp.subarray(0, 60),
            oldLogp: x.oldLogp.subarray(0, 60),
            mask: x.mask.subarray(0, 60),
            advantages: x.advantages.subarray(0, 60),
            shape: [3, 20] as [number, number],
        };
        const half = policyLoss(first, {});
        const halfGlobal = policyLoss(first, { normalizer: full.stats.tokens });
        expect(halfGlobal.gradLogp[0] * full.stats.tokens).toBeCloseTo(half.gradLogp[0] * half.stats.tokens, 5);
        expect(halfGlobal.gradLogp[0]).toBeCloseTo(full.gradLogp[0], 7);
    });

    it("REINFORCE works without oldLogp and is -A * logp", () => {
        const logp = new Float32Array([-1, -2, -3]),
            advantages = new Float32Array([2]);
        const r = policyLoss(
            { logp, advantages, mask: new Uint8Array([1, 1, 0]), shape: [1, 3] },
            { type: "reinforce" },
        );
        expect(r.loss).toBeCloseTo(2 * 1 + 2 * 2, 6); // seq-mean-token-sum over one sequence
        expect(Array.from(r.gradLogp)).toEqual([-2, -2, 0]);
        expect(r.stats.ratioMean).toBe(1);
    });

    it("async equals sync; errors name the parameter", async () => {
        const x = makeBatch(3, 16, 9);
        const a = await policyLossAsync(x, { kl: { coef: 0.1, estimator: "k2+" } });
        const s = policyLoss(x, { kl: { coef: 0.1, estimator: "k2+" } });
        expect(a.loss).toBe(s.loss);
        expect(Array.from(a.gradLogp)).toEqual(Array.from(s.gradLogp));
        expect(() => policyLoss(x, { type: "ppo2" as "ppo" })).toThrow(/policyLoss: type: expected one of "ppo"/);
        expect(() => policyLoss(x, { kl: { coef: 0.1, estimator: "k4" as "k3" } })).toThrow(/kl.estimator/);
        expect(() => policyLoss({ ...x, refLogp: undefined }, { kl: { coef: 0.1 } })).toThrow(
            /refLogp: expected Float32Array/,
        );
        expect(() => policyLoss(x, { entropyCoef: NaN })).toThrow(/entropyCoef: expected a number/);
        expect(() => policyLoss(x, { dualClip: 1 })).toThrow(/dualClip: expected a number > 1/);
        expect(() => policyLoss(x, { clip: { low: 0.2, hihg: 0.3 } as { low: number } })).toThrow(
            /Did you mean "high"/,
        );
        expect(() => policyLoss({ ...x, oldLogp: undefined }, {})).toThrow(
            /oldLogp: expected Float32Array \(required for "ppo"\)/,
        );
        const bad = x.mask.slice();
        bad[5] = 3;
        expect(() => policyLoss({ ...x, mask: bad }, {})).toThrow(
            /mask: expected 0 or 1 at every position, got 3 at index 5/,
        );
        expect(() => policyLoss(x, { out: { gradLogp: x.logp } })).toThrow(
            /out.gradLogp: expected memory that does not overlap logp/,
        );
        await expect(policyLossAsync({ ...x, mask: bad }, {})).rejects.toThrow(/mask/);
    });
});

describe("valueLoss", () => {
    it("matches verl's clipped value loss and its gradient, for every aggregation", async () => {
        const next = rng(3);
        const B = 4,
            T = 23,
            n = B * T;
        const values = new Float32Array(n),
            oldValues = new Float32Array(n),
            returns = new Float32Array(n),
            mask = new Uint8Array(n);
        for (let i = 0; i < n; i++) {
            values[i] = 2 * next() - 1;
            oldValues[i] = values[i] + (next() - 0.5);
            returns[i] = 2 * next() - 1;
            mask[i] = Math.floor(i / T) === 1 ? 0 : next() < 0.8 ? 1 : 0;
            if (!mask[i]) values[i] = NaN;
        }
        for (const aggregation of AGGS)
            for (const clip of [0.2, null]) {
                const got = valueLoss({ values, oldValues, returns, mask, shape: [B, T] }, { clip, aggregation });
                const len = Array.from({ length: B }, (_, b) =>
                    mask.subarray(b * T, b * T + T).reduce((s, v) => s + v, 0),
                );
                const tokens = len.reduce((s, v) => s + v, 0),
                    seqs = len.filter((v) => v > 0).length;
                let loss = 0,
                    nc = 0;
                for (let i = 0; i < n; i++) {
                    if (!mask[i]) {
                        expect(got.gradValues[i]).toBe(0);
                        continue;
                    }
                    const b = Math.floor(i / T);
                    const w =
                        aggregation === "token-mean"
                            ? 1 / tokens
                            : aggregation === "seq-mean-token-sum"
                              ? 1 / seqs
                              : aggregation === "seq-mean-token-mean"
                                ? 1 / (seqs * len[b])
                                : 1 / T;
                    const v = values[i],
                        R = returns[i];
                    const l1 = (v - R) ** 2;
                    let li = l1,
                        g = (v - R) * w;
                    if (clip !== null) {
                        const vc = Math.min(Math.max(v, oldValues[i] - clip), oldValues[i] + clip);
                        if ((vc - R) ** 2 > l1) {
                            li = (vc - R) ** 2;
                            g = 0;
                            nc++;
                        }
                    }
                    loss += 0.5 * w * li;
                    expect(got.gradValues[i]).toBeCloseTo(g, 6);
                }
                expect(got.loss).toBeCloseTo(loss, 6);
                expect(got.stats.clipFrac).toBeCloseTo(nc / tokens, 7);
                const a = await valueLossAsync(
                    { values, oldValues, returns, mask, shape: [B, T] },
                    { clip, aggregation },
                );
                expect(a.loss).toBe(got.loss);
            }
        expect(() => valueLoss({ values, returns, mask, shape: [B, T] })).toThrow(
            /oldValues: expected Float32Array \(required unless clip is null\)/,
        );
    });
});
