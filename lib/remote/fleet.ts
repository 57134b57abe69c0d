// fleet.ts: one Policy over many OpenAI-compatible endpoints (vLLM / SGLang replicas, `maporl serve` processes), as
// the rollout side of a training job scales out:
//   - routing: a request with a routingKey goes to the same endpoint while it is healthy (rendezvous hashing, so that a
//     server's prefix cache serves a growing discussion); others to the endpoint with the fewest requests in flight;
//     at most `concurrency` requests in flight per endpoint;
//   - health: `failureThreshold` consecutive failures (network error, timeout, 5xx, 429, malformed reply) eject an
//     endpoint; a probe (GET /health, else /v1/models) re-admits it, every probeIntervalMs, doubling with each
//     ejection since it last answered (up to 32 x); healthy endpoints are checked every healthCheckIntervalMs; a list
//     given as a function is read again every refreshIntervalMs;
//   - failover: a failed attempt moves the request to another endpoint (up to maxAttempts, within totalTimeoutMs).
//     Attempts run one after another and an abandoned one is aborted, so an answer is never taken twice; each
//     Generation says which endpoint answered and after how many attempts;
//   - adapters: pushAdapter(name, dir) loads a new version of a LoRA adapter on every endpoint (as "<name>-v<N>"),
//     then switches adapter(name)'s policy to it and unloads the previous version once its requests are answered;
//     an endpoint re-admitted later gets the versions requests still need (current, or retired but asked for) before
//     it serves them. Generations carry the served name (their weight version).
// Token ids and log-probs come back as OpenAICompatiblePolicy's do (openaiDialect.ts), per endpoint dialect.
import { randomUUID } from "node:crypto";

import { sleep } from "../abort.js";
import type { Tracer } from "../debate/trace.js";
import { DEFAULT_MAX_RESPONSE_BYTES, postJson, redactUrl } from "../http.js";
import { describe } from "../validate.js";
import { Endpoint, type EndpointStats, hash, traceAttempt } from "./fleetEndpoint.js";
import { FleetHealth } from "./fleetHealth.js";
import { type AdapterVersion, AdapterVersions, type FleetOptions } from "./fleetOptions.js";

export type { AdapterVersion, FleetOptions } from "./fleetOptions.js";

class ClientError extends Error {} // a 4xx that is the request's own fault: no failover
class ModelMissing extends Error {} // the endpoint does not have the requested adapter (a 404): try another
import { type BodyOptions, chatBody, DIALECTS, fillPromptIds, parseChat } from "./openaiDialect.js";
import type { GenerateRequest, Generation, Policy, SettledGeneration } from "../policy/types.js";
import { settledPolicy } from "../policy/settle.js";

export class FleetPolicy implements Policy {
    readonly name: string;
    private readonly o: Required<
        Omit<FleetOptions, "apiKey" | "name" | "endpoints" | "tracer" | "runId" | "vocabSize">
    > & { tracer?: Tracer; runId: string; vocabSize?: number };
    private readonly list: FleetOptions["endpoints"];
    private readonly eps = new Map<string, Endpoint>();
    private readonly headers: Record<string, string>;
    private waiters: (() => void)[] = [];
    private timers: ReturnType<typeof setInterval>[] = [];
    private started: Promise<void> | null = null;
    private closed = false;
    private rr = 0;
    // Pushed adapters: the current version per name, every loaded version, requests in flight per version.
    private readonly pushed = new AdapterVersions((served) => {
        for (const ep of this.eps.values())
            if (ep.loaded.has(served)) void ep.unloadAdapter(served).catch(() => undefined);
    });
    private readonly current = this.pushed.current;
    private readonly health: FleetHealth;

