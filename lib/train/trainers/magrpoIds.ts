// magrpoIds.ts: the ids MAGRPO trains on for each answer of its joint-action trees. The embedded model's answers are
// its own (the prompt through the trainer's chat template, the sampled tokens); a remote sampler's (a rollout fleet:
// fleetRollout.ts) must come with the exact ids it read and sampled and one log-prob per id, checked as rolloutTeam
// checks them (rollout.ts answerIds). A tree holding an answer that cannot be trained on fails alone, as a failed
// request fails its tree: the other questions' trees train.
import type { JointTree } from "../../debate/jointRollout.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import type { Generation, Policy } from "../../policy/types.js";
import { answerEnd, answerIds, type RolloutEntry } from "./rollout.js";

export type RowIds = Pick<RolloutEntry, "prompt" | "completion" | "stopped" | "truncated" | "logprobs" | "model">;

/** How the answers of a batch of trees become rows: a remote answer's checked ids, else the trainer's encoding. */
export class TreeIds {
    private readonly remote = new Map<Generation, RowIds>();

    constructor(private readonly tokenizer: NativePolicy["tokenizer"]) {}

    /**
     * Checks every remote answer of `trees` (the policy that answered agent a at depth d: `turn0[a]` at depth 0 when
     * given, else `agents[a]`); a tree with an answer that cannot be trained on gets its `error` (depth, agent, why).
     */
    check(
        trees: JointTree[],
        agents: readonly Policy[],
        turn0: readonly Policy[] | undefined,
        isStop: ((id: number) => boolean) | undefined,
        stopOf: (agent: number) => readonly string[] | undefined,
    ): void {
        for (const tree of trees) {
            if (tree.error) continue;
            outer: for (const act of tree.actions)
                for (const [a, g] of act.generations.entries()) {
                    const policy = act.depth === 0 && turn0 ? turn0[a]! : agents[a]!;
                    if (policy instanceof NativePolicy || this.remote.has(g)) continue;
                    const ids = answerIds(policy, g, act.prompts[a] as string, isStop, stopOf(a));
                    if (typeof ids === "string") {
                        tree.error = { depth: act.depth, agent: a, message: `${policy.name}: ${ids}`, attempts: 1 };
                        break outer;
                    }
                    this.remote.set(g, { ...ids, ...(g.model !== undefined ? { model: g.model } : {}) });
                }
        }
    }

    /** The row of answer `g` to `prompt`. */
    of(g: Generation, prompt: string): RowIds {
        return (
            this.remote.get(g) ?? {
                prompt: this.tokenizer.encodeChat([{ role: "user", content: prompt }]),
                completion: (g.tokens ?? []) as number[],
                ...answerEnd(g),
                ...(g.logprobs ? { logprobs: g.logprobs } : {}),
            }
        );
    }

    /** The served models named by the remote answers of `trees` (a fleet's adapter versions), one per answer. */
    served(trees: JointTree[]): string[] {
        const out: string[] = [];
        for (const tree of trees)
            if (!tree.error)
                for (const act of tree.actions)
                    for (const g of act.generations) {
                        const m = this.remote.get(g)?.model;
                        if (m !== undefined) out.push(m);
                    }
        return out;
    }
}
