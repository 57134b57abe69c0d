// rolloutCorrection.test.ts: the rollout/trainer mismatch correction against the float64 transcription of verl's
// rollout_corr_helper.py (test/reference/rolloutCorrection.ref.ts) on random batches (masked NaNs, empty rows, small
// and large mismatches, every IS level and mode, every rejection option, batch normalisation); the policy loss with
// rollout IS weights against verl's pg_losses * w in float64; presets; async; errors naming the option.
import { describe, expect, it } from "vitest";

import {
    fusedPolicyLoss,
    policyLoss,
    rolloutCorrection,
    rolloutCorrectionAsync,
    ROLLOUT_PRESETS,
    type PolicyLossType,
    type RolloutCorrectionOptions,
} from "../../lib/index.js";
import { RS_OPTIONS } from "../../lib/rl/rolloutCorrection.js";
import { firstMismatch, rng } from "../helpers/rng.js";
import { policyLossReference } from "../reference/policyLoss.ref.js";
import { rolloutCorrectionReference, type RcRefOptions } from "../reference/rolloutCorrection.ref.js";

function batch(seed: number, B: number, T: number, spread: number) {
    const r = rng(seed);
    const n = B * T;
    const roll = new Float32Array(n),
        old = new Float32Array(n),
        mask = new Uint8Array(n);
    for (let b = 0; b < B; b++) {
        const len = b === 1 ? 0 : 1 + Math.floor(r() * T); // row 1 empty
        for (let t = 0; t < T; t++) {
            const i = b * T + t;
            mask[i] = t < len && r() > 0.1 ? 1 : 0;
            roll[i] = -3 * r();
            // a mismatch of `spread` on average, one token in ten far off
            old[i] = roll[i] + spread * (2 * r() - 1) * (r() < 0.1 ? 6 : 1);
            if (!mask[i]) ((old[i] = NaN), (roll[i] = NaN));
        }
    }
    return { old, roll, mask, B, T };
}

function refOptions(o: RolloutCorrectionOptions): RcRefOptions {
    const names = o.rolloutRs ? (Array.isArray(o.rolloutRs) ? o.rolloutRs : [o.rolloutRs]) : [];
    const th = o.rolloutRsThreshold as number[] | undefined;
    return {
        is: o.rolloutIs ?? null,
        mode: o.rolloutIsMode ?? "truncate",
        threshold: o.rolloutIsThreshold ?? 2,
        lower: o.rolloutIsThresholdLower ?? 0,
        batchNormalize: o.rolloutIsBatchNormalize ?? false,
        rs: names.map((option, i) => {
            const u = th![i];
            return { option, lower: option.endsWith("k1") ? 1 / u : 0, upper: u };
        }),
    };
}

const thresholdOf = (opt: string) => (opt.endsWith("k1") ? 1.5 : opt.includes("sum") ? 0.3 : 0.05);

