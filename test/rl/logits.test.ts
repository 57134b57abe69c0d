// logits.test.ts: logprobs against the float64 two-pass formula (rows with -Infinity logits, one dominant logit,
// V not a multiple of any vector width, temperature), and fusedPolicyLoss against logprobs + policyLoss composed
// by the chain rule (every loss type, per-sequence advantages, entropy bonus, KL, in place), at every SIMD level;
// async twins; errors, including that a rejected in-place call leaves the logits untouched.
import { afterAll, describe, expect, it } from "vitest";

import {
    fusedPolicyLoss,
    fusedPolicyLossAsync,
    logprobs,
    logprobsAsync,
    policyLoss,
    setSimd,
    type PolicyLossType,
    type SimdLevel,
} from "../../lib/index.js";
import { firstMismatch, rng } from "../helpers/rng.js";
import { logprobsReference } from "../reference/policyLoss.ref.js";

afterAll(() => setSimd("best"));

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

function makeLogits(N: number, V: number, seed: number) {
    const next = rng(seed);
    const logits = new Float32Array(N * V);
    for (let i = 0; i < logits.length; i++) logits[i] = 8 * (next() - 0.5);
    const targets = new Int32Array(N);
    for (let n = 0; n < N; n++) targets[n] = Math.floor(next() * V);
    if (V > 2 && N > 3) {
        for (let v = 0; v < V; v += 2) if (v !== targets[0]) logits[v] = -Infinity; // row 0: half the row -Inf
        logits[1 * V + targets[1]] = 90; // row 1: one dominant logit
        logits[2 * V + ((targets[2] + 1) % V)] = -Infinity;
        logits[3 * V + targets[3]] = -Infinity; // row 3: the target itself -Inf
    }
    return { logits, targets };
}

describe("logprobs", () => {
    for (const level of levels)
        it(`matches the float64 formula, entropy included (SIMD ${level})`, () => {
            setSimd(level);
            for (const V of [1, 7, 16, 17, 33, 100, 1031, 151936])
                // the last: a Qwen-size row (float lane sums drifted there)
                for (const temperature of [1, 0.7]) {
                    const N = 6;
                    const { logits, targets } = makeLogits(N, V, V * 7 + 1);
                    const r = logprobs({ logits, targets, shape: [N, V] }, { temperature, entropy: true });
                    for (let n = 0; n < N; n++) {
                        const want = logprobsReference(logits, V, n, targets[n], temperature);
                        const ctx = `V=${V} T=${temperature} row ${n}`;
                        if (want.logp === -Infinity) expect(r.logp[n], ctx).toBe(-Infinity);
                        else
                            expect(
                                Math.abs(r.logp[n] - want.logp),
                                `${ctx}: ${r.logp[n]} vs ${want.logp}`,
                            ).toBeLessThan(2e-6 + 2e-6 * Math.abs(want.logp));
                        expect(Math.abs(r.entropy![n] - want.entropy), `${ctx}: entropy`).toBeLessThan(5e-6);
                    }
                }
        });

    it("gives NaN for a row of only -Infinity, async equals sync, and checks targets", async () => {
        const logits = new Float32Array(8).fill(-Infinity);
        expect(logprobs({ logits, targets: new Int32Array([0]), shape: [1, 8] }).logp[0]).toBeNaN();
        const { logits: z, targets } = makeLogits(5, 40, 2);
        const a = await logprobsAsync({ logits: z, targets, shape: [5, 40] }, { entropy: true });
        const s = logprobs({ logits: z, targets, shape: [5, 40] }, { entropy: true });
        expect(Array.from(a.logp)).toEqual(Array.from(s.logp));
        expect(() => logprobs({ logits: z, targets: new Int32Array([0, 1, 40, 2, 3]), shape: [5, 40] })).toThrow(
            /targets: expected token ids in \[0, 40\) \(V\), got 40 at index 2/,
        );
        expect(() => logprobs({ logits: z, targets, shape: [5, 40] }, { temperature: 0 })).toThrow(/temperature/);
        expect(() => logprobs({ logits: z, targets, shape: [5, 41] })).toThrow(
            /logits: expected Float32Array of 205 elements/,
        );
    });
});

