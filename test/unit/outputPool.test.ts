// outputPool.test.ts: the native output pool behind the kernels' default outputs (bindings/core/output_pool.cpp,
// lib/alloc.ts). Properties: an output of the pool is exactly the asked size; a block V8 collected comes back for the
// next call of its size (and the result is bit-identical to a call into a NaN-filled caller's buffer, so no stale
// byte survives); a loop that never yields stops taking new blocks after 64 MiB; the limit bounds what the pool
// holds; a bad limit is a RangeError naming it.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, describe, expect, it } from "vitest";

import { POOL_MIN_BYTES, outputFloat32 } from "../../lib/alloc.js";
import { gae, outputPoolStats, setOutputPool } from "../../lib/index.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const turn = () => new Promise((resolve) => setImmediate(resolve));
const limit0 = outputPoolStats().limitBytes;

// Full collections and turns of the event loop (V8 may free the backing stores on its sweeper thread; Node then runs
// the finalizers on a later turn) until `done` holds, for at most 2 s.
async function collect(done: () => boolean = () => outputPoolStats().outstandingBytes === 0): Promise<void> {
    for (let i = 0; i < 200 && !done(); i++) {
        gc();
        await turn();
        await new Promise((resolve) => setTimeout(resolve, 10));
    }
}

describe("output pool", () => {
    afterAll(() => {
        setOutputPool({ limitBytes: limit0 });
    });

    it("hands out arrays of exactly the asked size from the pool, and small ones from V8", () => {
        const before = outputPoolStats();
        const n = POOL_MIN_BYTES / 4 + 5; // not a size class: the ArrayBuffer is still exactly n floats
        const a = outputFloat32(n);
        expect(a.length).toBe(n);
        expect(a.buffer.byteLength).toBe(n * 4);
        const after = outputPoolStats();
        expect(after.hits + after.misses).toBe(before.hits + before.misses + 1);
        expect(after.outstandingBytes).toBeGreaterThanOrEqual(before.outstandingBytes + n * 4);
        a.fill(1); // writable over its whole length
        expect(a[n - 1]).toBe(1);
        const small = outputFloat32(1000);
        expect(small.buffer.byteLength).toBe(4000);
        const after2 = outputPoolStats();
        expect(after2.hits + after2.misses + after2.refused).toBe(after.hits + after.misses + after.refused);
    });

    it("takes a collected output back and gives it to the next call of its size; results stay bit-identical", async () => {
        const B = 64,
            T = 4096,
            n = B * T; // 1 MiB outputs
        const rewards = new Float32Array(n).map((_, i) => Math.sin(i)),
            values = new Float32Array(n).map((_, i) => Math.cos(i));
        const mask = new Uint8Array(n).map((_, i) => (i % 7 ? 1 : 0));
        const batch = { rewards, values, mask, shape: [B, T] as [number, number] };
        const opts = { gamma: 0.99, lambda: 0.95, whiten: true, device: "cpu" as const };
        const ref = gae(batch, {
            ...opts,
            out: { advantages: new Float32Array(n).fill(NaN), returns: new Float32Array(n).fill(NaN) },
        });
        const poison = () => {
            // a default call whose outputs are filled with stale NaNs and dropped
            const first = gae(batch, opts);
            first.advantages.fill(NaN);
            first.returns.fill(NaN);
        };
        const c0 = outputPoolStats().cachedBytes;
        poison();
        await collect(() => outputPoolStats().cachedBytes >= c0 + 2 * n * 4);
        const cached = outputPoolStats();
        expect(cached.cachedBytes).toBeGreaterThanOrEqual(2 * n * 4);
        const again = gae(batch, opts);
        const after = outputPoolStats();
        expect(after.hits).toBe(cached.hits + 2); // both outputs from cached blocks
        expect(Buffer.compare(Buffer.from(again.advantages.buffer), Buffer.from(ref.advantages.buffer))).toBe(0);
        expect(Buffer.compare(Buffer.from(again.returns.buffer), Buffer.from(ref.returns.buffer))).toBe(0);
    });

    it("a loop that never yields takes at most 64 MiB of new blocks of one size, then plain allocations", async () => {
        await collect();
        setOutputPool({ limitBytes: 0 }); // empty the cache, then start over
        setOutputPool({ limitBytes: 1 << 30 });
        const before = outputPoolStats();
        const held: Float32Array[] = [];
        for (let i = 0; i < 24; i++) held.push(outputFloat32((4 << 20) / 4)); // 24 x 4 MiB, all alive
        const after = outputPoolStats();
        expect(after.misses - before.misses).toBe(16); // 64 MiB
        expect(after.refused - before.refused).toBe(8);
        expect(held.every((a) => a.length === 1 << 20)).toBe(true);
        held.length = 0;
        await collect(() => outputPoolStats().outstandingBytes <= after.outstandingBytes - (64 << 20));
        const back = outputPoolStats();
        expect(back.outstandingBytes).toBeLessThanOrEqual(after.outstandingBytes - (64 << 20));
        expect(outputFloat32(1 << 20).length).toBe(1 << 20);
        expect(outputPoolStats().hits).toBe(back.hits + 1); // the streak is over: a block came back
    });

    it("never holds more than its limit; 0 turns it off", async () => {
        await collect();
        const s = setOutputPool({ limitBytes: 8 << 20 });
        expect(s.limitBytes).toBe(8 << 20);
        expect(s.cachedBytes + s.outstandingBytes).toBeLessThanOrEqual(8 << 20);
        const held = [outputFloat32(1 << 20), outputFloat32(1 << 20), outputFloat32(1 << 20)]; // 12 MiB asked
        const t = outputPoolStats();
        expect(t.cachedBytes + t.outstandingBytes).toBeLessThanOrEqual(8 << 20);
        expect(held.map((a) => a.length)).toEqual([1 << 20, 1 << 20, 1 << 20]);
        const off = setOutputPool({ limitBytes: 0 });
        expect(off.cachedBytes).toBe(0);
        const r0 = off.refused;
        expect(outputFloat32(1 << 20).length).toBe(1 << 20);
        expect(outputPoolStats().refused).toBe(r0 + 1);
    });

    it("refuses a bad limit with the parameter's name", () => {
        for (const bad of [-1, 1.5, NaN, Infinity, "1" as unknown as number, undefined as unknown as number])
            expect(() => setOutputPool({ limitBytes: bad })).toThrow(
                /setOutputPool: limitBytes: expected a non-negative integer/,
            );
        expect(() => setOutputPool(undefined as unknown as { limitBytes: number })).toThrow(/limitBytes/);
    });
});
