// tasks.ts: collaboration tasks for the embedded policy, each a deterministic generator of items plus its
// verifier (issue 8's trainers consume them; the debate layer runs them).
//   split-sum:    a decentralised task: agent i sees only operand i; the answer (the sum) needs every agent's
//                 operand, so a lone agent cannot beat chance.
//   arith-debate: procedurally generated multi-step arithmetic word problems; every agent sees the whole
//                 problem; errors are independent, so reading the others' answers helps.
// Items carry a per-agent view (what that agent is shown at turn 0) and the reference answer.
import { mulberry32 } from "../../random.js";
import { gsm8kVerifier, type Verifier } from "../../rewards/verifiers.js";
import type { Tool } from "../../env/tools.js";
import type { ToolCall } from "../../policy/types.js";
import { requireInteger, requireNumber } from "../../validate.js";

export interface TaskItem {
    id: string;
    /** The whole problem (what an observer or a solo agent with full information sees). */
    question: string;
    /** What agent a sees at turn 0: views[a]. */
    views: string[];
    /** The answer, as text the verifier reads ("42"). */
    reference: string;
    /** A worked solution ending in the answer, for the SFT warm start (tasks that have one). */
    solution?: string;
    /** The environment's hidden state of the item, what its tools read (plain JSON: scenario suites store it). */
    hidden?: Record<string, unknown>;
}

/** A previous turn's answer as the next observation shows it: its text, its extracted answer and, in a task with
 * tools, what the calls it made returned (the transition). */
export interface ToolPrevious {
    text: string;
    extracted: string | null;
    toolResults?: { ok: boolean; content: string; name?: string; error?: string }[];
}

/**
 * A task is the trainers' environment, a Dec-POMDP: agents (with `roles`), each one's observation (its view of the
 * item and `prompt`), actions that are whole responses, a transition (the previous turn's answers and, with `tools`,
 * what their calls returned), the joint reward (the verifier's scores of the `answerers`), and the horizon (the
 * job's turns). The debate tasks are the instance where every agent answers and nothing else happens between turns.
 */
export interface Task {
    readonly name: string;
    readonly agents: number;
    readonly verifier: Verifier;
    /** Role names by agent (traces, tool permissions). Defaults to "agent-1", "agent-2", .... */
    readonly roles?: string[];
    /** The agents whose answers are the team's (metrics, the majority, the joint reward). Defaults to all. */
    readonly answerers?: number[];
    /** The joint reward is the outcome at the horizon only (a workflow's): answers before the last turn score 0, so
     * an early action (a lookup, a plan) is credited only through what it led to. Debates score every turn. */
    readonly finalReward?: boolean;
    /** Tools the agents call through the task's text protocol (`toolCalls`); the rollout runs them between turns,
     * with the caller's role (a tool's `roles` restrict it), its timeout, and errors as results. */
    readonly tools?: Tool<never>[];
    /** The calls a response makes (the text protocol). */
    toolCalls?(text: string): ToolCall[];
    /** The centralised critic's observation at a turn (CoLLM-CC); defaults to every view and the previous answers. */
    centralPrompt?(item: TaskItem, previous: ToolPrevious[] | null, scores?: number[] | "empty"): string;
    /** A warm-start pair for agent `agent` at `turn` (its observation, built from a demonstrated previous turn, and the
     * answer to learn); takes precedence over `warmStart` and `solution`. */
    demonstration?(
        item: TaskItem,
        agent: number,
        turn: number,
        rng: () => number,
        feedback: boolean,
    ): { prompt: string; answer: string };
    /** `count` items, the same for the same seed. */
    generate(count: number, seed: number): TaskItem[];
    /**
     * A warm-start demonstration for agent `agent` at `turn`, shown `previous` (the previous turn's answers by
     * agent, or null at turn 0); `rng` is uniform in [0, 1). Tasks without one are warm-started on `solution`.
     */
    warmStart?(item: TaskItem, agent: number, turn: number, previous: string[] | null, rng: () => number): string;
    /** Held-out items (a test split) for the evaluations; tasks without one evaluate on generate(count, seed). */
    heldOut?(count: number): TaskItem[];
    /** Agent `agent`'s user message at a turn, given the previous turn's answers of every agent (null at turn 0)
     * and, with feedback, their verifier scores ("empty" at turn 0). Tasks without one speak the compact protocol
     * (rollout.ts's turnPrompt), which the embedded character-level policy reads. */
    prompt?(item: TaskItem, agent: number, previous: ToolPrevious[] | null, scores?: number[] | "empty"): string;
    /** The final answer of a response (default: the compact protocol's, rollout.ts's extractAnswer). */
    extract?(text: string): string | null;
}

function requireFormat(where: string, format: unknown): "words" | "compact" {
    if (format !== "words" && format !== "compact")
        throw new RangeError(`${where}: format: expected 'words' or 'compact', got ${JSON.stringify(format)}`);
    return format;
}

function requireCount(where: string, count: unknown, seed: unknown): void {
    if (!Number.isInteger(count) || (count as number) < 0)
        throw new RangeError(`${where}: count: expected an integer >= 0, got ${String(count)}`);
    if (!Number.isInteger(seed) || (seed as number) < 0)
        throw new RangeError(`${where}: seed: expected an integer >= 0, got ${String(seed)}`);
}

/**
 * split-sum: each of `agents` agents holds one operand of `digits` digits; the answer is their sum. Format 'words'
 * (default) for LLMs; 'compact' for the embedded policy: agent a's view is "b=7" (its letter and its number).
 * The compact warm start is a weak base: an answer is "7+r=s;s" with r a guess of the other operand, uniform,
 * except that at a follow-up turn it builds on a peer's previous answer (r = that answer mod 10^digits) with
 * probability `peerUse`. Nobody announces its number on purpose: co-training has to find that protocol.
 */
