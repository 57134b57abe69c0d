// metrics.ts: evaluation of debate transcripts as MAPoRL reports it (utils_cooperateLLM.stat_all):
//   - per-turn accuracy by majority vote over the agents' extracted answers: a tie among k answers gives credit
//     1/k when the right answer is among them, and "invalid" (no answer) is dropped from a tied majority;
//   - per-agent accuracy per turn; turn-to-turn transitions (right->right, right->wrong, wrong->right,
//     wrong->wrong), split by whether the majority was right at the earlier turn;
//   - the average discussion length (turns actually run) and completion tokens per turn.
// Input is the minimal shape every transcript has (lib/debate/transcript.ts will produce it).

/** One agent's answer at one turn. */
export interface AnswerRecord {
    /** The extracted answer (null: none could be extracted, "invalid"). */
    extracted: string | null;
    /** Whether it is right; when absent, extracted is compared with the episode's reference. */
    correct?: boolean;
    completionTokens?: number;
}

export interface EpisodeRecord {
    reference: string | number;
    /** turns[t][a]: agent a's answer at turn t (fewer turns when the debate stopped early). */
    turns: AnswerRecord[][];
    /** Set when the episode ended on a failed request (a Transcript's error): its completed turns still count. */
    error?: unknown;
}

/** A canonical key for comparing answers: numbers by value ("1,000", "1000.0" -> "1000"), text trimmed, lowercase. */
export function answerKey(x: string | number | null): string | null {
    if (x === null) return null;
    if (typeof x === "number") return Number.isFinite(x) ? String(x) : null;
    const t = x
        .trim()
        .replace(/^\$/, "")
        .replace(/,(?=\d{3}\b)/g, "");
    if (/^-?\d+(\.\d+)?$/.test(t)) return String(Number(t));
    return t.toLowerCase();
}

function isRight(ep: EpisodeRecord, a: AnswerRecord): boolean {
    if (typeof a.correct === "boolean") return a.correct;
    const k = answerKey(a.extracted);
    return k !== null && k === answerKey(ep.reference);
}

/** Majority-vote credit of one turn: 1, 1/k for a k-way tie containing the right answer, or 0. */
export function majorityCredit(ep: EpisodeRecord, answers: AnswerRecord[]): number {
    const counts = new Map<string | null, { n: number; right: boolean }>();
    for (const a of answers) {
        const k = answerKey(a.extracted);
        const c = counts.get(k) ?? { n: 0, right: false };
        c.n++;
        c.right ||= k !== null && isRight(ep, a);
        counts.set(k, c);
    }
    const top = Math.max(0, ...[...counts.values()].map((c) => c.n));
    let tied = [...counts.entries()].filter(([, c]) => c.n === top);
    if (tied.length > 1) tied = tied.filter(([k]) => k !== null); // "invalid" leaves a tied majority
    if (tied.length === 0) return 0;
    return tied.some(([, c]) => c.right) ? 1 / tied.length : 0;
}

export interface Transitions {
    rightToRight: number;
    rightToWrong: number;
    wrongToRight: number;
    wrongToWrong: number;
}

export interface DebateMetrics {
    /** Per turn: mean majority-vote credit over the episodes that reached the turn. */
    majorityAccuracy: number[];
    /** [turn][agent]: fraction right. */
    agentAccuracy: number[][];
    /** Per turn t: agent answer transitions from turn t to t+1, all, and split by the turn-t majority. */
    transitions: { all: Transitions; majorityRight: Transitions; majorityWrong: Transitions }[];
    /** Mean number of turns run. */
    averageTurns: number;
    /** Per turn: mean completion tokens per agent answer (NaN when not recorded). */
    tokensPerTurn: number[];
    episodes: number;
    /** Episodes that ended on a failed request: the turns they completed count above, the turns they missed do not
     * (an episode that failed at turn 0 is left out of every figure). */
    failed: number;
}

const zero = (): Transitions => ({ rightToRight: 0, rightToWrong: 0, wrongToRight: 0, wrongToWrong: 0 });

export function debateMetrics(episodes: EpisodeRecord[]): DebateMetrics {
    if (!Array.isArray(episodes))
        throw new TypeError(`debateMetrics: episodes: expected an array, got ${typeof episodes}`);
    const T = Math.max(0, ...episodes.map((e) => e.turns.length));
    const maj = new Array<number>(T).fill(0),
        majN = new Array<number>(T).fill(0);
    const agentRight: number[][] = [],
        agentN: number[][] = [];
    const tok = new Array<number>(T).fill(0),
        tokN = new Array<number>(T).fill(0);
    const trans = Array.from({ length: Math.max(0, T - 1) }, () => ({
        all: zero(),
        majorityRight: zero(),
        majorityWrong: zero(),
    }));
    let turns = 0;
    episodes.forEach((ep, i) => {
        if (!ep || !Array.isArray(ep.turns))
            throw new TypeError(`debateMetrics: episodes[${i}].turns: expected an array of turns`);
        turns += ep.turns.length;
        ep.turns.forEach((answers, t) => {
            const credit = majorityCredit(ep, answers);
            maj[t]! += credit;
            majN[t]! += 1;
            answers.forEach((a, ag) => {
                (agentRight[t] ??= [])[ag] = (agentRight[t][ag] ?? 0) + (isRight(ep, a) ? 1 : 0);
                (agentN[t] ??= [])[ag] = (agentN[t][ag] ?? 0) + 1;
                if (typeof a.completionTokens === "number") {
                    tok[t]! += a.completionTokens;
                    tokN[t]! += 1;
                }
            });
            if (t + 1 < ep.turns.length) {
                const next = ep.turns[t + 1]!;
                const split = credit === 1 ? trans[t]!.majorityRight : trans[t]!.majorityWrong;
                answers.forEach((a, ag) => {
                    const b = next[ag];
                    if (!b) return;
                    const key = (isRight(ep, a) ? "right" : "wrong") + "To" + (isRight(ep, b) ? "Right" : "Wrong");
                    const k = key as keyof Transitions;
                    trans[t]!.all[k]++;
                    split[k]++;
                });
            }
        });
    });
    return {
        majorityAccuracy: maj.map((s, t) => s / majN[t]!),
        agentAccuracy: agentRight.map((row, t) => row.map((r, ag) => r / agentN[t]![ag]!)),
        transitions: trans,
        averageTurns: episodes.length ? turns / episodes.length : 0,
        tokensPerTurn: tok.map((s, t) => (tokN[t] ? s / tokN[t] : NaN)),
        episodes: episodes.length,
        failed: episodes.filter((e) => e.error !== undefined && e.error !== null).length,
    };
}
