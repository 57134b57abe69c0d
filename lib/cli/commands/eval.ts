// eval.ts: `maporl eval`: the regression gate over a scenario suite, or --make-suite to write one
// (lib/train/job/evalGate.ts).
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { type Command, InvalidArgumentError } from "commander";

import { makeSuite, regressionGate } from "../../train/job/evalGate.js";
import { integer } from "../parse.js";

export interface EvalArgs {
    suite: string;
    makeSuite: boolean;
    fromRun?: string;
    items?: number;
    baseline?: string;
    candidate?: string;
    stage?: string;
    candidateStage?: string;
    replace: Record<number, string>;
    metric: string;
    threshold: number;
}

/** Declares `maporl eval` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: EvalArgs) => Promise<void>): void {
    cmd.description(
        "a regression gate: a fixed scenario suite on a baseline team and a candidate team; exits 1 when the metric falls more than the threshold",
    )
        .requiredOption("--suite <dir>", "the scenario suite (suite.json + scenarios.jsonl)")
        .option(
            "--make-suite",
            "write the suite instead: --from-run RUN's task, --items N of its held-out items",
            false,
        )
        .option("--from-run <dir>", "with --make-suite: the run whose config the suite takes")
        .option("--items <n>", "with --make-suite: scenarios (default 100)", integer(1, 1e6))
        .option("--baseline <run>", "the baseline team's run directory")
        .option("--candidate <run>", "the candidate team's run directory (default: the baseline's)")
        .option(
            "--stage <stage>",
            "which stage's models form the baseline team (default: the run's algorithm; 'independent' for the control)",
        )
        .option("--candidate-stage <stage>", "the candidate's stage (default: --stage)")
        .option(
            "--replace <i=dir...>",
            "in the candidate team, agent i played by the model in dir (e.g. 0=RUN/checkpoint/base, the untrained base)",
        )
        .option("--metric <m>", "majority@last, majority@N (turn N), solo or gain", "majority@last")
        .option(
            "--threshold <x>",
            "the largest drop that still passes",
            (v: string) => {
                const x = Number(v);
                if (!(x >= 0)) throw new InvalidArgumentError("expected a number >= 0");
                return x;
            },
            0.02,
        )
        .action(async (o: Omit<EvalArgs, "replace"> & { replace?: string[] }) => {
            const replace: Record<number, string> = {};
            for (const r of o.replace ?? []) {
                const m = /^(\d+)=(.+)$/.exec(r);
                if (!m) throw new RangeError(`eval: --replace: expected i=dir, got ${JSON.stringify(r)}`);
                replace[Number(m[1])] = m[2]!;
            }
            if (o.makeSuite && !o.fromRun)
                throw new RangeError("eval: --make-suite needs --from-run RUN (the run whose task the suite holds)");
            if (!o.makeSuite && !o.baseline)
                throw new RangeError("eval: --baseline RUN is required (or --make-suite to write a suite)");
            const { replace: _, ...rest } = o;
            await act({ ...rest, replace });
        });
}

/** `maporl eval`: the exit code. */
export async function run(a: EvalArgs): Promise<number> {
    if (a.makeSuite) {
        const cfg = JSON.parse(readFileSync(join(a.fromRun!, "config.json"), "utf8")) as Record<string, unknown>;
        const s = makeSuite(a.suite, { config: cfg, ...(a.items ? { items: a.items } : {}) });
        console.log(
            `maporl eval: wrote ${s.items.length} scenarios of ${s.resolved.task} to ${a.suite} (suite.json, scenarios.jsonl)`,
        );
        return 0;
    }
    const g = await regressionGate({
        suite: a.suite,
        metric: a.metric,
        threshold: a.threshold,
        baseline: { run: a.baseline!, ...(a.stage ? { stage: a.stage } : {}) },
        candidate: {
            run: a.candidate ?? a.baseline!,
            ...((a.candidateStage ?? a.stage) ? { stage: (a.candidateStage ?? a.stage)! } : {}),
            replace: a.replace,
        },
    });
    console.log(`maporl eval: ${g.message}`);
    return g.pass ? 0 : 1;
}
