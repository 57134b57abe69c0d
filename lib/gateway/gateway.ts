// gateway.ts: an OpenAI-compatible server in front of the agents' policies (a NativePolicy and its adapters, a
// FleetPolicy's adapters over vLLM / SGLang / maporl serve), that records every call of an unchanged agent program
// as a turn of that agent in its episode: the prompt ids the model read, the ids it sampled, their behaviour
// log-probs, tool calls and results (episodes.ts, recorder.ts). Requests are answered as maporl serve answers them
// (the same routes: chat completions streamed or whole, tools, completions, the Responses API, vLLM's token-id
// fields).
//
// Which agent a call belongs to: the path /episodes/<id>/agents/<agent>/v1, else the header x-maporl-agent, else the
// request's `model` naming an agent. Which episode: the path /episodes/<id>/v1, else the header x-maporl-episode; a
// call with neither is answered and not recorded (unless requireEpisode: then a 400). Routes besides the API's:
//   POST /episodes                    open one ({ id?, meta? }); answers { id, base_url }
//   GET  /episodes/<id>               the episode as recorded (reward null until rewarded)
//   DELETE /episodes/<id>             a closed episode, taken (the gateway keeps it no longer)
//   POST /episodes/<id>/reward        { reward, agents?: { name: r }, milestones?: [{ agent, reward, call?, name? }] }
//   POST /episodes/<id>/fail          { reason? }
//   GET  /health (no key needed), /v1/models (one card per agent)
// Bounded as maporl serve: loopback by default, Bearer apiKey on every route but /health, bodies (413), requests in
// flight (503 + Retry-After), open episodes, calls per episode, closed episodes kept, an idle episode times out, a
// call the upstream does not answer in callTimeoutMs fails (504).
import type { IncomingMessage, ServerResponse } from "node:http";

import { EpisodeStore, episodeId, type GatewayCall, type GatewayEpisode } from "./episodes.js";
import { recordingPolicy } from "./recorder.js";
import { answerFailure, bearerAuth, fail, jsonBody, listenHttp, pendingSlots, send } from "../serve/requests.js";
import { responsesRoute } from "../serve/responses.js";
import { chatRoute, type ModelLookup, type RouteContext } from "../serve/routes.js";
import { HttpError } from "../serve/serverModels.js";
import type { Tracer } from "../debate/trace.js";
import type { Policy } from "../policy/types.js";
import { requireOptions } from "../validate.js";

export interface GatewayOptions {
    /** Agent name -> the policy that answers for it (e.g. base.withAdapter(name), fleet.adapter(name)). */
    agents: Record<string, Policy>;
    /** Defaults to 127.0.0.1. */
    host?: string;
    /** Defaults to 8010; 0 picks a free port. */
    port?: number;
    /** Every route but GET /health requires `Authorization: Bearer <apiKey>`; else 401. */
    apiKey?: string;
    /** Largest accepted body (413 past it). Defaults to 4 MiB (an agent's conversation grows with its turns). */
    maxBodyBytes?: number;
    /** Generation requests in flight at once; one more is a 503 with Retry-After. Defaults to 64. */
    maxPending?: number;
    /** Episodes open at once. Defaults to 256. */
    maxEpisodes?: number;
    /** Calls one episode may make. Defaults to 256. */
    maxCallsPerEpisode?: number;
    /** Closed episodes kept until taken (gateway.take); while full, none opens. Defaults to 4096. */
    maxClosedEpisodes?: number;
    /** An open episode idle this long (no call in flight, no reward) fails. Defaults to 600000 (10 minutes). */
    episodeTimeoutMs?: number;
    /** A recorded call the upstream has not answered in this long is answered 504 and recorded as failed (the upstream
     * is asked to abort it; an episode never waits on a call for ever). Defaults to 600000 (10 minutes). */
    callTimeoutMs?: number;
    /** Refuse calls that name no episode (400) instead of answering them unrecorded. Defaults to false. */
    requireEpisode?: boolean;
    /** Called with every episode as it closes (rewarded or failed), e.g. to write it out and take it. */
    onEpisodeClosed?: (ep: GatewayEpisode) => void;
    /** A 'gateway.call' span per recorded call (episode, agent index and name as `role`, the call's index as `turn`,
     * tokens, latency, finish reason, error, text, endpoint, served model). */
    tracer?: Tracer;
    /** The spans' runId. Defaults to "gateway". */
    runId?: string;
}

