// crossplay.ts: `maporl crossplay`: agent 0 of each run with the partners of every other (the chemistry figure).
import type { Command } from "commander";

import { crossPlay, teamArg } from "../../train/job/evalGate.js";

export interface CrossPlayArgs {
    suite: string;
    runs: string[];
    stage?: string;
    metric: string;
}

/** Declares `maporl crossplay` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: CrossPlayArgs) => Promise<void>): void {
    cmd.description(
        "cross-play: agent 0 of each run's team with the partners of every other; the drop from self-play is the chemistry figure",
    )
        .requiredOption("--suite <dir>", "the scenario suite")
        .argument(
            "<runs...>",
            "run directories (two or more); RUN@STAGE takes that stage's team (RUN@base: the untrained base, RUN@independent: the control)",
        )
        .option("--stage <stage>", "which stage's models (default: each run's algorithm)")
        .option("--metric <m>", "majority@last, majority@N, solo or gain", "majority@last")
        .action(async (runs: string[], o: { suite: string; stage?: string; metric: string }) => {
            if (runs.length < 2)
                throw new RangeError(`crossplay: expected two or more run directories, got ${runs.length}`);
            await act({ runs, ...o });
        });
}

/** `maporl crossplay`: the exit code. */
export async function run(a: CrossPlayArgs): Promise<number> {
    const r = await crossPlay({
        suite: a.suite,
        metric: a.metric,
        teams: a.runs.map((run) => teamArg(run, a.stage)),
    });
    console.log(
        `cross-play (${a.metric}): row = agent 0's run, column = its partners' run; chemistry = a team's self-play minus its column's mean (its agent 0 swapped for another run's)`,
    );
    r.labels.forEach((l, i) => console.log(`  [${i}] ${l}`));
    console.log(`       ${r.labels.map((_, j) => `[${j}]`.padStart(7)).join("")}`);
    r.matrix.forEach((row, i) => console.log(`  [${i}]  ${row.map((x) => x.toFixed(3).padStart(7)).join("")}`));
    console.log(`  chemistry ${r.chemistry.map((c) => ((c >= 0 ? "+" : "") + c.toFixed(3)).padStart(7)).join("")}`);
    return 0;
}
