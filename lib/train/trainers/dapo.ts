// dapo.ts: DAPO's pieces in the trainers (lib/rl/dapo.ts has the formulas): the soft overlong punishment of a
// training answer, and the overlong filter (answers the sampler cut at maxTokens leave the actor's loss).
import { overlongPenalty } from "../../rl/dapo.js";
import type { Generation } from "../../policy/types.js";
import { agentSetting } from "../job/agentSettings.js";
import type { TrainConfig } from "../job/config.js";
import type { PackedBatch } from "./rollout.js";

/** The answer's length in sampled tokens: tokenIds when the backend gives them (the stop token included), else the
 * completion's tokens plus the stop token when it stopped. */
export function answerLength(g: Generation): number {
    if (g.tokenIds) return g.tokenIds.length;
    return (g.tokens?.length ?? 0) + (g.finishReason === "stop" ? 1 : 0);
}

/** The overlong penalty of agent a's training answer under the job's config (0 when overlong.buffer is 0); L_max is
 * the agent's maxTokens. */
export function overlongOf(cfg: TrainConfig, g: Generation, a: number): number {
    const o = cfg.overlong;
    if (o.buffer === 0) return 0;
    return overlongPenalty(answerLength(g), {
        maxTokens: agentSetting(cfg, a).maxTokens,
        buffer: o.buffer,
        penaltyFactor: o.penaltyFactor,
    });
}

/** A copy of the actor's mask [B, T] with every row that did not stop (cut at maxTokens) zeroed, and how many rows
 * that was. */
export function dropTruncated(
    actorMask: PackedBatch["mask"],
    [B, T]: PackedBatch["shape"],
    rows: readonly { stopped: boolean; truncated?: boolean }[],
): { mask: Float32Array; dropped: number } {
    const mask = Float32Array.from(actorMask);
    let dropped = 0;
    for (let r = 0; r < B; r++)
        if (rows[r]!.truncated ?? !rows[r]!.stopped) {
            mask.fill(0, r * T, (r + 1) * T);
            dropped++;
        }
    return { mask, dropped };
}
