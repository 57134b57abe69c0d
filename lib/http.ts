// http.ts: the one retrying JSON POST of the HTTP clients (OpenAICompatiblePolicy, HttpVerifier): a per-attempt
// timeout, retries with exponential backoff on network errors, timeouts, 429 and 5xx (waiting as long as a 429's or
// 503's Retry-After asks, within the deadline), one deadline over all attempts, no redirect to another origin, and
// prompt abort. Worst case of one request against a server that never answers: the deadline (`totalTimeoutMs`).
// Every reply body is read as a stream and abandoned once its decoded bytes pass `maxResponseBytes` (a compressed
// body is counted after decompression), so a server cannot make the client hold more than that. Credentials in a URL
// ("http://user:password@host") are sent as Basic authorization and never appear in a message (redactUrl).
import { sleep } from "./abort.js";

/** Decoded bytes of one reply read at most, by default: 64 MiB (a chat completion with log-probs of 32K tokens is
 * about 4 MiB). */
export const DEFAULT_MAX_RESPONSE_BYTES = 64 << 20;

/** `url` with any user name and password replaced by "***" (for messages and logs). */
export function redactUrl(url: string): string {
    try {
        const u = new URL(url);
        if (u.username === "" && u.password === "") return url;
        u.username = "***";
        u.password = "";
        return u.href;
    } catch {
        return url.replace(/\/\/[^/@\s]*@/, "//***@");
    }
}

/** A URL's credentials split off: the URL without them, and the Basic authorization header they make (or null). */
export function splitCredentials(url: string): { url: string; authorization: string | null } {
    const u = new URL(url);
    if (u.username === "" && u.password === "") return { url, authorization: null };
    const user = decodeURIComponent(u.username),
        pass = decodeURIComponent(u.password);
    u.username = "";
    u.password = "";
    return {
        url: u.href.replace(/\/$/, url.endsWith("/") ? "/" : ""),
        authorization: `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}`,
    };
}

/** A reply body over its bound: not retried (the same server would send the same). */
export class ResponseTooLargeError extends Error {}

/** The body of `res` as text, read chunk by chunk and abandoned (the stream cancelled) once it passes `maxBytes`. */
export async function readBounded(where: string, url: string, res: Response, maxBytes: number): Promise<string> {
    const declared = Number(res.headers.get("content-length"));
    const tooLarge = (n: string) =>
        new ResponseTooLargeError(
            `${where}: ${redactUrl(url)} sent a reply of ${n} bytes, over maxResponseBytes ` +
                `(${maxBytes}); raise maxResponseBytes if the server is trusted`,
        );
    if (res.headers.get("content-encoding") === null && Number.isFinite(declared) && declared > maxBytes) {
        await res.body?.cancel().catch(() => undefined);
        throw tooLarge(String(declared));
    }
    if (res.body === null) return "";
    const reader = res.body.getReader();
    const chunks: Uint8Array[] = [];
    let n = 0;
    for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        n += value.byteLength;
        if (n > maxBytes) {
            await reader.cancel().catch(() => undefined);
            throw tooLarge(`more than ${maxBytes}`);
        }
        chunks.push(value);
    }
    return Buffer.concat(chunks, n).toString("utf8");
}

export interface PostOptions {
    /** One attempt. */
    timeoutMs: number;
    retries: number;
    backoffMs: number;
    /** Every attempt and wait together; defaults to timeoutMs x (retries + 1) plus the backoffs. */
    totalTimeoutMs?: number;
    headers?: Record<string, string>;
    signal?: AbortSignal;
    /** Decoded bytes of a reply read at most; defaults to DEFAULT_MAX_RESPONSE_BYTES. */
    maxResponseBytes?: number;
}

/** Same-origin redirects followed at most. */
const MAX_REDIRECTS = 5;

/** Seconds or an HTTP date (RFC 9110 10.2.3) as milliseconds from now; null when absent or unreadable. */
export function retryAfterMs(value: string | null, now = Date.now()): number | null {
    if (value === null) return null;
    const v = value.trim();
    if (/^\d+$/.test(v)) return Number(v) * 1000;
    const t = Date.parse(v);
    return Number.isNaN(t) ? null : Math.max(0, t - now);
}

/**
 * POSTs `body` as JSON. Resolves with the first reply that is not retryable (status and text; a 4xx is the
 * caller's to report), the latency of that attempt and the attempts made. Rejects with signal.reason on abort; with
 * "`where`: `url` failed after N attempts: <last reason>" when every attempt failed or the deadline passed; and
 * at once when the server redirects to another origin (the body and its credentials are not sent there).
 */
