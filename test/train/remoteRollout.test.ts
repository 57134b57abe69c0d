// remoteRollout.test.ts: the trainers' rollouts on a sampler other than the embedded model (a fleet, a server): each
// answer's training row is built from the ids and log-probs the sampler returned. A stop-token ending drops the stop
// id (packRows appends the trainer's eos), a stop-string ending keeps every id, a cut answer is truncated; an answer
// without exact ids, with misaligned log-probs, or stopped on an id that is not a trainer stop token fails its episode
// alone, naming why.
import { describe, expect, it } from "vitest";

import type { GenerateRequest, Generation, Policy } from "../../lib/policy/types.js";
import { arithDebateTask } from "../../lib/train/tasks/tasks.js";
import { rolloutTeam } from "../../lib/train/trainers/rollout.js";
import { resolveConfig } from "../../lib/train/job/config.js";
import { magrpoSample, magrpoServed } from "../../lib/train/trainers/magrpo.js";
import type { NativePolicy } from "../../lib/model/nativePolicy.js";

const EOS = 2;

// A remote-like sampler: its answer for item i (`itemOf` the request; by default rolloutTeam's seed says it) comes from
// `reply(i)`; prompt ids [10 + i, 11].
function sampler(
    reply: (i: number) => Partial<Generation>,
    itemOf: (r: GenerateRequest) => number = (r) => Math.floor(Number(r.seed) / 1000) % 1000,
): Policy {
    return {
        name: "remote",
        async generate(reqs: GenerateRequest[]): Promise<Generation[]> {
            return reqs.map((r) => {
                const i = itemOf(r);
                return {
                    text: "1+1=2;2",
                    finishReason: "stop",
                    usage: { promptTokens: 2, completionTokens: 3 },
                    latencyMs: 0,
                    promptTokenIds: [10 + i, 11],
                    tokenIdsExact: true,
                    model: "agent-v1-x",
                    ...reply(i),
                };
            });
        },
    };
}

// One turn of two agents, the trainer's stop token EOS, each agent's stop strings (undefined: none).
const oneTurn = (stops: (string[] | undefined)[]) => ({
    turns: 1,
    temperature: 1,
    maxTokens: 8,
    seed: 0,
    isStop: (id: number) => id === EOS,
    agentSampling: stops.map((stop) => ({ temperature: 1, maxTokens: 8, ...(stop ? { stop } : {}) })),
});

