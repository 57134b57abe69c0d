// gae.test.ts: the GAE kernel against the float64 reference, its properties, and every error path.
import { afterAll, describe, expect, it } from "vitest";

import { backend, gae, gaeAsync, MaporlError, setSimd, setThreads, type SimdLevel } from "../../lib/index.js";
import { gaeReference } from "../reference/gae.ref.js";
import { firstMismatch, rng, uniformArray } from "../helpers/rng.js";

type MaskKind = "u8" | "f32";

interface Case {
    B: number;
    T: number;
    rewards: Float32Array;
    values: Float32Array;
    mask: Uint8Array | Float32Array;
}

// Masks with the awkward patterns: all-masked rows, masked runs in the middle, leading/trailing padding.
function makeCase(B: number, T: number, seed: number, kind: MaskKind): Case {
    const next = rng(seed);
    const m = kind === "u8" ? new Uint8Array(B * T) : new Float32Array(B * T);
    for (let b = 0; b < B; b++) {
        const pattern = b % 5;
        const len = Math.floor(next() * (T + 1));
        const runStart = Math.floor(next() * T),
            runLen = Math.floor(next() * Math.max(1, T / 3));
        for (let t = 0; t < T; t++) {
            let on = 1;
            if (pattern === 1)
                on = 0; // all masked
            else if (pattern === 2)
                on = t < len ? 1 : 0; // response then padding
            else if (pattern === 3)
                on = t >= runStart && t < runStart + runLen ? 0 : 1; // masked run inside
            else if (pattern === 4) on = next() < 0.6 ? 1 : 0; // scattered
            m[b * T + t] = on;
        }
    }
    return { B, T, rewards: uniformArray(B * T, next), values: uniformArray(B * T, next), mask: m };
}

const SHAPES: [number, number][] = [
    [1, 1],
    [1, 2],
    [2, 1],
    [1, 17],
    [3, 5],
    [7, 13],
    [5, 31],
    [16, 16],
    [17, 33],
    [11, 97],
    [2, 257],
    [64, 64],
    [3, 1031],
];
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

afterAll(() => {
    setSimd("best");
    setThreads(0);
});

describe("gae matches the float64 reference", () => {
    for (const level of levels) {
        it(`on random shapes, both mask types, whiten on and off (SIMD ${level})`, () => {
            setSimd(level);
            let seed = 1;
            for (const [B, T] of SHAPES) {
                for (const kind of ["u8", "f32"] as MaskKind[]) {
                    for (const [gamma, lambda] of [
                        [1, 0.95],
                        [0.99, 0.9],
                        [1, 1],
                        [0.5, 0],
                        [0, 0.7],
                    ]) {
                        for (const whiten of [false, true]) {
                            const c = makeCase(B, T, seed++, kind);
                            const got = gae({ ...c, shape: [B, T] }, { gamma, lambda, whiten, device: "cpu" });
                            const want = gaeReference(c.rewards, c.values, c.mask, B, T, gamma, lambda, whiten);
                            const ctx = `B=${B} T=${T} mask=${kind} gamma=${gamma} lambda=${lambda} whiten=${whiten} seed=${seed - 1}`;
                            // rtol is relative to the size of the terms (see GaeRef): returns = A + V can cancel.
                            expect(
                                firstMismatch(got.advantages, want.advantages, 1e-5, 1e-6, want.advantagesScale),
                                ctx,
                            ).toBeNull();
                            expect(
                                firstMismatch(got.returns, want.returns, 1e-5, 1e-6, want.returnsScale),
                                ctx,
                            ).toBeNull();
                            expect(got.device).toBe("cpu");
                        }
                    }
                }
            }
        });
    }

    it("handles empty shapes", () => {
        for (const [B, T] of [
            [0, 0],
            [0, 5],
            [5, 0],
        ] as [number, number][]) {
            const r = gae({
                rewards: new Float32Array(0),
                values: new Float32Array(0),
                mask: new Uint8Array(0),
                shape: [B, T],
            });
            expect(r.advantages.length).toBe(0);
            expect(r.returns.length).toBe(0);
        }
    });
});

