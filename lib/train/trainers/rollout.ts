// rollout.ts: batched debate rollouts of the embedded policy for the trainers, and the packing of answers into
// training batches. The protocol is MAPoRL's (docs/algorithms.md A.2) in a compact form a character-level model can
// read: agent a sees its view of the item, then "|" and the previous turn's answers of every agent, its own first,
// each as a 3-digit number ("???" when none was given, and at turn 0, so that answering alone and in a discussion
// differ only in what the slots hold). The A x E requests of a turn decode as one batch per distinct model (NativePolicy
// batches prompts of any length; fixed-width slots keep the rows' lengths close, so little of a batch idles). Answers end in ";" and the same 3 digits, so agreeing with a peer is a copy.
import { NativePolicy } from "../../model/nativePolicy.js";
import { answerKey } from "../../debate/metrics.js";
import { answerersOf, roleOf, type Task, type TaskItem, type ToolPrevious } from "../tasks/tasks.js";
import { runToolCall, type ToolResult } from "../../env/tools.js";
import type { Generation, Policy, SamplingOptions, ToolCall } from "../../policy/types.js";
import { pushTo } from "../../collections.js";
import { generateSettled, policyMessage } from "../../policy/settle.js";

export interface RolloutEntry {
    prompt: number[];
    /** The sampled tokens (without the EOS) and whether the answer ended with EOS. */
    completion: number[];
    stopped: boolean;
    /** Whether maxTokens cut the answer (an answer a stop string ended is neither stopped nor truncated). */
    truncated?: boolean;
    /** The behaviour log-probs the sampler returned (Generation.logprobs): one per completion token and the EOS when
     * `stopped` (the positions packRows trains). */
    logprobs?: number[];
    text: string;
    extracted: string | null;
    correct: boolean;
    /** The verifier's score; for an agent that is not an answerer of its task, the turn's joint reward (the mean
     * score of the answerers), so every agent is credited with the team's outcome. */
    score: number;
    /** What the calls this answer made returned (tasks with tools; runToolCall's results). */
    toolResults?: ToolResult[];
    /** The served model that sampled it, when the sampler names one (a fleet's adapter version: fleetRollout.ts). */
    model?: string;
    /** The temperature it was sampled at, when the agents' sampling differs (agentSettings). */
    temperature?: number;
    /** The credit the trainer assigned to this answer when it trained it (MAPoRL: its influence-aware outcome reward;
     * CoLLM: its TD advantage; MAGRPO: its group-relative advantage); absent for answers no model trained on. */
    credit?: number;
}

export interface TeamRollout {
    /** The task the debates ran (its prompts serve the centralised critic too). */
    task?: Task;
    items: TaskItem[];
    /** entries[item][turn][agent]. */
    entries: RolloutEntry[][][];
    agents: number;
    turns: number;
    /** Episodes dropped because a request failed (the others go on): their item, where, and the error. */
    failed?: { item: TaskItem; turn: number; agent: number; error: string }[];
}

export interface RolloutOptions {
    turns: number;
    temperature: number;
    maxTokens: number;
    /** Seed of the episode batch; agent a of item i at turn t draws with seed*1e6 + i*1000 + t*16 + a. */
    seed: number;
    /** The models that answer turn 0 (MAPoRL's separate turn-0 "policy" adapter); defaults to `agents`. */
    turn0?: Policy[];
    /** The trainer's stop tokens: an answer a remote sampler ended on an id that is not one fails its episode. Only
     * read for samplers other than the embedded model. */
    isStop?: (id: number) => boolean;
    /** Show the verifier's verdict on every previous answer (MAPoRL's reward feedback). Defaults to false. */
    feedback?: boolean;
    signal?: AbortSignal;
    /** Called after each batch of answers with how many it generated (progress inside an evaluation). */
    onAnswers?: (n: number) => void;
    /** Added to each answer's score (DAPO's soft overlong punishment; training rollouts only). */
    lengthPenalty?: (g: Generation, agent: number) => number;
    /** Per-agent sampling (the job's agentSettings), replacing temperature / maxTokens for that agent; entries then
     * record their temperature. */
    agentSampling?: SamplingOptions[];
}

const ANSWER_WIDTH = 3;