describe("rollouts on a remote sampler", () => {
    it("rows from the sampler's ids; each bad answer fails its episode alone, naming why", async () => {
        const task = arithDebateTask({ agents: 2 }),
            items = task.generate(6, 3);
        const p = sampler((i) => {
            switch (i) {
                case 0: // a stop token ends it
                    return { tokenIds: [5, 6, EOS], logprobs: [-0.1, -0.2, -0.3] };
                case 1: // a stop string ends it: every id kept
                    return { tokenIds: [5, 6, 7], logprobs: [-0.1, -0.2, -0.3] };
                case 2: // cut at maxTokens
                    return { tokenIds: [5, 6, 7], logprobs: [-0.1, -0.2, -0.3], finishReason: "length" };
                case 3: // no exact ids
                    return { tokenIds: [5, EOS], logprobs: [-0.1, -0.3], tokenIdsExact: false };
                case 4: // log-probs misaligned
                    return { tokenIds: [5, 6, EOS], logprobs: [-0.1, -0.2] };
                default: // stopped on an id that is no stop token, no stop string asked for
                    return { tokenIds: [5, 6, 9], logprobs: [-0.1, -0.2, -0.3] };
            }
        });
        // item 1 ended on a string: agent 1 asked for one (its row is kept), agent 0 did not (a stop on a non-stop id:
        // the episode fails)
        const r = await rolloutTeam(task, items, [p, p], oneTurn([undefined, [";"]]));
        const failed = new Map(r.failed!.map((f) => [f.item.id, f.error]));
        expect([...failed.keys()].sort()).toEqual([items[1].id, items[3].id, items[4].id, items[5].id].sort());
        expect(failed.get(items[1].id)).toMatch(/stopped on token 7, which is not one of the trainer's stop tokens/);
        expect(failed.get(items[3].id)).toMatch(/without the exact prompt and completion token ids/);
        expect(failed.get(items[4].id)).toMatch(/3 token ids but 2 log-probs/);
        expect(failed.get(items[5].id)).toMatch(/stopped on token 9/);
        const row = (item: number, a: number) => r.entries[r.items.findIndex((x) => x.id === items[item].id)][0][a];
        expect(row(0, 0)).toMatchObject({ prompt: [10, 11], completion: [5, 6], stopped: true, truncated: false });
        expect(row(0, 0).logprobs).toEqual([-0.1, -0.2, -0.3]); // the stop token's log-prob is the row's last
        expect(row(0, 0).model).toBe("agent-v1-x");
        expect(row(2, 1)).toMatchObject({ completion: [5, 6, 7], stopped: false, truncated: true });
    });

    it("a stop string the agent asked for: every sampled id kept, nothing appended, not truncated", async () => {
        const task = arithDebateTask({ agents: 2 }),
            items = task.generate(2, 5);
        const p = sampler(() => ({ tokenIds: [5, 6, 7], logprobs: [-0.1, -0.2, -0.3] }));
        const r = await rolloutTeam(task, items, [p, p], oneTurn([[";"], [";"]]));
        expect(r.failed).toBeUndefined();
        for (const ep of r.entries)
            for (const e of ep[0]) {
                expect(e).toMatchObject({ completion: [5, 6, 7], stopped: false, truncated: false });
                expect(e.logprobs!.length).toBe(e.completion.length);
            }
    });

    it("MAGRPO's trees on a remote sampler: rows from its ids; a tree with a bad answer fails alone", async () => {
        const task = arithDebateTask({ agents: 2 }),
            items = task.generate(3, 7);
        // the answer depends on the question the prompt holds: item 0 well formed, 1 without exact ids, 2 misaligned
        const p = sampler(
            (i) => ({
                tokenIds: [5, 6, EOS],
                logprobs: i === 2 ? [-0.1, -0.2] : [-0.1, -0.2, -0.3],
                tokenIdsExact: i !== 1,
                model: `agent-v${i}-x`,
            }),
            (r) => items.findIndex((x) => r.prompt!.includes(x.question)),
        );
        const cfg = resolveConfig({
            algo: "magrpo",
            agents: 2,
            turns: 1,
            separateTurn0: false,
            magrpo: { generations: 2 },
        });
        // every answer is remote: the trainer's tokenizer is not asked to encode any prompt
        const tokenizer = {} as NativePolicy["tokenizer"];
        const roll = { turns: 1, temperature: 1, maxTokens: 8, seed: 0, isStop: (id: number) => id === EOS };
        const s = await magrpoSample(cfg, task, items, [p, p], roll, tokenizer);
        const trees = s.grown.grown;
        expect(trees[0].error).toBeUndefined();
        expect(trees[1].error?.message).toMatch(/remote: the answer came without the exact prompt and completion/);
        expect(trees[2].error?.message).toMatch(/remote: the answer has 3 token ids but 2 log-probs/);
        const act = trees[0].actions[0];
        for (const [a, g] of act.generations.entries()) {
            const row = s.ids.of(g, act.prompts[a] as string);
            expect(row).toMatchObject({ prompt: [10, 11], completion: [5, 6], stopped: true, truncated: false });
            expect(row.logprobs).toEqual([-0.1, -0.2, -0.3]);
        }
        // the served models of the kept trees only: 2 agents x 2 answers of item 0
        expect(magrpoServed(s)).toEqual(["agent-v0-x", "agent-v0-x", "agent-v0-x", "agent-v0-x"]);
    });
});