describe("gae properties", () => {
    it("lambda = 0 gives one-step TD residuals against the next unmasked value", () => {
        const c = makeCase(9, 40, 77, "u8");
        const gamma = 0.9;
        const { advantages } = gae({ ...c, shape: [c.B, c.T] }, { gamma, lambda: 0 });
        for (let b = 0; b < c.B; b++) {
            let next = 0;
            for (let t = c.T - 1; t >= 0; t--) {
                const i = b * c.T + t;
                if (!c.mask[i]) {
                    expect(advantages[i]).toBe(0);
                    continue;
                }
                const td = c.rewards[i] + gamma * next - c.values[i];
                expect(advantages[i]).toBeCloseTo(td, 5);
                next = c.values[i]!;
            }
        }
    });

    it("gamma = lambda = 1 gives reward-to-go minus V", () => {
        const c = makeCase(6, 50, 78, "f32");
        const { advantages, returns } = gae({ ...c, shape: [c.B, c.T] }, { gamma: 1, lambda: 1 });
        for (let b = 0; b < c.B; b++) {
            let togo = 0;
            for (let t = c.T - 1; t >= 0; t--) {
                const i = b * c.T + t;
                if (!c.mask[i]) continue;
                togo += c.rewards[i];
                expect(advantages[i]).toBeCloseTo(togo - c.values[i], 4);
                expect(returns[i]).toBeCloseTo(togo, 4);
            }
        }
    });

    it("inserting masked positions changes nothing at the unmasked ones", () => {
        const next = rng(5);
        const B = 4,
            T = 37;
        const c = makeCase(B, T, 79, "u8");
        c.mask.fill(1);
        const base = gae({ ...c, shape: [B, T] }, { gamma: 0.97, lambda: 0.9 });
        // Spread every row over T2 slots with masked junk (including NaN) between the originals.
        const T2 = 101;
        const r2 = uniformArray(B * T2, next, -50, 50),
            v2 = uniformArray(B * T2, next, -50, 50);
        const m2 = new Uint8Array(B * T2);
        const slots: number[][] = [];
        for (let b = 0; b < B; b++) {
            const pos = new Set<number>();
            while (pos.size < T) pos.add(Math.floor(next() * T2));
            const sorted = [...pos].sort((x, y) => x - y);
            slots.push(sorted);
            sorted.forEach((p, t) => {
                r2[b * T2 + p] = c.rewards[b * T + t]!;
                v2[b * T2 + p] = c.values[b * T + t]!;
                m2[b * T2 + p] = 1;
            });
            for (let p = 0; p < T2; p++)
                if (!m2[b * T2 + p] && p % 3 === 0) {
                    r2[b * T2 + p] = NaN;
                    v2[b * T2 + p] = Infinity;
                }
        }
        const spread = gae({ rewards: r2, values: v2, mask: m2, shape: [B, T2] }, { gamma: 0.97, lambda: 0.9 });
        for (let b = 0; b < B; b++) {
            slots[b].forEach((p, t) => {
                expect(spread.advantages[b * T2 + p]).toBeCloseTo(base.advantages[b * T + t], 5);
                expect(spread.returns[b * T2 + p]).toBeCloseTo(base.returns[b * T + t], 5);
            });
            for (let p = 0; p < T2; p++)
                if (!m2[b * T2 + p]) {
                    expect(spread.advantages[b * T2 + p]).toBe(0);
                    expect(spread.returns[b * T2 + p]).toBe(0);
                }
        }
    });

    it("all-masked rows give zeros and returns = advantages + values elsewhere", () => {
        const c = makeCase(10, 23, 80, "f32");
        const { advantages, returns } = gae({ ...c, shape: [c.B, c.T] });
        for (let i = 0; i < c.B * c.T; i++) {
            if (!c.mask[i]) {
                expect(advantages[i]).toBe(0);
                expect(returns[i]).toBe(0);
            } else expect(returns[i]).toBeCloseTo(advantages[i] + c.values[i], 5);
        }
    });

    it("results are bit-identical whatever the thread count", () => {
        const c = makeCase(97, 301, 81, "u8");
        const runs = [1, 2, 3, 8].map((n) => {
            setThreads(n);
            return gae({ ...c, shape: [c.B, c.T] }, { whiten: true });
        });
        setThreads(0);
        for (const r of runs.slice(1)) {
            expect(
                Buffer.from(r.advantages.buffer, r.advantages.byteOffset, r.advantages.byteLength).equals(
                    Buffer.from(
                        runs[0].advantages.buffer,
                        runs[0].advantages.byteOffset,
                        runs[0].advantages.byteLength,
                    ),
                ),
            ).toBe(true);
            expect(
                Buffer.from(r.returns.buffer, r.returns.byteOffset, r.returns.byteLength).equals(
                    Buffer.from(runs[0].returns.buffer, runs[0].returns.byteOffset, runs[0].returns.byteLength),
                ),
            ).toBe(true);
        }
    });

    it("NaN and Inf at unmasked positions propagate (no crash), and only backwards in their row", () => {
        const B = 3,
            T = 40;
        const c = makeCase(B, T, 82, "u8");
        c.mask.fill(1);
        c.rewards[1 * T + 20] = NaN;
        c.values[2 * T + 30] = Infinity;
        const { advantages } = gae({ ...c, shape: [B, T] }, { gamma: 0.9, lambda: 0.9 });
        for (let t = 0; t < T; t++) expect(Number.isFinite(advantages[t])).toBe(true);
        for (let t = 0; t <= 20; t++) expect(Number.isNaN(advantages[T + t])).toBe(true);
        for (let t = 21; t < T; t++) expect(Number.isFinite(advantages[T + t])).toBe(true);
        for (let t = 31; t < T; t++) expect(Number.isFinite(advantages[2 * T + t])).toBe(true);
        expect(Number.isFinite(advantages[2 * T + 30])).toBe(false);
    });

    it("whitening gives zero mean and unit (unbiased) variance over the unmasked tokens", () => {
        const c = makeCase(20, 50, 83, "f32");
        const { advantages } = gae({ ...c, shape: [c.B, c.T] }, { whiten: true });
        const vals: number[] = [];
        for (let i = 0; i < c.B * c.T; i++)
            if (c.mask[i]) vals.push(advantages[i]);
            else expect(advantages[i]).toBe(0);
        const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
        const variance = vals.reduce((a, b) => a + (b - mean) ** 2, 0) / (vals.length - 1);
        expect(Math.abs(mean)).toBeLessThan(1e-5);
        expect(variance).toBeCloseTo(1, 4);
    });

    it("whitening a single valid token gives 0 (verl raises)", () => {
        const mask = new Uint8Array([0, 1, 0]);
        const r = gae(
            { rewards: new Float32Array([1, 2, 3]), values: new Float32Array(3), mask, shape: [1, 3] },
            { whiten: true },
        );
        expect([...r.advantages]).toEqual([0, 0, 0]);
        expect(r.returns[1]).toBe(2);
    });

    it("writes into out buffers when given, and they can be reused", () => {
        const c = makeCase(4, 19, 84, "u8");
        const out = { advantages: new Float32Array(4 * 19).fill(7), returns: new Float32Array(4 * 19).fill(7) };
        const r1 = gae({ ...c, shape: [4, 19] }, { out });
        expect(r1.advantages).toBe(out.advantages);
        expect(r1.returns).toBe(out.returns);
        const fresh = gae({ ...c, shape: [4, 19] });
        expect([...out.advantages]).toEqual([...fresh.advantages]);
        expect([...out.returns]).toEqual([...fresh.returns]);
    });
});

