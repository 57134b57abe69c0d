// magrpoCross.ts: MAGRPO's credit for cross joint actions (every combination of the agents' completions at a state).
import { pushTo } from "../../collections.js";
import { groupAdvantages } from "../../rl/groupAdvantages.js";
import type { JointTree } from "../../debate/jointRollout.js";
import type { TrainConfig } from "../job/config.js";

/**
 * Cross joint actions (CoMLRL's joint_mode="cross", docs/algorithms.md B.3): agent a's completion k at a state takes part
 * in G^(A-1) joint actions; it gets the SUM of their returns, baselined over the agent's own G completions at that
 * state (mean | max | rloo | none, as the aligned case). One entry per (state, agent, completion), naming a joint
 * action that holds the completion.
 */
export function crossCompletions(
    tree: JointTree,
    returns: Float32Array,
    A: number,
    G: number,
    baseline: TrainConfig["magrpo"]["baseline"],
): { action: number; agent: number; adv: number }[] {
    const states = new Map<number, number[]>(); // a state's joint actions share their parent
    tree.actions.forEach((act, n) => {
        pushTo(states, act.parent, n);
    });
    const scores: number[] = [],
        groups: number[] = [],
        where: { action: number; agent: number }[] = [];
    for (const ids of states.values())
        for (let a = 0; a < A; a++) {
            const group = groups.length ? groups[groups.length - 1]! + 1 : 0;
            for (let k = 0; k < G; k++) {
                const holding = ids.filter((n) => tree.actions[n]!.sample[a] === k);
                if (holding.length === 0) continue;
                scores.push(holding.reduce((sum, n) => sum + returns[n]!, 0));
                groups.push(group);
                where.push({ action: holding[0]!, agent: a });
            }
        }
    const adv = groupAdvantages(
        { scores: Float32Array.from(scores), groups: Int32Array.from(groups) },
        { estimator: "magrpo", baseline, device: "cpu" },
    );
    return where.map((w, j) => ({ ...w, adv: adv[j]! }));
}
