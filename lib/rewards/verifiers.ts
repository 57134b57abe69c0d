// verifiers.ts: rule and remote verifiers. A verifier scores one response against a reference:
// `score(item) -> Promise<{ score in [0, 1], extracted, reason? }>`. Built-ins come from factories:
// gsm8kVerifier, labelVerifier, exactVerifier, regexVerifier, fnVerifier, and HttpVerifier for a remote service.
// `scoreAll` runs a verifier over a batch with a concurrency limit and records failures as failures (never as a
// silent 0), which is what the debate transcript stores.
import { DEFAULT_MAX_RESPONSE_BYTES, postJson, redactUrl } from "../http.js";
import { extractFinalNumber, extractLabel, parseNumber, sameNumber } from "./extract.js";

export interface VerifyItem {
    question?: string;
    response: string;
    /** The reference answer: a number, or text from which it is extracted ("#### 18", "A: 18", a label...). */
    reference: string | number;
}

export interface Verdict {
    /** In [0, 1]: 1 right, 0 wrong (rule verifiers); a probability for learned ones. */
    score: number;
    /** What the verifier read as the response's answer (null when it found none). */
    extracted: string | null;
    reason?: string;
}

export interface Verifier {
    readonly name: string;
    score(item: VerifyItem, options?: { signal?: AbortSignal }): Promise<Verdict>;
}

function requireItem(name: string, item: VerifyItem): void {
    if (item === null || typeof item !== "object")
        throw new TypeError(`${name}: item: expected { response, reference }, got ${typeof item}`);
    if (typeof item.response !== "string")
        throw new TypeError(`${name}: item.response: expected a string, got ${typeof item.response}`);
    if (typeof item.reference !== "string" && typeof item.reference !== "number")
        throw new TypeError(`${name}: item.reference: expected a string or number, got ${typeof item.reference}`);
}

/** The reference's number: a number as is, else extracted from the text ("#### 18", "A: 18", "18"). */
function referenceNumber(ref: string | number): number | null {
    if (typeof ref === "number") return Number.isFinite(ref) ? ref : null;
    return parseNumber(ref) ?? extractFinalNumber(ref)?.value ?? null;
}

/**
 * GSM8K-style math verifier: the response's final number (\boxed{}, "####", "A:", "Answer:", or the last number;
 * commas, "$", units, negatives, decimals, fractions) equals the reference's, to a relative 1e-6.
 */
export function gsm8kVerifier(options: { name?: string } = {}): Verifier {
    const name = options.name ?? "gsm8k";
    return {
        name,
        async score(item) {
            requireItem(name, item);
            const ref = referenceNumber(item.reference);
            if (ref === null)
                throw new RangeError(
                    `${name}: item.reference: expected a number or text ending in one, got ${JSON.stringify(item.reference)}`,
                );
            const got = extractFinalNumber(item.response);
            if (got === null) return { score: 0, extracted: null, reason: "no number in the response" };
            const ok = sameNumber(got.value, ref);
            return { score: ok ? 1 : 0, extracted: got.text, reason: ok ? undefined : `${got.value} != ${ref}` };
        },
    };
}

/** Closed-label verifier (NLI and the like): the label the response names equals the reference label. */
export function labelVerifier(options: { labels?: readonly string[]; name?: string } = {}): Verifier {
    const labels = options.labels ?? ["entailment", "neutral", "contradiction"];
    if (!Array.isArray(labels) || labels.length === 0 || labels.some((l) => typeof l !== "string" || !l.trim()))
        throw new TypeError("labelVerifier: labels: expected a non-empty array of non-empty strings");
    const name = options.name ?? "label";
    return {
        name,
        async score(item) {
            requireItem(name, item);
            const ref = extractLabel(String(item.reference), labels);
            if (ref === null)
                throw new RangeError(
                    `${name}: item.reference: expected one of ${labels.join(", ")}, got ${JSON.stringify(item.reference)}`,
                );
            const got = extractLabel(item.response, labels);
            return {
                score: got === ref ? 1 : 0,
                extracted: got,
                reason: got === null ? "no label in the response" : undefined,
            };
        },
    };
}

