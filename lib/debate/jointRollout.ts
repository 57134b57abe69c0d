// jointRollout.ts: MAGRPO's group sampling over a multi-turn tree (docs/algorithms.md B.2), over any Policy.
//   - At each state every agent samples G completions from its own prompt.
//   - Joint actions: 'aligned' pairs the g-th completion of every agent (G per state); 'cross' takes the
//     Cartesian product (G^N). The joint reward function is called once per joint action.
//   - Multi-turn: every joint action branches; `transition` gives each agent's next prompt; a state whose mean
//     immediate reward is above `terminationThreshold` is not expanded (its joint actions are leaves).
//   - The tree has G^T leaves (aligned) or G^(N·T) (cross) without early termination.
// The tree grows breadth first: all states of a depth (of every item, with runBatch) are sampled by ONE generate
// call per distinct Policy, so a batching backend (NativePolicy, a vLLM-style server) sees G x states requests at
// once instead of G. The output lists the joint actions depth by depth with their parent joint action, ready for
// treeReturns (parent, rewards), plus every agent's generation (text, tokens, log-probs) for the per-agent losses.
// Seeds depend on the state's path from the root (not on the traversal), so run(item) and runBatch([.., item, ..])
// draw the same samples.
import {
    type ChatMessage,
    type Generation,
    type Policy,
    type SamplingOptions,
    samplingOptions,
} from "../policy/types.js";
import { describe } from "../validate.js";
import { pushTo } from "../collections.js";
import {
    type EpisodeErrorPolicy,
    episodeErrorPolicy,
    episodeRetries,
    generateSettled,
    policyMessage,
} from "../policy/settle.js";

export interface TransitionInput<Item> {
    item: Item;
    /** The depth of the joint action just taken (0 for the first turn). */
    turn: number;
    /** Each agent's prompt at this state. */
    prompts: (string | ChatMessage[])[];
    /** Each agent's completion in this joint action. */
    completions: string[];
    /** Each agent's earlier prompts and responses along this branch (oldest first, this turn excluded). */
    history: { prompts: (string | ChatMessage[])[][]; responses: string[][] };
}

export interface JointRolloutOptions<Item> {
    agents: Policy[];
    /** Who answers at the first state instead of `agents` (one per agent), e.g. MAPoRL's frozen turn-0 model when only
     * the discussion turns are trained. Defaults to `agents`. */
    firstTurnAgents?: Policy[];
    /** Completions per agent per state (CoMLRL's num_generations), >= 1. */
    generations: number;
    /** Turns (tree depth), >= 1. */
    turns: number;
    /** Defaults to 'aligned'. */
    joint?: "aligned" | "cross";
    /** Each agent's first prompt. */
    prompt: (item: Item, agent: number) => string | ChatMessage[];
    /** Each agent's next prompt after a joint action; required when turns > 1. */
    transition?: (input: TransitionInput<Item>) => (string | ChatMessage[])[] | Promise<(string | ChatMessage[])[]>;
    /** The joint reward of one joint action (`turn`: its depth, 0 for the first). */
    reward: (completions: string[], item: Item, turn: number) => number | Promise<number>;
    /** A state whose mean immediate reward is above this is not expanded. Defaults to none. */
    terminationThreshold?: number;
    sampling?: SamplingOptions;
    /** Per-agent sampling, merged over `sampling` for agent a (absent entries: `sampling` alone). */
    agentSampling?: (SamplingOptions | undefined)[];
    /** Base seed (or one per item): completion g of agent a at a state gets a distinct seed derived from it and from
     * the state's path from the root. A function lets the items of a batch sample independently. */
    seed?: number | ((item: Item) => number);
    /** When a request fails (after its policy's own retries): 'skip' (default) ends that item's tree, which comes
     * back with `error` and the joint actions made before it while the other items grow on; 'retry' grows a failed
     * item's tree again from the root, up to `retries` times, then skips it; 'fail-fast' rejects with a
     * JointRolloutError holding every tree so far. */
    onError?: EpisodeErrorPolicy;
    /** Item retries under onError 'retry'. Defaults to 2. */
    retries?: number;
}

/** runBatch under onError 'fail-fast', and run() whenever its item failed: the first failure, with every tree so far. */
export class JointRolloutError extends Error {
    readonly trees: JointTree[];

