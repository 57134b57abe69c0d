// jointRollout.ts: MAGRPO's group sampling over a multi-turn tree (reference/algorithms.md B.2), over any Policy.
//   - At each state every agent samples G completions from its own prompt.
//   - Joint actions: 'aligned' pairs the g-th completion of every agent (G per state); 'cross' takes the
//     Cartesian product (G^N). The joint reward function is called once per joint action.
//   - Multi-turn: every joint action branches; `transition` gives each agent's next prompt; a state whose mean
//     immediate reward is above `terminationThreshold` is not expanded (its joint actions are leaves).
//   - The tree has G^T leaves (aligned) or G^(N·T) (cross) without early termination.
// The output lists the joint actions in creation order with their parent joint action, ready for treeReturns
// (parent, rewards), plus every agent's generation (text, tokens, log-probs) for the per-agent losses.
import type { ChatMessage, Generation, Policy, SamplingOptions } from "../policy/types.js";

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
    /** The joint reward of one joint action. */
    reward: (completions: string[], item: Item) => number | Promise<number>;
    /** A state whose mean immediate reward is above this is not expanded. Defaults to none. */
    terminationThreshold?: number;
    sampling?: SamplingOptions;
    /** Base seed: completion g of agent a at a state gets a distinct seed derived from it. */
    seed?: number;
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
}

export class JointRollout<Item> {
    private readonly o: JointRolloutOptions<Item> & { joint: "aligned" | "cross" };

    constructor(options: JointRolloutOptions<Item>) {
        if (options === null || typeof options !== "object") throw new TypeError("JointRollout: options: expected an object");
        const { agents, generations, turns } = options;
        if (!Array.isArray(agents) || agents.length === 0 || agents.some((a) => !a || typeof a.generate !== "function"))
            throw new TypeError("JointRollout: agents: expected a non-empty array of Policy objects");
        if (!Number.isInteger(generations) || generations < 1) throw new RangeError(`JointRollout: generations: expected an integer >= 1, got ${String(generations)}`);
        if (!Number.isInteger(turns) || turns < 1) throw new RangeError(`JointRollout: turns: expected an integer >= 1, got ${String(turns)}`);
        const joint = options.joint ?? "aligned";
        if (joint !== "aligned" && joint !== "cross") throw new RangeError(`JointRollout: joint: expected 'aligned' or 'cross', got ${JSON.stringify(joint)}`);
        if (typeof options.prompt !== "function") throw new TypeError("JointRollout: prompt: expected a function (item, agent) => prompt");
        if (typeof options.reward !== "function") throw new TypeError("JointRollout: reward: expected a function (completions, item) => number");
        if (turns > 1 && typeof options.transition !== "function") throw new TypeError("JointRollout: transition: required when turns > 1");
        this.o = { ...options, joint };
    }

    async run(item: Item, options: { signal?: AbortSignal } = {}): Promise<JointTree> {
        const { agents } = this.o, N = agents.length;
        const actions: JointAction[] = [];
        let terminated = 0;
        const expand = async (prompts: (string | ChatMessage[])[], parent: number, depth: number,
            history: { prompts: (string | ChatMessage[])[][]; responses: string[][] }, state: number): Promise<void> => {
            options.signal?.throwIfAborted();
            const gens = await Promise.all(agents.map((policy, a) => policy.generate(
                Array.from({ length: this.o.generations }, (_, g) => ({
                    ...(typeof prompts[a] === "string" ? { prompt: prompts[a] as string } : { messages: prompts[a] as ChatMessage[] }),
                    sampling: this.o.sampling,
                    ...(this.o.seed !== undefined ? { seed: this.o.seed + 7919 * state + 131 * a + g } : {}),
                })), { signal: options.signal })));
            gens.forEach((list, a) => {
                if (!Array.isArray(list) || list.length !== this.o.generations)
                    throw new TypeError(`JointRollout: agent ${a}: generate() returned ${Array.isArray(list) ? list.length : "no"} generations, expected ${this.o.generations}`);
            });
            const combos = this.o.joint === "aligned"
                ? Array.from({ length: this.o.generations }, (_, g) => new Array<number>(N).fill(g))
                : cartesian(N, this.o.generations);
            const ids: number[] = [];
            for (const sample of combos) {
                const generations = sample.map((g, a) => gens[a]![g]!);
                const reward = await this.o.reward(generations.map((x) => x.text), item);
                if (typeof reward !== "number" || Number.isNaN(reward)) throw new TypeError(`JointRollout: reward: expected a number, got ${String(reward)}`);
                ids.push(actions.length);
                actions.push({ parent, depth, sample, generations, prompts, reward });
            }
            const mean = ids.reduce((s, i) => s + actions[i]!.reward, 0) / ids.length;
            if (depth + 1 >= this.o.turns) return;
            if (this.o.terminationThreshold !== undefined && mean > this.o.terminationThreshold) {
                terminated++;
                return;
            }
            for (const id of ids) {
                const act = actions[id]!;
                const completions = act.generations.map((g) => g.text);
                const next = await this.o.transition!({ item, turn: depth, prompts, completions, history });
                if (!Array.isArray(next) || next.length !== N) throw new TypeError(`JointRollout: transition: expected one prompt per agent (${N}), got ${Array.isArray(next) ? next.length : typeof next}`);
                await expand(next, id, depth + 1, {
                    prompts: history.prompts.map((h, a) => [...h, prompts[a]!]),
                    responses: history.responses.map((h, a) => [...h, completions[a]!]),
                }, actions.length);
            }
        };
        const first = agents.map((_, a) => this.o.prompt(item, a));
        await expand(first, -1, 0, { prompts: agents.map(() => []), responses: agents.map(() => []) }, 0);
        const hasChild = new Uint8Array(actions.length);
        for (const a of actions) if (a.parent >= 0) hasChild[a.parent] = 1;
        return {
            actions,
            parent: Int32Array.from(actions, (a) => a.parent),
            rewards: Float32Array.from(actions, (a) => a.reward),
            leaves: hasChild.reduce((s, h) => s + (h ? 0 : 1), 0),
            terminated,
        };
    }
}

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