/** The final answer of a compact solution, in the protocol's format only: the number after the last ';', ending the
 * text ("2*3=6,7+6=13;013"). Anything else is no answer: a model is not paid for noise that happens to contain the
 * reference's digits (taking the last number anywhere in the text graded such noise right). */
export function extractAnswer(text: string): string | null {
    const m = /;\s*(-?\d+)\s*$/.exec(text);
    return m ? m[1]! : null;
}

function formatAnswer(x: string | null): string {
    if (x === null || !/^\d+$/.test(x) || x.length > ANSWER_WIDTH) return "?".repeat(ANSWER_WIDTH);
    return x.padStart(ANSWER_WIDTH, "0");
}

/** Agent a's user message: the task's own prompt (words tasks, as GSM8K's), else the compact protocol (turnPrompt). */
export function promptFor(
    task: Task,
    item: TaskItem,
    agent: number,
    previous: ToolPrevious[] | null,
    scores?: number[] | "empty",
): string {
    if (task.prompt) return task.prompt(item, agent, previous, scores);
    return turnPrompt(
        item.views[agent]!,
        agent,
        task.agents,
        previous ? previous.map((e) => e.extracted) : null,
        scores,
    );
}

/** A response's final answer under the task's format. */
export const answerOf = (task: Task, text: string): string | null =>
    task.extract ? task.extract(text) : extractAnswer(text);

/**
 * The user message agent a of `agents` sees: its view, then everyone's previous answers (own first), or empty slots
 * at turn 0. With `scores` (MAPoRL's reward feedback) each answer is followed by the verifier's verdict, "+" for a
 * score >= 0.5 and "-" below ("?" in an empty slot).
 */
export function turnPrompt(
    view: string,
    agent: number,
    agents: number,
    previous: (string | null)[] | null,
    scores?: number[] | "empty",
): string {
    const order = [agent, ...Array.from({ length: agents }, (_, j) => j).filter((j) => j !== agent)];
    const mark = (j: number) =>
        scores === undefined ? "" : scores === "empty" || !previous ? "?" : scores[j]! >= 0.5 ? "+" : "-";
    return `${view}|${order.map((j) => formatAnswer(previous ? previous[j]! : null) + mark(j)).join(",")}`;
}

/** A task solution "chain;42" in the protocol's answer format "chain;042". */
export function protocolSolution(solution: string): string {
    const m = /^(.*;)(\d+)$/s.exec(solution);
    return m ? m[1]! + formatAnswer(m[2]!) : solution;
}

/**
 * Runs E debates of `turns` turns; agents[a] answers for agent a (the same model may appear several times). An
 * episode whose request fails (generateSettled: the batch, then its requests alone) is dropped and listed in
 * `failed`; the others go on. Rejects when every episode failed (nothing to train on), and on abort.
 */
