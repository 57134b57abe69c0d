// trainGateway.ts (cli): `maporl train --gateway -- <program> [args...]`: co-trains the agents of an unchanged agent
// program (any language; it reads OPENAI_BASE_URL) through the gateway. One base model in process (--model), a LoRA
// adapter per agent (--agents names), the program run G times per item per iteration (gateway/command.ts), MAGRPO
// credit per agent, one step per agent, the held-out reward before and after. Writes to the run directory:
//   adapters/<agent>/     each agent's adapter (PEFT layout), saved after every iteration
//   metrics.jsonl         a line per iteration: mean reward, each agent's mean return / rows / loss, failed, seconds
//   summary.json          the held-out reward before and after, the iterations' rewards
// Ctrl-C starts no new program; the iteration under way is abandoned once its programs end (the adapters saved are the
// last finished iteration's).
import { randomBytes } from "node:crypto";
import { appendFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { readTextFile } from "../files.js";
import { commandProgram } from "../gateway/command.js";
import type { GatewayEpisode } from "../gateway/episodes.js";
import { startGateway } from "../gateway/gateway.js";
import { trainGateway, type GatewayEvalResult } from "../gateway/loop.js";
import { NativePolicy } from "../model/nativePolicy.js";

export const GATEWAY_REWARDS = ["posted", "exact", "number"] as const;

export interface GatewayTrainArgs {
    /** The agent program and its arguments. */
    program: string[];
    model: string;
    agents: string[];
    items: string;
    evalItems?: string;
    evalRuns: number;
    iterations: number;
    groups: number;
    lr: number;
    concurrency: number;
    reward: (typeof GATEWAY_REWARDS)[number];
    credit: "magrpo" | "influence" | "critic";
    loraRank: number;
    loraAlpha: number;
    seed: number;
    programTimeout: number;
    out?: string;
}

const MAX_ITEMS = 1_000_000;

/** Items from a JSON-lines file (one JSON value a line, blank lines skipped) or a file holding one JSON array. */
export function readItems(path: string, flag: string): unknown[] {
    const text = readTextFile(path, `${flag} (items, JSON lines)`);
    let items: unknown[];
    if (text.trimStart().startsWith("[")) {
        try {
            items = JSON.parse(text) as unknown[];
        } catch {
            throw new Error(`train: ${flag} ${path}: starts with '[' but is not a JSON array`);
        }
    } else
        items = text.split("\n").flatMap((line, k) => {
            if (line.trim() === "") return [];
            try {
                return [JSON.parse(line) as unknown];
            } catch {
                throw new Error(
                    `train: ${flag} ${path}: line ${k + 1} is not JSON: ${JSON.stringify(line.slice(0, 80))}`,
                );
            }
        });
    if (!Array.isArray(items) || items.length === 0 || items.length > MAX_ITEMS)
        throw new RangeError(`train: ${flag} ${path}: expected 1 to ${MAX_ITEMS} items, got ${items.length ?? 0}`);
    return items;
}

// The item's expected answer: its `answer` field where it is an object with one, else the item itself.
const expected = (item: unknown): string =>
    String(item && typeof item === "object" && "answer" in item ? item.answer : item).trim();
const lastNumber = (s: string): number | null => {
    const m = s.replace(/,/g, "").match(/-?\d+(?:\.\d+)?/g);
    return m ? Number(m[m.length - 1]) : null;
};

/** The reward of an output for `--reward`: undefined for 'posted' (the program posts it to MAPORL_REWARD_URL). */
export function rewardOf(how: GatewayTrainArgs["reward"]): ((item: unknown, output: unknown) => number) | undefined {
    if (how === "exact") return (item, output) => (String(output).trim() === expected(item) ? 1 : 0);
    if (how === "number")
        return (item, output) => {
            const got = lastNumber(String(output)),
                want = lastNumber(expected(item));
            return got !== null && want !== null && Math.abs(got - want) <= 1e-9 * Math.max(1, Math.abs(want)) ? 1 : 0;
        };
    return undefined;
}

const fmt = (e: GatewayEvalResult | null) =>
    e ? `${e.meanReward.toFixed(3)} (${e.episodes - e.failed.length}/${e.episodes} episodes rewarded)` : "-";

/** `maporl train --gateway`: the exit code. */
export async function runGatewayTraining(a: GatewayTrainArgs): Promise<number> {
    const items = readItems(a.items, "--items");
    const evalItems = a.evalItems !== undefined ? readItems(a.evalItems, "--eval-items") : undefined;
    const dir = a.out ?? `runs/gateway-${new Date().toISOString().replace(/[:.]/g, "-")}`;
    mkdirSync(join(dir, "adapters"), { recursive: true });
    const base = await NativePolicy.load(a.model);
    const controller = new AbortController();
    const onSigint = () => {
        process.stderr.write(
            "\nmaporl: stopping: no new program starts; the iteration under way is abandoned once its programs end\n",
        );
        controller.abort(new Error("interrupted"));
    };
    process.once("SIGINT", onSigint);
    // (a key of this run only: the gateway answers no one but the program it runs)
    const apiKey = randomBytes(16).toString("hex");
    let gw: Awaited<ReturnType<typeof startGateway>> | null = null;
    try {
        const models: Record<string, NativePolicy> = {};
        for (const [k, name] of a.agents.entries())
            models[name] = await base.withAdapter(name, { rank: a.loraRank, alpha: a.loraAlpha, seed: a.seed + k });
        // (credit 'critic': a critic per agent, another adapter on the base whose value head trains)
        const critics: Record<string, NativePolicy> = {};
        if (a.credit === "critic")
            for (const [k, name] of a.agents.entries())
                critics[name] = await base.withAdapter(`critic-${name}`, {
                    rank: a.loraRank,
                    alpha: a.loraAlpha,
                    seed: a.seed + 1000 + k,
                });
        // (limits sized from the run: every episode of an iteration, or of an evaluation, is kept until it is read; every
        // program under way may be open, and have every agent's call in flight)
        const episodes = Math.max(items.length * a.groups, (evalItems?.length ?? 0) * a.evalRuns);
        gw = await startGateway({
            agents: models,
            port: 0,
            apiKey,
            requireEpisode: true,
            maxClosedEpisodes: Math.max(4096, episodes),
            maxEpisodes: Math.max(256, a.concurrency),
            maxPending: Math.max(64, a.concurrency * a.agents.length),
        });
        console.log(`maporl train --gateway: run directory ${dir}; agents ${a.agents.join(", ")} at ${gw.baseUrl}`);
        const program = commandProgram({
            command: a.program[0]!,
            args: a.program.slice(1),
            apiKey,
            timeoutMs: a.programTimeout,
        });
        const reward = rewardOf(a.reward);
        const t0 = performance.now();
        let tIt = t0;
        const result = await trainGateway(items, {
            gateway: gw,
            models,
            program,
            ...(reward
                ? { reward: (item: unknown, output: unknown, _ep: GatewayEpisode) => reward(item, output) }
                : {}),
            iterations: a.iterations,
            credit: a.credit,
            ...(a.credit === "critic" ? { critics, collm: { lr: a.lr } } : {}),
            groups: a.groups,
            lr: a.lr,
            concurrency: a.concurrency,
            ...(evalItems ? { evalItems, evalRuns: a.evalRuns } : {}),
            signal: controller.signal,
            onIteration: async (it, r) => {
                for (const [name, m] of Object.entries(models)) await m.saveAdapter(join(dir, "adapters", name));
                for (const [name, c] of Object.entries(critics))
                    await c.saveAdapter(join(dir, "adapters", `critic-${name}`));
                const now = performance.now();
                const line = {
                    iteration: it + 1,
                    meanReward: r.meanReward,
                    agents: r.agents,
                    episodes: r.episodes.length,
                    failed: r.failed.length,
                    inexact: r.inexact,
                    seconds: (now - tIt) / 1000,
                };
                tIt = now;
                appendFileSync(join(dir, "metrics.jsonl"), `${JSON.stringify(line)}\n`);
                const why = r.failed[0] ? ` (first: ${r.failed[0].reason.slice(0, 120)})` : "";
                console.error(
                    `iteration ${it + 1}/${a.iterations} reward ${r.meanReward.toFixed(3)} failed ${r.failed.length}/${r.episodes.length}${why} ` +
                        Object.entries(r.agents)
                            .map(([n, s]) => `${n}: rows ${s.rows} loss ${s.loss === null ? "-" : s.loss.toFixed(4)}`)
                            .join(", "),
                );
            },
        });
        const summary = {
            agents: a.agents,
            items: items.length,
            groups: a.groups,
            iterations: result.rewards.length,
            rewards: result.rewards,
            // (the mean over rewarded episodes; how many were rewarded beside it: a failed episode is not a 0)
            heldOut: result.before
                ? {
                      before: result.before.meanReward,
                      after: result.after!.meanReward,
                      rewardedBefore: (result.before.episodes - result.before.failed.length) / result.before.episodes,
                      rewardedAfter: (result.after!.episodes - result.after!.failed.length) / result.after!.episodes,
                  }
                : null,
            seconds: (performance.now() - t0) / 1000,
        };
        writeFileSync(join(dir, "summary.json"), `${JSON.stringify(summary, null, 2)}\n`);
        console.log(
            `held-out reward: untrained ${fmt(result.before)}, co-trained ${fmt(result.after)}\n` +
                `adapters: ${dir}/adapters/   metrics: ${dir}/metrics.jsonl   summary: ${dir}/summary.json`,
        );
        return 0;
    } catch (e) {
        if (controller.signal.aborted) {
            console.error(`maporl: interrupted; the adapters of the last finished iteration are in ${dir}/adapters/`);
            return 130;
        }
        throw e;
    } finally {
        process.off("SIGINT", onSigint);
        await gw?.close();
        await base.dispose();
    }
}