describe("gaeAsync", () => {
    it("equals the sync result", async () => {
        const c = makeCase(33, 129, 90, "f32");
        const sync = gae({ ...c, shape: [c.B, c.T] }, { whiten: true, gamma: 0.99 });
        const asyncR = await gaeAsync({ ...c, shape: [c.B, c.T] }, { whiten: true, gamma: 0.99 });
        expect([...asyncR.advantages]).toEqual([...sync.advantages]);
        expect([...asyncR.returns]).toEqual([...sync.returns]);
    });

    it("runs many calls concurrently", async () => {
        const cases = [0, 1, 2, 3, 4, 5, 6, 7].map((k) => makeCase(16 + k, 64 + k, 100 + k, "u8"));
        const results = await Promise.all(cases.map((c) => gaeAsync({ ...c, shape: [c.B, c.T] })));
        results.forEach((r, k) => {
            const want = gae({ ...cases[k], shape: [cases[k].B, cases[k].T] });
            expect([...r.advantages]).toEqual([...want.advantages]);
        });
    });

    it("rejects at once with the abort reason, before or during the work", async () => {
        const c = makeCase(8, 8, 91, "u8");
        const pre = new AbortController();
        pre.abort();
        await expect(gaeAsync({ ...c, shape: [8, 8] }, { signal: pre.signal })).rejects.toMatchObject({
            name: "AbortError",
        });
        const big = makeCase(256, 4096, 92, "f32");
        const during = new AbortController();
        const p = gaeAsync({ ...big, shape: [256, 4096] }, { signal: during.signal });
        during.abort(new Error("stop"));
        await expect(p).rejects.toThrow("stop");
    });

    it("rejects when an array is detached (transferred) while the call runs, whichever array it is", async () => {
        // The check runs when the promise settles, on the main thread: after this synchronous transfer, always.
        for (const which of ["rewards", "mask"] as const) {
            const c = makeCase(64, 256, 94, "u8");
            const p = gaeAsync({ ...c, shape: [64, 256] });
            const buf = c[which].buffer as ArrayBuffer;
            structuredClone(buf, { transfer: [buf] });
            await expect(p).rejects.toThrow(/gae: an array of this call was detached \(transferred\) while it ran/);
        }
        const out = { advantages: new Float32Array(64 * 256), returns: new Float32Array(64 * 256) };
        const p = gaeAsync({ ...makeCase(64, 256, 95, "u8"), shape: [64, 256] }, { out });
        structuredClone(out.returns.buffer, { transfer: [out.returns.buffer] });
        await expect(p).rejects.toThrow(TypeError);
        const c = makeCase(8, 8, 96, "u8"); // and an undisturbed call still resolves
        await expect(gaeAsync({ ...c, shape: [8, 8] })).resolves.toMatchObject({ device: "cpu" });
    });

    it("rejects with MaporlError for a bad mask", async () => {
        const c = makeCase(2, 3, 93, "u8");
        c.mask[4] = 3;
        await expect(gaeAsync({ ...c, shape: [2, 3] })).rejects.toMatchObject({
            name: "MaporlError",
            code: "MAPORL_ERR_INVALID_ARG",
        });
    });
});

