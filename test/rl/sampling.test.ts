// sampling.test.ts: sample / logprobsOfTokens from JS: the support and log-probs against a float64 sort-based
// reference written here, a chi-square test of the frequencies, determinism (thread count, SIMD level, batch
// composition), invalid rows, per-row parameters, errors and async. The bulk of the statistical tests (600 random
// rows with ties, V = 1, k >= V, p = 1 and tiny p; 200,000 draws per filter and temperature) is in
// test/native/sampling/test_sampling.cpp.
import { afterAll, describe, expect, it } from "vitest";

import {
    logprobsOfTokens,
    logprobsOfTokensAsync,
    sample,
    sampleAsync,
    setSimd,
    setThreads,
    type SimdLevel,
} from "../../lib/index.js";
import { rng } from "../helpers/rng.js";

afterAll(() => {
    setSimd("best");
    setThreads(0);
});

interface F {
    T: number;
    k: number;
    p: number;
    minP: number;
    joint: boolean;
}

// Float64 reference: order by (logit desc, index asc), top-k, top-p prefix (kept while the mass before < p * total),
// min-p; returns the renormalised probabilities (0 outside the support).
function reference(z: ArrayLike<number>, f: F): Float64Array {
    const V = z.length;
    let M = -Infinity;
    for (let i = 0; i < V; i++) M = Math.max(M, z[i] / f.T);
    const e = Float64Array.from({ length: V }, (_, i) => (z[i] === -Infinity ? 0 : Math.exp(z[i] / f.T - M)));
    const idx = Array.from({ length: V }, (_, i) => i).sort((a, b) => z[b] - z[a] || a - b);
    const hasK = f.k > 0 && f.k < V,
        n = hasK ? f.k : V;
    const keep = new Uint8Array(V);
    for (let j = 0; j < n; j++) keep[idx[j]] = z[idx[j]] > -Infinity ? 1 : 0;
    if (f.p > 0 && f.p < 1) {
        let total = 0;
        for (let i = 0; i < V; i++) total += hasK && !f.joint ? (keep[i] ? e[i] : 0) : e[i];
        let before = 0;
        for (let j = 0; j < n; j++) {
            const i = idx[j];
            if (!keep[i]) continue;
            if (!(before < f.p * total)) keep[i] = 0;
            before += e[i];
        }
    }
    if (f.minP > 0) for (let i = 0; i < V; i++) if (e[i] < f.minP) keep[i] = 0;
    let S = 0;
    for (let i = 0; i < V; i++) S += keep[i] ? e[i] : 0;
    return Float64Array.from({ length: V }, (_, i) => (keep[i] ? e[i] / S : 0));
}

function rows(z: Float32Array, n: number): Float32Array {
    const out = new Float32Array(z.length * n);
    for (let b = 0; b < n; b++) out.set(z, b * z.length);
    return out;
}

