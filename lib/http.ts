// http.ts: the one retrying JSON POST of the HTTP clients (OpenAICompatiblePolicy, HttpVerifier): a per-attempt
// timeout, retries with exponential backoff on network errors, timeouts, 429 and 5xx, and prompt abort.
import { sleep } from "./abort.js";

export interface PostOptions {
    timeoutMs: number;
    retries: number;
    backoffMs: number;
    headers?: Record<string, string>;
    signal?: AbortSignal;
}

/**
 * POSTs `body` as JSON. Resolves with the first reply that is not retryable (status and text; a 4xx is the
 * caller's to report) and the latency of that attempt. Rejects with signal.reason on abort, and with
 * "`where`: `url` failed after N attempts: <last reason>" when every attempt failed.
 */
export async function postJson(where: string, url: string, body: string, o: PostOptions): Promise<{ status: number; ok: boolean; text: string; latencyMs: number }> {
    let last = "";
    for (let attempt = 0; attempt <= o.retries; attempt++) {
        if (attempt > 0) await sleep(o.backoffMs * 2 ** (attempt - 1), o.signal);
        o.signal?.throwIfAborted();
        const timeout = AbortSignal.timeout(o.timeoutMs);
        const t0 = performance.now();
        try {
            const res = await fetch(url, { method: "POST", body, signal: o.signal ? AbortSignal.any([o.signal, timeout]) : timeout,
                headers: { "content-type": "application/json", ...(o.headers ?? {}) } });
            if (res.status === 429 || res.status >= 500) {
                last = `HTTP ${res.status}`;
                await res.body?.cancel();
                continue;
            }
            const text = await res.text();
            return { status: res.status, ok: res.ok, text, latencyMs: performance.now() - t0 };
        } catch (e) {
            if (o.signal?.aborted) throw o.signal.reason;
            last = timeout.aborted ? `timed out after ${o.timeoutMs} ms` : (e as Error).message;
        }
    }
    throw new Error(`${where}: ${url} failed after ${o.retries + 1} attempts: ${last}`);
}