    constructor(options: FleetOptions) {
        const fn = "FleetPolicy";
        if (options === null || typeof options !== "object")
            throw new TypeError(`${fn}: options: expected an object, got ${describe(options)}`);
        if (typeof options.model !== "string" || !options.model)
            throw new TypeError(`${fn}: model: expected the served model name, got ${describe(options.model)}`);
        const e = options.endpoints;
        if (typeof e !== "function" && (!Array.isArray(e) || e.length === 0 || e.some((u) => typeof u !== "string")))
            throw new TypeError(
                `${fn}: endpoints: expected a non-empty array of base URLs or a function returning one, got ${describe(e)}`,
            );
        if (Array.isArray(e))
            e.forEach((u) => {
                try {
                    new URL(u);
                } catch {
                    throw new TypeError(`${fn}: endpoints: not a URL: ${JSON.stringify(redactUrl(u))}`);
                }
            });
        const num = (k: keyof FleetOptions, d: number, min: number, int = false) => {
            const v = options[k];
            if (v === undefined) return d;
            if (typeof v !== "number" || !Number.isFinite(v) || v < min || (int && !Number.isInteger(v)))
                throw new RangeError(
                    `${fn}: ${k}: expected ${int ? "an integer" : "a number"} >= ${min}, got ${describe(v)}`,
                );
            return v;
        };
        const dialect = options.dialect ?? "auto";
        if (!DIALECTS.includes(dialect))
            throw new RangeError(
                `${fn}: dialect: expected ${DIALECTS.map((x) => `'${x}'`).join(", ")}, got ${JSON.stringify(dialect)}`,
            );
        this.o = {
            model: options.model,
            dialect,
            logprobs: options.logprobs ?? true,
            concurrency: num("concurrency", 64, 1, true),
            timeoutMs: num("timeoutMs", 120_000, 1),
            totalTimeoutMs: num("totalTimeoutMs", 300_000, 1),
            maxAttempts: num("maxAttempts", 3, 1, true),
            failureThreshold: num("failureThreshold", 2, 1, true),
            probeIntervalMs: num("probeIntervalMs", 1000, 1),
            healthCheckIntervalMs: num("healthCheckIntervalMs", 10_000, 0),
            refreshIntervalMs: num("refreshIntervalMs", 30_000, 1),
            sticky: options.sticky ?? true,
            ...(options.tracer ? { tracer: options.tracer } : {}),
            runId: options.runId ?? "run",
            maxResponseBytes: num("maxResponseBytes", DEFAULT_MAX_RESPONSE_BYTES, 1, true),
        };
        this.health = new FleetHealth({
            current: this.current,
            live: () => this.pushed.live(),
            probeIntervalMs: this.o.probeIntervalMs,
            closed: () => this.closed,
            notify: () => this.notify(),
        });
        if (options.vocabSize !== undefined) this.o.vocabSize = num("vocabSize", 0, 1, true);
        if ((this.o.vocabSize ?? 0) > 2 ** 31)
            throw new RangeError(
                `${fn}: vocabSize: expected an integer in [1, 2^31], got ${describe(options.vocabSize)}`,
            );
        this.name = options.name ?? `fleet:${options.model}`;
        this.headers = options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {};
        this.list = e;
        if (Array.isArray(e)) this.setEndpoints(e);
    }

    /** The endpoints now in rotation or ejected (not those removed by a refresh). */
    get endpoints(): string[] {
        return [...this.eps.values()].filter((x) => !x.removed).map((x) => x.shown);
    }

    /** Every endpoint's figures (removed ones too, while they are known). */
    stats(): EndpointStats[] {
        return [...this.eps.values()].map((x) => x.stats());
    }

    /** Reads a function `endpoints` again now. */
    async refresh(): Promise<void> {
        if (typeof this.list !== "function") return;
        const urls = await this.list();
        if (!Array.isArray(urls) || urls.some((u) => typeof u !== "string" || !URL.canParse(u)))
            throw new TypeError(`${this.name}: endpoints(): expected an array of base URLs, got ${describe(urls)}`);
        this.setEndpoints(urls);
    }

    private setEndpoints(urls: string[]): void {
        const keep = new Set(urls.map((u) => u.replace(/\/+$/, "")));
        for (const [u, ep] of this.eps) if (!keep.has(u)) ep.removed = true;
        for (const u of keep) {
            const ep = this.eps.get(u);
            if (ep) {
                ep.removed = false;
                continue;
            }
            this.eps.set(
                u,
                new Endpoint(u, {
                    where: this.name,
                    timeoutMs: this.o.timeoutMs,
                    headers: this.headers,
                    dialect: this.o.dialect,
                    failureThreshold: this.o.failureThreshold,
                }),
            );
        }
        this.notify();
    }

    // Timers (health checks, list refresh) start with the first request; close() stops them.
    private start(): Promise<void> {
        this.started ??= (async () => {
            if (typeof this.list === "function") {
                await this.refresh();
                const t = setInterval(() => {
                    this.refresh().catch(() => undefined);
                }, this.o.refreshIntervalMs);
                t.unref();
                this.timers.push(t);
            }
            if (this.o.healthCheckIntervalMs > 0) {
                const t = setInterval(() => {
                    for (const ep of this.eps.values()) if (ep.healthy && !ep.removed) void this.health.check(ep);
                }, this.o.healthCheckIntervalMs);
                t.unref();
                this.timers.push(t);
            }
        })();
        return this.started;
    }

