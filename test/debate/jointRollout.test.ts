// jointRollout.test.ts: MAGRPO's joint-action tree for A=2, G=2, T=2, aligned and cross: sizes (G^T and G^(A·T)
// leaves), joint-action composition, the transition's inputs, early termination pruning, and that the tree feeds
// treeReturns; breadth-first batching (one generate call per distinct policy per depth, over every item) and
// seeds that depend on the state, not on the batch.
import { describe, expect, it } from "vitest";

import { JointRollout, treeReturns, type GenerateRequest, type Generation, type Policy } from "../../lib/index.js";

// A deterministic in-process policy: completion g of a request is "<name>:<prompt>#<g>" (g from the seed).
function fakePolicy(name: string): Policy {
    return {
        name,
        async generate(reqs: GenerateRequest[]): Promise<Generation[]> {
            return reqs.map((r, i) => ({
                text: `${name}:${r.prompt ?? r.messages?.at(-1)?.content}#${i}`,
                finishReason: "stop",
                usage: { promptTokens: 1, completionTokens: 1 },
                latencyMs: 0,
            }));
        },
    };
}

const base = {
    agents: [fakePolicy("a"), fakePolicy("b")],
    generations: 2,
    turns: 2,
    prompt: (item: string, agent: number) => `${item}/${agent}`,
    transition: ({ completions, turn }: { completions: string[]; turn: number }) =>
        completions.map((c) => `t${turn + 1}(${c.split("#")[1]})`),
    reward: (completions: string[]) => completions.filter((c) => c.endsWith("#1")).length / completions.length,
};

// Records every generate call; a completion's text names the policy, the prompt and the request's seed.
function seededPolicy(name: string, calls: number[]): Policy {
    return {
        name,
        async generate(reqs: GenerateRequest[]): Promise<Generation[]> {
            calls.push(reqs.length);
            return reqs.map((r) => ({
                text: `${name}:${r.prompt}@${r.seed}`,
                finishReason: "stop",
                usage: { promptTokens: 1, completionTokens: 1 },
                latencyMs: 0,
            }));
        },
    };
}