export async function postJson(
    where: string,
    url: string,
    body: string,
    o: PostOptions,
): Promise<{ status: number; ok: boolean; text: string; latencyMs: number; attempts: number }> {
    const total = o.totalTimeoutMs ?? o.timeoutMs * (o.retries + 1) + o.backoffMs * (2 ** o.retries - 1);
    const cred = splitCredentials(url),
        shown = redactUrl(url);
    url = cred.url;
    const headers = {
        "content-type": "application/json",
        ...(cred.authorization ? { authorization: cred.authorization } : {}),
        ...(o.headers ?? {}),
    };
    const maxBytes = o.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    const deadline = performance.now() + total;
    let last = "",
        attempts = 0;
    const fail = () => new Error(`${where}: ${shown} failed after ${attempts} attempts: ${last}`);
    let wait = 0;
    for (let attempt = 0; attempt <= o.retries; attempt++) {
        if (attempt > 0) {
            const left = deadline - performance.now();
            if (wait > left) {
                last += ` (the next attempt would start after the ${total} ms deadline)`;
                break;
            }
            await sleep(wait, o.signal);
        }
        o.signal?.throwIfAborted();
        const budget =
            o.totalTimeoutMs === undefined ? o.timeoutMs : Math.min(o.timeoutMs, deadline - performance.now());
        if (budget <= 0) break;
        const timeout = AbortSignal.timeout(Math.max(1, Math.ceil(budget)));
        const t0 = performance.now();
        attempts++;
        wait = o.backoffMs * 2 ** attempt;
        try {
            let target = url,
                res: Response;
            for (let hop = 0; ; hop++) {
                res = await fetch(target, {
                    method: "POST",
                    body,
                    redirect: "manual",
                    signal: o.signal ? AbortSignal.any([o.signal, timeout]) : timeout,
                    headers,
                });
                if (res.status < 300 || res.status >= 400) break;
                await res.body?.cancel();
                const location = res.headers.get("location");
                const next = location === null ? null : new URL(location, target);
                if (
                    next === null ||
                    next.origin !== new URL(url).origin ||
                    (res.status !== 307 && res.status !== 308) ||
                    hop >= MAX_REDIRECTS
                )
                    throw new RedirectError(
                        `${where}: ${redactUrl(target)} answered HTTP ${res.status} redirecting to ${location === null ? "(no location)" : next!.href}: ` +
                            (next && next.origin !== new URL(url).origin
                                ? "another origin, not followed (point baseUrl at the server itself)"
                                : hop >= MAX_REDIRECTS
                                  ? `more than ${MAX_REDIRECTS} redirects`
                                  : "only same-origin 307 / 308 redirects are followed"),
                    );
                target = next.href;
            }
            if (res.status === 429 || res.status >= 500) {
                last = `HTTP ${res.status}`;
                const after =
                    res.status === 429 || res.status === 503 ? retryAfterMs(res.headers.get("retry-after")) : null;
                if (after !== null) {
                    wait = Math.max(wait, after);
                    last += ` (Retry-After ${res.headers.get("retry-after")})`;
                }
                await res.body?.cancel();
                continue;
            }
            const text = await readBounded(where, shown, res, maxBytes);
            return { status: res.status, ok: res.ok, text, latencyMs: performance.now() - t0, attempts };
        } catch (e) {
            if (o.signal?.aborted) throw o.signal.reason;
            if (e instanceof RedirectError || e instanceof ResponseTooLargeError) throw e;
            last = timeout.aborted ? `timed out after ${Math.round(budget)} ms` : (e as Error).message;
        }
    }
    throw fail();
}

class RedirectError extends Error {}

/** GETs `url` once (no retries: health checks and probes, where a failure is the answer): status and text, or a
 * rejection naming the URL on a network error or when `timeoutMs` passes. */
export async function getJson(
    where: string,
    url: string,
    o: { timeoutMs: number; headers?: Record<string, string>; signal?: AbortSignal; maxResponseBytes?: number },
): Promise<{ status: number; ok: boolean; text: string; latencyMs: number }> {
    const timeout = AbortSignal.timeout(Math.max(1, Math.ceil(o.timeoutMs)));
    const t0 = performance.now();
    const cred = splitCredentials(url),
        shown = redactUrl(url);
    try {
        const res = await fetch(cred.url, {
            redirect: "error",
            signal: o.signal ? AbortSignal.any([o.signal, timeout]) : timeout,
            headers: { ...(cred.authorization ? { authorization: cred.authorization } : {}), ...(o.headers ?? {}) },
        });
        const text = await readBounded(where, shown, res, o.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES);
        return { status: res.status, ok: res.ok, text, latencyMs: performance.now() - t0 };
    } catch (e) {
        if (o.signal?.aborted) throw o.signal.reason;
        if (e instanceof ResponseTooLargeError) throw e;
        throw new Error(
            `${where}: GET ${shown} failed: ${timeout.aborted ? `timed out after ${Math.round(o.timeoutMs)} ms` : (e as Error).message}`,
        );
    }
}