    /** Stops the health checks, probes and refreshes (requests in flight finish). */
    close(): void {
        this.closed = true;
        for (const t of this.timers) clearInterval(t);
        this.timers = [];
        for (const ep of this.eps.values())
            if (ep.probing) {
                clearTimeout(ep.probing);
                ep.probing = null;
            }
        this.notify();
    }

    private notify(): void {
        const w = this.waiters;
        this.waiters = [];
        for (const f of w) f();
    }

    // Waits for a change (a slot freed, an endpoint re-admitted, an adapter loaded), at most `ms`.
    private async change(ms: number, signal?: AbortSignal): Promise<void> {
        let wake!: () => void;
        const p = new Promise<void>((r) => {
            wake = r;
        });
        this.waiters.push(wake);
        await Promise.race([p, sleep(Math.max(1, Math.min(ms, 250)), signal)]);
    }

    // An endpoint for a request to `served` (null: the base), preferring those not yet tried, with one of its slots
    // taken (the caller releases it); waits for a slot or a re-admission until the deadline.
    private async pick(
        key: string | undefined,
        served: string | null,
        tried: Set<Endpoint>,
        deadline: number,
        signal?: AbortSignal,
    ): Promise<Endpoint> {
        let counted: Endpoint | null = null;
        try {
            for (;;) {
                signal?.throwIfAborted();
                if (this.closed) throw new Error(`${this.name}: closed while the request waited for an endpoint`);
                const has = (ep: Endpoint) => served === null || !this.pushed.dirs.has(served) || ep.loaded.has(served);
                const cands = [...this.eps.values()].filter((ep) => ep.healthy && !ep.removed && has(ep));
                const untried = cands.filter((ep) => !tried.has(ep)),
                    pool = untried.length > 0 ? untried : cands;
                const free = pool.filter((ep) => ep.outstanding < this.o.concurrency);
                let target: Endpoint | undefined;
                if (key !== undefined && this.o.sticky && pool.length > 0) {
                    // The key's endpoint (rendezvous hashing: it moves only when that endpoint leaves), waited for when
                    // busy, unless as many requests already wait there as it takes at once and another has room.
                    const sticky = pool.reduce((a, b) =>
                        hash(`${key}\u0000${b.url}`) > hash(`${key}\u0000${a.url}`) ? b : a,
                    );
                    if (
                        sticky.outstanding < this.o.concurrency ||
                        free.length === 0 ||
                        sticky.waiting - (counted === sticky ? 1 : 0) < this.o.concurrency
                    )
                        target = sticky;
                    if (target && target.outstanding >= this.o.concurrency && counted !== target) {
                        if (counted) counted.waiting--;
                        target.waiting++;
                        counted = target;
                    }
                }
                if (target === undefined && free.length > 0) {
                    const least = Math.min(...free.map((ep) => ep.outstanding));
                    const best = free.filter((ep) => ep.outstanding === least);
                    target = best[this.rr++ % best.length]!;
                }
                if (target && target.outstanding < this.o.concurrency) {
                    target.outstanding++; // in the step that checked it: no other request can take it meanwhile
                    return target;
                }
                const left = deadline - performance.now();
                if (left <= 0) {
                    const all = [...this.eps.values()].filter((ep) => !ep.removed);
                    throw new Error(
                        `${this.name}: no endpoint could take the request within the ${this.o.totalTimeoutMs} ms deadline (` +
                            (all.length === 0
                                ? "no endpoints"
                                : all
                                      .map(
                                          (ep) =>
                                              `${ep.shown}: ${!ep.healthy ? "ejected" : !has(ep) ? `without ${served}` : `${ep.outstanding} in flight`}`,
                                      )
                                      .join("; ")) +
                            ")",
                    );
                }
                await this.change(left, signal);
            }
        } finally {
            if (counted) counted.waiting--;
        }
    }

