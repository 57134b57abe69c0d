// freshRows.ts (bench): a kernel's three fresh-process rows (out reused, default call, default call in a synchronous
// loop); fresh.ts runs the child.
import { timeFreshProcess } from "./fresh.js";
import { type BenchContext, type BenchRow } from "./types.js";

export function freshRows(
    kernel: string,
    size: string,
    ctx: BenchContext,
    bytesMoved: number,
    baselineMs: number | null,
    label: string,
): BenchRow[] {
    const t = timeFreshProcess(kernel, ctx.reps, ctx.threads);
    const ok = "eventLoopMs" in t;
    const note = ok ? undefined : t.error;
    return [
        {
            kernel,
            size,
            impl: `maporl ${kernel} ${label}, out= reused, fresh process`,
            medianMs: ok ? t.reusedMs : null,
            peakExtraBytes: null,
            bytesMoved,
            baselineMs,
        },
        {
            kernel,
            size,
            impl: `maporl ${kernel} ${label}, default call, fresh process`,
            medianMs: ok ? t.eventLoopMs : null,
            peakExtraBytes: null,
            bytesMoved,
            baselineMs,
            ...(note ? { note } : {}),
        },
        {
            kernel,
            size,
            impl: `maporl ${kernel} ${label}, default call, fresh process, synchronous loop`,
            medianMs: ok ? t.syncMs : null,
            peakExtraBytes: null,
            bytesMoved,
            baselineMs,
        },
    ];
}