// fusedPolicyLoss = logprobs + policyLoss + the chain rule, written here in float64 from the softmax derivative.
function composed(
    logits: Float32Array,
    targets: Int32Array,
    V: number,
    T0: number,
    mask: Uint8Array,
    temperature: number,
    batch: { oldLogp: Float32Array; advantages: Float32Array; refLogp?: Float32Array; shape: [number, number] },
    options: Parameters<typeof policyLoss>[1],
) {
    const N = targets.length;
    const lp = logprobs({ logits, targets, shape: [N, V] }, { temperature, entropy: true });
    for (let n = 0; n < N; n++)
        if (!mask[n]) {
            lp.logp[n] = 0;
            lp.entropy![n] = 0;
        }
    const pl = policyLoss({ ...batch, logp: lp.logp, entropy: lp.entropy, mask }, options);
    const g = new Float64Array(N * V);
    for (let n = 0; n < N; n++) {
        if (!mask[n]) continue;
        const { lse } = logprobsReference(logits, V, n, targets[n], temperature);
        const H = lp.entropy![n],
            gl = pl.gradLogp[n],
            ge = pl.gradEntropy![n];
        for (let v = 0; v < V; v++) {
            const x = logits[n * V + v] / temperature,
                p = Math.exp(x - lse);
            const dH = p === 0 ? 0 : -p * (x - lse + H);
            g[n * V + v] = (((v === targets[n] ? 1 : 0) - p) * gl + ge * dH) / temperature;
        }
    }
    void T0;
    return { g, pl, lp };
}