    // One request over the fleet: attempts on endpoints one after another until one answers.
    private async one(r: GenerateRequest, i: number, served: string | null, signal?: AbortSignal): Promise<Generation> {
        await this.start();
        const deadline = performance.now() + this.o.totalTimeoutMs,
            tried = new Set<Endpoint>(),
            errors: string[] = [];
        // Endpoints that refused this request with a 4xx: if another endpoint answers it, the refusal was theirs (a
        // strike against their health); if a second endpoint refuses it too, it is the request's fault.
        const refused: Endpoint[] = [];
        for (let attempt = 1; ; attempt++) {
            const ep = await this.pick(r.routingKey, served, tried, deadline, signal); // (its slot taken)
            const start = Date.now(),
                t0 = performance.now();
            try {
                const g = await this.attempt(ep, r, i, served, deadline, signal);
                ep.succeeded(g.latencyMs, g.usage.promptTokens, g.usage.completionTokens);
                for (const x of refused) if (x.strike()) this.health.scheduleProbe(x);
                traceAttempt(this.o, ep, r, served, start, t0, attempt, g);
                return { ...g, endpoint: ep.shown, attempts: attempt };
            } catch (e) {
                if (signal?.aborted) throw signal.reason;
                const msg = e instanceof Error ? e.message : String(e);
                traceAttempt(this.o, ep, r, served, start, t0, attempt, null, msg);
                tried.add(ep);
                errors.push(`${ep.shown}: ${msg}`);
                if (e instanceof ClientError) {
                    const elsewhere = [...this.eps.values()].some((x) => x.healthy && !x.removed && !tried.has(x));
                    const again =
                        refused.length === 0 &&
                        elsewhere &&
                        attempt < this.o.maxAttempts &&
                        performance.now() < deadline;
                    ep.rejected(msg, again);
                    refused.push(ep);
                    if (!again)
                        throw refused.length > 1
                            ? new ClientError(
                                  `${this.name}: the request was refused by ${refused.length} endpoints: ${errors.join(" | ")}`,
                              )
                            : e;
                    continue;
                }
                if (e instanceof ModelMissing) {
                    // the server lost it (restarted): load it there again, meanwhile elsewhere
                    ep.loaded.delete(served!);
                    const v = this.pushed.live().find((x) => x.served === served);
                    if (v) void this.health.restore(ep, [v]);
                } else if (ep.failed(msg, attempt < this.o.maxAttempts)) this.health.scheduleProbe(ep);
                if (attempt >= this.o.maxAttempts || performance.now() >= deadline)
                    throw new Error(
                        `${this.name}: the request failed on ${attempt} attempt${attempt > 1 ? "s" : ""}: ${errors.join(" | ")}`,
                    );
            } finally {
                ep.outstanding--;
                this.notify();
            }
        }
    }

    private async attempt(
        ep: Endpoint,
        r: GenerateRequest,
        i: number,
        served: string | null,
        deadline: number,
        signal?: AbortSignal,
    ): Promise<Generation> {
        const dialect = await ep.dialect(signal);
        const o: BodyOptions = {
            model: this.o.model,
            adapter: served ?? undefined,
            dialect,
            logprobs: this.o.logprobs,
            vocabSize: this.o.vocabSize,
        };
        const { json, messages } = chatBody(this.name, r, i, o);
        const budget = Math.max(1, Math.min(this.o.timeoutMs, deadline - performance.now()));
        const post = {
            timeoutMs: budget,
            totalTimeoutMs: budget,
            retries: 0,
            backoffMs: 0,
            headers: this.headers,
            maxResponseBytes: this.o.maxResponseBytes,
            ...(signal ? { signal } : {}),
        };
        const res = await postJson(this.name, `${ep.url}/chat/completions`, json, post);
        if (!res.ok) {
            const text = `HTTP ${res.status}: ${res.text.slice(0, 300)}`;
            if (res.status === 404 && served !== null && this.pushed.dirs.has(served)) throw new ModelMissing(text);
            throw new ClientError(`${this.name}: ${ep.shown}: ${text}`);
        }
        const { generation, promptIdsMissing } = parseChat(this.name, res.text, res.latencyMs, o);
        if (promptIdsMissing) await fillPromptIds(this.name, ep.url, generation, messages, { ...o, ...post });
        return generation;
    }

    // Runs the requests for `target()` (the served name at request time: an adapter's current version), each alone
    // over the fleet.
    private async run(
        requests: GenerateRequest[],
        target: () => string | null,
        signal?: AbortSignal,
    ): Promise<Promise<Generation>[]> {
        if (!Array.isArray(requests)) throw new TypeError(`${this.name}: requests: expected an array`);
        requests.forEach((r, i) =>
            chatBody(this.name, r, i, { model: this.o.model, dialect: "openai", logprobs: false }),
        ); // checked before any is sent
        if (this.closed) throw new Error(`${this.name}: closed`);
        return requests.map(async (r, i) => {
            const served = target();
            if (served !== null) this.pushed.begin(served);
            try {
                return await this.one(r, i, served, signal);
            } finally {
                if (served !== null) this.pushed.release(served);
            }
        });
    }

