// alloc.ts: output buffers for kernels that write every element (a kernel called without `out`).
// Fresh memory costs a page fault per 4 KiB and the OS zeroing it: gae's two 4 MiB outputs took 3 ms in a fresh
// process against 0.55 ms for the kernel into reused buffers. Outputs of POOL_MIN_BYTES and more therefore come from
// the native output pool (bindings/core/output_pool.cpp): blocks of already-faulted memory, handed out as external
// ArrayBuffers and taken back when V8 collects them (Node runs the finalizer at the next turn of the event loop).
// The pool is bounded (setOutputPool, MAPORL_OUTPUT_POOL_BYTES; 512 MiB by default); past the bound, in a runtime
// that refuses external buffers, or with MAPORL_OUTPUT_POOL_BYTES=0, an output is an uninitialised Node allocation,
// advised to huge pages from HUGE_OUTPUT_BYTES on. No stale byte can be observed either way: the kernel overwrites
// every element (masked positions included).
import { Buffer } from "node:buffer";
import { native, type OutputPoolStats } from "./native.js";

export type { OutputPoolStats } from "./native.js";

/** Outputs at least this large (bytes) are advised to huge pages when they do not come from the pool. */
export const HUGE_OUTPUT_BYTES = 32 << 20;
/** Outputs at least this large (bytes) come from the output pool; smaller ones are cheap for malloc. */
export const POOL_MIN_BYTES = 256 << 10;

/** A Float32Array of `n` elements whose contents are unspecified until a kernel writes all of them. */
export function outputFloat32(n: number): Float32Array {
    const bytes = n * 4;
    if (bytes >= POOL_MIN_BYTES) {
        const pooled = native.outputBuffer(bytes);
        if (pooled !== undefined) return new Float32Array(pooled, 0, n);
    }
    const a = new Float32Array(Buffer.allocUnsafeSlow(bytes).buffer, 0, n);
    if (bytes >= HUGE_OUTPUT_BYTES) native.adviseHugePages(a);
    return a;
}

/** The kernels' output pool: how full it is and how often it served a call from a cached block. */
export function outputPoolStats(): OutputPoolStats {
    return native.outputPoolStats();
}

/**
 * Sets the output pool's bound on the bytes it holds, cached and handed out together (default 512 MiB, or
 * MAPORL_OUTPUT_POOL_BYTES). Cached blocks over the new bound are unmapped at once; 0 empties the pool and turns it
 * off. Returns the stats after the change.
 */
export function setOutputPool(options: { limitBytes: number }): OutputPoolStats {
    const v = options?.limitBytes;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0)
        throw new RangeError(`setOutputPool: limitBytes: expected a non-negative integer (bytes), got ${String(v)}`);
    return native.setOutputPool(v);
}
