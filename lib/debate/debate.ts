// debate.ts: MAPoRL's multi-agent discussion protocol over any Policy (docs/algorithms.md A.2).
//   - A agents, each with its own Policy (heterogeneous teams work), T turns;
//   - turn 0: every agent sees the question alone;
//   - turn t >= 1: agent i's context is its own full history (its answers as assistant messages) plus one user
//     message per turn with the previous-turn answers of the agents it is connected to (simultaneous moves:
//     nobody sees a same-turn answer), and, with `feedback`, the verifier's score of its own and their answers;
//   - topology 'full' (everyone sees everyone), 'ring' (each agent sees its predecessor), 'star' (agent 0 sees
//     all, the others see agent 0) or an adjacency matrix (adj[i][j]: i sees j);
//   - optional early stop by consensus (a share of agents agree, and, with a verifier, the majority's mean score
//     passes a threshold; MAPoRL's check_agent_consensus).
// The result is a Transcript (transcript.ts); every agent turn is also a span for the tracer (trace.ts).
import { answerKey } from "./metrics.js";
import { defaultPrompts, type DebatePrompts, type DebateTask, type PeerAnswer } from "./prompts.js";
import type { Tracer } from "./trace.js";
import type { Transcript, TurnEntry } from "./transcript.js";
import {
    type EpisodeErrorPolicy,
    episodeErrorPolicy,
    episodeRetries,
    generateSettled,
    policyMessage,
} from "../policy/settle.js";
import {
    type ChatMessage,
    type Generation,
    type Policy,
    type SamplingOptions,
    samplingOptions,
} from "../policy/types.js";
import { describe } from "../validate.js";
import { extractFinalNumber, extractLabel } from "../rewards/extract.js";
import type { Verifier } from "../rewards/verifiers.js";
import { pushTo } from "../collections.js";

export type Topology = "full" | "ring" | "star" | boolean[][];

export interface DebateOptions {
    agents: Policy[];
    turns: number;
    /** Picks the default prompts and answer extraction. Defaults to 'math'. */
    task?: DebateTask;
    topology?: Topology;
    /** Scores every answer (the score lands on the transcript). */
    verifier?: Verifier;
    /** Show the verifier's scores to the agents at the next turn (needs `verifier`). Defaults to false. */
    feedback?: boolean;
    prompts?: Partial<DebatePrompts>;
    /** What an agent's request holds at turn t >= 1: 'full' (default, MAPoRL's) its whole history, its own answers as
     * assistant messages, then the new user message; 'last' the new user message alone (the trainers' protocol,
     * whose one message per turn quotes every previous answer: see compactDebate). */
    history?: "full" | "last";
    sampling?: SamplingOptions;
    /** Base seed; agent a at turn t gets seed + 1000 * t + a. */
    seed?: number;
    /** Stop before turn T when at least `share` of the agents give the same answer (and, with a verifier, the
     * majority's mean score is >= minScore). Off by default, as in MAPoRL's configs. */
    consensus?: { share: number; minScore?: number } | null;
    /** Answer extraction; defaults by task (the final number, or the NLI label). */
    extract?: (text: string) => string | null;
    tracer?: Tracer;
    runId?: string;
    /** When an agent's request fails (after its policy's own retries): 'skip' (default) ends that episode, which
     * comes back with `error` and the turns it completed while the others go on; 'retry' runs a failed episode
     * again from its start, up to `retries` times, then skips it; 'fail-fast' rejects runBatch with a
     * DebateError holding every episode's transcript so far. The answers given before a failure are in the trace. */
    onError?: EpisodeErrorPolicy;
    /** Episode retries under onError 'retry'. Defaults to 2. */
    retries?: number;
}

/** runBatch under onError 'fail-fast', and run() whenever its episode failed: the first failure, with every
 * episode's transcript so far (completed turns only). */
export class DebateError extends Error {
    readonly transcripts: Transcript[];

    constructor(message: string, transcripts: Transcript[]) {
        super(message);
        this.name = "DebateError";
        this.transcripts = transcripts;
    }
}

export interface DebateItem {
    id?: string;
    question: string;
    reference: string | number;
}

