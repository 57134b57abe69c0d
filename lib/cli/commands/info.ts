// info.ts: `maporl info`: the native backend: version, threads, SIMD, the CUDA build and its devices.
import type { Command } from "commander";

import { backend } from "../../backend.js";

/** Declares `maporl info` on `cmd`. */
export function declare(cmd: Command, act: () => Promise<void>): void {
    cmd.description("print the native backend: version, threads, SIMD, CUDA build and devices").action(
        async () => await act(),
    );
}

/** `maporl info`: the exit code. */
export function run(): number {
    const b = backend();
    console.log(`maporl ${b.version}`);
    console.log(`threads: ${b.threads}`);
    console.log(`simd:    ${b.simd}`);
    console.log(`cuda:    ${b.cuda.compiled ? "compiled" : "not compiled (rebuild with MAPORL_CUDA=1 for CUDA)"}`);
    if (b.cuda.compiled) {
        if (b.cuda.devices.length === 0) console.log("devices: none (no GPU or no driver visible)");
        for (const d of b.cuda.devices)
            console.log(
                `device ${d.index}: ${d.name}, compute ${d.computeCapability}, ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB, ${d.multiprocessors} SMs`,
            );
    }
    return 0;
}