describe("rolloutCorrection", () => {
    it("equals verl's weights, rejection mask and metrics (float64 transcription) on random batches", () => {
        let cases = 0;
        const levels = [null, "token", "sequence", "geometric"] as const;
        for (let seed = 1; seed <= 48; seed++) {
            const r = rng(1000 + seed);
            const B = 1 + Math.floor(r() * 6),
                T = 1 + Math.floor(r() * 30);
            const spread = [0.02, 0.3, 1.5][seed % 3];
            const x = batch(seed, Math.max(B, 2), T, spread);
            const rs = [...RS_OPTIONS].filter(() => r() < 0.25).slice(0, 4);
            const o: RolloutCorrectionOptions = {
                rolloutIs: levels[seed % 4],
                rolloutIsMode: seed % 8 < 4 ? "truncate" : "mask",
                rolloutIsThreshold: [1.5, 2, 5][seed % 3],
                rolloutIsThresholdLower: seed % 2 ? 0.5 : 0,
                rolloutIsBatchNormalize: seed % 5 === 0,
                ...(rs.length ? { rolloutRs: rs, rolloutRsThreshold: rs.map(thresholdOf) } : {}),
            };
            const got = rolloutCorrection({ oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [x.B, T] }, o);
            const want = rolloutCorrectionReference(x.old, x.roll, x.mask, x.B, T, refOptions(o));
            const where = `seed ${seed} ${JSON.stringify(o)}`;
            if (o.rolloutIs) expect(firstMismatch(got.weights!, want.weights, 1e-6, 1e-7), where).toBeNull();
            else expect(got.weights).toBeUndefined();
            expect(Array.from(got.mask), where).toEqual(Array.from(want.keep));
            const s = got.stats;
            for (const [k, v] of Object.entries(want.stats))
                expect(s[k as keyof typeof s], `${where}: ${k}`).toBeCloseTo(v, 9);
            cases++;
        }
        expect(cases).toBe(48);
    });

    it("truncation and masking do what their names say at the threshold's edges", () => {
        // one row, token ratios 0.25, 0.6, 1, 1.9, 4 (old - rollout = log ratio)
        const ratios = [0.25, 0.6, 1, 1.9, 4];
        const roll = new Float32Array(5).fill(-1),
            old = Float32Array.from(ratios, (q) => -1 + Math.log(q)),
            mask = new Uint8Array(5).fill(1);
        const b = { oldLogp: old, rolloutLogp: roll, mask, shape: [1, 5] as const };
        const tis = rolloutCorrection(b, { preset: "tis" });
        expect(Array.from(tis.weights!, (w) => +w.toFixed(5))).toEqual([0.25, 0.6, 1, 1.9, 2]);
        expect(tis.stats.isCorrectedFraction).toBeCloseTo(1 / 5, 12);
        const mis = rolloutCorrection(b, { preset: "mis" });
        expect(Array.from(mis.weights!, (w) => +w.toFixed(5))).toEqual([0.25, 0.6, 1, 1.9, 0]);
        const ice = rolloutCorrection(b, { preset: "icepop", rolloutIsThreshold: 3 });
        expect(Array.from(ice.weights!, (w) => +w.toFixed(5))).toEqual([0, 0.6, 1, 1.9, 0]);
        // rejection with token_k1 at 3: keeps ratios in [1/3, 3] (k1 = -log ratio within [log 1/3, log 3])
        const rej = rolloutCorrection(b, { rolloutRs: "token_k1", rolloutRsThreshold: 3 });
        expect(Array.from(rej.mask)).toEqual([0, 1, 1, 1, 0]);
        expect(rej.stats.rsMaskedFraction).toBeCloseTo(2 / 5, 12);
        expect(rej.stats.rsSeqMaskedFraction).toBe(1);
        // sequence level: the product of the ratios (1.14), truncated at 2 it stays; geometric: 1.9^(1/5)
        const seq = rolloutCorrection(b, { rolloutIs: "sequence" });
        expect(Array.from(seq.weights!, (w) => +w.toFixed(4))).toEqual(new Array(5).fill(1.14));
        const geo = rolloutCorrection(b, { rolloutIs: "geometric" });
        expect(geo.weights![0]).toBeCloseTo(Math.pow(1.14, 1 / 5), 5);
    });

    it("presets are their explicit options, and explicit options override a preset", () => {
        const x = batch(7, 4, 12, 0.8);
        const b = { oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [4, 12] as const };
        for (const [name, opts] of Object.entries(ROLLOUT_PRESETS)) {
            const a = rolloutCorrection(b, { preset: name as keyof typeof ROLLOUT_PRESETS });
            const e = rolloutCorrection(b, opts);
            expect(Array.from(a.weights!), name).toEqual(Array.from(e.weights!));
        }
        const o = rolloutCorrection(b, { preset: "tis", rolloutIsThreshold: 1.2 });
        expect(Math.max(...o.weights!)).toBeLessThanOrEqual(Math.fround(1.2));
    });

    it("verl's threshold syntax: one for all, 'lower_upper' for k1, comma-separated lists", () => {
        const x = batch(9, 5, 16, 0.6);
        const b = { oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [5, 16] as const };
        const a = rolloutCorrection(b, { rolloutRs: "token_k1,seq_mean_k3", rolloutRsThreshold: "0.5_2.0,0.05" });
        const c = rolloutCorrection(b, {
            rolloutRs: ["token_k1", "seq_mean_k3"],
            rolloutRsThreshold: [[0.5, 2], 0.05],
        });
        expect(Array.from(a.mask)).toEqual(Array.from(c.mask));
        const one = rolloutCorrection(b, { rolloutRs: "token_k2,token_k3", rolloutRsThreshold: 0.1 });
        const two = rolloutCorrection(b, { rolloutRs: ["token_k2", "token_k3"], rolloutRsThreshold: [0.1, 0.1] });
        expect(Array.from(one.mask)).toEqual(Array.from(two.mask));
        expect(one.stats.rsMaskedFraction).toBeGreaterThan(0);
    });

    it("async equals sync; the input mask passes through without rejection; an empty batch has zero stats", async () => {
        const x = batch(11, 3, 9, 0.4);
        const b = { oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [3, 9] as const };
        const s = rolloutCorrection(b, { preset: "seq-tis", rolloutRs: "seq_max_k2", rolloutRsThreshold: 0.2 });
        const a = await rolloutCorrectionAsync(b, {
            preset: "seq-tis",
            rolloutRs: "seq_max_k2",
            rolloutRsThreshold: 0.2,
        });
        expect(Array.from(a.weights!)).toEqual(Array.from(s.weights!));
        expect(a.stats).toEqual(s.stats);
        const plain = rolloutCorrection(b, { preset: "tis" });
        expect(Array.from(plain.mask)).toEqual(Array.from(x.mask));
        const e = rolloutCorrection(
            { oldLogp: new Float32Array(0), rolloutLogp: new Float32Array(0), mask: new Uint8Array(0), shape: [0, 5] },
            { preset: "tis" },
        );
        expect(e.stats.tokens).toBe(0);
        expect(e.stats.isMean).toBe(0);
    });

    it("rejects bad options and inputs, naming them", () => {
        const x = batch(3, 2, 4, 0.1);
        const b = { oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [2, 4] as const };
        const bad: [unknown, RegExp][] = [
            [{ rolloutIs: "tokens" }, /rolloutIs: expected one of/],
            [{ rolloutIs: "token", rolloutIsThreshold: 0 }, /rolloutIsThreshold: expected a number/],
            [{ rolloutIs: "token", rolloutIsThreshold: NaN }, /rolloutIsThreshold/],
            [
                { rolloutIs: "token", rolloutIsThresholdLower: 3 },
                /rolloutIsThresholdLower: expected a number in \[0, rolloutIsThreshold = 2\)/,
            ],
            [{ rolloutRs: "token_k4", rolloutRsThreshold: 1 }, /rolloutRs\[0\]: expected one of/],
            [{ rolloutRs: "token_k1" }, /rolloutRsThreshold: expected a threshold \(required with rolloutRs\)/],
            [{ rolloutRs: "token_k1,token_k2", rolloutRsThreshold: [1, 2, 3] }, /expected one threshold or 2/],
            [{ rolloutRs: "token_k1", rolloutRsThreshold: "2_0.5" }, /expected lower < upper/],
            [{ rolloutRs: "token_k2", rolloutRsThreshold: "0.5_2" }, /"lower_upper" is for k1 options only/],
            [{ rolloutRs: "token_k2", rolloutRsThreshold: -1 }, /rolloutRsThreshold\[0\]: expected a number/],
            [{ preset: "tls" }, /preset: expected one of/],
            [{ rolloutIsBatchNormalize: 1 }, /rolloutIsBatchNormalize: expected a boolean/],
            [{ rolloutIS: "token" }, /rolloutIS/],
        ];
        for (const [o, re] of bad)
            expect(() => rolloutCorrection(b, o as RolloutCorrectionOptions), JSON.stringify(o)).toThrow(re);
        const half = Uint8Array.from(x.mask);
        half[0] = 2;
        expect(() => rolloutCorrection({ ...b, mask: half }, { preset: "tis" })).toThrow(/mask: expected 0 or 1/);
        expect(() => rolloutCorrection({ ...b, rolloutLogp: new Float32Array(3) }, { preset: "tis" })).toThrow(
            /rolloutLogp/,
        );
    });
});