/** The adjacency matrix of a topology for A agents (adj[i][j]: i sees j; never itself). */
export function topologyMatrix(topology: Topology, A: number): boolean[][] {
    const m = Array.from({ length: A }, () => new Array<boolean>(A).fill(false));
    if (topology === "full") for (let i = 0; i < A; i++) for (let j = 0; j < A; j++) m[i]![j] = i !== j;
    else if (topology === "ring")
        for (let i = 0; i < A; i++) {
            if (A > 1) m[i]![(i + A - 1) % A] = true;
        }
    else if (topology === "star")
        for (let i = 1; i < A; i++) {
            m[0]![i] = true;
            m[i]![0] = true;
        }
    else if (Array.isArray(topology)) {
        if (
            topology.length !== A ||
            topology.some((r) => !Array.isArray(r) || r.length !== A || r.some((x) => typeof x !== "boolean"))
        )
            throw new TypeError(`Debate: topology: expected an ${A} x ${A} boolean matrix (one row per agent)`);
        for (let i = 0; i < A; i++) for (let j = 0; j < A; j++) m[i]![j] = i !== j && topology[i]![j]!;
    } else
        throw new RangeError(
            `Debate: topology: expected 'full', 'ring', 'star' or an adjacency matrix, got ${JSON.stringify(topology)}`,
        );
    return m;
}

const NLI_LABELS = ["entailment", "neutral", "contradiction"];

export class Debate {
    private readonly o: DebateOptions & {
        task: DebateTask;
        prompts: DebatePrompts;
        extract: (t: string) => string | null;
        onError: EpisodeErrorPolicy;
        retries: number;
    };
    readonly adjacency: boolean[][];

    constructor(options: DebateOptions) {
        if (options === null || typeof options !== "object") throw new TypeError("Debate: options: expected an object");
        const { agents, turns } = options;
        if (!Array.isArray(agents) || agents.length === 0 || agents.some((a) => !a || typeof a.generate !== "function"))
            throw new TypeError("Debate: agents: expected a non-empty array of Policy objects (with generate())");
        if (!Number.isInteger(turns) || turns < 1)
            throw new RangeError(`Debate: turns: expected an integer >= 1, got ${String(turns)}`);
        const task = options.task ?? "math";
        if (task !== "math" && task !== "nli")
            throw new RangeError(`Debate: task: expected 'math' or 'nli', got ${JSON.stringify(task)}`);
        if (options.feedback && !options.verifier) throw new TypeError("Debate: feedback: needs a verifier");
        const c = options.consensus;
        if (c != null && !(typeof c.share === "number" && c.share > 0 && c.share <= 1))
            throw new RangeError(`Debate: consensus.share: expected a number in (0, 1], got ${String(c.share)}`);
        if (c != null && c.minScore !== undefined && (typeof c.minScore !== "number" || Number.isNaN(c.minScore)))
            throw new TypeError(`Debate: consensus.minScore: expected a number, got ${describe(c.minScore)}`);
        if (options.seed !== undefined && !Number.isSafeInteger(options.seed))
            throw new TypeError(`Debate: seed: expected an integer, got ${describe(options.seed)}`);
        if (options.extract !== undefined && typeof options.extract !== "function")
            throw new TypeError(
                `Debate: extract: expected a function (text) => answer | null, got ${describe(options.extract)}`,
            );
        if (options.history !== undefined && options.history !== "full" && options.history !== "last")
            throw new RangeError(`Debate: history: expected 'full' or 'last', got ${describe(options.history)}`);
        if (options.runId !== undefined && typeof options.runId !== "string")
            throw new TypeError(`Debate: runId: expected a string, got ${describe(options.runId)}`);
        if (options.sampling !== undefined) samplingOptions("Debate", "sampling", options.sampling); // checked before any request
        this.adjacency = topologyMatrix(options.topology ?? "full", agents.length);
        const extract =
            options.extract ??
            (task === "nli"
                ? (t: string) => extractLabel(t, NLI_LABELS)
                : (t: string) => extractFinalNumber(t)?.text ?? null);
        const onError = episodeErrorPolicy("Debate", options.onError),
            retries = episodeRetries("Debate", options.retries);
        this.o = {
            ...options,
            task,
            extract,
            prompts: { ...defaultPrompts, ...(options.prompts ?? {}) },
            onError,
            retries,
        };
    }