/** Exact match after normalisation: 'trim' (default), 'case' (trim + case-insensitive) or 'none'. */
export function exactVerifier(options: { normalize?: "trim" | "case" | "none"; name?: string } = {}): Verifier {
    const mode = options.normalize ?? "trim";
    if (!["trim", "case", "none"].includes(mode))
        throw new RangeError(
            `exactVerifier: normalize: expected "trim", "case" or "none", got ${JSON.stringify(mode)}`,
        );
    const norm = (s: string) => (mode === "none" ? s : mode === "trim" ? s.trim() : s.trim().toLowerCase());
    const name = options.name ?? "exact";
    return {
        name,
        async score(item) {
            requireItem(name, item);
            const got = norm(item.response);
            return { score: got === norm(String(item.reference)) ? 1 : 0, extracted: got };
        },
    };
}

/** The last match of `pattern` (capture `group`, default 1 or the whole match) equals the reference, trimmed. */
export function regexVerifier(pattern: RegExp, options: { group?: number; name?: string } = {}): Verifier {
    if (!(pattern instanceof RegExp))
        throw new TypeError(`regexVerifier: pattern: expected a RegExp, got ${typeof pattern}`);
    const re = new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : pattern.flags + "g");
    const name = options.name ?? "regex";
    return {
        name,
        async score(item) {
            requireItem(name, item);
            let last: RegExpExecArray | null = null;
            re.lastIndex = 0;
            for (let m = re.exec(item.response); m; m = re.exec(item.response)) {
                last = m;
                if (m[0] === "") re.lastIndex++;
            }
            if (!last) return { score: 0, extracted: null, reason: `no match of ${pattern}` };
            const got = (last[options.group ?? (last.length > 1 ? 1 : 0)] ?? "").trim();
            return { score: got === String(item.reference).trim() ? 1 : 0, extracted: got };
        },
    };
}

/** A user function as a verifier; it may return a number in [0, 1] or a Verdict, sync or async. */
export function fnVerifier(
    name: string,
    fn: (item: VerifyItem) => number | Verdict | Promise<number | Verdict>,
): Verifier {
    if (typeof name !== "string" || !name) throw new TypeError("fnVerifier: name: expected a non-empty string");
    if (typeof fn !== "function") throw new TypeError(`fnVerifier: fn: expected a function, got ${typeof fn}`);
    return {
        name,
        async score(item) {
            requireItem(name, item);
            const v = await fn(item);
            const verdict: Verdict = typeof v === "number" ? { score: v, extracted: null } : v;
            if (verdict === null || typeof verdict !== "object" || !(verdict.score >= 0 && verdict.score <= 1))
                throw new RangeError(
                    `${name}: expected a score in [0, 1], got ${JSON.stringify(typeof v === "number" ? v : verdict?.score)}`,
                );
            return {
                score: verdict.score,
                extracted: verdict.extracted ?? null,
                ...(verdict.reason ? { reason: verdict.reason } : {}),
            };
        },
    };
}

export interface HttpVerifierOptions {
    url: string;
    name?: string;
    /** Per request. Defaults to 30,000 ms. */
    timeoutMs?: number;
    /** Retries on network errors, timeouts, 429 and 5xx, with exponential backoff from `backoffMs`. Defaults to 3. */
    retries?: number;
    backoffMs?: number;
    headers?: Record<string, string>;
    /** Decoded bytes of one reply read at most. Defaults to 64 MiB. */
    maxResponseBytes?: number;
}

/**
 * A remote verifier: POST `{ items: [{ question, response, reference }] }` as JSON; the service answers
 * `{ results: [{ score, extracted?, reason? }] }` in the same order. `scoreBatch` sends many items in one request.
 */
export class HttpVerifier implements Verifier {
    readonly name: string;
    private readonly o: Required<Omit<HttpVerifierOptions, "name" | "headers">> & { headers: Record<string, string> };