describe("fusedPolicyLoss", () => {
    for (const level of levels)
        it(`equals logprobs + policyLoss composed by the chain rule (SIMD ${level})`, () => {
            setSimd(level);
            let seed = 1;
            for (const V of [13, 37, 4103])
                for (const type of ["ppo", "gspo", "cispo", "reinforce"] as PolicyLossType[]) {
                    const B = 3,
                        T = 4,
                        N = B * T,
                        next = rng(seed++);
                    const { logits, targets } = makeLogits(N, V, seed);
                    const mask = new Uint8Array(N).map((_, i) => (i % 5 === 4 ? 0 : 1));
                    const oldLogp = new Float32Array(N).map(() => -Math.log(V) + 2 * (next() - 0.5));
                    const refLogp = new Float32Array(N).map(() => -Math.log(V) + (next() - 0.5));
                    const perSeq = type === "gspo";
                    const advantages = new Float32Array(perSeq ? B : N).map(() => 2 * (next() - 0.5));
                    const temperature = V === 37 ? 0.8 : 1;
                    const options = { type, entropyCoef: 0.02, kl: { coef: 0.05, estimator: "k3" as const } };
                    const want = composed(
                        logits,
                        targets,
                        V,
                        T,
                        mask,
                        temperature,
                        { oldLogp, advantages, refLogp, shape: [B, T] },
                        options,
                    );
                    const got = fusedPolicyLoss(
                        { logits, targets, oldLogp, advantages, mask, refLogp, shape: [B, T, V] },
                        { ...options, temperature },
                    );
                    const ctx = `V=${V} ${type}`;
                    // (cispo's loss is infinite where a target logit is -Infinity: -w * A * logp)
                    expect(
                        got.loss === want.pl.loss ||
                            Math.abs(got.loss - want.pl.loss) < 1e-6 + 1e-5 * Math.abs(want.pl.loss),
                        `${ctx}: ${got.loss} vs ${want.pl.loss}`,
                    ).toBe(true);
                    expect(firstMismatch(got.logp, want.lp.logp, 1e-6, 1e-6), ctx).toBeNull();
                    const scale = new Float64Array(N * V).fill(
                        Math.max(...Array.from(want.pl.gradLogp, Math.abs)) + 0.02,
                    );
                    expect(firstMismatch(got.gradLogits, want.g, 1e-4, 1e-9, scale), ctx).toBeNull();
                    expect(got.stats.clipFrac).toBeCloseTo(want.pl.stats.clipFrac, 6);
                    const copy = logits.slice();
                    const inPlace = fusedPolicyLoss(
                        { logits: copy, targets, oldLogp, advantages, mask, refLogp, shape: [B, T, V] },
                        { ...options, temperature, inPlace: true },
                    );
                    expect(inPlace.gradLogits).toBe(copy);
                    expect(firstMismatch(copy, got.gradLogits, 0, 0), `${ctx} in place`).toBeNull();
                }
        });

    it("reports the masked mean entropy in stats with or without an entropy bonus, and the bonus alone changes the loss", () => {
        const V = 40,
            B = 2,
            T = 5,
            N = B * T;
        const { logits, targets } = makeLogits(N, V, 11);
        const mask = new Uint8Array(N).map((_, i) => (i % 3 === 2 ? 0 : 1));
        const batch = {
            logits,
            targets,
            oldLogp: new Float32Array(N).fill(-3.5),
            advantages: new Float32Array(N).map((_, i) => (i % 2 ? 0.7 : -0.4)),
            mask,
            shape: [B, T, V] as [number, number, number],
        };
        const plain = fusedPolicyLoss(batch),
            bonus = fusedPolicyLoss(batch, { entropyCoef: 0.1 });
        let s = 0,
            n = 0;
        for (let i = 0; i < N; i++)
            if (mask[i]) {
                s += plain.entropy[i];
                n++;
            }
        expect(plain.stats.entropyMean).toBeCloseTo(s / n, 6);
        expect(plain.stats.entropyMean).toBeGreaterThan(0);
        expect(bonus.stats.entropyMean).toBeCloseTo(plain.stats.entropyMean, 9);
        expect(plain.stats.entropyLoss).toBeGreaterThan(0); // agg(entropy), reported either way
        expect(bonus.loss).toBeCloseTo(plain.loss - 0.1 * plain.stats.entropyLoss, 6);
    });

    it("async equals sync; a rejected in-place call leaves the logits untouched", async () => {
        const V = 50,
            N = 6;
        const { logits, targets } = makeLogits(N, V, 5);
        const batch = {
            logits,
            targets,
            oldLogp: new Float32Array(N).fill(-4),
            advantages: new Float32Array(N).fill(0.5),
            mask: new Uint8Array(N).fill(1),
            shape: [N, V] as [number, number],
        };
        const a = await fusedPolicyLossAsync(batch);
        const s = fusedPolicyLoss(batch);
        expect(a.loss).toBe(s.loss);
        expect(firstMismatch(a.gradLogits, s.gradLogits, 0, 0)).toBeNull();
        const bad = targets.slice();
        bad[4] = -1;
        const before = logits.slice();
        expect(() => fusedPolicyLoss({ ...batch, targets: bad }, { inPlace: true })).toThrow(
            /targets: expected token ids in \[0, 50\)/,
        );
        expect(firstMismatch(logits, before, 0, 0)).toBeNull();
        const masked = batch.mask.slice();
        masked[4] = 0; // a masked row's target is never read; its gradient row is 0
        const r = fusedPolicyLoss({ ...batch, targets: bad, mask: masked });
        expect(r.gradLogits.subarray(4 * V, 5 * V).every((v) => v === 0)).toBe(true);
        expect(() => fusedPolicyLoss(batch, { inPlace: true, out: { gradLogits: new Float32Array(N * V) } })).toThrow(
            /out.gradLogits/,
        );
        expect(() => fusedPolicyLoss({ ...batch, shape: [N, V, 1, 1] as unknown as [number, number] })).toThrow(
            /shape: expected \[N, V\] or \[B, T, V\]/,
        );
    });
});

// bfloat16 logits (Uint16Array bit patterns): the float32 path's results on the widened values, bit for bit.
function toBf16(x: Float32Array): { bf16: Uint16Array; widened: Float32Array } {
    const u32 = new Uint32Array(x.buffer, x.byteOffset, x.length);
    const bf16 = new Uint16Array(x.length);
    const widened = new Float32Array(x.length);
    const w32 = new Uint32Array(widened.buffer);
    for (let i = 0; i < x.length; i++) {
        bf16[i] = u32[i] >>> 16; // truncation: any bf16 value will do
        w32[i] = (bf16[i] << 16) >>> 0;
    }
    return { bf16, widened };
}

