// lookup.ts: tool-lookup, the demonstration workflow for the embedded model: a researcher and a solver, the
// information the answer needs behind a tool only the researcher may call. The Dec-POMDP, term by term:
//   agents        agent 0 the researcher, agent 1 the solver (roles);
//   observations  the researcher sees a key ("k=3"), the solver an operand ("x=5"); both see the previous turn's
//                 answers (the compact protocol's slots) and the team's scratchpad, the shared artifact: "#7" (what the
//                 last turn's lookup returned), "#?" (nothing), "#!" (the call failed);
//   actions       a whole response; "@3" in it calls lookup(key 3) (the text protocol of the compact models);
//   transition    the rollout runs the calls (lookup is restricted to the researcher: the solver's is a 'forbidden'
//                 tool error) and the results become the scratchpad's next version;
//   reward        the solver's answer is the team's (answerers): the item's value for the key plus the operand; the
//                 joint reward is its score at the last turn (finalReward: earlier turns pay 0), credited to both
//                 agents' turns by the trainers' estimators (MAPoRL's discounted influence, CoLLM's TD, MAGRPO's tree);
//   horizon       the job's turns (2: the lookup, then the answer).
// With `hops` h > 1 the lookups chain (a long horizon with the reward only at its end): the value a lookup returns is
// the next key, the researcher must look up its own key at turn 0 and the scratchpad's value at turns 1 .. h-1, and
// the answer is the h-th value plus the operand, given by the solver at turn h (turns >= h + 1). h = 1 is the task
// above, item for item and demonstration for demonstration.
// The warm start is a weak base: the researcher looks up its own key with probability p (`keyUse`; else a random
// key), the solver adds the scratchpad's value with probability q (`padUse`) (else guesses the missing term). Only a team whose two
// agents both change succeeds: the trained hand-off; the independent control (the researcher trained against a frozen
// solver) and either trained agent with an untrained partner stay near q or p.
import { mulberry32 } from "../../random.js";
import { gsm8kVerifier } from "../../rewards/verifiers.js";
import type { Tool } from "../../env/tools.js";
import type { ToolCall } from "../../policy/types.js";
import { requireInteger, requireNumber } from "../../validate.js";
import { turnPrompt } from "../trainers/rollout.js";
import type { Task, TaskItem, ToolPrevious } from "./tasks.js";

const KEYS = "0123456789";

/** The scratchpad after a turn's tool results: the first successful lookup's value, "!" when every call failed, "?" for none. */
export function scratchpad(previous: ToolPrevious[] | null): string {
    const results = previous ? previous.flatMap((p) => p.toolResults ?? []) : [];
    const ok = results.find((r) => r.ok);
    return ok ? ok.content : results.length ? "!" : "?";
}

/** The calls of a compact response: every "@<key>" (at most 4). */
export function lookupCalls(text: string): ToolCall[] {
    return [...text.matchAll(/@([0-9a-z])/g)]
        .slice(0, 4)
        .map((m, k) => ({ id: `call_${k}`, name: "lookup", arguments: JSON.stringify({ key: m[1] }) }));
}

/** The value at the end of `hops` lookups from `key` (each value the next key). */
export function chainEnd(values: string, key: string, hops: number): string {
    let k = key;
    for (let h = 0; h < hops; h++) k = values[KEYS.indexOf(k)]!;
    return k;
}