    constructor(message: string, trees: JointTree[]) {
        super(message);
        this.name = "JointRolloutError";
        this.trees = trees;
    }
}

export interface JointAction {
    /** Index of the parent joint action in `actions`, or -1 at the first state. */
    parent: number;
    depth: number;
    /** Which of the G completions each agent contributed. */
    sample: number[];
    /** Each agent's generation. */
    generations: Generation[];
    /** Each agent's prompt at the state. */
    prompts: (string | ChatMessage[])[];
    reward: number;
}

export interface JointTree {
    actions: JointAction[];
    /** For treeReturns: parent joint action per node, and immediate joint reward. */
    parent: Int32Array;
    rewards: Float32Array;
    /** Joint actions without children. */
    leaves: number;
    /** States not expanded because of the termination threshold. */
    terminated: number;
    /** Set when the item failed: the depth and agent of the failed request, its error, and the attempts made. */
    error?: { depth: number; agent: number; message: string; attempts: number };
}

export class JointRollout<Item> {
    private readonly o: JointRolloutOptions<Item> & {
        joint: "aligned" | "cross";
        onError: EpisodeErrorPolicy;
        retries: number;
    };

    constructor(options: JointRolloutOptions<Item>) {
        if (options === null || typeof options !== "object")
            throw new TypeError("JointRollout: options: expected an object");
        const { agents, generations, turns } = options;
        if (!Array.isArray(agents) || agents.length === 0 || agents.some((a) => !a || typeof a.generate !== "function"))
            throw new TypeError("JointRollout: agents: expected a non-empty array of Policy objects");
        if (!Number.isInteger(generations) || generations < 1)
            throw new RangeError(`JointRollout: generations: expected an integer >= 1, got ${String(generations)}`);
        if (!Number.isInteger(turns) || turns < 1)
            throw new RangeError(`JointRollout: turns: expected an integer >= 1, got ${String(turns)}`);
        const joint = options.joint ?? "aligned";
        if (joint !== "aligned" && joint !== "cross")
            throw new RangeError(`JointRollout: joint: expected 'aligned' or 'cross', got ${JSON.stringify(joint)}`);
        if (
            options.firstTurnAgents !== undefined &&
            (!Array.isArray(options.firstTurnAgents) ||
                options.firstTurnAgents.length !== agents.length ||
                options.firstTurnAgents.some((a) => !a || typeof a.generate !== "function"))
        )
            throw new TypeError(
                `JointRollout: firstTurnAgents: expected ${agents.length} Policy objects (one per agent)`,
            );
        if (typeof options.prompt !== "function")
            throw new TypeError("JointRollout: prompt: expected a function (item, agent) => prompt");
        if (typeof options.reward !== "function")
            throw new TypeError("JointRollout: reward: expected a function (completions, item) => number");
        if (turns > 1 && typeof options.transition !== "function")
            throw new TypeError("JointRollout: transition: required when turns > 1");
        if (options.seed !== undefined && typeof options.seed !== "function" && !Number.isSafeInteger(options.seed))
            throw new TypeError(
                `JointRollout: seed: expected an integer or a function (item) => integer, got ${String(options.seed)}`,
            );
        const th = options.terminationThreshold;
        if (th !== undefined && (typeof th !== "number" || Number.isNaN(th)))
            throw new TypeError(`JointRollout: terminationThreshold: expected a number, got ${describe(th)}`);
        if (options.sampling !== undefined) samplingOptions("JointRollout", "sampling", options.sampling); // checked before any request
        if (options.agentSampling !== undefined) {
            if (!Array.isArray(options.agentSampling))
                throw new TypeError("JointRollout: agentSampling: expected an array (one entry per agent)");
            options.agentSampling.forEach((x, a) => {
                if (x !== undefined) samplingOptions("JointRollout", `agentSampling[${a}]`, x);
            });
        }
        // The tree is materialised: bound it (a typo such as generations: 2 ** 31 must not exhaust the heap).
        const perState = joint === "aligned" ? generations : generations ** agents.length;
        let actions = 0,
            level = 1;
        for (let d = 0; d < turns && actions <= MAX_TREE_ACTIONS; d++) {
            level *= perState;
            actions += level;
        }
        if (actions > MAX_TREE_ACTIONS)
            throw new RangeError(
                `JointRollout: the tree of generations ${generations}, ${agents.length} agents, joint '${joint}' and turns ${turns} ` +
                    `has ${actions > 1e15 ? "over 10^15" : actions} joint actions per item; at most ${MAX_TREE_ACTIONS} are supported`,
            );
        this.o = {
            ...options,
            joint,
            onError: episodeErrorPolicy("JointRollout", options.onError),
            retries: episodeRetries("JointRollout", options.retries),
        };
    }