export interface Gateway {
    /** e.g. "http://127.0.0.1:8010/v1": calls here name their episode by header, or are not recorded. */
    baseUrl: string;
    /** The base URL whose calls are recorded in episode `id` (and, with `agent`, as that agent's). */
    episodeUrl(id: string, agent?: string): string;
    readonly episodes: EpisodeStore;
    readonly agents: string[];
    /** Opens an episode (a fresh id when omitted). */
    open(id?: string, meta?: Record<string, string | number>): GatewayEpisode;
    /** Replaces the policy that answers for `agent` (e.g. after an adapter was pushed); calls in flight finish. */
    setAgent(agent: string, policy: Policy): void;
    close(): Promise<void>;
}

const CHECKS = {
    maxBodyBytes: 1,
    maxPending: 1,
    maxEpisodes: 1,
    maxCallsPerEpisode: 1,
    maxClosedEpisodes: 1,
    episodeTimeoutMs: 1,
    callTimeoutMs: 1,
} as const;
const OPTION_KEYS = [
    "agents",
    "host",
    "port",
    "apiKey",
    "requireEpisode",
    "onEpisodeClosed",
    "tracer",
    "runId",
    ...Object.keys(CHECKS),
] as (keyof GatewayOptions)[];

function checked(o: GatewayOptions) {
    requireOptions("startGateway", "options", o, OPTION_KEYS);
    const int = (k: keyof typeof CHECKS, d: number): number => {
        const v = o[k] ?? d;
        if (!Number.isSafeInteger(v) || v < CHECKS[k])
            throw new RangeError(`startGateway: ${k}: expected an integer >= ${CHECKS[k]}, got ${String(o[k])}`);
        return v;
    };
    if (!o.agents || typeof o.agents !== "object" || Object.keys(o.agents).length === 0)
        throw new TypeError("startGateway: agents: expected { agentName: Policy } with at least one agent");
    for (const [name, p] of Object.entries(o.agents)) {
        if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name))
            throw new RangeError(
                `startGateway: agents: ${JSON.stringify(name)}: expected a name of 1 to 64 letters, digits, '.', '_', '-'`,
            );
        if (!p || typeof p.generate !== "function")
            throw new TypeError(`startGateway: agents.${name}: expected a Policy (with generate)`);
    }
    if (o.apiKey !== undefined && (typeof o.apiKey !== "string" || o.apiKey.length === 0))
        throw new TypeError("startGateway: apiKey: expected a non-empty string");
    return {
        limit: int("maxBodyBytes", 4 << 20),
        callTimeoutMs: int("callTimeoutMs", 600_000),
        maxPending: int("maxPending", 64),
        limits: {
            maxOpen: int("maxEpisodes", 256),
            maxCalls: int("maxCallsPerEpisode", 256),
            maxClosed: int("maxClosedEpisodes", 4096),
            timeoutMs: int("episodeTimeoutMs", 600_000),
        },
    };
}

const header = (req: IncomingMessage, name: string): string | undefined => {
    const h = req.headers[name];
    return Array.isArray(h) ? h[0] : h;
};

// The path split into its episode, agent and the rest (an API route such as /v1/chat/completions, or an episode
// action); throws a 400 on a malformed episode id.
function parsePath(url: string): { episode?: string; agent?: string; rest: string } {
    if (!url.startsWith("/episodes/")) return { rest: url };
    const seg = url.slice("/episodes/".length).split("/");
    const decode = (x: string, at: string) => {
        try {
            return decodeURIComponent(x);
        } catch {
            throw new HttpError(400, `${at}: not a valid percent-encoding: ${JSON.stringify(x.slice(0, 64))}`);
        }
    };
    const episode = episodeId(decode(seg[0]!, "the path's episode id"), "the path's episode id");
    if (seg[1] === "agents" && seg[2] !== undefined)
        return { episode, agent: decode(seg[2], "the path's agent"), rest: `/${seg.slice(3).join("/")}` };
    return { episode, rest: seg.length > 1 ? `/${seg.slice(1).join("/")}` : "" };
}