describe("gae errors", () => {
    const ok = () => ({
        rewards: new Float32Array(6),
        values: new Float32Array(6),
        mask: new Uint8Array(6).fill(1),
        shape: [2, 3] as [number, number],
    });

    it("wrong types are TypeErrors naming the parameter", () => {
        expect(() => gae({ ...ok(), rewards: new Float64Array(6) as never })).toThrow(
            /gae: rewards: expected Float32Array of 6 elements, got Float64Array/,
        );
        expect(() => gae({ ...ok(), values: [0, 0, 0, 0, 0, 0] as never })).toThrow(TypeError);
        expect(() => gae({ ...ok(), mask: new Int32Array(6) as never })).toThrow(
            /mask: expected Uint8Array or Float32Array/,
        );
        expect(() => gae({ ...ok(), shape: "2x3" as never })).toThrow(TypeError);
        expect(() => gae(ok(), { gamma: "1" as never })).toThrow(/gamma: expected a number/);
        expect(() => gae(ok(), { whiten: 1 as never })).toThrow(TypeError);
        expect(() => gae(null as never)).toThrow(TypeError);
        expect(() => gae(ok(), { device: 3 as never })).toThrow(TypeError);
    });

    it("wrong lengths and ranges are RangeErrors", () => {
        expect(() => gae({ ...ok(), rewards: new Float32Array(5) })).toThrow(
            /rewards: expected Float32Array of 6 elements, got 5 elements/,
        );
        expect(() => gae({ ...ok(), shape: [2, -3] })).toThrow(RangeError);
        expect(() => gae({ ...ok(), shape: [2, 1.5] })).toThrow(RangeError);
        expect(() => gae({ ...ok(), shape: [2, 3, 1] as never })).toThrow(RangeError);
        expect(() => gae(ok(), { gamma: 1.5 })).toThrow(/gamma: expected a number in \[0, 1\], got 1.5/);
        expect(() => gae(ok(), { lambda: NaN })).toThrow(/lambda: expected a number in \[0, 1\], got NaN/);
        expect(() => gae(ok(), { lambda: -Infinity })).toThrow(RangeError);
        expect(() => gae(ok(), { device: "tpu" as never })).toThrow(RangeError);
        expect(() => gae(ok(), { lamda: 0.9 } as never)).toThrow(/unknown option "lamda". Did you mean "lambda"\?/);
    });

    it("detached and resizable buffers are refused", () => {
        const a = ok();
        structuredClone(a.rewards.buffer, { transfer: [a.rewards.buffer] });
        expect(() => gae(a)).toThrow(/rewards: .*detached/);
        const rb = new (ArrayBuffer as unknown as new (n: number, o: object) => ArrayBuffer)(24, { maxByteLength: 48 }); // resizable (ES2024 typings not enabled)
        expect(() => gae({ ...ok(), values: new Float32Array(rb) })).toThrow(/values: expected a fixed-length buffer/);
    });

    it("views of a SharedArrayBuffer give the same results as plain ones (sync and async)", async () => {
        const a = {
            ...ok(),
            rewards: Float32Array.of(1, -2, 0.5, 3, 0, -1),
            values: Float32Array.of(0.1, 0.2, -0.3, 0.4, 0.5, 0.6),
            mask: Uint8Array.of(1, 1, 0, 1, 1, 1),
        };
        const shared = <T extends Float32Array | Uint8Array>(x: T): T => {
            const y = new (x.constructor as new (b: SharedArrayBuffer, o: number, n: number) => T)(
                new SharedArrayBuffer(x.byteLength + 8),
                8,
                x.length,
            );
            y.set(x);
            return y;
        };
        const b = { ...a, rewards: shared(a.rewards), values: shared(a.values), mask: shared(a.mask) };
        const want = gae(a, { whiten: true });
        const out = { advantages: shared(new Float32Array(6)), returns: shared(new Float32Array(6)) };
        expect(want.advantages.some((x) => x !== 0)).toBe(true);
        expect(gae(b, { whiten: true, out })).toEqual(want);
        expect(out.advantages).toEqual(want.advantages);
        expect(await gaeAsync(b, { whiten: true })).toEqual(want);
    });

    it("overlapping outputs are refused", () => {
        const a = ok();
        expect(() => gae(a, { out: { advantages: a.rewards } })).toThrow(
            /out.advantages: expected memory that does not overlap rewards/,
        );
        const shared = new Float32Array(6);
        expect(() => gae(a, { out: { advantages: shared, returns: shared } })).toThrow(/out.returns/);
        expect(() => gae(a, { out: { advantages: new Float32Array(5) } })).toThrow(RangeError);
    });

    it("mask values other than 0/1 are MaporlErrors with the index", () => {
        for (const bad of [2, 255]) {
            const a = ok();
            a.mask[4] = bad;
            expect(() => gae(a)).toThrow(MaporlError);
            expect(() => gae(a)).toThrow(
                new RegExp(`mask: expected 0 or 1 at every position, got ${bad} at index 4 \\(row 1, t 1\\)`),
            );
        }
        for (const bad of [0.5, NaN, -1]) {
            const a = { ...ok(), mask: new Float32Array(6).fill(1) };
            a.mask[2] = bad;
            try {
                gae(a);
                expect.unreachable();
            } catch (e) {
                expect(e).toBeInstanceOf(MaporlError);
                expect((e as MaporlError).code).toBe("MAPORL_ERR_INVALID_ARG");
                expect((e as Error).message).toContain("index 2");
            }
        }
    });

    it("device 'cuda' without a GPU is MAPORL_ERR_NO_DEVICE, and 'auto' falls back to the CPU", () => {
        if (backend().cuda.devices.length > 0) return; // this machine has a GPU: covered by the CUDA suite
        try {
            gae(ok(), { device: "cuda" });
            expect.unreachable();
        } catch (e) {
            expect(e).toBeInstanceOf(MaporlError);
            expect((e as MaporlError).code).toBe("MAPORL_ERR_NO_DEVICE");
        }
        expect(gae(ok(), { device: "auto" }).device).toBe("cpu");
    });
});