    /** Runs one episode. Rejects promptly on abort (with signal.reason), and with a DebateError when the episode
     * failed (after the retries of onError 'retry'). */
    async run(item: DebateItem, options: { signal?: AbortSignal } = {}): Promise<Transcript> {
        const t = (await this.runAll([item], options.signal))[0]!;
        if (t.error)
            throw new DebateError(
                `Debate: episode ${t.id}: turn ${t.error.turn}, agent ${t.error.agent}: ${t.error.message}`,
                [t],
            );
        return t;
    }

    /**
     * Runs several episodes together: at each turn, every live episode's requests to one Policy go in ONE generate
     * call (a batching backend such as NativePolicy decodes them as one batch; an HTTP policy sends them under its
     * concurrency limit). Episodes that reach consensus drop out. Each transcript equals what run(item) gives (the
     * seeds depend on the turn and agent only). A failed request ends its own episode only (see `onError`): that
     * transcript carries `error` and its completed turns. When every episode failed, rejects with a DebateError naming
     * the first failure (holding every transcript).
     */
    async runBatch(items: DebateItem[], options: { signal?: AbortSignal } = {}): Promise<Transcript[]> {
        return everyFailed(await this.runAll(items, options.signal));
    }

    private async runAll(items: DebateItem[], signal: AbortSignal | undefined): Promise<Transcript[]> {
        const out = await this.attempt(items, signal, this.o.onError === "fail-fast");
        if (this.o.onError !== "retry") return out;
        for (let attempt = 2; attempt <= this.o.retries + 1; attempt++) {
            const failed = out.flatMap((t, i) => (t.error ? [i] : []));
            if (failed.length === 0) break;
            // Again from the start (same ids, same seeds), alone.
            const again = await this.attempt(
                failed.map((i) => ({ ...items[i]!, id: out[i]!.id })),
                signal,
                false,
            );
            failed.forEach((i, k) => {
                out[i] = again[k]!;
                if (out[i].error) out[i].error.attempts = attempt;
            });
        }
        return out;
    }

    private async attempt(
        items: DebateItem[],
        signal: AbortSignal | undefined,
        failFast: boolean,
    ): Promise<Transcript[]> {
        if (!Array.isArray(items)) throw new TypeError("Debate.runBatch: items: expected an array");
        items.forEach((item, i) => {
            const where = items.length === 1 ? "Debate.run: item" : `Debate.runBatch: items[${i}]`;
            if (!item || typeof item.question !== "string") throw new TypeError(`${where}.question: expected a string`);
            if (typeof item.reference !== "string" && typeof item.reference !== "number")
                throw new TypeError(`${where}.reference: expected a string or number`);
            if (item.id !== undefined && typeof item.id !== "string")
                throw new TypeError(`${where}.id: expected a string, got ${describe(item.id)}`);
        });
        const { agents, turns } = this.o,
            A = agents.length;
        const stamp = Date.now().toString(36); // default ids: unique within the batch
        const eps = items.map((item, i) => ({
            item,
            id: item.id ?? (items.length > 1 ? `q${stamp}-${i}` : `q${stamp}`),
            out: [] as TurnEntry[][],
            stopped: false,
            error: undefined as Transcript["error"],
            histories: Array.from({ length: A }, () => [] as ChatMessage[]),
        }));
        const transcripts = () =>
            eps.map((e): Transcript => ({
                version: 1,
                id: e.id,
                question: e.item.question,
                reference: e.item.reference,
                agents: A,
                adjacency: this.adjacency,
                turns: e.out,
                stoppedEarly: e.stopped && !e.error,
                ...(e.error ? { error: e.error } : {}),
            }));
        for (let t = 0; t < turns; t++) {
            signal?.throwIfAborted();
            const live = eps.filter((e) => !e.stopped);
            if (live.length === 0) break;
            const prompts = live.map((e) =>
                agents.map((_, a) => {
                    const content =
                        t === 0
                            ? this.o.prompts.question({ task: this.o.task, question: e.item.question })
                            : this.o.prompts.followUp(this.followUpContext(e.item.question, t, a, e.out[t - 1]!));
                    return [...(this.o.history === "last" ? [] : e.histories[a]!), { role: "user" as const, content }];
                }),
            );
            const entries = await this.turnBatch(live, prompts, t, signal);
            live.forEach((e, k) => {
                const failure = entries[k]!.findIndex((x) => x instanceof Error);
                if (failure >= 0) {
                    // the episode ends here; its answers of this turn are in the trace
                    e.error = {
                        turn: t,
                        agent: failure,
                        message: (entries[k]![failure] as Error).message,
                        attempts: 1,
                    };
                    e.stopped = true;
                    return;
                }
                const row = entries[k] as TurnEntry[];
                e.out.push(row);
                row.forEach((x, a) =>
                    e.histories[a]!.push(x.prompt[x.prompt.length - 1]!, { role: "assistant", content: x.text }),
                );
                if (t + 1 < turns && this.consensusReached(row)) e.stopped = true;
            });
            const first = failFast ? eps.find((e) => e.error) : undefined;
            if (first)
                throw new DebateError(
                    `Debate: episode ${first.id}: turn ${first.error!.turn}, agent ${first.error!.agent}: ${first.error!.message}`,
                    transcripts(),
                );
        }
        return transcripts();
    }

