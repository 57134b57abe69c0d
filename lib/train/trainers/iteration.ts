// iteration.ts: what one training iteration of any trainer returns (stage.ts runs it; each trainer builds it).
import type { EvalResult } from "../job/evaluate.js";
import type { AgentStats } from "./maporl.js";
import type { TeamRollout, TraceEntry } from "./rollout.js";

export interface IterationResult {
    stats: AgentStats[];
    /** The training rollout's team metrics (accuracy per turn of this iteration's questions). */
    train: EvalResult;
    /** Episodes dropped because a request failed (TeamRollout.failed); the iteration trained on the others. */
    failed?: NonNullable<TeamRollout["failed"]>;
    /** One episode for traces.jsonl: per turn and agent its text, whether it was right, and, where they apply, its
     * role, the tool calls it made (name, arguments, ok, result or error) and the credit the trainer assigned to it. */
    trace: { question: string; reference: string; turns: TraceEntry[][] };
    /** The iteration's rollout (maporl, collm: what the replay buffer keeps the successful episodes of). */
    rollout?: TeamRollout;
}
