// transcript.ts: the record of one debate episode, every (turn, agent) answer with what it was shown, its tokens,
// log-probs, extracted answer, verifier score (or the verifier's failure) and timing. It serialises to JSON and
// back without loss: non-finite numbers (a -Infinity log-prob) are written as strings and read back.
import type { ChatMessage } from "../policy/types.js";

export interface TurnEntry {
    turn: number;
    agent: number;
    /** The messages sent to the agent's policy. */
    prompt: ChatMessage[];
    text: string;
    tokens?: (number | string)[];
    logprobs?: number[];
    /** The extracted answer; null when none could be extracted. */
    extracted: string | null;
    /** The verifier's score, when a verifier ran and succeeded. */
    score?: number;
    /** Set when the verifier failed (then there is no score; it is never read as 0). */
    verifierError?: string;
    finishReason: string;
    usage: { promptTokens: number; completionTokens: number };
    latencyMs: number;
}

export interface Transcript {
    version: 1;
    id: string;
    question: string;
    reference: string | number;
    agents: number;
    /** adjacency[i][j]: agent i sees agent j's previous answer. */
    adjacency: boolean[][];
    /** turns[t][a]. */
    turns: TurnEntry[][];
    stoppedEarly: boolean;
}

const ENCODED = "__maporl_number__:";

export function transcriptToJSON(t: Transcript): string {
    return JSON.stringify(t, (_k, v) => (typeof v === "number" && !Number.isFinite(v) ? ENCODED + String(v) : v));
}

export function transcriptFromJSON(text: string): Transcript {
    const t = JSON.parse(text, (_k, v) => (typeof v === "string" && v.startsWith(ENCODED) ? Number(v.slice(ENCODED.length)) : v)) as Transcript;
    if (!t || t.version !== 1 || !Array.isArray(t.turns) || typeof t.question !== "string")
        throw new SyntaxError("transcriptFromJSON: expected a maporl transcript (version 1)");
    return t;
}