export async function rolloutTeam(
    task: Task,
    items: TaskItem[],
    agents: Policy[],
    o: RolloutOptions,
): Promise<TeamRollout> {
    const A = agents.length;
    const entries: RolloutEntry[][][] = items.map(() => []);
    const failed = new Map<number, { item: TaskItem; turn: number; agent: number; error: string }>();
    for (let t = 0; t < o.turns; t++) {
        o.signal?.throwIfAborted();
        const turn: RolloutEntry[][] = items.map(() => new Array(A));
        const byModel = new Map<Policy, { i: number; a: number }[]>();
        const who = t === 0 && o.turn0 ? o.turn0 : agents;
        const live = items.flatMap((_, i) => (failed.has(i) ? [] : [i]));
        for (let a = 0; a < A; a++) pushTo(byModel, who[a]!, ...live.map((i) => ({ i, a })));
        // One batch per distinct model: the embedded models' in turn (they share the machine's thread pool), remote
        // samplers' at once (each server batches what it holds); every draw is seeded per request either way.
        const batches = [...byModel];
        const remote = batches.every(([m]) => !isNative(m));
        const answered = remote ? await Promise.all(batches.map(([model, who]) => answerBatch(model, who))) : [];
        for (const [k, [model, who]] of batches.entries())
            record(model, who, remote ? answered[k]! : await answerBatch(model, who));
        async function answerBatch(model: Policy, who: { i: number; a: number }[]) {
            const content = who.map(({ i, a }) => {
                const prev = t === 0 ? null : entries[i]![t - 1]!;
                return promptFor(
                    task,
                    items[i]!,
                    a,
                    prev,
                    o.feedback ? (prev ? prev.map((e) => e.score) : "empty") : undefined,
                );
            });
            const gens = await generateSettled(
                model,
                who.map(({ i, a }, k) => ({
                    messages: [{ role: "user" as const, content: content[k]! }],
                    sampling: o.agentSampling?.[a] ?? { temperature: o.temperature, maxTokens: o.maxTokens },
                    seed: o.seed * 1_000_000 + i * 1000 + t * 16 + a,
                })),
                { ...(o.signal ? { signal: o.signal } : {}) },
            );
            o.onAnswers?.(who.length);
            const verdicts = await Promise.all(
                gens.map(async (settled, k) =>
                    settled.ok
                        ? await task.verifier.score({
                              question: items[who[k]!.i]!.question,
                              response: settled.generation.text,
                              reference: items[who[k]!.i]!.reference,
                          })
                        : null,
                ),
            );
            return { content, gens, verdicts };
        }
        function record(
            model: Policy,
            who: { i: number; a: number }[],
            { content, gens, verdicts }: Awaited<ReturnType<typeof answerBatch>>,
        ): void {
            for (let k = 0; k < who.length; k++) {
                const { i, a } = who[k]!,
                    settled = gens[k]!,
                    item = items[i]!;
                if (!settled.ok) {
                    if (!failed.has(i))
                        failed.set(i, { item, turn: t, agent: a, error: policyMessage(model, settled.error) });
                    continue;
                }
                const g = settled.generation;
                const ids = answerIds(model, g, content[k]!, o.isStop, stopList(o.agentSampling?.[a]?.stop));
                if (typeof ids === "string") {
                    if (!failed.has(i)) failed.set(i, { item, turn: t, agent: a, error: `${model.name}: ${ids}` });
                    continue;
                }
                const extracted = answerOf(task, g.text);
                const verdict = verdicts[k]!;
                turn[i]![a] = {
                    ...ids,
                    ...(g.model !== undefined && !isNative(model) ? { model: g.model } : {}),
                    text: g.text,
                    extracted,
                    correct: extracted !== null && answerKey(extracted) === answerKey(item.reference),
                    score: verdict.score + (o.lengthPenalty ? o.lengthPenalty(g, a) : 0),
                    ...(o.agentSampling?.[a]?.temperature !== undefined
                        ? { temperature: o.agentSampling[a].temperature }
                        : {}),
                };
            }
        }
        for (const i of live)
            if (!failed.has(i)) await transition(task, items[i]!, turn[i]!, t, t === o.turns - 1, o.signal);
        turn.forEach((row, i) => entries[i]!.push(row));
    }
    if (failed.size === 0) return { task, items, entries, agents: A, turns: o.turns };
    if (failed.size === items.length) {
        const f = [...failed.values()][0]!;
        throw new Error(
            `rollout: every episode failed (${items.length}); the first at turn ${f.turn}, agent ${f.agent}: ${f.error}`,
        );
    }
    const keep = items.flatMap((_, i) => (failed.has(i) ? [] : [i]));
    return {
        task,
        items: keep.map((i) => items[i]!),
        entries: keep.map((i) => entries[i]!),
        agents: A,
        turns: o.turns,
        failed: [...failed.values()],
    };
}

const stopList = (x: string | string[] | undefined): string[] | undefined =>
    x === undefined ? undefined : typeof x === "string" ? [x] : x;
const isNative = (p: Policy): p is NativePolicy => p instanceof NativePolicy;

/**
 * How an embedded model's answer ended, as packRows needs it: `stopped` when a stop token ended it (packRows appends
 * the trainer's eos, whose log-prob is the answer's last), `truncated` when maxTokens cut it. An answer a stop string
 * ended is neither: its tokens are every sampled token, the string's included, and nothing is appended.
 */
export function answerEnd(g: Generation): { stopped: boolean; truncated: boolean } {
    const tokens = g.tokens?.length ?? 0;
    const stopToken = g.finishReason === "stop" && (g.tokenIds === undefined || g.tokenIds.length > tokens);
    return { stopped: stopToken, truncated: g.finishReason === "length" };
}