    /** The tree of one item; rejects with a JointRolloutError when the item failed (after onError 'retry''s retries). */
    async run(item: Item, options: { signal?: AbortSignal } = {}): Promise<JointTree> {
        const tree = (await this.runBatch([item], options))[0]!;
        if (tree.error)
            throw new JointRolloutError(
                `JointRollout: depth ${tree.error.depth}, agent ${tree.error.agent}: ${tree.error.message}`,
                [tree],
            );
        return tree;
    }

    /** The trees of several items, grown together (one generate call per distinct Policy per depth). A failed request
     * ends its own item's tree only (see `onError`). */
    async runBatch(items: Item[], options: { signal?: AbortSignal } = {}): Promise<JointTree[]> {
        if (!Array.isArray(items)) throw new TypeError("JointRollout.runBatch: items: expected an array");
        const out = await this.grow(items, options.signal, this.o.onError === "fail-fast");
        if (this.o.onError !== "retry") return out;
        for (let attempt = 2; attempt <= this.o.retries + 1; attempt++) {
            const failed = out.flatMap((t, i) => (t.error ? [i] : []));
            if (failed.length === 0) break;
            const again = await this.grow(
                failed.map((i) => items[i]!),
                options.signal,
                false,
            );
            failed.forEach((i, k) => {
                out[i] = again[k]!;
                if (out[i].error) out[i].error.attempts = attempt;
            });
        }
        return out;
    }