/** tool-lookup (see above); `keyUse` is p, `padUse` is q, `hops` the chain's length. */
export function lookupTask(options: { keyUse?: number; padUse?: number; hops?: number } = {}): Task {
    const fn = "lookupTask";
    const p = requireNumber(fn, "keyUse", options.keyUse, 0.3, 0, 1),
        q = requireNumber(fn, "padUse", options.padUse, 0.3, 0, 1),
        hops = requireInteger(fn, "hops", options.hops ?? 1, 1, 6);
    const lookup: Tool<{ key: string }> = {
        name: "lookup",
        description: "The item's value for a key (a digit).",
        roles: ["researcher"],
        timeoutMs: 1000,
        parameters: {
            type: "object",
            properties: { key: { type: "string", pattern: "^[0-9]$" } },
            required: ["key"],
            additionalProperties: false,
        },
        run: ({ key }, ctx) => {
            const item = (ctx.episode as { item?: TaskItem } | undefined)?.item;
            const values = item?.hidden?.values;
            if (typeof values !== "string" || values.length !== KEYS.length)
                throw new Error("this item has no database");
            return values[KEYS.indexOf(key)]!;
        },
    };
    const answers = (previous: ToolPrevious[] | null) => (previous ? previous.map((e) => e.extracted) : null);
    const prompt = (item: TaskItem, agent: number, previous: ToolPrevious[] | null, scores?: number[] | "empty") =>
        `${turnPrompt(item.views[agent]!, agent, 2, answers(previous), scores)}#${scratchpad(previous)}`;
    // The warm start's researcher: its own key with probability p, else a uniform one.
    const call = (key: string, rng: () => number) => (rng() < p ? key : KEYS[Math.floor(rng() * KEYS.length)]!);
    return {
        name: "tool-lookup",
        agents: 2,
        roles: ["researcher", "solver"],
        answerers: [1],
        finalReward: true,
        verifier: gsm8kVerifier({ name: "tool-lookup" }),
        tools: [lookup],
        toolCalls: lookupCalls,
        generate(count, seed) {
            if (!Number.isInteger(count) || count < 0)
                throw new RangeError(`tool-lookup: count: expected an integer >= 0, got ${String(count)}`);
            if (!Number.isInteger(seed) || seed < 0)
                throw new RangeError(`tool-lookup: seed: expected an integer >= 0, got ${String(seed)}`);
            const next = mulberry32(seed ^ 0x100c);
            return Array.from({ length: count }, (_, i) => {
                const values = Array.from({ length: KEYS.length }, () => String(Math.floor(next() * 10))).join("");
                const k = Math.floor(next() * KEYS.length),
                    x = Math.floor(next() * 10);
                return {
                    id: `tool-lookup-${seed}-${i}`,
                    question: `${values}[${KEYS[k]}]${hops > 1 ? `^${hops}` : ""}+${x}`,
                    views: [`k=${KEYS[k]}`, `x=${x}`],
                    reference: String(Number(chainEnd(values, KEYS[k]!, hops)) + x),
                    hidden: { values },
                };
            });
        },
        prompt,
        // The central critic (CoLLM-CC) reads both views and the scratchpad.
        centralPrompt: (item, previous, scores) =>
            `${item.views.join("&")}|${turnPrompt("", 0, 2, answers(previous), scores).slice(1)}#${scratchpad(previous)}`,
        demonstration(item, agent, turn, rng, feedback) {
            const values = item.hidden!.values as string,
                key = item.views[0]!.slice(2),
                x = Number(item.views[1]!.slice(2));
            // The demonstration's previous turn: the researcher's lookup (the key it should have looked up, its own
            // at turn 0 and the chain's value after, with probability p) and a guess.
            let previous: ToolPrevious[] | null = null;
            if (turn > 0) {
                const called = call(chainEnd(values, key, Math.min(turn, hops) - 1), rng);
                const guess = Math.floor(rng() * 10);
                previous = [
                    {
                        text: `@${called}`,
                        extracted: called,
                        toolResults: [{ ok: true, content: values[KEYS.indexOf(called)]! }],
                    },
                    { text: `${x}+${guess}=${x + guess};${x + guess}`, extracted: String(x + guess) },
                ];
            }
            // The verdicts the rollout shows: none before the horizon (finalReward scores those turns 0).
            const marks = !feedback ? undefined : previous ? previous.map(() => 0) : ("empty" as const);
            let answer: string;
            if (agent === 0 && turn > 0 && turn < hops) {
                // a hop of the chain: the scratchpad's value is the next key
                const pad = scratchpad(previous);
                answer = `@${call(/^\d$/.test(pad) ? pad : key, rng)}`;
            } else if (agent === 0) answer = `@${call(key, rng)}`;
            else {
                const pad = scratchpad(previous);
                const r = /^\d$/.test(pad) && rng() < q ? Number(pad) : Math.floor(rng() * 10);
                answer = `${x}+${r}=${x + r};${x + r}`;
            }
            return { prompt: prompt(item, agent, previous, marks), answer };
        },
    };
}
