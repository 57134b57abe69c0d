// prompts.ts: the default prompt templates of the debate, after MAPoRL's (docs/algorithms.md A.2): a
// turn-0 question prompt per task, and the follow-up user message of turn t >= 1, which carries the verifier's
// feedback on the agent's own previous answer (when enabled), the neighbours' previous answers (with their
// scores, when enabled), an instruction to reconsider, and the question again. Every template is a plain
// function the caller can replace.

export type DebateTask = "math" | "nli";

export interface QuestionContext {
    task: DebateTask;
    question: string;
}

export interface PeerAnswer {
    /** 0-based agent index. */
    agent: number;
    text: string;
    /** The verifier's score of that answer (only with feedback). */
    score?: number;
}

export interface FollowUpContext extends QuestionContext {
    turn: number;
    agent: number;
    /** The verifier's score of this agent's own previous answer (only with feedback). */
    ownScore?: number;
    /** This agent's own previous answer (the default prompts leave it in the history; a prompt for \`history:
     * 'last'\` quotes it). */
    ownAnswer?: string;
    peers: PeerAnswer[];
}

export interface DebatePrompts {
    question(ctx: QuestionContext): string;
    followUp(ctx: FollowUpContext): string;
}

/** MAPoRL's feedback bins for a verifier score. */
export function feedbackBin(score: number): string {
    if (score < 0.3) return "your answer is highly likely wrong";
    if (score < 0.6) return "your answer might be wrong; check it carefully";
    if (score < 0.8) return "your answer seems right, but check it again";
    return "your answer is likely right";
}

const fmt = (x: number) => x.toFixed(3);

export const defaultPrompts: DebatePrompts = {
    question({ task, question }) {
        if (task === "nli")
            return (
                `${question}\nPlease determine the relationship between the premise and the hypothesis. Choose one of ` +
                "'entailment', 'neutral', 'contradiction'. Start with a concise reasoning, then conclude with your final answer " +
                "in the format: Answer: <label>."
            );
        return (
            `Question: ${question}\nProvide a reasoning for your solution. At the end, you MUST write the answer in the ` +
            "following format: Answer: \\boxed{ XXX }"
        );
    },
    followUp({ question, ownScore, peers }) {
        const parts: string[] = [];
        if (ownScore !== undefined)
            parts.push(
                `Reward from a verifier of your answer: ${fmt(ownScore)} out of 1.0, which means ${feedbackBin(ownScore)}.`,
            );
        if (peers.length) {
            parts.push("These are the solutions to the problem from other agents:");
            for (const p of peers) {
                parts.push(`Agent ${p.agent + 1} solution: \`\`\`${p.text}\`\`\``);
                if (p.score !== undefined)
                    parts.push(
                        `Reward associated with agent ${p.agent + 1}'s solution calculated by verifier: ${fmt(p.score)} out of 1.0.`,
                    );
            }
        }
        parts.push(
            "Consider your own solution and the solutions of the other agents carefully. If your answer is wrong, " +
                "revise it; do not simply repeat an answer that has already been given. Keep the reasoning simple, and end with " +
                "the answer in the required format.",
        );
        parts.push(`Once again, the question is: ${question}`);
        return parts.join("\n\n");
    },
};
