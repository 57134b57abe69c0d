// alloc.test.ts: kernel outputs from lib/alloc.ts. Large fresh outputs are advised to transparent huge pages: the
// advice must be taken where Linux has them, refused where no whole 2 MiB page lies inside the array, and change
// nothing in the results.
import { existsSync } from "node:fs";
import { platform } from "node:os";
import { describe, expect, it } from "vitest";

import { HUGE_OUTPUT_BYTES, outputFloat32 } from "../../lib/alloc.js";
import { gae } from "../../lib/index.js";
import { native } from "../../lib/native.js";

describe("outputFloat32", () => {
    it("gives arrays of the asked length, small and huge", () => {
        expect(outputFloat32(0).length).toBe(0);
        expect(outputFloat32(7).length).toBe(7);
        const big = outputFloat32(HUGE_OUTPUT_BYTES / 4 + 3);
        expect(big.length).toBe(HUGE_OUTPUT_BYTES / 4 + 3);
        expect(big.byteOffset).toBe(0);
    });

    it("advises huge pages where the kernel has them, and only on whole 2 MiB pages", () => {
        const thp = platform() === "linux" && existsSync("/sys/kernel/mm/transparent_hugepage/enabled");
        expect(native.adviseHugePages(new Float32Array(Buffer.allocUnsafeSlow(8 << 20).buffer))).toBe(thp);
        expect(native.adviseHugePages(new Float32Array(1024))).toBe(false); // 4 KiB: no 2 MiB page inside
        expect(() => native.adviseHugePages([1, 2] as unknown as Float32Array)).toThrow(TypeError);
    });

    it("changes no result: a 32 MiB GAE output equals the same call into a caller's buffer, bit for bit", () => {
        const B = 2048,
            T = 4096,
            n = B * T; // 32 MiB per output: the advised path
        expect(n * 4).toBeGreaterThanOrEqual(HUGE_OUTPUT_BYTES);
        const rewards = new Float32Array(n),
            values = new Float32Array(n),
            mask = new Uint8Array(n);
        let s = 12345;
        for (let i = 0; i < n; i++) {
            s = (s * 1103515245 + 12345) >>> 0;
            rewards[i] = (s >>> 8) / 16777216 - 0.5;
            values[i] = ((s >>> 4) & 0xffff) / 65536;
            mask[i] = (s & 7) !== 0 ? 1 : 0;
        }
        const batch = { rewards, values, mask, shape: [B, T] as [number, number] };
        const fresh = gae(batch, { gamma: 0.99, lambda: 0.95, whiten: true, device: "cpu" });
        const out = { advantages: new Float32Array(n).fill(NaN), returns: new Float32Array(n).fill(NaN) };
        const given = gae(batch, { gamma: 0.99, lambda: 0.95, whiten: true, device: "cpu", out });
        expect(Buffer.compare(Buffer.from(fresh.advantages.buffer), Buffer.from(given.advantages.buffer))).toBe(0);
        expect(Buffer.compare(Buffer.from(fresh.returns.buffer, 0, n * 4), Buffer.from(given.returns.buffer))).toBe(0);
    });
});
