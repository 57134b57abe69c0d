// validate.test.ts: the argument checks every public function relies on (pure TS, no addon).
import { describe, expect, it } from "vitest";

import {
    describe as describeValue,
    requireArray,
    requireChoice,
    requireDisjoint,
    requireInteger,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../../lib/validate.js";

describe("validate", () => {
    it("describes values for messages", () => {
        expect(describeValue(NaN)).toBe("NaN");
        expect(describeValue(new Float64Array(3))).toBe("Float64Array of 3 elements");
        expect(describeValue([1, 2])).toBe("Array of 2 elements");
        expect(describeValue(null)).toBe("null");
        expect(describeValue("x".repeat(50))).toContain("…");
        expect(describeValue(new Map())).toBe("Map");
    });

    it("requireArray checks type, length, detached and resizable buffers", () => {
        const a = new Float32Array(4);
        expect(requireArray("f", "x", a, [Float32Array], 4)).toBe(a);
        expect(() => requireArray("f", "x", new Float32Array(3), [Float32Array], 4)).toThrow(RangeError);
        expect(() => requireArray("f", "x", new Int32Array(4), [Float32Array, Uint8Array], 4)).toThrow(
            "f: x: expected Float32Array or Uint8Array of 4 elements, got Int32Array of 4 elements",
        );
        expect(() => requireArray("f", "x", undefined, [Float32Array], 4)).toThrow(TypeError);
        const d = new Float32Array(4);
        structuredClone(d.buffer, { transfer: [d.buffer] });
        expect(() => requireArray("f", "x", d, [Float32Array], 4)).toThrow(/detached/);
        const Resizable = ArrayBuffer as unknown as new (n: number, o: object) => ArrayBuffer; // ES2024 typings not enabled
        expect(() =>
            requireArray("f", "x", new Float32Array(new Resizable(16, { maxByteLength: 32 })), [Float32Array], 4),
        ).toThrow(/resizable/);
        // An empty array on a zero-length (not detached) buffer is fine.
        expect(requireArray("f", "x", new Float32Array(0), [Float32Array], 0).length).toBe(0);
        // SharedArrayBuffer-backed views are accepted (fixed length).
        expect(requireArray("f", "x", new Float32Array(new SharedArrayBuffer(16)), [Float32Array], 4).length).toBe(4);
    });

    it("requireShape2 accepts non-negative integers only", () => {
        expect(requireShape2("f", [2, 3], ["B", "T"])).toEqual([2, 3]);
        expect(() => requireShape2("f", [2], ["B", "T"])).toThrow(RangeError);
        expect(() => requireShape2("f", [2, "3"], ["B", "T"])).toThrow('f: shape[1] (T): expected an integer, got "3"');
        expect(() => requireShape2("f", [-1, 3], ["B", "T"])).toThrow(RangeError);
        expect(() => requireShape2("f", [NaN, 3], ["B", "T"])).toThrow(RangeError);
        expect(() => requireShape2("f", [2 ** 20, 2 ** 20], ["B", "T"])).toThrow(/at most 2\^32/);
        expect(() => requireShape2("f", undefined, ["B", "T"])).toThrow(TypeError);
    });

    it("requireNumber, requireInteger and requireChoice name what they got", () => {
        expect(requireNumber("f", "g", undefined, 0.5, 0, 1)).toBe(0.5);
        expect(() => requireNumber("f", "g", Infinity, 0.5, 0, 1)).toThrow(
            "f: g: expected a number in [0, 1], got Infinity",
        );
        expect(() => requireInteger("f", "n", 1.5, 0, 4)).toThrow(RangeError);
        expect(() => requireInteger("f", "n", "1", 0, 4)).toThrow(TypeError);
        expect(requireChoice("f", "d", undefined, ["a", "b"], "a")).toBe("a");
        expect(() => requireChoice("f", "d", "c", ["a", "b"], "a")).toThrow('f: d: expected one of "a", "b", got "c"');
    });

    it("requireOptions rejects unknown keys and suggests the closest", () => {
        expect(requireOptions("f", "options", undefined, ["gamma"])).toEqual({});
        expect(() => requireOptions("f", "options", { gama: 1 }, ["gamma", "lambda"])).toThrow(
            /Did you mean "gamma"\?/,
        );
        expect(() => requireOptions("f", "options", { zzz: 1 }, ["gamma", "lambda"])).toThrow(
            /unknown option "zzz". Known options: gamma, lambda/,
        );
        for (const x of [new Float32Array(0), new DataView(new ArrayBuffer(4)), [], null, 3])
            expect(() => requireOptions("f", "options", x, ["gamma"])).toThrow(/f: options: expected an object, got/);
        expect(() => requireOptions("f", "options", 5, ["gamma"])).toThrow(TypeError);
        expect(() => requireOptions("f", "options", [], ["gamma"])).toThrow(TypeError);
    });

    it("requireDisjoint finds overlapping views of one buffer", () => {
        const buf = new ArrayBuffer(64);
        const a = new Float32Array(buf, 0, 8),
            b = new Float32Array(buf, 32, 8),
            c = new Float32Array(buf, 28, 2);
        expect(() => requireDisjoint("f", { a }, { b })).not.toThrow();
        expect(() => requireDisjoint("f", { b }, { c })).toThrow("f: b: expected memory that does not overlap c");
        expect(() => requireDisjoint("f", { a }, { a })).not.toThrow();
    });
});
