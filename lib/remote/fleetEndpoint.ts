// fleetEndpoint.ts: one server of a FleetPolicy: its dialect, health (consecutive failures eject it; a probe of
// GET /health, else /v1/models, re-admits it), the requests in flight, the LoRA adapters loaded on it (vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter; SGLang's /load_lora_adapter and /unload_lora_adapter), and its
// figures (requests, errors, failovers, tokens, latency).
import { getJson, postJson, redactUrl } from "../http.js";
import { type Dialect, detectDialect, serverRoot } from "./openaiDialect.js";
import type { Tracer } from "../debate/trace.js";
import type { GenerateRequest, Generation } from "../policy/types.js";

/** An endpoint's figures, as FleetPolicy.stats() reports them. */
export interface EndpointStats {
    url: string;
    healthy: boolean;
    dialect: Dialect | null;
    /** Requests being answered now. */
    outstanding: number;
    /** Attempts sent, answered, failed (network error, timeout, 5xx, 429, malformed or oversized reply, 4xx). */
    requests: number;
    ok: number;
    errors: number;
    /** Requests that failed here and moved to another endpoint. */
    failovers: number;
    /** Times the endpoint was taken out of rotation, and put back after a probe. */
    ejections: number;
    readmissions: number;
    /** Adapters found missing on a server that answers (restarted between two health checks) and loaded again. */
    adapterReloads: number;
    promptTokens: number;
    completionTokens: number;
    /** Latency of the answered attempts (ms): mean, median and 95th percentile of the last 1,000. */
    latencyMs: { mean: number; p50: number; p95: number };
    /** The adapters (served names) loaded here. */
    adapters: string[];
    lastError: string | null;
}

export interface EndpointSettings {
    where: string;
    timeoutMs: number;
    headers: Record<string, string>;
    dialect: Dialect | "auto";
    failureThreshold: number;
}

