// backend.test.ts: the backend report, threads and SIMD levels, and the error class wiring.
import { describe, expect, it } from "vitest";

import { backend, MaporlError, setMatmulPrecision, setSimd, setThreads } from "../../lib/index.js";
import { native } from "../../lib/native.js";

describe("backend", () => {
    it("reports version, threads, SIMD and CUDA", () => {
        const b = backend();
        expect(b.version).toMatch(/^\d+\.\d+\.\d+$/);
        expect(b.threads).toBeGreaterThanOrEqual(1);
        expect(["scalar", "avx2", "avx512"]).toContain(b.simd);
        expect(typeof b.cuda.compiled).toBe("boolean");
        expect(Array.isArray(b.cuda.devices)).toBe(true);
        if (!b.cuda.compiled) expect(b.cuda.devices).toEqual([]);
        for (const d of b.cuda.devices) {
            expect(d.totalMemory).toBeGreaterThan(0);
            expect(d.computeCapability).toMatch(/^\d+\.\d+$/);
        }
    });

    it("setMatmulPrecision: float32 by default, TF32 as 'high', bad values named and the setting kept", () => {
        expect(backend().matmulPrecision).toBe("highest");
        try {
            expect(setMatmulPrecision("high")).toBe("high");
            expect(backend().matmulPrecision).toBe("high");
            expect(() => setMatmulPrecision("medium" as never)).toThrow(
                /setMatmulPrecision: precision: expected one of "highest", "high", got "medium"/,
            );
            expect(() => setMatmulPrecision(undefined as never)).toThrow(TypeError);
            expect(backend().matmulPrecision).toBe("high");
        } finally {
            expect(setMatmulPrecision("highest")).toBe("highest");
        }
    });

    it("setThreads sets and validates", () => {
        expect(setThreads(3)).toBe(3);
        expect(backend().threads).toBe(3);
        expect(setThreads(1)).toBe(1);
        expect(setThreads(0)).toBeGreaterThanOrEqual(1);
        expect(() => setThreads(-1)).toThrow(RangeError);
        expect(() => setThreads(2000)).toThrow(RangeError);
        expect(() => setThreads(1.5)).toThrow(RangeError);
        expect(() => setThreads("2" as never)).toThrow(TypeError);
    });

    it("setSimd lowers and restores the level; an unsupported level is a MaporlError", () => {
        const best = setSimd("best");
        expect(setSimd("scalar")).toBe("scalar");
        expect(backend().simd).toBe("scalar");
        expect(setSimd("best")).toBe(best);
        expect(() => setSimd("sse9" as never)).toThrow(RangeError);
        if (best !== "avx512") {
            expect(() => setSimd("avx512")).toThrow(MaporlError);
        }
    });

    it("measureReadBandwidth / measureCopyBandwidth: plausible rates, arguments validated", () => {
        // 64 MiB (part of it may stay in a large L3): any machine streams it faster than 1 GB/s and slower than 2 TB/s
        // (the copy counted as read + write).
        const read = native.measureReadBandwidth(64 << 20, 3),
            copy = native.measureCopyBandwidth(64 << 20, 3);
        for (const r of [read, copy]) {
            expect(Number.isFinite(r)).toBe(true);
            expect(r).toBeGreaterThan(1e9);
            expect(r).toBeLessThan(2e12);
        }
        for (const f of [native.measureReadBandwidth, native.measureCopyBandwidth]) {
            expect(() => f(1024, 3)).toThrow(/bytes: expected an integer in \[4096, /);
            expect(() => f(1 << 20, 0)).toThrow(/reps: expected an integer in \[1, 1000\]/);
            expect(() => f(1 << 20, 2.5)).toThrow(RangeError);
        }
    });

    it("measurePeakFlops: the FMA rate of the active SIMD level (vector levels beat one lane), reps validated", () => {
        const best = setSimd("best");
        setThreads(1);
        try {
            const top = native.measurePeakFlops(3);
            expect(Number.isFinite(top)).toBe(true);
            expect(top).toBeGreaterThan(1e8);
            setSimd("scalar");
            const scalar = native.measurePeakFlops(3);
            expect(scalar).toBeGreaterThan(1e8);
            // 8 or 16 lanes per FMA against 1: even a busy machine keeps a 3x gap.
            if (best !== "scalar") expect(top).toBeGreaterThan(3 * scalar);
        } finally {
            setSimd("best");
            setThreads(0);
        }
        expect(() => native.measurePeakFlops(0)).toThrow(/reps: expected an integer in \[1, 1000\]/);
        expect(() => native.measurePeakFlops(1.5)).toThrow(RangeError);
    });
});
