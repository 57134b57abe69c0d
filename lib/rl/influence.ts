// influence.ts: MAPoRL's reward terms (docs/algorithms.md A.4–A.5), in TS: the work is O(Q·T·A).
//  - influenceRewards: Definition 1, the influence-aware verification reward, and the reference code's other
//    rule variants (score_rule in trl/trainer/utils_multi_unified.py).
//  - collaborationBonus: the incentive terms (bonus_rule), with named coefficients and a sign switch.
import { requireArray, requireChoice, requireNumber, requireOptions } from "../validate.js";

function requireShape3(fn: string, shape: unknown): [number, number, number] {
    if (!Array.isArray(shape) || shape.length !== 3)
        throw new (Array.isArray(shape) ? RangeError : TypeError)(
            `${fn}: shape: expected [Q, T, A], got ${Array.isArray(shape) ? shape.length + " dimensions" : typeof shape}`,
        );
    shape.forEach((d, i) => {
        if (typeof d !== "number") throw new TypeError(`${fn}: shape[${i}]: expected an integer, got ${typeof d}`);
        if (!Number.isSafeInteger(d) || d < (i === 0 ? 0 : 1))
            throw new RangeError(
                `${fn}: shape[${i}] (${"QTA"[i]}): expected an integer >= ${i === 0 ? 0 : 1}, got ${d}`,
            );
    });
    return shape as [number, number, number];
}

function requireLastTurn(fn: string, x: unknown, Q: number, T: number): Int32Array | undefined {
    if (x === undefined) return undefined;
    const a = requireArray(fn, "lastTurn", x, [Int32Array], Q);
    a.forEach((v, q) => {
        if (v < 0 || v >= T) throw new RangeError(`${fn}: lastTurn[${q}]: expected a turn in [0, ${T - 1}], got ${v}`);
    });
    return a;
}

export type InfluenceRule = "discounted-sum" | "last" | "current";
export type InfluenceScope = "all" | "individual";

export interface InfluenceOptions {
    /** The discount d of Definition 1 (`rule_discount`, separate from the token-level γ). Defaults to `0.3`. */
    discount?: number;
    /**
     * `'discounted-sum'` (Definition 1), `'last'` (the last turn's score) or `'current'` (this turn's score).
     * Defaults to `'discounted-sum'`.
     */
    rule?: InfluenceRule;
    /** `'all'`: future terms use the mean over all agents (itself included); `'individual'`: the agent's own. Defaults to `'all'`. */
    scope?: InfluenceScope;
    /** Per question, the last turn that was played (early stop by consensus), [Q]. Later turns get NaN. Defaults to T − 1. */
    lastTurn?: Int32Array;
}

/**
 * MAPoRL's influence-aware verification reward for scores [Q, T, A] (verifier scores of agent a's answer at turn
 * t of question q). With x the last turn and D = Σ_{t'=t..x} d^{t'−t}, rule 'discounted-sum':
 *   scope 'all':        R(q,t,a) = ( s(q,t,a) + Σ_{t'=t+1..x} d^{t'−t} · mean_j s(q,t',j) ) / D
 *   scope 'individual': R(q,t,a) = Σ_{t'=t..x} d^{t'−t} · s(q,t',a) / D
 * rule 'last': s(q,x,·) (team mean for 'all'); rule 'current': s(q,t,·) (team mean for 'all').
 * Turns after lastTurn[q] are NaN. A NaN score propagates into the rewards that include it.
 */