    private gen(target: () => string | null) {
        return settledPolicy((requests, signal) => this.run(requests, target, signal));
    }

    /** Requests to the base model: each request alone over the fleet; rejects with the first failure. */
    async generate(requests: GenerateRequest[], options: { signal?: AbortSignal } = {}): Promise<Generation[]> {
        return this.gen(() => null).generate(requests, options);
    }

    /** Every request's outcome (a failed request does not stop the others); rejects only on abort or a bad request. */
    async generateSettled(
        requests: GenerateRequest[],
        options: { signal?: AbortSignal } = {},
    ): Promise<SettledGeneration[]> {
        return this.gen(() => null).generateSettled(requests, options);
    }

    /** A Policy for a model the servers serve by name (an adapter given to them at start, e.g. vLLM's --lora-modules). */
    policy(model: string): Policy {
        if (typeof model !== "string" || !model)
            throw new TypeError(`${this.name}.policy: model: expected a served model name, got ${describe(model)}`);
        const served = model === this.o.model ? null : model;
        return { name: `${this.name}/${model}`, ...this.gen(() => served) };
    }

    /** A Policy for the current version of pushed adapter `name` (pushAdapter): a request asks for the version current
     * when it starts, and its Generation's `model` names it. */
    adapter(name: string): Policy {
        if (typeof name !== "string" || !name)
            throw new TypeError(`${this.name}.adapter: name: expected an adapter name, got ${describe(name)}`);
        return {
            name: `${this.name}/${name}`,
            ...this.gen(() => {
                const v = this.current.get(name);
                if (!v)
                    throw new Error(
                        `${this.name}: adapter '${name}' has not been pushed (pushAdapter(name, dir) first)`,
                    );
                return v.served;
            }),
        };
    }

    /** The current version of pushed adapter `name`, or null. */
    adapterVersion(name: string): AdapterVersion | null {
        return this.current.get(name) ?? null;
    }

    /**
     * Loads PEFT adapter directory `dir` (readable by the servers at that path) on every healthy endpoint as the next
     * version of adapter `name` ("<name>-v<N>"), switches adapter(name) to it, and unloads the previous version once
     * its requests are answered. Rejects (nothing switched) when no endpoint could load it; endpoints that failed are
     * listed and do not serve the new version until they load it (an endpoint re-admitted later loads the versions
     * requests still need first).
     */
    async pushAdapter(
        name: string,
        dir: string,
    ): Promise<{ version: AdapterVersion; failed: { url: string; error: string }[] }> {
        if (typeof name !== "string" || !/^[\w.-]+$/.test(name))
            throw new TypeError(
                `${this.name}.pushAdapter: name: expected letters, digits, '_', '.', '-', got ${describe(name)}`,
            );
        if (typeof dir !== "string" || !dir)
            throw new TypeError(
                `${this.name}.pushAdapter: dir: expected the adapter directory's path, got ${describe(dir)}`,
            );
        await this.start();
        const prev = this.current.get(name),
            version = (prev?.version ?? 0) + 1;
        const v: AdapterVersion = { name, version, served: `${name}-v${version}-${randomUUID().slice(0, 8)}`, dir };
        this.pushed.dirs.set(v.served, dir);
        const live = [...this.eps.values()].filter((ep) => ep.healthy && !ep.removed);
        const out = await Promise.allSettled(live.map((ep) => ep.loadAdapter(v.served, dir)));
        const failed = out.flatMap((x, k) =>
            x.status === "rejected" ? [{ url: live[k]!.shown, error: (x.reason as Error).message }] : [],
        );
        if (live.length === 0 || failed.length === live.length) {
            this.pushed.dirs.delete(v.served);
            throw new Error(
                `${this.name}.pushAdapter: ${name} v${version} could not be loaded on any endpoint` +
                    (failed.length ? `: ${failed.map((f) => f.error).join(" | ")}` : " (none is healthy)"),
            );
        }
        this.current.set(name, v);
        this.notify();
        if (prev) {
            this.pushed.retire(prev.served);
        }
        return { version: v, failed };
    }
}