/** Starts a gateway; resolves once it listens. */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
    const { limit, maxPending, limits, callTimeoutMs } = checked(options);
    const agents = new Map(Object.entries(options.agents));
    const names = [...agents.keys()];
    const store = new EpisodeStore(limits, names, options.onEpisodeClosed);
    const authorized = bearerAuth(options.apiKey);
    const agentOf = (name: string, at: string): Policy => {
        const p = agents.get(name);
        if (!p)
            throw new HttpError(
                404,
                `${at}: no agent ${JSON.stringify(name)}; this gateway's agents: ${names.join(", ")}`,
            );
        return p;
    };
    const slots = pendingSlots(maxPending, "the gateway");
    let counter = 0,
        root = "";
    const ctxLen = (() => {
        const c = (Object.values(options.agents)[0] as { config?: { contextLength?: unknown } }).config?.contextLength;
        return typeof c === "number" ? c : null;
    })();

    const tracer = options.tracer,
        runId = options.runId ?? "gateway";
    const span = tracer
        ? (c: GatewayCall, episode: string) => {
              const s = c.samples[0];
              tracer.span({
                  name: "gateway.call",
                  runId,
                  episode,
                  agent: names.indexOf(c.agent),
                  role: c.agent,
                  turn: c.index,
                  parent: 0,
                  startMs: c.startedAt,
                  latencyMs: c.latencyMs,
                  promptTokens: s?.promptTokenIds.length ?? 0,
                  completionTokens: c.samples.reduce((n, x) => n + x.tokenIds.length, 0),
                  finishReason: s?.finishReason ?? "error",
                  ...(c.error !== undefined ? { error: c.error } : {}),
                  ...(s ? { text: s.text } : {}),
                  ...(s?.endpoint !== undefined ? { endpoint: s.endpoint } : {}),
                  ...(s?.model !== undefined ? { model: s.model } : {}),
              });
          }
        : undefined;
    // The models a request can name: the agent given by path or header (whatever `model` says), else `model`.
    const lookup = (episode: string | undefined, fixed: string | undefined): ModelLookup => ({
        get(model: unknown) {
            const name = fixed ?? (typeof model === "string" ? model : undefined);
            if (name === undefined)
                throw new HttpError(
                    400,
                    `model: expected an agent's name (or the header x-maporl-agent); agents: ${names.join(", ")}`,
                );
            const upstream = agentOf(name, fixed !== undefined ? "the agent" : "model");
            return {
                name,
                policy:
                    episode === undefined
                        ? upstream
                        : recordingPolicy(store, episode, name, upstream, callTimeoutMs, span),
            };
        },
    });

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
        let counted = false;
        try {
            const url = (req.url ?? "").split("?")[0]!.replace(/\/+$/, "");
            if (req.method === "GET" && url === "/health") {
                res.writeHead(200, { "content-length": 0 });
                return res.end();
            }
            if (!authorized(req))
                return fail(res, 401, "Unauthorized: this gateway requires Authorization: Bearer <api key>");
            const p = parsePath(url);
            const episode =
                p.episode ??
                (header(req, "x-maporl-episode") !== undefined
                    ? episodeId(header(req, "x-maporl-episode"), "x-maporl-episode")
                    : undefined);
            const agent = p.agent ?? header(req, "x-maporl-agent");
            if (agent !== undefined) agentOf(agent, "the agent");
            if (req.method === "GET" && p.rest === "/v1/models")
                return send(res, 200, {
                    object: "list",
                    data: names.map((id) => ({
                        id,
                        object: "model",
                        created: 0,
                        owned_by: "maporl",
                        root: id,
                        parent: null,
                        max_model_len: ctxLen,
                    })),
                });
            if (url === "/episodes" && req.method === "POST") {
                const b = await jsonBody(req, limit);
                const meta = b.meta && typeof b.meta === "object" && !Array.isArray(b.meta) ? b.meta : {};
                const ep = store.open(b.id === undefined ? undefined : episodeId(b.id, "id"), metaOf(meta));
                return send(res, 200, { id: ep.id, base_url: `${root}/episodes/${ep.id}/v1` });
            }
            if (p.episode !== undefined && !p.rest.startsWith("/v1/")) {
                if ((req.method === "GET" || req.method === "DELETE") && p.rest === "") {
                    const ep = store.get(p.episode);
                    if (!ep) throw new HttpError(404, `no episode ${p.episode}`);
                    if (req.method === "DELETE") {
                        if (ep.status === "open") throw new HttpError(409, `episode ${p.episode} is still open`);
                        store.take(p.episode);
                    }
                    return send(res, 200, ep);
                }
                if (req.method === "POST" && p.rest === "/reward") {
                    const ep = store.reward(p.episode, await jsonBody(req, limit));
                    // ("closing": calls were in flight; it closes, rewarded, when the last one ends)
                    return send(res, 200, { id: ep.id, status: ep.status === "open" ? "closing" : ep.status });
                }
                if (req.method === "POST" && p.rest === "/fail") {
                    const b = await jsonBody(req, limit);
                    if (b.reason !== undefined && typeof b.reason !== "string")
                        throw new HttpError(400, `reason: expected a string, got ${typeof b.reason}`);
                    const st = store.fail(p.episode, b.reason?.slice(0, 1000) ?? "failed by the client");
                    if (st === undefined) throw new HttpError(404, `no episode ${p.episode}`);
                    if (st === "rewarded" || st === "closing as rewarded")
                        throw new HttpError(409, `episode ${p.episode} was rewarded; it cannot fail`);
                    // (closing: calls were in flight; it closes, failed, when the last one ends; a second fail
                    // keeps the first reason)
                    return send(res, 200, { id: p.episode, status: st });
                }
                throw new HttpError(404, `no route ${req.method} ${url}`);
            }
            const route = p.rest.startsWith("/v1/") ? p.rest.slice(3) : p.rest;
            if (req.method !== "POST" || !["/chat/completions", "/completions", "/responses"].includes(route))
                throw new HttpError(404, `no route ${req.method} ${url}`);
            if (episode === undefined && options.requireEpisode)
                throw new HttpError(
                    400,
                    "this gateway records every call: name the episode (the header x-maporl-episode, or the base URL /episodes/<id>/v1)",
                );
            const body = await jsonBody(req, limit);
            if (!slots.take(res)) return;
            counted = true;
            const ctx: RouteContext = { models: lookup(episode, agent), ctx: ctxLen, next: () => ++counter };
            if (route === "/responses") return await responsesRoute(ctx, body, res);
            return await chatRoute(ctx, body, res, route === "/completions");
        } catch (e) {
            answerFailure(res, e);
        } finally {
            if (counted) slots.release();
        }
    };
    const http = await listenHttp(handle, options.port ?? 8010, options.host ?? "127.0.0.1").catch((e: unknown) => {
        store.shutdown();
        throw e;
    });
    const addr = http.address;
    root = `http://${addr.family === "IPv6" ? `[${addr.address}]` : addr.address}:${addr.port}`;
    return {
        baseUrl: `${root}/v1`,
        episodeUrl: (id, agent) =>
            `${root}/episodes/${encodeURIComponent(episodeId(id, "id"))}${agent !== undefined ? `/agents/${encodeURIComponent(agent)}` : ""}/v1`,
        episodes: store,
        agents: names,
        open: (id, meta) => store.open(id === undefined ? undefined : episodeId(id, "id"), meta),
        setAgent(agent, policy) {
            agentOf(agent, "setAgent: agent");
            if (!policy || typeof policy.generate !== "function")
                throw new TypeError(`setAgent: policy: expected a Policy (with generate)`);
            agents.set(agent, policy);
        },
        close: async () => {
            store.shutdown();
            await http.stop();
        },
    };
}

// An episode's meta from a request: string and finite-number values, at most 32 keys of 64 characters.
function metaOf(m: object): Record<string, string | number> {
    const out: Record<string, string | number> = {};
    for (const [k, v] of Object.entries(m).slice(0, 32))
        if (typeof v === "string") out[k.slice(0, 64)] = v.slice(0, 1000);
        else if (typeof v === "number" && Number.isFinite(v)) out[k.slice(0, 64)] = v;
    return out;
}