describe("bf16 logits", () => {
    for (const level of levels)
        it(`logprobs and fusedPolicyLoss equal the float32 path on the widened values (SIMD ${level})`, async () => {
            setSimd(level);
            for (const V of [3, 100, 4099]) {
                const B = 2,
                    T = 4,
                    N = B * T;
                const { logits, targets } = makeLogits(N, V, V + 11);
                const { bf16, widened } = toBf16(logits);
                const f = logprobs({ logits: widened, targets, shape: [N, V] }, { temperature: 0.7, entropy: true });
                const b = logprobs(
                    { logits: bf16, targets, shape: [N, V] },
                    { temperature: 0.7, entropy: true, logitsDtype: "bf16" },
                );
                expect(firstMismatch(b.logp, f.logp, 0, 0), `V=${V} logp`).toBeNull();
                expect(firstMismatch(b.entropy!, f.entropy!, 0, 0), `V=${V} entropy`).toBeNull();
                const batch = {
                    targets,
                    oldLogp: new Float32Array(N).fill(-3),
                    advantages: new Float32Array(B).map((_, i) => i - 0.5),
                    mask: new Uint8Array(N).map((_, i) => (i === 5 ? 0 : 1)),
                    shape: [B, T, V] as [number, number, number],
                };
                for (const type of ["ppo", "gspo", "cispo"] as PolicyLossType[]) {
                    const opts = {
                        type,
                        temperature: 0.7,
                        entropyCoef: 0.01,
                        aggregation: "seq-mean-token-mean" as const,
                    };
                    const ff = fusedPolicyLoss({ ...batch, logits: widened }, opts);
                    const fb = await fusedPolicyLossAsync({ ...batch, logits: bf16 }, { ...opts, logitsDtype: "bf16" });
                    expect(fb.loss, `${type} V=${V}`).toBe(ff.loss);
                    expect(firstMismatch(fb.gradLogits, ff.gradLogits, 0, 0), `${type} V=${V} gradLogits`).toBeNull();
                    expect(firstMismatch(fb.logp, ff.logp, 0, 0), `${type} V=${V} logp`).toBeNull();
                    expect(fb.stats).toEqual(ff.stats);
                }
            }
        });

    it("needs logitsDtype 'bf16' for a Uint16Array, a Uint16Array for 'bf16', and no inPlace", () => {
        const { logits, targets } = makeLogits(2, 8, 3);
        const { bf16 } = toBf16(logits);
        expect(() => logprobs({ logits: bf16, targets, shape: [2, 8] })).toThrow(
            /logits: expected a Float32Array, or a Uint16Array with logitsDtype: 'bf16'.*logitsDtype unset/,
        );
        expect(() => logprobs({ logits: bf16, targets, shape: [2, 8] }, { logitsDtype: "float32" })).toThrow(
            /got a Uint16Array with logitsDtype 'float32'/,
        );
        expect(() => logprobs({ logits, targets, shape: [2, 8] }, { logitsDtype: "bf16" })).toThrow(
            /logits: expected Uint16Array of 16 elements, got Float32Array/,
        );
        expect(() => logprobs({ logits: bf16, targets, shape: [2, 8] }, { logitsDtype: "fp16" as never })).toThrow(
            /logitsDtype: expected 'float32' or 'bf16'/,
        );
        const batch = {
            logits: bf16,
            targets,
            oldLogp: new Float32Array(2),
            advantages: new Float32Array(2),
            mask: new Uint8Array(2).fill(1),
            shape: [2, 8] as [number, number],
        };
        expect(() => fusedPolicyLoss(batch, { logitsDtype: "bf16", inPlace: true })).toThrow(
            /inPlace: expected false with logitsDtype 'bf16'/,
        );
        expect(fusedPolicyLoss(batch, { logitsDtype: "bf16" }).gradLogits).toBeInstanceOf(Float32Array);
    });
});
