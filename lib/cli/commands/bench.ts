// bench.ts: `maporl bench`: the kernels and models against the PyTorch baselines in the same run (lib/bench).
import type { Command } from "commander";

import { runBench } from "../../bench/index.js";
import { editDistance } from "../../validate.js";
import { integer } from "../parse.js";

export interface BenchArgs {
    kernels: string[];
    threads?: number;
    reps?: number;
    pythonReps?: number;
    python: boolean;
    out?: string;
}

/** Declares `maporl bench` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: BenchArgs) => Promise<void>, known: readonly string[]): void {
    cmd.description(
        "time the kernels against the PyTorch baselines in the same run. The baselines are slow on a CPU (on 2 cores: llama's about 25 minutes, the others about 2; each long one prints its estimate first); --no-python skips them (llama alone then about 70 s)",
    )
        .argument("[kernels...]", `which (default all): ${known.join(", ")}`)
        .option("--threads <n>", "threads for both sides (default 2)", integer(1, 1024))
        .option("--reps <n>", "repetitions of our kernels (default 30)", integer(1, 1e6))
        .option("--python-reps <n>", "repetitions of the baselines (default 5)", integer(1, 1e6))
        .option("--no-python", "skip the baselines")
        .option("--out <dir>", "where the JSON goes (default bench/results)")
        .action(
            async (
                kernels: string[],
                o: { threads?: number; reps?: number; pythonReps?: number; python: boolean; out?: string },
            ) => {
                for (const k of kernels)
                    if (!known.includes(k)) {
                        const best = [...known].sort((a, b) => editDistance(k, a) - editDistance(k, b))[0];
                        throw new RangeError(
                            `bench: unknown benchmark '${k}'${best && editDistance(k, best) <= 3 ? ` (did you mean ${best}?)` : ""}; known: ${known.join(", ")}`,
                        );
                    }
                await act({ kernels, ...o });
            },
        );
}

/** `maporl bench`: the exit code. */
export async function run(a: BenchArgs): Promise<number> {
    await runBench({
        kernels: a.kernels,
        python: a.python,
        ...(a.threads ? { threads: a.threads } : {}),
        ...(a.reps ? { reps: a.reps } : {}),
        ...(a.pythonReps ? { pythonReps: a.pythonReps } : {}),
        ...(a.out ? { outDir: a.out } : {}),
    });
    return 0;
}