/**
 * An answer's ids as the trainer packs them: the prompt's ids, the completion's without its stop token, whether it
 * stopped, and the behaviour log-probs (one per completion token and the stop token). The embedded model's are its own;
 * any other sampler must return the exact ids it read and sampled (Generation.tokenIdsExact) with one log-prob each,
 * and end a stopped answer on one of the trainer's stop tokens (`isStop`; packRows appends the trainer's eos, as for
 * the embedded model's answers). A string says why an answer cannot be trained on.
 */
export function answerIds(
    model: Policy,
    g: Generation,
    content: string,
    isStop: ((id: number) => boolean) | undefined,
    stopStrings: readonly string[] | undefined,
): Pick<RolloutEntry, "prompt" | "completion" | "stopped" | "truncated" | "logprobs"> | string {
    const stopped = g.finishReason === "stop";
    if (isNative(model))
        return {
            prompt: model.tokenizer.encodeChat([{ role: "user", content }]),
            completion: (g.tokens ?? []) as number[],
            ...answerEnd(g),
            ...(g.logprobs ? { logprobs: g.logprobs } : {}),
        };
    const ids = g.tokenIds,
        prompt = g.promptTokenIds;
    if (g.tokenIdsExact !== true || !ids || !prompt)
        return "the answer came without the exact prompt and completion token ids (serve with return_token_ids)";
    if (!g.logprobs || g.logprobs.length !== ids.length)
        return `the answer has ${ids.length} token ids but ${g.logprobs?.length ?? "no"} log-probs`;
    const truncated = g.finishReason === "length";
    // ended by a stop token (the trainer's: packRows appends its eos), or by a stop string (every id kept)
    const stopToken = stopped && ids.length > 0 && (isStop ? isStop(ids[ids.length - 1]!) : true);
    if (stopped && !stopToken && !stopStrings?.length)
        return `the answer stopped on token ${ids[ids.length - 1] ?? "(none)"}, which is not one of the trainer's stop tokens, and no stop string was asked for`;
    return {
        prompt: [...prompt],
        completion: stopToken ? ids.slice(0, -1) : [...ids],
        stopped: stopToken,
        truncated,
        logprobs: g.logprobs,
    };
}

/**
 * The transition after a turn of one episode: each answer's tool calls (the task's text protocol) run in agent order
 * with the caller's role, their results kept on the entry (the next observations read them); then, when the task
 * names its answerers, every other agent's score becomes the turn's joint reward; with `finalReward`, every score
 * before the `last` turn is 0. A tool that throws, hangs or is forbidden is a result with ok false, never an error of
 * the episode.
 */
export async function transition(
    task: Task,
    item: TaskItem,
    row: RolloutEntry[],
    turn: number,
    last: boolean,
    signal?: AbortSignal,
): Promise<void> {
    for (const [a, e] of row.entries()) {
        const results = await runTools(task, item, a, e.text, turn, signal);
        if (results) e.toolResults = results;
    }
    const scores = turnScores(
        task,
        row.map((e) => e.score),
        last,
    );
    row.forEach((e, a) => {
        e.score = scores[a]!;
    });
}

/** A turn's scores as the trainers credit them: an agent outside the task's answerers gets the turn's joint reward;
 * with `finalReward`, every score before the `last` turn is 0. */
export function turnScores(task: Task, scores: number[], last: boolean): number[] {
    if (task.finalReward && !last) return scores.map(() => 0);
    if (!task.answerers) return scores;
    const joint = jointScore(task, scores);
    return scores.map((x, a) => (task.answerers!.includes(a) ? x : joint));
}

/** The results of the calls one answer makes (in order), or undefined when it makes none or the task has no tools. */
export async function runTools(
    task: Task,
    item: TaskItem,
    agent: number,
    text: string,
    turn: number,
    signal?: AbortSignal,
): Promise<ToolResult[] | undefined> {
    let calls: ToolCall[];
    try {
        calls = task.tools?.length && task.toolCalls ? task.toolCalls(text) : [];
    } catch (e) {
        // the task's own parser failed on this answer: an error of the call, the episode goes on
        return [
            {
                callId: "call_0",
                name: "?",
                arguments: "",
                ok: false,
                error: "arguments",
                ms: 0,
                content: `error: the tool calls of this answer could not be read (${e instanceof Error ? e.message : String(e)})`,
            },
        ];
    }
    if (!Array.isArray(calls) || !calls.length) return undefined;
    const out: ToolResult[] = [];
    for (const call of calls)
        out.push(
            await runToolCall(task.tools!, call, {
                role: roleOf(task, agent),
                turn,
                episode: { item },
                ...(signal ? { signal } : {}),
            }),
        );
    return out;
}

