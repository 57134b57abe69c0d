// alloc.ts: output buffers for kernels that write every element. Zero-filled `new Float32Array(n)` costs a
// memset plus, for fresh pages, a page fault per 4 KiB and V8 external-memory GC pressure: about as much as
// the whole GAE kernel at 1M tokens. An uninitialised Node allocation reuses already-mapped memory, and the
// kernel overwrites all of it (masked positions included), so no stale byte can ever be observed.
import { Buffer } from "node:buffer";

/** A Float32Array of `n` elements whose contents are unspecified until a kernel writes all of them. */
export function outputFloat32(n: number): Float32Array {
    return new Float32Array(Buffer.allocUnsafeSlow(n * 4).buffer, 0, n);
}
