// evaluate.ts: the held-out evaluation of a team: per-turn majority accuracy (MAPoRL's stat_all, ties credited
// 1/k), per-agent accuracy per turn, solo accuracy (each agent's turn-0 answer, given with empty discussion slots:
// the agent alone, the knowledge-vs-collaboration control) and the turn-to-turn transitions.
import { debateMetrics, type Transitions } from "../../debate/metrics.js";
import type { SamplingOptions } from "../../policy/types.js";
import type { NativePolicy } from "../../model/nativePolicy.js";
import { rolloutTeam, type TeamRollout } from "../trainers/rollout.js";
import { answerersOf, type Task, type TaskItem } from "../tasks/tasks.js";

export interface EvalResult {
    majorityAccuracy: number[];
    agentAccuracy: number[][];
    soloAccuracy: number[];
    /** Per turn t: transitions of every agent's answer from turn t to t + 1. */
    transitions: Transitions[];
    /** Final-turn majority accuracy minus turn-0 majority accuracy. */
    gain: number;
    /** With a separate turn-0 model: each agent's trained (turns >= 1) model answering alone, empty slots. */
    trainedAlone?: number[];
    episodes: number;
    /** Per turn: the mean completion tokens of the answerers' answers (verl's response_length). */
    tokensPerTurn: number[];
}

/** The team's metrics: over the answers of the task's answerers (every agent in a debate; the solver of tool-lookup). */
export function teamMetrics(r: TeamRollout): EvalResult {
    const who = answerersOf(r.task, r.agents);
    const m = debateMetrics(
        r.entries.map((ep, i) => ({
            reference: r.items[i]!.reference,
            turns: ep.map((turn) =>
                who
                    .map((a) => turn[a]!)
                    .map((x) => ({
                        extracted: x.extracted,
                        correct: x.correct,
                        completionTokens: x.completion.length,
                    })),
            ),
        })),
    );
    const maj = m.majorityAccuracy;
    return {
        majorityAccuracy: maj,
        agentAccuracy: m.agentAccuracy,
        soloAccuracy: m.agentAccuracy[0] ?? [],
        transitions: m.transitions.map((x) => x.all),
        gain: maj[maj.length - 1]! - maj[0]!,
        episodes: m.episodes,
        tokensPerTurn: m.tokensPerTurn,
    };
}

export async function evaluateTeam(
    task: Task,
    items: TaskItem[],
    agents: NativePolicy[],
    o: {
        turns: number;
        temperature: number;
        maxTokens: number;
        seed: number;
        turn0?: NativePolicy[];
        feedback?: boolean;
        signal?: AbortSignal;
        onAnswers?: (n: number) => void;
        /** Per-agent sampling (agentSettings: temperature, topP, maxTokens, stop), as in training. */
        agentSampling?: SamplingOptions[];
    },
): Promise<EvalResult> {
    const r = teamMetrics(await rolloutTeam(task, items, agents, o));
    if (o.turn0 && o.turn0.some((m, a) => m !== agents[a])) {
        const { turn0: _, ...alone } = o;
        r.trainedAlone = teamMetrics(await rolloutTeam(task, items, agents, { ...alone, turns: 1 })).agentAccuracy[0]!;
    }
    return r;
}
