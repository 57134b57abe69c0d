// transcript.ts: the record of one debate episode, every (turn, agent) answer with what it was shown, its tokens,
// log-probs, extracted answer, verifier score (or the verifier's failure) and timing. It serialises to JSON and
// back without loss: non-finite numbers (a -Infinity log-prob) are written as strings and read back.
import type { ChatMessage, Generation } from "../policy/types.js";

/** One answer: the agent's Generation (text, exact ids, log-probs, model, endpoint, attempts, finish reason, usage,
 * latency) with where it stood in the debate and how it was judged. */
export interface TurnEntry extends Generation {
    turn: number;
    agent: number;
    /** The messages sent to the agent's policy. */
    prompt: ChatMessage[];
    /** The extracted answer; null when none could be extracted. */
    extracted: string | null;
    /** The verifier's score, when a verifier ran and succeeded. */
    score?: number;
    /** Set when the verifier failed (then there is no score; it is never read as 0). */
    verifierError?: string;
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
    /** Set when the episode failed: which turn and agent, the error, and how many attempts were made (Debate's
     * onError). `turns` then holds the turns completed before it. */
    error?: { turn: number; agent: number; message: string; attempts: number };
}

const ENCODED = "__maporl_number__:";

export function transcriptToJSON(t: Transcript): string {
    return JSON.stringify(t, (_k, v) => (typeof v === "number" && !Number.isFinite(v) ? ENCODED + String(v) : v));
}

export function transcriptFromJSON(text: string): Transcript {
    const t = JSON.parse(text, (_k, v) =>
        typeof v === "string" && v.startsWith(ENCODED) ? Number(v.slice(ENCODED.length)) : v,
    ) as Transcript;
    if (!t || t.version !== 1 || !Array.isArray(t.turns) || typeof t.question !== "string")
        throw new SyntaxError("transcriptFromJSON: expected a maporl transcript (version 1)");
    return t;
}

/**
 * The verifier scores and 0/1 correctness of a batch of transcripts as the [Q, T, A] tensors that
 * influenceRewards and collaborationBonus take, with lastTurn for episodes that stopped early (their later turns
 * are NaN). `isCorrect` decides correctness from an entry (default: score >= 0.5). A missing score (no verifier,
 * or a verifier failure) is NaN, which influenceRewards propagates rather than reading as 0.
 */
export function transcriptScores(transcripts: Transcript[], options: { isCorrect?: (e: TurnEntry) => boolean } = {}) {
    if (!Array.isArray(transcripts) || transcripts.length === 0)
        throw new TypeError("transcriptScores: transcripts: expected a non-empty array");
    const A = transcripts[0]!.agents;
    const T = Math.max(...transcripts.map((t) => t.turns.length));
    transcripts.forEach((t, q) => {
        if (t.agents !== A)
            throw new RangeError(
                `transcriptScores: transcripts[${q}].agents: expected ${A} (as the first), got ${t.agents}`,
            );
    });
    const Q = transcripts.length;
    const scores = new Float32Array(Q * T * A).fill(NaN),
        correct = new Float32Array(Q * T * A).fill(NaN);
    const lastTurn = new Int32Array(Q);
    const isCorrect = options.isCorrect ?? ((e: TurnEntry) => e.score !== undefined && e.score >= 0.5);
    transcripts.forEach((tr, q) => {
        lastTurn[q] = tr.turns.length - 1;
        tr.turns.forEach((row, t) =>
            row.forEach((e, a) => {
                const i = (q * T + t) * A + a;
                scores[i] = e.score ?? NaN;
                correct[i] = e.score === undefined && !options.isCorrect ? NaN : isCorrect(e) ? 1 : 0;
            }),
        );
    });
    return { scores, correct, shape: [Q, T, A] as [number, number, number], lastTurn };
}
