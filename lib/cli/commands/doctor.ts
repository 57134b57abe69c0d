// doctor.ts: `maporl doctor`: checks the installation (lib/doctor.ts) and prints the report, or JSON.
import type { Command } from "commander";

import { doctor } from "../../doctor.js";

export interface DoctorArgs {
    json: boolean;
}

/** Declares `maporl doctor` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: DoctorArgs) => Promise<void>): void {
    cmd.description(
        "check this installation: the backend, every kernel at every SIMD level against float64, and on a visible GPU every kernel and the model on CUDA against the CPU",
    )
        .option("--json", "print the report as JSON", false)
        .action(async (o: { json: boolean }) => await act(o));
}

/** `maporl doctor`: the exit code. */
export async function run(a: DoctorArgs): Promise<number> {
    const r = await doctor(a.json ? {} : { log: (l) => console.log(l) });
    if (a.json) console.log(JSON.stringify(r, null, 2));
    return r.failed === 0 ? 0 : 1;
}