const quantile = (xs: number[], q: number) => {
    if (xs.length === 0) return 0;
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

export class Endpoint {
    healthy = true;
    removed = false;
    outstanding = 0;
    /** Requests waiting for a slot here (sticky routing). */
    waiting = 0;
    consecutiveFailures = 0;
    /** Ejections since the endpoint last answered: the wait before the next probe doubles with each (a server whose
     * /health passes while its requests fail is not re-admitted every probe interval), up to 32 x. */
    ejectionStreak = 0;
    /** Served adapter names known to be loaded here. */
    readonly loaded = new Set<string>();
    probing: ReturnType<typeof setTimeout> | null = null;
    private dialectP: Promise<Dialect> | null = null;
    private dialectKnown: Dialect | null = null;
    private readonly s = {
        requests: 0,
        ok: 0,
        errors: 0,
        failovers: 0,
        ejections: 0,
        readmissions: 0,
        adapterReloads: 0,
        promptTokens: 0,
        completionTokens: 0,
        latSum: 0,
    };
    /** Adapter versions being loaded again here (one load at a time per version). */
    readonly restoring = new Set<string>();
    private readonly lat: number[] = [];
    private lastError: string | null = null;

    /** The URL as messages and stats show it (credentials redacted). */
    readonly shown: string;

    constructor(
        readonly url: string,
        private readonly o: EndpointSettings,
    ) {
        this.shown = redactUrl(url);
        if (o.dialect !== "auto") {
            this.dialectKnown = o.dialect;
            this.dialectP = Promise.resolve(o.dialect);
        }
    }

    get root(): string {
        return serverRoot(this.url);
    }

    /** The endpoint's dialect (asked once under 'auto'; asked again after a failed detection or a re-admission). */
    dialect(signal?: AbortSignal): Promise<Dialect> {
        if (this.dialectP === null) {
            const p = detectDialect(this.o.where, this.url, {
                timeoutMs: Math.min(this.o.timeoutMs, 10_000),
                headers: this.o.headers,
                ...(signal ? { signal } : {}),
            });
            this.dialectP = p;
            p.then(
                (d) => {
                    this.dialectKnown = d;
                },
                () => {
                    if (this.dialectP === p) this.dialectP = null;
                },
            );
        }
        return this.dialectP;
    }

    /** Records an answered attempt. */
    succeeded(latencyMs: number, promptTokens: number, completionTokens: number): void {
        this.s.requests++;
        this.s.ok++;
        this.s.promptTokens += promptTokens;
        this.s.completionTokens += completionTokens;
        this.s.latSum += latencyMs;
        this.lat.push(latencyMs);
        if (this.lat.length > 1000) this.lat.shift();
        this.consecutiveFailures = 0;
        this.ejectionStreak = 0;
    }

    /** Records a failed attempt; true when it ejects the endpoint (failureThreshold consecutive failures). */
    failed(message: string, movedAway: boolean): boolean {
        this.rejected(message, movedAway);
        return this.strike();
    }

    /** Records an attempt the server refused (a 4xx): counted and kept as lastError, but not yet held against the
     * endpoint's health; strike() does that once the same request succeeds elsewhere. */
    rejected(message: string, movedAway: boolean): void {
        this.s.requests++;
        this.s.errors++;
        if (movedAway) this.s.failovers++;
        this.lastError = message;
    }

    /** One failure against the endpoint's health; true when it ejects it (failureThreshold consecutive failures). */
    strike(): boolean {
        this.consecutiveFailures++;
        if (this.healthy && this.consecutiveFailures >= this.o.failureThreshold) {
            this.eject();
            return true;
        }
        return false;
    }

    /** Takes the endpoint out of rotation. Its adapters are forgotten: a server that restarts has none, so they are
     * loaded again when it is re-admitted. */
    eject(): void {
        if (!this.healthy) return;
        this.healthy = false;
        this.s.ejections++;
        this.ejectionStreak++;
        this.loaded.clear();
        this.dialectP = this.o.dialect === "auto" ? null : this.dialectP;
    }

    /** One probe: GET /health (vLLM, SGLang, maporl serve), else GET /v1/models; true when the server answers 200. */
    async probe(): Promise<boolean> {
        const o = { timeoutMs: Math.min(this.o.timeoutMs, 2000), headers: this.o.headers };
        try {
            const h = await getJson(this.o.where, `${this.root}/health`, o);
            if (h.ok) return true;
            if (h.status !== 404) return false;
            return (await getJson(this.o.where, `${this.url}/models`, o)).ok;
        } catch {
            return false;
        }
    }

    /** The model ids the server lists (GET /v1/models), or null when it does not answer. */
    async servedModels(): Promise<string[] | null> {
        try {
            const r = await getJson(this.o.where, `${this.url}/models`, {
                timeoutMs: Math.min(this.o.timeoutMs, 2000),
                headers: this.o.headers,
            });
            if (!r.ok) return null;
            const j = JSON.parse(r.text) as { data?: { id?: unknown }[] };
            return Array.isArray(j.data) ? j.data.map((m) => String(m.id)) : null;
        } catch {
            return null;
        }
    }

    /** Loads `served` again after the server was found without it (counted in adapterReloads). */
    async reload(served: string, dir: string): Promise<void> {
        if (this.restoring.has(served)) return;
        this.restoring.add(served);
        this.loaded.delete(served); // requests for it go elsewhere meanwhile
        try {
            await this.loadAdapter(served, dir);
            this.s.adapterReloads++;
        } catch (e) {
            if ((await this.servedModels())?.includes(served))
                this.loaded.add(served); // loaded meanwhile (a push): it is there
            else throw e;
        } finally {
            this.restoring.delete(served);
        }
    }

    readmit(): void {
        this.healthy = true;
        this.consecutiveFailures = 0;
        this.s.readmissions++;
    }

    /** Loads a PEFT adapter directory as model `served` on this server (its runtime LoRA endpoint). */
    async loadAdapter(served: string, dir: string): Promise<void> {
        const d = await this.dialect();
        if (d === "openai")
            throw new Error(
                `${this.o.where}: ${this.shown} speaks the plain OpenAI dialect: no runtime LoRA loading (use vLLM, SGLang or maporl serve)`,
            );
        const url = d === "sglang" ? `${this.root}/load_lora_adapter` : `${this.root}/v1/load_lora_adapter`;
        const r = await postJson(this.o.where, url, JSON.stringify({ lora_name: served, lora_path: dir }), {
            timeoutMs: this.o.timeoutMs,
            retries: 1,
            backoffMs: 100,
            headers: this.o.headers,
        });
        let sglangFailure: string | null = null;
        if (r.ok && d === "sglang") {
            try {
                const j = JSON.parse(r.text) as { success?: unknown; error_message?: unknown };
                if (j.success === false) sglangFailure = String(j.error_message ?? "success: false");
            } catch {
                /* a plain-text success */
            }
        }
        if (!r.ok || sglangFailure !== null)
            throw new Error(
                `${this.o.where}: loading adapter ${served} from ${dir} on ${this.shown}: ${sglangFailure ?? `HTTP ${r.status}: ${r.text.slice(0, 300)}`}` +
                    (r.status === 404 && d === "vllm"
                        ? " (vLLM needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; maporl serve needs --enable-lora)"
                        : ""),
            );
        this.loaded.add(served);
    }

    /** Unloads adapter `served` (a server that no longer has it counts as done). */
    async unloadAdapter(served: string): Promise<void> {
        this.loaded.delete(served);
        const d = await this.dialect();
        const url = d === "sglang" ? `${this.root}/unload_lora_adapter` : `${this.root}/v1/unload_lora_adapter`;
        const r = await postJson(this.o.where, url, JSON.stringify({ lora_name: served }), {
            timeoutMs: this.o.timeoutMs,
            retries: 1,
            backoffMs: 100,
            headers: this.o.headers,
        });
        if (!r.ok && r.status !== 404)
            throw new Error(
                `${this.o.where}: unloading adapter ${served} on ${this.shown}: HTTP ${r.status}: ${r.text.slice(0, 300)}`,
            );
    }

    stats(): EndpointStats {
        const s = this.s,
            n = s.ok;
        return {
            url: this.shown,
            healthy: this.healthy && !this.removed,
            dialect: this.dialectKnown,
            outstanding: this.outstanding,
            requests: s.requests,
            ok: s.ok,
            errors: s.errors,
            failovers: s.failovers,
            ejections: s.ejections,
            readmissions: s.readmissions,
            adapterReloads: s.adapterReloads,
            promptTokens: s.promptTokens,
            completionTokens: s.completionTokens,
            latencyMs: { mean: n ? s.latSum / n : 0, p50: quantile(this.lat, 0.5), p95: quantile(this.lat, 0.95) },
            adapters: [...this.loaded],
            lastError: this.lastError,
        };
    }
}

/** One attempt of a fleet request at `ep`, as a "fleet.attempt" span on the tracer (when there is one). */
export function traceAttempt(
    o: { tracer?: Tracer; runId: string; model: string },
    ep: Endpoint,
    r: GenerateRequest,
    served: string | null,
    start: number,
    t0: number,
    attempt: number,
    g: Generation | null,
    error?: string,
): void {
    o.tracer?.span({
        name: "fleet.attempt",
        runId: o.runId,
        episode: r.routingKey ?? "",
        agent: -1,
        turn: -1,
        parent: 0,
        startMs: start,
        latencyMs: performance.now() - t0,
        promptTokens: g?.usage.promptTokens ?? 0,
        completionTokens: g?.usage.completionTokens ?? 0,
        finishReason: g?.finishReason ?? "error",
        endpoint: ep.shown,
        model: served ?? o.model,
        attempts: attempt,
        ...(error !== undefined ? { error } : {}),
    });
}

/** FNV-1a of a string, for rendezvous hashing. */
export function hash(s: string): number {
    let h = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) {
        h ^= s.charCodeAt(i);
        h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h;
}