    // One turn of the live episodes: one generate call per distinct policy, then verification of every answer. A
    // failed request's slot holds its Error.
    private async turnBatch(
        live: { item: DebateItem; id: string }[],
        prompts: ChatMessage[][][],
        t: number,
        signal?: AbortSignal,
    ): Promise<(TurnEntry | Error)[][]> {
        const { agents } = this.o;
        const byPolicy = new Map<Policy, { k: number; a: number }[]>();
        live.forEach((_, k) =>
            agents.forEach((p, a) => {
                pushTo(byPolicy, p, { k, a });
            }),
        );
        const entries: (TurnEntry | Error)[][] = live.map(() => new Array<TurnEntry | Error>(agents.length));
        await Promise.all(
            [...byPolicy].map(async ([policy, slots]) => {
                const start = Date.now(),
                    t0 = performance.now();
                // routingKey: a fleet sends an agent's turns of one episode to one server, whose prefix cache holds its history.
                const gens = await generateSettled(
                    policy,
                    slots.map(({ k, a }) => ({
                        messages: prompts[k]![a]!,
                        sampling: this.o.sampling,
                        routingKey: `${live[k]!.id}/${a}`,
                        ...(this.o.seed !== undefined ? { seed: this.o.seed + 1000 * t + a } : {}),
                    })),
                    { signal },
                );
                await Promise.all(
                    slots.map(async ({ k, a }, j) => {
                        const g = gens[j]!;
                        if (!g.ok) {
                            const error = new Error(policyMessage(policy, g.error));
                            this.span(live[k]!.id, t, a, start, t0, { finishReason: "error", error: error.message });
                            entries[k]![a] = error;
                            return;
                        }
                        entries[k]![a] = await this.entry(
                            live[k]!.item,
                            live[k]!.id,
                            t,
                            a,
                            prompts[k]![a]!,
                            g.generation,
                            start,
                            t0,
                            signal,
                        );
                    }),
                );
            }),
        );
        return entries;
    }

    private span(
        id: string,
        t: number,
        a: number,
        start: number,
        t0: number,
        extra: {
            completionTokens?: number;
            promptTokens?: number;
            finishReason: string;
            error?: string;
            entry?: TurnEntry;
        },
    ): void {
        const e = extra.entry;
        this.o.tracer?.span({
            name: "debate.turn",
            runId: this.o.runId ?? "run",
            episode: id,
            agent: a,
            turn: t,
            parent: 0,
            startMs: start,
            latencyMs: performance.now() - t0,
            promptTokens: extra.promptTokens ?? 0,
            completionTokens: extra.completionTokens ?? 0,
            finishReason: extra.finishReason,
            ...(extra.error ? { error: extra.error } : {}),
            ...(e
                ? { text: e.text, extracted: e.extracted, ...(e.score !== undefined ? { score: e.score } : {}) }
                : {}),
            ...(e?.endpoint !== undefined ? { endpoint: e.endpoint } : {}),
            ...(e?.model !== undefined ? { model: e.model } : {}),
            ...(e?.attempts !== undefined ? { attempts: e.attempts } : {}),
        });
    }

