// alloc.ts: output buffers for kernels that write every element. Zero-filled `new Float32Array(n)` costs a
// memset plus, for fresh pages, a page fault per 4 KiB and V8 external-memory GC pressure: about as much as
// the whole GAE kernel at 1M tokens. An uninitialised Node allocation reuses already-mapped memory, and the
// kernel overwrites all of it (masked positions included), so no stale byte can ever be observed.
// Outputs of HUGE_OUTPUT_BYTES and more are fresh mappings whatever we do (glibc maps them on their own), and their
// 4 KiB pages fault in one by one as the kernel first writes them: ~65,000 faults for fusedPolicyLoss's 256 MiB
// gradient (~120 ms here, four times the kernel). They are advised to transparent huge pages where Linux allows it
// (2 MiB pages: 512 times fewer faults; the rest is the kernel zeroing them, ~55 ms); elsewhere nothing changes.
import { Buffer } from "node:buffer";
import { native } from "./native.js";

/** Outputs at least this large (bytes) are advised to huge pages (glibc's largest mmap threshold: always their own mapping). */
export const HUGE_OUTPUT_BYTES = 32 << 20;

/** A Float32Array of `n` elements whose contents are unspecified until a kernel writes all of them. */
export function outputFloat32(n: number): Float32Array {
    const a = new Float32Array(Buffer.allocUnsafeSlow(n * 4).buffer, 0, n);
    if (n * 4 >= HUGE_OUTPUT_BYTES) native.adviseHugePages(a);
    return a;
}
