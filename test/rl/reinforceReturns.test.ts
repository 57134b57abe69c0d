// reinforceReturns.test.ts: REINFORCE++ returns against the float64 reference at every SIMD level, properties,
// NaN containment, thread invariance, async, errors.
import { afterAll, describe, expect, it } from "vitest";

import {
    reinforceReturns,
    reinforceReturnsAsync,
    MaporlError,
    setSimd,
    setThreads,
    type SimdLevel,
} from "../../lib/index.js";
import { returnsReference } from "../reference/returns.ref.js";
import { firstMismatch, rng, uniformArray } from "../helpers/rng.js";

afterAll(() => {
    setSimd("best");
    setThreads(0);
});

function makeCase(B: number, T: number, seed: number, f32: boolean) {
    const next = rng(seed);
    const mask = f32 ? new Float32Array(B * T) : new Uint8Array(B * T);
    for (let b = 0; b < B; b++) {
        const len = Math.floor(next() * (T + 1)),
            pattern = b % 4;
        for (let t = 0; t < T; t++)
            mask[b * T + t] =
                pattern === 0 ? 1 : pattern === 1 ? (t < len ? 1 : 0) : pattern === 2 ? (next() < 0.7 ? 1 : 0) : 0;
    }
    return { rewards: uniformArray(B * T, next), mask, shape: [B, T] as [number, number] };
}

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

describe("reinforceReturns", () => {
    for (const level of levels) {
        it(`matches the float64 reference (SIMD ${level})`, () => {
            setSimd(level);
            let seed = 1;
            for (const [B, T] of [
                [1, 1],
                [2, 3],
                [5, 17],
                [9, 33],
                [16, 64],
                [3, 257],
                [31, 100],
            ] as [number, number][])
                for (const gamma of [1, 0.99, 0.5, 0])
                    for (const whiten of [false, true])
                        for (const f32 of [false, true]) {
                            const c = makeCase(B, T, seed++, f32);
                            const got = reinforceReturns(c, { gamma, whiten, device: "cpu" });
                            const want = returnsReference(c.rewards, c.mask, B, T, gamma, whiten);
                            const ctx = `B=${B} T=${T} gamma=${gamma} whiten=${whiten} f32=${f32} seed=${seed - 1}`;
                            expect(firstMismatch(got.returns, want.returns, 1e-5, 1e-6, want.scale), ctx).toBeNull();
                            expect(
                                firstMismatch(got.advantages, want.advantages, 1e-5, 1e-6, want.scaleA),
                                ctx,
                            ).toBeNull();
                        }
            setSimd("best");
        });
    }

    it("an all-masked batch gives zeros, whitened or not", () => {
        const z = reinforceReturns({
            rewards: new Float32Array(12).fill(NaN),
            mask: new Uint8Array(12),
            shape: [3, 4],
        });
        expect([...z.returns]).toEqual(new Array(12).fill(0));
        expect([...z.advantages]).toEqual(new Array(12).fill(0));
    });

    it("gamma = 1 with a full mask is the reverse cumulative sum", () => {
        const c = makeCase(4, 50, 7, false);
        c.mask.fill(1);
        const { returns } = reinforceReturns(c, { gamma: 1, whiten: false });
        for (let b = 0; b < 4; b++) {
            let acc = 0;
            for (let t = 49; t >= 0; t--) {
                acc += c.rewards[b * 50 + t];
                expect(returns[b * 50 + t]).toBeCloseTo(acc, 4);
            }
        }
    });

    it("a masked position cuts the chain: NaN and rewards beyond it never reach earlier tokens", () => {
        const rewards = new Float32Array([1, 1, 5, NaN, 1, 1, 1, 1]);
        const mask = new Uint8Array([1, 1, 0, 1, 1, 1, 1, 1]);
        for (const level of levels) {
            setSimd(level);
            const { returns } = reinforceReturns({ rewards, mask, shape: [1, 8] }, { gamma: 1, whiten: false });
            expect([...returns.slice(0, 3)]).toEqual([2, 1, 0]);
            expect(Number.isNaN(returns[3])).toBe(true);
            expect([...returns.slice(4)]).toEqual([4, 3, 2, 1]);
        }
        setSimd("best");
    });

    it("is bit-identical across thread counts, and async equals sync", async () => {
        const c = makeCase(67, 211, 9, true);
        const runs = [1, 2, 7].map((t) => {
            setThreads(t);
            return reinforceReturns(c, { gamma: 0.97 });
        });
        setThreads(0);
        for (const r of runs)
            expect(Buffer.from(r.advantages.buffer).equals(Buffer.from(runs[0].advantages.buffer))).toBe(true);
        const a = await reinforceReturnsAsync(c, { gamma: 0.97 });
        expect(Buffer.from(a.returns.buffer).equals(Buffer.from(runs[0].returns.buffer))).toBe(true);
    });

    it("bad input gives TypeError, RangeError or MaporlError naming the parameter", () => {
        const ok = () => ({
            rewards: new Float32Array(6),
            mask: new Uint8Array(6).fill(1),
            shape: [2, 3] as [number, number],
        });
        expect(() => reinforceReturns({ ...ok(), rewards: new Float64Array(6) as never })).toThrow(TypeError);
        expect(() => reinforceReturns({ ...ok(), mask: new Uint8Array(5) })).toThrow(
            /mask: expected Uint8Array or Float32Array of 6 elements/,
        );
        expect(() => reinforceReturns(ok(), { gamma: 2 })).toThrow(RangeError);
        expect(() => reinforceReturns(ok(), { whitening: true } as never)).toThrow(/Did you mean "whiten"/);
        const o = ok();
        expect(() => reinforceReturns(o, { out: { returns: o.rewards } })).toThrow(
            /out.returns: expected memory that does not overlap rewards/,
        );
        const out = { returns: new Float32Array(6), advantages: new Float32Array(6) };
        expect(reinforceReturns(ok(), { out }).returns).toBe(out.returns);
        const bad = ok();
        bad.mask[5] = 3;
        expect(() => reinforceReturns(bad)).toThrow(MaporlError);
        expect(() => reinforceReturns(bad)).toThrow(/index 5 \(row 1, t 2\)/);
    });
});
