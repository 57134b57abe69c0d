// extract.ts: final-answer extraction from free-text model output, for rule verifiers.
//   extractFinalNumber: the answer of a math solution, from (in order of precedence) \boxed{...}, "#### n",
//   an "A:" / "Answer:" / "answer is" line, else the last number in the text. Handles thousands commas, "$",
//   units and trailing punctuation, negatives, decimals and simple fractions ("3/4", "\frac{3}{4}").
//   extractLabel: the first label of a closed set that the text names, case- and punctuation-tolerant.

/** A parsed number: its value and the text it came from. */
export interface ExtractedNumber {
    value: number;
    text: string;
}

const NUMBER = /[-−]?\$?\s?\d[\d,]*(?:\.\d+)?(?:\s*\/\s*\d+(?:\.\d+)?)?|[-−]?\$?\.\d+/g;

/** Parses one number token ("1,234.5", "-$3", "3/4", ".5"); null if it is not one. */
export function parseNumber(token: string): number | null {
    let t = token.trim().replace(/−/g, "-").replace(/\$/g, "").replace(/\s+/g, "");
    if (/^-?\d{1,3}(,\d{3})+(\.\d+)?$/.test(t) || /^-?\d+(,\d{3})+(\.\d+)?$/.test(t)) t = t.replace(/,/g, "");
    else if (t.includes(",")) return null; // "1,2" is not a number
    const frac = /^(-?\d+(?:\.\d+)?)\/(\d+(?:\.\d+)?)$/.exec(t);
    if (frac) {
        const d = Number(frac[2]);
        return d === 0 ? null : Number(frac[1]) / d;
    }
    if (!/^-?(\d+(\.\d+)?|\.\d+)$/.test(t)) return null;
    return Number(t);
}

function lastNumberIn(text: string): ExtractedNumber | null {
    const latexFrac = /\\d?frac\{\s*(-?\d+(?:\.\d+)?)\s*\}\{\s*(\d+(?:\.\d+)?)\s*\}/g;
    let best: { at: number; value: number; text: string } | null = null;
    for (let m = latexFrac.exec(text); m; m = latexFrac.exec(text)) {
        const d = Number(m[2]);
        if (d !== 0) best = { at: m.index, value: Number(m[1]) / d, text: m[0] };
    }
    let lastPlain: { at: number; value: number; text: string } | null = null;
    NUMBER.lastIndex = 0;
    for (let m = NUMBER.exec(text); m; m = NUMBER.exec(text)) {
        let tok = m[0].replace(/,+$/, "");
        let v = parseNumber(tok);
        if (v === null && tok.includes(",")) {
            // "5,6 and 7" or a list: take the part after the last comma
            tok = tok.slice(tok.lastIndexOf(",") + 1);
            v = parseNumber(tok);
        }
        if (v !== null) lastPlain = { at: m.index, value: v, text: tok.trim() };
    }
    // A \frac wins over the plain numbers inside it (and over any before it).
    const pick = best && (!lastPlain || lastPlain.at < best.at + best.text.length) ? best : lastPlain;
    return pick ? { value: pick.value, text: pick.text } : null;
}

/** The content of the last \boxed{...} (nested braces allowed), or null. */
export function lastBoxed(text: string): string | null {
    const at = text.lastIndexOf("\\boxed");
    if (at < 0) return null;
    const open = text.indexOf("{", at);
    if (open < 0) return null;
    let depth = 0;
    for (let i = open; i < text.length; i++) {
        if (text[i] === "{") depth++;
        else if (text[i] === "}" && --depth === 0) return text.slice(open + 1, i);
    }
    return null;
}

/**
 * The final numeric answer of a math solution, or null when there is none. Precedence: the last \boxed{},
 * then the last "#### ..." line, then the last "A:" / "Answer:" / "the answer is" marker, then the last number.
 * Within the chosen span the last number counts ("#### 1,000 dollars" -> 1000).
 */
export function extractFinalNumber(text: string): ExtractedNumber | null {
    if (typeof text !== "string") return null;
    const boxed = lastBoxed(text);
    if (boxed !== null) {
        const n = lastNumberIn(boxed);
        if (n) return n;
    }
    const markers = [
        /####\s*([^\n]*)/g,
        /(?:^|\n)\s*(?:A|Answer|Final answer)\s*[:：]\s*([^\n]*)/gi,
        /\banswer is\s*[:：]?\s*([^\n]*)/gi,
    ];
    for (const re of markers) {
        let span: string | null = null;
        for (let m = re.exec(text); m; m = re.exec(text)) span = m[1]!;
        if (span !== null) {
            const n = lastNumberInAnswer(span);
            if (n) return n;
        }
    }
    return lastNumberIn(text);
}

// In an answer span the first number is the answer ("18 dollars, or 3 per day" is rare; "A: 18" is the rule),
// unless it is an equation, where the result follows the last "=".
function lastNumberInAnswer(span: string): ExtractedNumber | null {
    const eq = span.lastIndexOf("=");
    const tail = eq >= 0 ? span.slice(eq + 1) : span;
    NUMBER.lastIndex = 0;
    const frac = /\\d?frac\{\s*(-?\d+(?:\.\d+)?)\s*\}\{\s*(\d+(?:\.\d+)?)\s*\}/.exec(tail);
    const m = NUMBER.exec(tail);
    if (frac && (!m || frac.index <= m.index)) {
        const d = Number(frac[2]);
        if (d !== 0) return { value: Number(frac[1]) / d, text: frac[0] };
    }
    if (!m) return null;
    const v = parseNumber(m[0].replace(/,+$/, ""));
    return v === null ? lastNumberIn(tail) : { value: v, text: m[0].trim() };
}

/** True when two extracted answers are the same number (relative tolerance 1e-6, for 8.999999999999998 = 9). */
export function sameNumber(a: number, b: number): boolean {
    if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
    return Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(a), Math.abs(b));
}

/**
 * The first of `labels` that `text` names as a word (case-insensitive, punctuation ignored), preferring an
 * explicit "answer: X" / "label: X"; null if none. Longer labels win over their prefixes ("not entailment").
 */
export function extractLabel(text: string, labels: readonly string[]): string | null {
    if (typeof text !== "string") return null;
    const norm = (s: string) =>
        s
            .toLowerCase()
            .replace(/[^a-z0-9]+/g, " ")
            .trim();
    const byLength = [...labels].sort((a, b) => b.length - a.length);
    const find = (hay: string) => {
        const h = ` ${norm(hay)} `;
        let best: { at: number; label: string } | null = null;
        for (const l of byLength) {
            const at = h.indexOf(` ${norm(l)} `);
            if (at >= 0 && (!best || at < best.at)) best = { at, label: l };
        }
        return best?.label ?? null;
    };
    const explicit = /(?:answer|label|prediction|final answer)\s*(?:is)?\s*[:：]?\s*([^\n]*)/gi;
    let span: string | null = null;
    for (let m = explicit.exec(text); m; m = explicit.exec(text)) span = m[1]!;
    return (span !== null ? find(span) : null) ?? find(text);
}