    constructor(options: HttpVerifierOptions) {
        if (options === null || typeof options !== "object" || typeof options.url !== "string")
            throw new TypeError("HttpVerifier: options.url: expected a URL string");
        new URL(options.url); // throws a TypeError naming the bad URL
        const int = (v: unknown, d: number, what: string) => {
            if (v === undefined) return d;
            if (typeof v !== "number" || !Number.isFinite(v) || v < 0)
                throw new RangeError(`HttpVerifier: ${what}: expected a number >= 0, got ${String(v)}`);
            return v;
        };
        this.name = options.name ?? "http";
        this.o = {
            url: options.url,
            timeoutMs: int(options.timeoutMs, 30_000, "timeoutMs"),
            retries: int(options.retries, 3, "retries"),
            backoffMs: int(options.backoffMs, 200, "backoffMs"),
            headers: options.headers ?? {},
            maxResponseBytes: int(options.maxResponseBytes, DEFAULT_MAX_RESPONSE_BYTES, "maxResponseBytes"),
        };
    }

    async score(item: VerifyItem, options?: { signal?: AbortSignal }): Promise<Verdict> {
        return (await this.scoreBatch([item], options))[0]!;
    }

    async scoreBatch(items: VerifyItem[], options?: { signal?: AbortSignal }): Promise<Verdict[]> {
        items.forEach((it) => requireItem(this.name, it));
        const body = JSON.stringify({
            items: items.map((it) => ({
                question: it.question ?? null,
                response: it.response,
                reference: it.reference,
            })),
        });
        const r = await postJson(this.name, this.o.url, body, {
            timeoutMs: this.o.timeoutMs,
            retries: this.o.retries,
            backoffMs: this.o.backoffMs,
            headers: this.o.headers,
            signal: options?.signal,
            maxResponseBytes: this.o.maxResponseBytes,
        });
        if (!r.ok)
            throw new Error(
                `${this.name}: ${redactUrl(this.o.url)} answered HTTP ${r.status}: ${r.text.slice(0, 200)}`,
            );
        return parseReply(this.name, r.text, items.length);
    }
}

function parseReply(name: string, text: string, n: number): Verdict[] {
    let json: unknown;
    try {
        json = JSON.parse(text);
    } catch {
        throw new SyntaxError(
            `${name}: malformed reply: expected JSON { results: [...] }, got ${JSON.stringify(text.slice(0, 120))}`,
        );
    }
    const results = (json as { results?: unknown })?.results;
    if (!Array.isArray(results) || results.length !== n)
        throw new SyntaxError(
            `${name}: malformed reply: expected { results: [...] } with ${n} entries, got ${JSON.stringify(text.slice(0, 120))}`,
        );
    return results.map((r, i) => {
        const s = (r as { score?: unknown })?.score;
        if (typeof s !== "number" || !(s >= 0 && s <= 1))
            throw new SyntaxError(
                `${name}: malformed reply: results[${i}].score: expected a number in [0, 1], got ${JSON.stringify(s)}`,
            );
        const ex = (r as { extracted?: unknown }).extracted,
            reason = (r as { reason?: unknown }).reason;
        return {
            score: s,
            extracted: typeof ex === "string" ? ex : null,
            ...(typeof reason === "string" ? { reason } : {}),
        };
    });
}

/** One item's outcome: a verdict, or the failure (kept, so that a broken verifier is never read as score 0). */
export type ScoreOutcome = { ok: true; verdict: Verdict } | { ok: false; error: string };

/** Scores every item with at most `concurrency` in flight (default 8); failures are returned, not thrown. */
export async function scoreAll(
    verifier: Verifier,
    items: VerifyItem[],
    options: { concurrency?: number; signal?: AbortSignal } = {},
): Promise<ScoreOutcome[]> {
    const limit = options.concurrency ?? 8;
    if (!Number.isInteger(limit) || limit < 1)
        throw new RangeError(`scoreAll: concurrency: expected an integer >= 1, got ${String(limit)}`);
    const out: ScoreOutcome[] = new Array(items.length);
    let next = 0;
    const worker = async () => {
        while (next < items.length) {
            options.signal?.throwIfAborted();
            const i = next++;
            try {
                out[i] = { ok: true, verdict: await verifier.score(items[i]!, { signal: options.signal }) };
            } catch (e) {
                if (options.signal?.aborted) throw options.signal.reason;
                out[i] = { ok: false, error: e instanceof Error ? e.message : String(e) };
            }
        }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    return out;
}