describe("sample", () => {
    it("draws inside the reference support, with the reference log-probs", () => {
        const next = rng(17);
        for (let trial = 0; trial < 120; trial++) {
            const V = 1 + Math.floor(next() * 60);
            const z = Float32Array.from({ length: V }, () => 4 * (next() - 0.5));
            if (V > 4 && trial % 3 === 0) for (let i = 0; i < V; i += 3) z[i] = z[0]!; // ties
            const f: F = {
                T: 0.3 + 1.7 * next(),
                k: trial % 2 ? Math.floor(next() * (V + 2)) : 0,
                p: trial % 3 === 1 ? 1 : next(),
                minP: trial % 4 === 0 ? 0.3 * next() : 0,
                joint: trial % 5 === 0,
            };
            const want = reference(z, f);
            const B = 32;
            const r = sample(
                { logits: rows(z, B), shape: [B, V] },
                {
                    temperature: f.T,
                    topK: f.k,
                    topP: f.p,
                    minP: f.minP,
                    filterOrder: f.joint ? "joint" : "top-k-first",
                    seed: trial,
                    position: Int32Array.from({ length: B }, (_, b) => b),
                },
            );
            for (let b = 0; b < B; b++) {
                const t = r.tokens[b];
                expect(r.valid[b]).toBe(1);
                expect(want[t], `trial ${trial} row ${b}: token ${t}`).toBeGreaterThan(0);
                expect(Math.abs(r.logprobs[b] - Math.log(want[t])), `trial ${trial}`).toBeLessThan(1e-5);
            }
        }
    });

    it("matches the reference frequencies (chi-square, 200,000 draws)", () => {
        const V = 6,
            N = 200_000;
        const z = Float32Array.of(0.5, 1.5, -0.2, 1.4, 0.9, -1.0);
        const f: F = { T: 1.3, k: 5, p: 0.9, minP: 0, joint: false };
        const r = sample(
            { logits: rows(z, N), shape: [N, V] },
            {
                temperature: f.T,
                topK: f.k,
                topP: f.p,
                seed: 123n,
                position: BigInt64Array.from({ length: N }, (_, i) => BigInt(i)),
                rawLogprobs: false,
            },
        );
        const want = reference(z, f),
            count = new Float64Array(V);
        for (const t of r.tokens) count[t] += 1;
        let chi = 0,
            df = -1;
        for (let i = 0; i < V; i++) {
            if (want[i] === 0) {
                expect(count[i]).toBe(0);
                continue;
            }
            chi += (count[i] - want[i] * N) ** 2 / (want[i] * N);
            df++;
        }
        // chi-square critical value at p = 1e-3 (Wilson-Hilferty)
        const a = 2 / (9 * df),
            critical = df * (1 - a + 3.0902 * Math.sqrt(a)) ** 3;
        expect(chi).toBeLessThan(critical);
        expect(r.rawLogprobs).toBeUndefined();
    });

    it("gives the same token for the same row, seed and position across threads, SIMD levels and batches", () => {
        const next = rng(5);
        const B = 24,
            V = 3000;
        const logits = Float32Array.from({ length: B * V }, () => 6 * (next() - 0.5));
        const seed = BigUint64Array.from({ length: B }, (_, b) => (BigInt(b) * 0x9e3779b97f4a7c15n) % 2n ** 64n);
        const position = BigInt64Array.from({ length: B }, (_, b) => BigInt(b * 13));
        const opts = { temperature: 0.8, topP: 0.95, seed, position };
        const ref = sample({ logits, shape: [B, V] }, opts).tokens;
        for (const level of ["scalar", "avx2", "avx512"] as SimdLevel[]) {
            try {
                setSimd(level);
            } catch {
                continue;
            }
            for (const t of [1, 3]) {
                setThreads(t);
                expect(Array.from(sample({ logits, shape: [B, V] }, opts).tokens), `${level} ${t}`).toEqual(
                    Array.from(ref),
                );
            }
        }
        setSimd("best");
        setThreads(0);
        for (const b of [0, 7, 23]) {
            const one = sample(
                { logits: logits.subarray(b * V, (b + 1) * V), shape: [1, V] },
                { temperature: 0.8, topP: 0.95, seed: seed[b], position: position[b] },
            );
            expect(one.tokens[0]).toBe(ref[b]);
        }
    });

    it("marks NaN and all -Infinity rows invalid, is greedy at temperature 0, and scores tokens", async () => {
        const z = Float32Array.of(0, 3, 3, 1, NaN, 0, 0, 0, -Infinity, -Infinity, -Infinity, -Infinity);
        const r = sample({ logits: z, shape: [3, 4] }, { temperature: Float32Array.of(0, 1, 1) });
        expect(Array.from(r.tokens)).toEqual([1, -1, -1]);
        expect(Array.from(r.valid)).toEqual([1, 0, 0]);
        expect(r.logprobs[0]).toBe(0);
        expect(r.logprobs[1]).toBeNaN();
        const next = rng(9);
        const logits = Float32Array.from({ length: 8 * 50 }, () => 4 * (next() - 0.5));
        const opts = { temperature: 0.7, topK: 10, minP: 0.05 };
        const s = sample({ logits, shape: [8, 50] }, { ...opts, seed: 1 });
        const g = logprobsOfTokens({ logits, tokens: s.tokens, shape: [8, 50] }, opts);
        expect(Array.from(g.logprobs)).toEqual(Array.from(s.logprobs));
        expect(Array.from(g.rawLogprobs!)).toEqual(Array.from(s.rawLogprobs!));
        const ga = await logprobsOfTokensAsync({ logits, tokens: s.tokens, shape: [8, 50] }, opts);
        expect(Array.from(ga.logprobs)).toEqual(Array.from(g.logprobs));
        const sa = await sampleAsync({ logits, shape: [8, 50] }, { ...opts, seed: 1 });
        expect(Array.from(sa.tokens)).toEqual(Array.from(s.tokens));
    });

    it("rejects bad options with the parameter's name", () => {
        const logits = new Float32Array(20);
        expect(() => sample({ logits, shape: [2, 10] }, { topP: Float32Array.of(0.5, 2) })).toThrow(
            /sample: topP\[1\]: expected a number in \[0, 1\]/,
        );
        expect(() => sample({ logits, shape: [2, 10] }, { temperature: -1 })).toThrow(
            /temperature: expected a finite number >= 0/,
        );
        expect(() => sample({ logits, shape: [2, 10] }, { topK: 1.5 })).toThrow(/topK: expected an integer/);
        expect(() => sample({ logits, shape: [2, 10] }, { seed: -1 })).toThrow(
            /seed: expected an integer in \[0, 2\^64\)/,
        );
        expect(() => sample({ logits, shape: [2, 10] }, { filterOrder: "topk" as "joint" })).toThrow(/filterOrder/);
        expect(() => sample({ logits, shape: [2, 10] }, { topk: 3 } as object)).toThrow(/Did you mean "topK"/);
        expect(() => logprobsOfTokens({ logits, tokens: Int32Array.of(0, 10), shape: [2, 10] })).toThrow(
            /tokens\[1\]: expected a token id in \[0, 10\)/,
        );
        expect(() => sample({ logits, shape: [2, 11] })).toThrow(/logits: expected Float32Array of 22 elements/);
    });
});
