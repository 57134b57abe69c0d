// compactDebate.ts: the trainers' compact protocol as Debate options, so that a `Debate` (over `maporl serve`, an
// in-process NativePolicy, or any Policy) asks a model trained by `maporl train` on the embedded GPT exactly what
// it saw in training: one user message per turn, "<question>|<answers>", every agent's previous final answer in
// three digits (its own first, "???" for none or a negative one) and, with feedback, the verifier's verdict on each
// ("+" right, "-" wrong; "?" at turn 0). The model answers "<working>;<answer>", e.g. "9*3=27,27-4=23;023".
import type { DebateOptions } from "../../debate/debate.js";
import type { FollowUpContext, QuestionContext } from "../../debate/prompts.js";
import { requireOptions } from "../../validate.js";
import { extractAnswer, turnPrompt } from "../trainers/rollout.js";

/** The Debate options of the compact protocol for a team of `agents` (the question is every agent's view). */
export function compactDebate(options: {
    agents: number;
    feedback?: boolean;
}): Required<Pick<DebateOptions, "prompts" | "history" | "extract" | "topology">> {
    const o = requireOptions<{ agents: number; feedback?: boolean }>("compactDebate", "options", options, [
        "agents",
        "feedback",
    ]);
    const A = o.agents;
    if (A === undefined || !Number.isInteger(A) || A < 1 || A > 64)
        throw new RangeError(`compactDebate: agents: expected an integer in [1, 64], got ${String(A)}`);
    if (o.feedback !== undefined && typeof o.feedback !== "boolean")
        throw new TypeError(`compactDebate: feedback: expected a boolean, got ${typeof o.feedback}`);
    const feedback = o.feedback === true;
    return {
        history: "last",
        topology: "full", // the protocol quotes every agent
        extract: extractAnswer,
        prompts: {
            question: (c: QuestionContext) => turnPrompt(c.question, 0, A, null, feedback ? "empty" : undefined),
            followUp: (c: FollowUpContext) => {
                const texts: (string | undefined)[] = new Array(A),
                    scores: number[] = new Array(A).fill(0);
                texts[c.agent] = c.ownAnswer;
                scores[c.agent] = c.ownScore ?? 0;
                for (const p of c.peers) {
                    texts[p.agent] = p.text;
                    scores[p.agent] = p.score ?? 0;
                }
                if (texts.some((t) => t === undefined))
                    throw new RangeError("compactDebate: every agent's previous answer is needed (topology 'full')");
                return turnPrompt(
                    c.question,
                    c.agent,
                    A,
                    texts.map((t) => extractAnswer(t!)),
                    feedback ? scores : undefined,
                );
            },
        },
    };
}