    private async entry(
        item: DebateItem,
        id: string,
        t: number,
        a: number,
        prompt: ChatMessage[],
        g: Generation,
        start: number,
        t0: number,
        signal?: AbortSignal,
    ): Promise<TurnEntry> {
        const entry: TurnEntry = {
            turn: t,
            agent: a,
            prompt,
            text: g.text,
            ...(g.tokens ? { tokens: g.tokens } : {}),
            ...(g.logprobs ? { logprobs: g.logprobs } : {}),
            ...(g.tokenIds ? { tokenIds: g.tokenIds } : {}),
            ...(g.promptTokenIds ? { promptTokenIds: g.promptTokenIds } : {}),
            ...(g.tokenIdsExact !== undefined ? { tokenIdsExact: g.tokenIdsExact } : {}),
            ...(g.model !== undefined ? { model: g.model } : {}),
            ...(g.endpoint !== undefined ? { endpoint: g.endpoint } : {}),
            ...(g.attempts !== undefined ? { attempts: g.attempts } : {}),
            extracted: this.o.extract(g.text),
            finishReason: g.finishReason,
            usage: g.usage,
            latencyMs: g.latencyMs,
        };
        if (this.o.verifier) {
            try {
                entry.score = (
                    await this.o.verifier.score(
                        { question: item.question, response: g.text, reference: item.reference },
                        { signal },
                    )
                ).score;
            } catch (e) {
                if (signal?.aborted) throw signal.reason;
                entry.verifierError = e instanceof Error ? e.message : String(e);
            }
        }
        this.span(id, t, a, start, t0, {
            promptTokens: g.usage.promptTokens,
            completionTokens: g.usage.completionTokens,
            finishReason: g.finishReason,
            entry,
        });
        return entry;
    }

    private followUpContext(question: string, t: number, a: number, prev: TurnEntry[]) {
        const fb = this.o.feedback === true;
        const peers: PeerAnswer[] = [];
        prev.forEach((p, j) => {
            if (this.adjacency[a]![j])
                peers.push({ agent: j, text: p.text, ...(fb && p.score !== undefined ? { score: p.score } : {}) });
        });
        const own = prev[a]!;
        return {
            task: this.o.task,
            question,
            turn: t,
            agent: a,
            peers,
            ownAnswer: own.text,
            ...(fb && own.score !== undefined ? { ownScore: own.score } : {}),
        };
    }

    private consensusReached(entries: TurnEntry[]): boolean {
        const c = this.o.consensus;
        if (!c) return false;
        const groups = new Map<string, TurnEntry[]>();
        for (const e of entries) {
            const k = answerKey(e.extracted);
            if (k !== null) pushTo(groups, k, e);
        }
        const top = [...groups.values()].sort((x, y) => y.length - x.length)[0];
        if (!top || top.length / entries.length < c.share) return false;
        if (c.minScore === undefined || !this.o.verifier) return true;
        const scores = top.map((e) => e.score).filter((s): s is number => s !== undefined);
        return scores.length > 0 && scores.reduce((s, x) => s + x, 0) / scores.length >= c.minScore;
    }
}

/** `out`, unless every episode failed: then a DebateError with the first failure (and every transcript), so that a
 * batch that produced nothing (a prompt over the context, a server down) is never read as a batch of empty debates. */
function everyFailed(out: Transcript[]): Transcript[] {
    const first = out[0];
    if (first === undefined || out.some((t) => !t.error)) return out;
    throw new DebateError(
        `Debate: every episode failed (${out.length} of ${out.length}); the first, ${first.id}: turn ${first.error!.turn}, agent ` +
            `${first.error!.agent}: ${first.error!.message}`,
        out,
    );
}