describe("JointRollout", () => {
    it("aligned: G joint actions per state and G^T leaves", async () => {
        const tree = await new JointRollout<string>({ ...base, joint: "aligned", seed: 3 }).run("q");
        expect(tree.actions.length).toBe(2 + 4);
        expect(tree.leaves).toBe(4); // G^T
        expect(tree.actions[0].sample).toEqual([0, 0]);
        expect(tree.actions[0].generations.map((g) => g.text)).toEqual(["a:q/0#0", "b:q/1#0"]);
        // a state's joint actions first, then each one's subtree
        expect(Array.from(tree.parent)).toEqual([-1, -1, 0, 0, 1, 1]);
        expect(tree.actions[2].prompts).toEqual(["t1(0)", "t1(0)"]);
        expect(tree.actions[4].prompts).toEqual(["t1(1)", "t1(1)"]);
        const r = treeReturns({ parent: tree.parent, rewards: tree.rewards }, { gamma: 0.9 });
        expect(r.returns[0]).toBeCloseTo(0 + 0.9 * 0.5); // children rewards 0 and 1
    });

    it("cross: G^A joint actions per state and G^(A·T) leaves; early termination prunes", async () => {
        const tree = await new JointRollout<string>({ ...base, joint: "cross" }).run("q");
        expect(tree.actions.filter((a) => a.depth === 0).length).toBe(4);
        expect(tree.leaves).toBe(16); // G^(A·T)
        expect(tree.actions.slice(0, 4).map((a) => a.sample)).toEqual([
            [0, 0],
            [0, 1],
            [1, 0],
            [1, 1],
        ]);
        // mean immediate reward at the first state is 0.5 > 0.4: it is not expanded
        const pruned = await new JointRollout<string>({ ...base, joint: "cross", terminationThreshold: 0.4 }).run("q");
        expect(pruned.actions.length).toBe(4);
        expect(pruned.terminated).toBe(1);
        expect(pruned.leaves).toBe(4);
    });

    it("passes the branch history to the transition and validates", async () => {
        const seen: unknown[] = [];
        await new JointRollout<string>({
            ...base,
            turns: 3,
            generations: 1,
            transition: (x) => {
                seen.push(x.history);
                return x.completions.map(() => `n${x.turn}`);
            },
        }).run("q");
        expect(seen[1]).toEqual({ prompts: [["q/0"], ["q/1"]], responses: [["a:q/0#0"], ["b:q/1#0"]] });
        expect(() => new JointRollout<string>({ ...base, transition: undefined })).toThrow(
            /transition: required when turns > 1/,
        );
        expect(() => new JointRollout<string>({ ...base, joint: "zip" as "cross" })).toThrow(
            /joint: expected 'aligned' or 'cross'/,
        );
        await expect(new JointRollout<string>({ ...base, reward: () => NaN }).run("q")).rejects.toThrow(
            /reward: expected a number/,
        );
    });

    it("grows breadth first: one generate call per distinct policy per depth, over every item", async () => {
        const calls: number[] = [];
        const shared = seededPolicy("s", calls);
        const opts = {
            ...base,
            agents: [shared, shared, seededPolicy("c", calls)],
            generations: 2,
            turns: 3,
            seed: 11,
            transition: ({ completions, turn }: { completions: string[]; turn: number }) =>
                completions.map(() => `t${turn + 1}`),
            reward: (cs: string[]) => cs.length,
        };
        const trees = await new JointRollout<string>(opts).runBatch(["x", "y", "z"]);
        // depth d has 3 items x 2^d states; the shared policy answers 2 agents x G per state, the other G per state
        expect(calls.sort((a, b) => a - b)).toEqual([6, 12, 12, 24, 24, 48]);
        for (const t of trees) {
            expect(t.actions.length).toBe(2 + 4 + 8);
            expect(t.actions.map((a) => a.depth)).toEqual([0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]); // depth by depth
            t.parent.forEach((p, i) => expect(p).toBeLessThan(i));
        }
        // the same item alone draws the same samples (seeds follow the state's path, not the batch)
        const alone = await new JointRollout<string>(opts).run("y");
        expect(alone.actions.map((a) => a.generations.map((g) => g.text))).toEqual(
            trees[1].actions.map((a) => a.generations.map((g) => g.text)),
        );
        // distinct states draw distinct seeds
        const seeds = new Set(trees[1].actions.flatMap((a) => a.generations.map((g) => g.text.split("@").at(-1))));
        expect(seeds.size).toBe(2 * 3 * 7); // 7 states x 3 agents x G = 2 (one state's G samples are its aligned joint actions)
        await expect(new JointRollout<string>(opts).runBatch("x" as never)).rejects.toThrow(/items: expected an array/);
        // firstTurnAgents answer the first state only; a per-item seed function
        const first = [seededPolicy("f0", calls), seededPolicy("f1", calls), seededPolicy("f2", calls)];
        const t2 = await new JointRollout<string>({
            ...opts,
            turns: 2,
            firstTurnAgents: first,
            seed: (it: string) => it.charCodeAt(0),
        }).runBatch(["x", "y"]);
        expect(
            t2[0].actions.filter((a) => a.depth === 0).flatMap((a) => a.generations.map((g) => g.text.split(":")[0])),
        ).toEqual(["f0", "f1", "f2", "f0", "f1", "f2"]);
        expect(
            t2[0].actions.filter((a) => a.depth === 1).flatMap((a) => a.generations.map((g) => g.text.split(":")[0])),
        ).toEqual(Array(4).fill(["s", "s", "c"]).flat());
        expect(t2[0].actions[0].generations[0].text.endsWith(`@${"x".charCodeAt(0)}`)).toBe(true);
        expect(t2[1].actions[0].generations[0].text.endsWith(`@${"y".charCodeAt(0)}`)).toBe(true);
        expect(() => new JointRollout<string>({ ...opts, firstTurnAgents: [shared] })).toThrow(
            /firstTurnAgents: expected 3/,
        );
        expect(() => new JointRollout<string>({ ...opts, seed: 1.5 })).toThrow(/seed: expected an integer/);
        expect(() => new JointRollout<string>({ ...opts, terminationThreshold: "0.5" as never })).toThrow(
            /terminationThreshold: expected a number, got "0.5"/,
        );
        expect(() => new JointRollout<string>({ ...opts, sampling: { temperature: -1 } })).toThrow(
            /JointRollout: sampling\.temperature/,
        );
        // The tree is built in memory: an absurd size is refused up front instead of exhausting the heap.
        expect(() => new JointRollout<string>({ ...opts, generations: 2 ** 31 })).toThrow(
            /joint actions per item; at most 1048576/,
        );
        expect(() => new JointRollout<string>({ ...opts, generations: 8, joint: "cross", turns: 3 })).toThrow(
            /over 10\^15|joint actions per item/,
        );
    });
});