describe("policy loss with rollout IS weights", () => {
    const TYPES: PolicyLossType[] = ["ppo", "gspo", "cispo", "reinforce"];
    it("equals verl's pg_losses * rollout_is_weights (float64) for every loss type, per-token and per-sequence A", () => {
        for (const type of TYPES)
            for (const perSeq of [false, true]) {
                const B = 5,
                    T = 11;
                const x = batch(type.length * 7 + (perSeq ? 1 : 0), B, T, 0.5);
                const r = rng(99);
                const logp = Float32Array.from(x.old, (v) => (Number.isNaN(v) ? NaN : v + 0.3 * (2 * r() - 1)));
                const adv = Float32Array.from({ length: perSeq ? B : B * T }, () => 2 * r() - 1);
                const corr = rolloutCorrection(
                    { oldLogp: x.old, rolloutLogp: x.roll, mask: x.mask, shape: [B, T] },
                    { preset: "tis" },
                );
                const got = policyLoss(
                    {
                        logp,
                        oldLogp: x.old,
                        advantages: adv,
                        mask: x.mask,
                        rolloutIsWeights: corr.weights!,
                        shape: [B, T],
                    },
                    { type, dualClip: type === "ppo" ? 3 : null },
                );
                const want = policyLossReference(
                    {
                        logp,
                        oldLogp: x.old,
                        advantages: adv,
                        mask: x.mask,
                        refLogp: null,
                        entropy: null,
                        isWeights: corr.weights!,
                        B,
                        T,
                    },
                    {
                        type,
                        clipLow: 0.2,
                        clipHigh: 0.2,
                        dualClip: type === "ppo" ? 3 : null,
                        logRatioClamp: type === "gspo" ? 10 : 20,
                        kl: null,
                        entropyCoef: 0,
                        aggregation: type === "reinforce" ? "seq-mean-token-sum" : "token-mean",
                        normalizer: null,
                    },
                );
                const where = `${type} perSeq=${perSeq}`;
                expect(got.loss, where).toBeCloseTo(want.loss, 5);
                expect(firstMismatch(got.gradLogp, want.grad, 1e-5, 1e-7, want.gradScale), where).toBeNull();
                expect(got.stats.clipFrac, where).toBeCloseTo(want.stats.clipFrac, 12);
                // the fused kernel takes the same weights
                if (type !== "gspo" || !perSeq) {
                    const fused = fusedPolicyLoss(
                        {
                            logits: new Float32Array(B * T * 3),
                            targets: new Int32Array(B * T),
                            oldLogp: x.old,
                            advantages: adv,
                            mask: x.mask,
                            rolloutIsWeights: corr.weights!,
                            shape: [B, T, 3],
                        },
                        { type, dualClip: type === "ppo" ? 3 : null },
                    );
                    const base = policyLoss(
                        {
                            logp: new Float32Array(B * T).fill(-Math.log(3)),
                            oldLogp: x.old,
                            advantages: adv,
                            mask: x.mask,
                            rolloutIsWeights: corr.weights!,
                            shape: [B, T],
                        },
                        { type, dualClip: type === "ppo" ? 3 : null },
                    );
                    expect(fused.loss, `${where} fused`).toBeCloseTo(base.loss, 5);
                }
            }
    });

    it("weights of 1 change nothing; a negative or NaN weight at an unmasked token is an error naming its index", () => {
        const B = 2,
            T = 3,
            mask = Uint8Array.from([1, 1, 0, 1, 0, 0]);
        const logp = Float32Array.from([-1, -2, NaN, -0.5, NaN, NaN]),
            oldLogp = Float32Array.from([-1.1, -1.8, NaN, -0.4, NaN, NaN]),
            advantages = Float32Array.from([1, -1]);
        const plain = policyLoss({ logp, oldLogp, advantages, mask, shape: [B, T] });
        const ones = policyLoss({
            logp,
            oldLogp,
            advantages,
            mask,
            rolloutIsWeights: new Float32Array(6).fill(1),
            shape: [B, T],
        });
        expect(ones.loss).toBe(plain.loss);
        expect(Array.from(ones.gradLogp)).toEqual(Array.from(plain.gradLogp));
        const w = new Float32Array(6).fill(1);
        w[3] = -0.5;
        expect(() => policyLoss({ logp, oldLogp, advantages, mask, rolloutIsWeights: w, shape: [B, T] })).toThrow(
            /rolloutIsWeights\[3\]: expected a finite number >= 0/,
        );
        w[3] = 1;
        w[2] = NaN; // masked: never read
        expect(() => policyLoss({ logp, oldLogp, advantages, mask, rolloutIsWeights: w, shape: [B, T] })).not.toThrow();
    });
});
