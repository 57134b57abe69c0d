// toy.ts: `maporl toy`: the collaboration-rate curves of the toy game at T = 10 and 20 and the agreement of
// the learned behaviour with Observations 1 and 2 over the payoff grid (lib/train/tasks/toy.ts).
import type { Command } from "commander";

import { integer } from "../parse.js";
import { observation1, observation2, toyGame, toyPayoffGrid, type ToyPayoffs } from "../../train/tasks/toy.js";

export interface ToyReport {
    turns: number;
    curves: { label: string; rate: number[] }[];
    agreement: { observation: string; agree: number; total: number }[];
}

const spark = (xs: number[]) => xs.map((x) => " ▁▂▃▄▅▆▇█"[Math.min(8, Math.round(x * 8))]).join("");

/** Runs the toy-game study; `log` receives the printed lines, `onProgress` the payoffs of the grid done so far at
 * each T (48 per T; each is 6 short trainings). */
export function runToy(
    options: {
        turns?: number[];
        seed?: number;
        log?: (line: string) => void;
        onProgress?: (p: { turns: number; done: number; total: number }) => void;
    } = {},
): ToyReport[] {
    const log = options.log ?? console.log,
        seed = options.seed ?? 0;
    const fast = { episodes: 32, iterations: 150, lr: 1 };
    const reports: ToyReport[] = [];
    for (const T of options.turns ?? [10, 20]) {
        const p = { rCol: 0.3, rInd: 1, rSyn: 2.6 };
        log(
            `\ntoy game, T = ${T}, payoffs R_col ${p.rCol}, R_ind ${p.rInd}, R_syn ${p.rSyn}: collaboration rate over iterations (every 10)`,
        );
        const curves = [
            { label: "co-trained, team reward", r: toyGame({ payoffs: p, turns: T, reward: "team", seed }) },
            { label: "co-trained, own reward", r: toyGame({ payoffs: p, turns: T, reward: "own", seed }) },
            {
                label: "one learner vs fixed partner pi=0.3",
                r: toyGame({ payoffs: p, turns: T, mode: "fixed-partner", partnerPi: 0.3, seed }),
            },
        ].map(({ label, r }) => {
            log(`  ${label.padEnd(38)} ${spark(r.curve.map((c) => c.rate))}  final ${r.rate.toFixed(3)}`);
            return { label, rate: r.curve.map((c) => c.rate) };
        });
        const tally = new Map<string, { agree: number; total: number }>();
        const count = (key: string, rate: number, predicted: boolean) => {
            const t = tally.get(key) ?? { agree: 0, total: 0 };
            t.total++;
            if (rate >= 0.5 === predicted) t.agree++;
            tally.set(key, t);
        };
        const grid = toyPayoffGrid();
        grid.forEach((q: ToyPayoffs, i) => {
            for (const reward of ["team", "own"] as const)
                count(
                    `Observation 2 (${reward} reward)`,
                    toyGame({ payoffs: q, turns: T, reward, seed: seed + i, ...fast }).rate,
                    observation2(q, reward),
                );
            for (const pi of [0.3, 0.5, 0.7, 0.9])
                count(
                    "Observation 1 (pi in 0.3..0.9)",
                    toyGame({ payoffs: q, turns: T, mode: "fixed-partner", partnerPi: pi, seed: seed + i, ...fast })
                        .rate,
                    observation1(q, pi),
                );
            options.onProgress?.({ turns: T, done: i + 1, total: grid.length });
        });
        const agreement = [...tally].map(([observation, t]) => ({ observation, ...t }));
        log(`  agreement with the closed forms over ${toyPayoffGrid().length} payoffs:`);
        for (const a of agreement)
            log(`    ${a.observation.padEnd(32)} ${a.agree}/${a.total} (${((100 * a.agree) / a.total).toFixed(1)}%)`);
        reports.push({ turns: T, curves, agreement });
    }
    return reports;
}

/** `maporl toy` as the CLI runs it: the study's lines on stdout, its progress on stderr (redrawn on a terminal; in
 * logs a line every 5 s and at the end of each grid). */
/** `maporl toy`: prints the study. */
export function runToyCli(options: { turns?: number[]; seed?: number }): void {
    const tty = process.stderr.isTTY === true,
        t0 = performance.now();
    let last = 0;
    runToy({
        ...options,
        log: (l) => {
            if (tty) process.stderr.write("\r\x1b[K");
            console.log(l);
        },
        onProgress: ({ turns, done, total }) => {
            const line = `  T = ${turns}: payoff grid ${done}/${total}, elapsed ${((performance.now() - t0) / 1000).toFixed(0)} s`;
            if (tty) process.stderr.write(`\r\x1b[K${line}`);
            else if (performance.now() - last > 5000 || done === total) {
                last = performance.now();
                process.stderr.write(line + "\n");
            }
        },
    });
    if (tty) process.stderr.write("\r\x1b[K");
}

/** Declares `maporl toy` on `cmd`. */
export function declare(cmd: Command, act: (a: { seed: number }) => Promise<void>): void {
    cmd.description(
        "MAPoRL's toy game: collaboration-rate curves at T = 10 and 20, and the learned behaviour against Observations 1 and 2 over a payoff grid",
    )
        .option("--seed <n>", "the seed", integer(0, 2 ** 31 - 1), 0)
        .action(async (o: { seed: number }) => await act(o));
}

/** `maporl toy`: the exit code. */
export function run(a: { seed: number }): number {
    runToyCli(a);
    return 0;
}