/** The joint reward of a turn: the mean score of the task's answerers. */
export function jointScore(task: Task | undefined, scores: number[]): number {
    const who = answerersOf(task, scores.length);
    return who.reduce((s, a) => s + scores[a]!, 0) / who.length;
}

export interface TraceEntry {
    text: string;
    correct: boolean;
    role?: string;
    tools?: { name: string; arguments: string; ok: boolean; content: string; error?: string }[];
    credit?: number;
    temperature?: number;
    /** The served version that sampled it, on a fleet. */
    model?: string;
}

/** An episode's entries as traces.jsonl records them. */
export function traceTurns(task: Task | undefined, turns: RolloutEntry[][]): TraceEntry[][] {
    return turns.map((turn) =>
        turn.map((x, a) => ({
            text: x.text,
            correct: x.correct,
            ...(task?.roles ? { role: roleOf(task, a) } : {}),
            ...(x.toolResults
                ? {
                      tools: x.toolResults.map((c) => ({
                          name: c.name,
                          arguments: c.arguments,
                          ok: c.ok,
                          content: c.content,
                          ...(c.error ? { error: c.error } : {}),
                      })),
                  }
                : {}),
            ...(x.credit !== undefined ? { credit: x.credit } : {}),
            ...(x.temperature !== undefined ? { temperature: x.temperature } : {}),
            ...(x.model !== undefined ? { model: x.model } : {}),
        })),
    );
}

export interface PackedBatch {
    tokens: Int32Array;
    targets: Int32Array;
    /** 1 at the positions that predict an answer token (and its EOS), [B, T]. */
    mask: Float32Array;
    /** Per row, the position predicting its last answer token (where the outcome reward lands). */
    last: Int32Array;
    shape: [number, number];
    /** The sampler's log-probs at the masked positions [B, T] (0 elsewhere), when every row carried them
     * (RolloutEntry.logprobs, one per trained position). */
    rolloutLogp?: Float32Array;
}

/** Packs (prompt, answer) rows into [B, T] next-token batches; T is the longest row, at most `context`. */
export function packRows(
    rows: { prompt: number[]; completion: number[]; stopped: boolean; logprobs?: number[] }[],
    eos: number,
    context: number,
): PackedBatch {
    const seqs = rows.map((r) => {
        const s = [...r.prompt, ...r.completion, ...(r.stopped ? [eos] : [])];
        return s.length > context ? s.slice(0, context) : s;
    });
    const B = rows.length,
        T = Math.max(2, ...seqs.map((s) => s.length));
    const tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T),
        mask = new Float32Array(B * T),
        last = new Int32Array(B);
    seqs.forEach((s, b) => {
        const p = rows[b]!.prompt.length;
        for (let t = 0; t < s.length; t++) tokens[b * T + t] = s[t]!;
        for (let t = 0; t + 1 < s.length; t++) targets[b * T + t] = s[t + 1]!;
        for (let t = p - 1; t + 1 < s.length; t++) mask[b * T + t] = 1;
        last[b] = Math.max(p - 1, s.length - 2);
    });
    const aligned = rows.every((r) => r.logprobs && r.logprobs.length === r.completion.length + (r.stopped ? 1 : 0));
    if (!aligned || B === 0) return { tokens, targets, mask, last, shape: [B, T] };
    const rolloutLogp = new Float32Array(B * T);
    seqs.forEach((s, b) => {
        const p = rows[b]!.prompt.length,
            lp = rows[b]!.logprobs!;
        for (let t = p - 1; t + 1 < s.length; t++) rolloutLogp[b * T + t] = lp[t - p + 1]!;
    });
    return { tokens, targets, mask, last, shape: [B, T], rolloutLogp };
}