export function influenceRewards(
    batch: { scores: Float32Array; shape: readonly [number, number, number] },
    options?: InfluenceOptions,
): Float32Array {
    const fn = "influenceRewards";
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with scores and shape, got ${typeof batch}`);
    const o = requireOptions<InfluenceOptions>(fn, "options", options, ["discount", "rule", "scope", "lastTurn"]);
    const [Q, T, A] = requireShape3(fn, batch.shape);
    const s = requireArray(fn, "scores", batch.scores, [Float32Array], Q * T * A);
    const d = requireNumber(fn, "discount", o.discount, 0.3, 0, 1);
    const rule = requireChoice(fn, "rule", o.rule, ["discounted-sum", "last", "current"], "discounted-sum");
    const scope = requireChoice(fn, "scope", o.scope, ["all", "individual"], "all");
    const last = requireLastTurn(fn, o.lastTurn, Q, T);
    const out = new Float32Array(Q * T * A);
    const at = (q: number, t: number, a: number) => s[(q * T + t) * A + a]!;
    const teamMean = (q: number, t: number) => {
        let m = 0;
        for (let j = 0; j < A; j++) m += at(q, t, j);
        return m / A;
    };
    for (let q = 0; q < Q; q++) {
        const x = last ? last[q]! : T - 1;
        const means = Float64Array.from({ length: T }, (_, t) => (t <= x ? teamMean(q, t) : NaN));
        for (let t = 0; t < T; t++) {
            for (let a = 0; a < A; a++) {
                let r: number;
                if (t > x) r = NaN;
                else if (rule === "current") r = scope === "all" ? means[t]! : at(q, t, a);
                else if (rule === "last") r = scope === "all" ? means[x]! : at(q, x, a);
                else {
                    let num = at(q, t, a),
                        den = 1,
                        w = 1;
                    for (let u = t + 1; u <= x; u++) {
                        w *= d;
                        num += w * (scope === "all" ? means[u]! : at(q, u, a));
                        den += w;
                    }
                    r = num / den;
                }
                out[(q * T + t) * A + a] = r;
            }
        }
    }
    return out;
}

export interface BonusCoefficients {
    /** α0: the agent turns wrong → right while the others were wrong (self-correction against the group). Code: alpha[1]. */
    correctedAlone?: number;
    /** α1: the agent turns wrong → right while the others were right (persuaded correctly). Code: alpha[0]. */
    persuadedCorrectly?: number;
    /** β0: the agent is wrong but the others turn wrong → right next turn (wrong but useful). Code: alpha[2]. */
    wrongButUseful?: number;
    /** β1: the agent is right and the others turn wrong → right next turn (persuasive). Code: alpha[3]. */
    persuasive?: number;
}

export interface BonusOptions extends BonusCoefficients {
    /**
     * `'paper'`: the forward (influence-on-others) terms reward helping the others to the right answer, as the
     * paper describes β0/β1. `'reference-code'`: the public code's bonus_rule exactly: its forward signs, which
     * penalise it (docs/algorithms.md A.5), and its sentinel guard: whenever the running bonus lands on exactly -1 (the
     * code's "no answer" value) it adds 0.001, which alphas of 0.5, 1 and 2 (the paper's sweeps) hit often.
     * Defaults to `'paper'`.
     */
    signs?: "paper" | "reference-code";
    /** Per question, the last turn that was played (early stop by consensus), [Q]: later turns get NaN, and the
     * forward term looks at turn t + 1 only where it was played. Defaults to T − 1. */
    lastTurn?: Int32Array;
}

/**
 * MAPoRL's collaboration incentives from 0/1 correctness [Q, T, A] (ground truth, as the reference code uses).
 * No bonus at turn 0. With o the others' mean correctness (> 0.5 right, < 0.5 wrong, exactly 0.5 neither):
 *  backward (t ≥ 1), own change from t − 1 to t, others at t − 1:
 *    wrong → right: +correctedAlone if the others were wrong, +persuadedCorrectly if right;
 *    right → wrong: −correctedAlone if the others were right (a new wrong answer), −persuadedCorrectly if they
 *    were wrong (persuaded wrongly); a single agent uses ±correctedAlone.
 *  forward (1 ≤ t ≤ T − 2, A > 1), the others from t to t + 1, own correctness at t ('paper' signs):
 *    others wrong → right: +persuasive if own right, +wrongButUseful if own wrong;
 *    others right → wrong: −wrongButUseful if own right, −persuasive if own wrong.
 *  'reference-code' negates the forward term and nudges a running bonus of exactly -1 to -0.999 (the code's guard).
 * With lastTurn, turns after it are NaN and the forward term runs only while t + 1 was played. NOTE: the reference
 * code reads an unplayed turn as its -1 sentinel, which its forward rule takes for "the others turned wrong"; maporl
 * does not count what was not played (docs/conventions.md).
 */
export function collaborationBonus(
    batch: { correct: Float32Array | Uint8Array; shape: readonly [number, number, number] },
    options?: BonusOptions,
): Float32Array {
    const fn = "collaborationBonus";
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with correct and shape, got ${typeof batch}`);
    const o = requireOptions<BonusOptions>(fn, "options", options, [
        "correctedAlone",
        "persuadedCorrectly",
        "wrongButUseful",
        "persuasive",
        "signs",
        "lastTurn",
    ]);
    const [Q, T, A] = requireShape3(fn, batch.shape);
    const c = requireArray(fn, "correct", batch.correct, [Float32Array, Uint8Array], Q * T * A);
    c.forEach((v, i) => {
        if (v !== 0 && v !== 1)
            throw new RangeError(`${fn}: correct: expected 0 or 1 at every position, got ${v} at index ${i}`);
    });
    const a0 = requireNumber(fn, "persuadedCorrectly", o.persuadedCorrectly, 0, -1e6, 1e6);
    const a1 = requireNumber(fn, "correctedAlone", o.correctedAlone, 0, -1e6, 1e6);
    const a2 = requireNumber(fn, "wrongButUseful", o.wrongButUseful, 0, -1e6, 1e6);
    const a3 = requireNumber(fn, "persuasive", o.persuasive, 0, -1e6, 1e6);
    const code = requireChoice(fn, "signs", o.signs, ["paper", "reference-code"], "paper") === "reference-code";
    const sign = code ? -1 : 1;
    const last = requireLastTurn(fn, o.lastTurn, Q, T);
    // The reference code's guard after each change of the bonus: exactly -1 (its sentinel) becomes -0.999.
    const guard = (x: number) => (code && x === -1 ? x + 0.001 : x);
    const at = (q: number, t: number, a: number) => c[(q * T + t) * A + a]!;
    const others = (q: number, t: number, a: number) => {
        let m = 0;
        for (let j = 0; j < A; j++) if (j !== a) m += at(q, t, j);
        return m / (A - 1);
    };
    const out = new Float32Array(Q * T * A);
    for (let q = 0; q < Q; q++) {
        const x = last ? last[q]! : T - 1;
        for (let t = x + 1; t < T; t++) for (let a = 0; a < A; a++) out[(q * T + t) * A + a] = NaN;
        for (let t = 1; t <= x; t++)
            for (let a = 0; a < A; a++) {
                let bonus = 0;
                const before = at(q, t - 1, a),
                    now = at(q, t, a);
                if (A === 1) {
                    if (before === 0 && now === 1) bonus = guard(bonus + a1);
                    else if (before === 1 && now === 0) bonus = guard(bonus - a1);
                } else {
                    const o1 = others(q, t - 1, a);
                    if (before === 0 && now === 1 && o1 !== 0.5) bonus = guard(bonus + (o1 < 0.5 ? a1 : a0));
                    else if (before === 1 && now === 0 && o1 !== 0.5) bonus = guard(bonus - (o1 > 0.5 ? a1 : a0));
                    if (t + 1 <= x) {
                        const ot = others(q, t, a),
                            on = others(q, t + 1, a);
                        if (ot < 0.5 && on > 0.5) bonus = guard(bonus + sign * (now === 1 ? a3 : a2));
                        else if (ot > 0.5 && on < 0.5) bonus = guard(bonus - sign * (now === 1 ? a2 : a3));
                    }
                }
                out[(q * T + t) * A + a] = bonus;
            }
    }
    return out;
}

/** {@link influenceRewards} as a promise (TS work on the calling thread; `signal` checked first). */
export async function influenceRewardsAsync(
    batch: Parameters<typeof influenceRewards>[0],
    options?: InfluenceOptions & { signal?: AbortSignal },
): Promise<Float32Array> {
    const { signal, ...rest } = options ?? {};
    signal?.throwIfAborted();
    return influenceRewards(batch, rest);
}

/** {@link collaborationBonus} as a promise (TS work on the calling thread; `signal` checked first). */
export async function collaborationBonusAsync(
    batch: Parameters<typeof collaborationBonus>[0],
    options?: BonusOptions & { signal?: AbortSignal },
): Promise<Float32Array> {
    const { signal, ...rest } = options ?? {};
    signal?.throwIfAborted();
    return collaborationBonus(batch, rest);
}