export function splitSumTask(
    options: { agents?: number; digits?: number; format?: "words" | "compact"; peerUse?: number } = {},
): Task {
    const fn = "splitSumTask",
        format = requireFormat(fn, options.format ?? "words");
    const peerUse = requireNumber(fn, "peerUse", options.peerUse, 0.3, 0, 1);
    const agents = requireInteger(fn, "agents", options.agents ?? 2, 2, 16),
        digits = requireInteger(fn, "digits", options.digits ?? 1, 1, 6);
    const hi = 10 ** digits;
    return {
        name: "split-sum",
        agents,
        verifier: gsm8kVerifier({ name: "split-sum" }),
        generate(count, seed) {
            requireCount("split-sum", count, seed);
            const next = mulberry32(seed ^ 0x51ab);
            return Array.from({ length: count }, (_, i) => {
                const ops = Array.from({ length: agents }, () => Math.floor(next() * hi));
                return {
                    id: `split-sum-${seed}-${i}`,
                    question: format === "compact" ? ops.join("+") : `What is ${ops.join(" + ")}?`,
                    views: ops.map((x, a) =>
                        format === "compact"
                            ? `${"abcdefghijklmnop"[a]}=${x}`
                            : `You are agent ${a + 1} of ${agents}. Your number is ${x}. ` +
                              `The answer is the sum of all ${agents} agents' numbers. What is the sum?`,
                    ),
                    reference: String(ops.reduce((s, x) => s + x, 0)),
                };
            });
        },
        ...(format === "compact"
            ? {
                  warmStart(
                      item: TaskItem,
                      agent: number,
                      turn: number,
                      previous: string[] | null,
                      rng: () => number,
                  ): string {
                      const x = Number(/=(\d+)$/.exec(item.views[agent]!)![1]);
                      const peers = previous ? previous.filter((_, j) => j !== agent) : [];
                      const r =
                          turn > 0 && peers.length && rng() < peerUse
                              ? Number(peers[Math.floor(rng() * peers.length)]!) % hi
                              : Math.floor(rng() * hi);
                      return `${x}+${r}=${x + r};${x + r}`;
                  },
              }
            : {}),
    };
}

const NAMES = ["Ana", "Ben", "Chen", "Dana", "Eli", "Fay", "Gus", "Hana"];
const THINGS = ["apples", "books", "coins", "marbles", "stamps", "shells"];

/**
 * arith-debate: problems of `steps` operations (+, -, x) on small whole numbers, evaluated left to right; answers
 * stay >= 0. Format 'words' (default): word problems for LLMs. Format 'compact': "7+2*3-4" with the solution
 * "7+2=9,9*3=27,27-4=23;23", for the embedded character-level policy. The same seed gives the same problems in both.
 */
export function arithDebateTask(
    options: { agents?: number; steps?: number; maxOperand?: number; format?: "words" | "compact" } = {},
): Task {
    const fn = "arithDebateTask",
        format = requireFormat(fn, options.format ?? "words");
    const agents = requireInteger(fn, "agents", options.agents ?? 3, 1, 16),
        steps = requireInteger(fn, "steps", options.steps ?? 3, 1, 8);
    const maxOperand = requireInteger(fn, "maxOperand", options.maxOperand ?? 9, 2, 99);
    return {
        name: "arith-debate",
        agents,
        verifier: gsm8kVerifier({ name: "arith-debate" }),
        generate(count, seed) {
            requireCount("arith-debate", count, seed);
            const next = mulberry32(seed ^ 0xa417);
            const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
            return Array.from({ length: count }, (_, i) => {
                const who = NAMES[int(0, NAMES.length - 1)]!,
                    what = THINGS[int(0, THINGS.length - 1)]!;
                let value = int(2, maxOperand);
                const parts = [`${who} has ${value} ${what}.`],
                    chain: string[] = [];
                let compact = String(value);
                const apply = (sym: string, x: number, next: number) => {
                    chain.push(`${value}${sym}${x}=${next}`);
                    compact += `${sym}${x}`;
                    value = next;
                };
                for (let s = 0; s < steps; s++) {
                    const op = int(0, 2);
                    if (op === 0) {
                        const x = int(1, maxOperand);
                        apply("+", x, value + x);
                        parts.push(`Then ${who} gets ${x} more.`);
                    } else if (op === 1 && value > 1) {
                        const x = int(1, Math.min(maxOperand, value - 1));
                        apply("-", x, value - x);
                        parts.push(`Then ${who} gives away ${x}.`);
                    } else {
                        const x = int(2, 3);
                        apply("*", x, value * x);
                        parts.push(`Then the number of ${what} is multiplied by ${x}.`);
                    }
                }
                parts.push(`How many ${what} does ${who} have now?`);
                const question = format === "compact" ? compact : parts.join(" ");
                return {
                    id: `arith-debate-${seed}-${i}`,
                    question,
                    views: Array.from({ length: agents }, () => question),
                    reference: String(value),
                    solution: `${chain.join(",")};${value}`,
                };
            });
        },
    };
}

/** The role of agent a. */
export const roleOf = (task: Task, a: number): string => task.roles?.[a] ?? `agent-${a + 1}`;

/** The agents whose answers are the team's. */
export const answerersOf = (task: Task | undefined, agents: number): number[] =>
    task?.answerers ?? Array.from({ length: agents }, (_, a) => a);
