// fleetOptions.ts: FleetPolicy's options, and the versions of the adapters pushed to its endpoints.
import type { Tracer } from "../debate/trace.js";
import type { Dialect } from "./openaiDialect.js";

export interface FleetOptions {
    /** Base URLs ("http://10.0.0.5:8000/v1"), or a function giving the current list (read again every
     * refreshIntervalMs: endpoints added join, endpoints gone finish what they hold and get nothing more). */
    endpoints: string[] | (() => string[] | Promise<string[]>);
    /** The base model's served name. */
    model: string;
    name?: string;
    apiKey?: string;
    /** Every endpoint's dialect, or 'auto' (each asks its GET /v1/models). Defaults to 'auto'. */
    dialect?: Dialect | "auto";
    /** Ask for token log-probs. Defaults to true. */
    logprobs?: boolean;
    /** Requests in flight per endpoint. Defaults to 64 (maporl serve's maxPending; vLLM and SGLang batch more: raise it
     * there). An inference server batches the requests it holds at once, so a low value starves it. */
    concurrency?: number;
    /** One attempt. Defaults to 120,000 ms. */
    timeoutMs?: number;
    /** One request, every attempt and wait included. Defaults to 300,000 ms. */
    totalTimeoutMs?: number;
    /** Attempts per request over the endpoints (the first and its failovers). Defaults to 3. */
    maxAttempts?: number;
    /** Consecutive failures that eject an endpoint. Defaults to 2. */
    failureThreshold?: number;
    /** How often an ejected endpoint is probed (doubling with each ejection since it last answered, up to 32 x).
     * Defaults to 1,000 ms. */
    probeIntervalMs?: number;
    /** How often healthy endpoints are checked (0: only by their requests). Defaults to 10,000 ms. */
    healthCheckIntervalMs?: number;
    /** How often a function `endpoints` is read again. Defaults to 30,000 ms. */
    refreshIntervalMs?: number;
    /** Route requests with a routingKey to one endpoint. Defaults to true. */
    sticky?: boolean;
    /** One 'fleet.attempt' span per attempt (endpoint, status, latency, tokens, error). */
    tracer?: Tracer;
    runId?: string;
    /** Decoded bytes of one reply read at most (a larger reply is a failed attempt). Defaults to 64 MiB. */
    maxResponseBytes?: number;
    /** The model's vocabulary size, when known: every token id a reply names must be below it (always below 2^31). */
    vocabSize?: number;
}

/** A pushed adapter's current version. */
export interface AdapterVersion {
    name: string;
    version: number;
    served: string;
    dir: string;
}

// FNV-1a of a string, for rendezvous hashing.

/** The versions of pushed adapters: the current one per name, every loaded one (served name -> directory), the
 * requests in flight per served name; a retired version is unloaded (`unload`) once none is in flight. */
export class AdapterVersions {
    readonly current = new Map<string, AdapterVersion>();
    readonly dirs = new Map<string, string>();
    private readonly inflight = new Map<string, number>();
    private readonly retiring = new Set<string>();
    constructor(private readonly unload: (served: string) => void) {}

    /** A request to `served` starts. */
    begin(served: string): void {
        this.inflight.set(served, (this.inflight.get(served) ?? 0) + 1);
    }

    /** One request to `served` done (delta -1), or a check (0): a retired version with none in flight is unloaded. */
    release(served: string, delta = -1): void {
        const n = (this.inflight.get(served) ?? 0) + delta;
        if (n > 0) {
            this.inflight.set(served, n);
            return;
        }
        this.inflight.delete(served);
        if (!this.retiring.delete(served)) return;
        this.dirs.delete(served);
        this.unload(served);
    }

    /** The versions requests still need: every current one, and each retired one while requests for it are in flight
     * or waiting for an endpoint (an endpoint that lost its adapters must load these again, not only the current). */
    live(): { served: string; dir: string }[] {
        const out = [...this.current.values()].map((v) => ({ served: v.served, dir: v.dir }));
        for (const served of this.retiring) {
            const dir = this.dirs.get(served);
            if (dir !== undefined && (this.inflight.get(served) ?? 0) > 0) out.push({ served, dir });
        }
        return out;
    }

    /** `served` is no longer current: unloaded once its requests are answered. */
    retire(served: string): void {
        this.retiring.add(served);
        this.release(served, 0);
    }
}