    private async grow(items: Item[], signal: AbortSignal | undefined, failFast: boolean): Promise<JointTree[]> {
        const options = { signal };
        const { agents } = this.o,
            N = agents.length,
            G = this.o.generations;
        type History = { prompts: (string | ChatMessage[])[][]; responses: string[][] };
        type State = {
            i: number;
            parent: number;
            depth: number;
            key: number;
            prompts: (string | ChatMessage[])[];
            history: History;
        };
        const trees = items.map(() => ({
            actions: [] as JointAction[],
            terminated: 0,
            error: undefined as JointTree["error"],
        }));
        const combos =
            this.o.joint === "aligned"
                ? Array.from({ length: G }, (_, g) => new Array<number>(N).fill(g))
                : cartesian(N, G);
        let frontier: State[] = items.map((item, i) => ({
            i,
            parent: -1,
            depth: 0,
            key: 0,
            prompts: agents.map((_, a) => this.o.prompt(item, a)),
            history: { prompts: agents.map(() => []), responses: agents.map(() => []) },
        }));
        while (frontier.length > 0) {
            options.signal?.throwIfAborted();
            // One call per distinct policy: every (state, agent of that policy, g), in state order.
            const gens: Generation[][][] = frontier.map(() => agents.map(() => [])); // [state][agent][g]
            const byPolicy = new Map<Policy, { s: number; a: number }[]>();
            frontier.forEach((state, st) =>
                (state.depth === 0 && this.o.firstTurnAgents ? this.o.firstTurnAgents : agents).forEach((p, a) =>
                    pushTo(byPolicy, p, { s: st, a }),
                ),
            );
            const seeds =
                this.o.seed === undefined
                    ? null
                    : frontier.map((st) => {
                          const base = typeof this.o.seed === "function" ? this.o.seed(items[st.i]!) : this.o.seed!;
                          if (!Number.isSafeInteger(base))
                              throw new TypeError(`JointRollout: seed(item): expected an integer, got ${String(base)}`);
                          return base + 7919 * st.key;
                      });
            await Promise.all(
                [...byPolicy].map(async ([policy, slots]) => {
                    const reqs = slots.flatMap(({ s, a }) =>
                        Array.from({ length: G }, (_, g) => {
                            const pr = frontier[s]!.prompts[a]!;
                            return {
                                ...(typeof pr === "string" ? { prompt: pr } : { messages: pr }),
                                sampling: this.o.agentSampling?.[a]
                                    ? { ...this.o.sampling, ...this.o.agentSampling[a] }
                                    : this.o.sampling,
                                ...(seeds ? { seed: seeds[s]! + 131 * a + g } : {}),
                            };
                        }),
                    );
                    const out = await generateSettled(policy, reqs, { signal: options.signal });
                    slots.forEach(({ s, a }, k) => {
                        const mine = out.slice(k * G, (k + 1) * G),
                            bad = mine.find((x) => !x.ok);
                        const tree = trees[frontier[s]!.i]!;
                        if (bad && !bad.ok && !tree.error)
                            tree.error = {
                                depth: frontier[s]!.depth,
                                agent: a,
                                message: policyMessage(policy, bad.error),
                                attempts: 1,
                            };
                        gens[s]![a] = mine.flatMap((x) => (x.ok ? [x.generation] : []));
                    });
                }),
            );
            const failed = trees.find((t) => t.error);
            if (failFast && failed)
                throw new JointRolloutError(
                    `JointRollout: depth ${failed.error!.depth}, agent ${failed.error!.agent}: ${failed.error!.message}`,
                    finish(trees),
                );
            const next: State[] = [];
            for (let st = 0; st < frontier.length; st++) {
                const state = frontier[st]!,
                    tree = trees[state.i]!,
                    item = items[state.i]!;
                if (tree.error) continue; // the failed item's tree ends with the joint actions made before this depth
                const ids: number[] = [];
                for (const sample of combos) {
                    const generations = sample.map((g, a) => gens[st]![a]![g]!);
                    const reward = await this.o.reward(
                        generations.map((x) => x.text),
                        item,
                        state.depth,
                    );
                    if (typeof reward !== "number" || Number.isNaN(reward))
                        throw new TypeError(`JointRollout: reward: expected a number, got ${String(reward)}`);
                    ids.push(tree.actions.length);
                    tree.actions.push({
                        parent: state.parent,
                        depth: state.depth,
                        sample,
                        generations,
                        prompts: state.prompts,
                        reward,
                    });
                }
                if (state.depth + 1 >= this.o.turns) continue;
                const mean = ids.reduce((s, i) => s + tree.actions[i]!.reward, 0) / ids.length;
                if (this.o.terminationThreshold !== undefined && mean > this.o.terminationThreshold) {
                    tree.terminated++;
                    continue;
                }
                for (let c = 0; c < ids.length; c++) {
                    const act = tree.actions[ids[c]!]!;
                    const completions = act.generations.map((g) => g.text);
                    const prompts = await this.o.transition!({
                        item,
                        turn: state.depth,
                        prompts: state.prompts,
                        completions,
                        history: state.history,
                    });
                    if (!Array.isArray(prompts) || prompts.length !== N)
                        throw new TypeError(
                            `JointRollout: transition: expected one prompt per agent (${N}), got ${Array.isArray(prompts) ? prompts.length : typeof prompts}`,
                        );
                    next.push({
                        i: state.i,
                        parent: ids[c]!,
                        depth: state.depth + 1,
                        key: (state.key * 1000003 + c + 1) % 2147483647,
                        prompts,
                        history: {
                            prompts: state.history.prompts.map((h, a) => [...h, state.prompts[a]!]),
                            responses: state.history.responses.map((h, a) => [...h, completions[a]!]),
                        },
                    });
                }
            }
            frontier = next;
        }
        return finish(trees);
    }
}

function finish(trees: { actions: JointAction[]; terminated: number; error: JointTree["error"] }[]): JointTree[] {
    return trees.map(({ actions, terminated, error }) => {
        const hasChild = new Uint8Array(actions.length);
        for (const a of actions) if (a.parent >= 0) hasChild[a.parent] = 1;
        return {
            actions,
            parent: Int32Array.from(actions, (a) => a.parent),
            rewards: Float32Array.from(actions, (a) => a.reward),
            leaves: hasChild.reduce((s, h) => s + (h ? 0 : 1), 0),
            terminated,
            ...(error ? { error } : {}),
        };
    });
}

const MAX_TREE_ACTIONS = 1 << 20;

function cartesian(N: number, G: number): number[][] {
    const out: number[][] = [];
    const cur = new Array<number>(N).fill(0);
    for (;;) {
        out.push([...cur]);
        let a = N - 1;
        while (a >= 0 && ++cur[a]! === G) cur[a--] = 0;
        if (a < 0) return out;
    }
}
