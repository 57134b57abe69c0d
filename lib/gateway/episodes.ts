// episodes.ts (gateway): what the gateway records. An episode is one run of an agent program: the ordered calls of all
// its agents (each call: the messages as sent, the prompt ids the model read, the ids it sampled with their behaviour
// log-probs, tool calls and, once a later call sends them back, their results; the adapter version; latency), then a
// reward. Episodes open on their first call (or explicitly), close when rewarded, failed, or idle past the timeout
// (failed: reward NaN), and stay until taken. Every limit is checked before a call runs: open episodes, calls per
// episode, closed episodes kept; an error names the limit.
import { HttpError } from "../serve/serverModels.js";
import type { ChatMessage, SamplingOptions, ToolCall, ToolSpec } from "../policy/types.js";

/** A tool call as recorded: the result is the content of the tool message a later call sent back for it. */
export interface RecordedToolCall extends ToolCall {
    result?: string;
}

/** One sampled answer of a call (a call with n > 1 has n). */
export interface GatewaySample {
    text: string;
    /** The prompt's ids exactly as the model read them (after its chat template). */
    promptTokenIds: number[];
    /** The ids exactly as the model sampled them (the stop token that ended the answer included). */
    tokenIds: number[];
    /** The behaviour log-prob of every entry of tokenIds. */
    logprobs: number[];
    /** false when the upstream gave no ids (text only): such a sample is kept, never trained on. */
    tokenIdsExact: boolean;
    finishReason: string;
    toolCalls?: RecordedToolCall[];
    /** The served model that answered (an adapter's versioned name on a fleet), when known. */
    model?: string;
    endpoint?: string;
    /** The seed it was drawn with (the gateway sets one where the client gave none, so every call can be replayed). */
    seed: string;
}

export interface GatewayCall {
    /** Its place among the episode's calls (all agents), in the order they started. */
    index: number;
    agent: string;
    /** Wall-clock start (ms since the epoch) and duration. */
    startedAt: number;
    latencyMs: number;
    /** The chat messages as sent (empty for a /v1/completions call: then promptTokenIds). */
    messages: ChatMessage[];
    /** A /v1/completions call's prompt, as the ids the model continued (a text prompt tokenized, no template). */
    promptTokenIds?: number[];
    tools?: ToolSpec[];
    sampling: SamplingOptions;
    /** Empty when the call failed (then `error`). */
    samples: GatewaySample[];
    error?: string;
}

/** A reward given for a step of one agent (AgentPRM-style milestones): added to that agent's return. */
export interface Milestone {
    agent: string;
    reward: number;
    /** The call it rewards (its index), when given. */
    call?: number;
    name?: string;
}

export type EpisodeStatus = "open" | "rewarded" | "failed";

export interface GatewayEpisode {
    id: string;
    status: EpisodeStatus;
    openedAt: number;
    closedAt?: number;
    /** Why a failed episode failed (a timeout, the program's error, the gateway closing). */
    reason?: string;
    /** The joint reward; NaN until rewarded and for a failed episode. */
    reward: number;
    /** Per-agent rewards added to the joint one for that agent. */
    agentRewards: Record<string, number>;
    milestones: Milestone[];
    calls: GatewayCall[];
    /** Free-form labels of the run (the trainer's item index and group). */
    meta: Record<string, string | number>;
}

/** The reward of an episode, as POST /episodes/<id>/reward takes it (also gateway.reward). */
export interface EpisodeReward {
    reward: number;
    agents?: Record<string, number>;
    milestones?: Milestone[];
}

export interface EpisodeLimits {
    /** Episodes open at once; a call that would open one more is answered 503. */
    maxOpen: number;
    /** Calls one episode may make; one more is answered 429. */
    maxCalls: number;
    /** Closed episodes kept until taken; while full, no episode opens (503). */
    maxClosed: number;
    /** An open episode with no call in flight and none for this long fails ('timed out'). */
    timeoutMs: number;
}

/** The largest magnitude of an agent's return (joint + own reward + milestones): far inside float32, in which the
 * trainers' group statistics are computed. */
export const MAX_RETURN = 1e30;

const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** An episode id (from a header or path), checked. */
export function episodeId(x: unknown, at: string): string {
    if (typeof x !== "string" || !ID.test(x))
        throw new HttpError(
            400,
            `${at}: expected an episode id of 1 to 128 characters (letters, digits, '.', '_', ':', '-'; a letter or digit first), got ${JSON.stringify(typeof x === "string" ? x.slice(0, 64) : x)}`,
        );
    return x;
}

interface Live {
    ep: GatewayEpisode;
    /** The calls in flight: each is recorded by `finish` once, unless the episode closed or the call timed out. */
    inFlight: Set<GatewayCall>;
    /** Rewarded or failed while calls were in flight: closes as this once the last one ends. */
    closing: EpisodeStatus | null;
    last: number;
    waiters: ((ep: GatewayEpisode) => void)[];
}

const finite = (x: unknown, at: string): number => {
    if (typeof x !== "number" || !Number.isFinite(x))
        throw new HttpError(400, `${at}: expected a finite number, got ${JSON.stringify(x)}`);
    return x;
};

/** The episodes of one gateway. */
export class EpisodeStore {
    private readonly live = new Map<string, Live>();
    private closedCount = 0;
    private readonly sweeper: NodeJS.Timeout;
    private serial = 0;

    constructor(
        readonly limits: EpisodeLimits,
        private readonly agents: readonly string[],
        /** Called with every episode as it closes (after its waiters); an error it throws is reported, not raised. */
        private readonly onClose?: (ep: GatewayEpisode) => void,
    ) {
        this.sweeper = setInterval(() => this.sweep(), Math.max(10, Math.min(1000, limits.timeoutMs / 4)));
        this.sweeper.unref();
    }

    /** Opens episode `id` (a fresh id when omitted); an open one is returned as it is, a closed one is a 409. */
    open(id?: string, meta: Record<string, string | number> = {}): GatewayEpisode {
        const key = id === undefined ? `ep-${Date.now().toString(36)}-${(++this.serial).toString(36)}` : id;
        const l = this.live.get(key);
        if (l) {
            if (l.ep.status !== "open") throw new HttpError(409, `episode ${key} is closed (${l.ep.status})`);
            // (opened again with labels: new ones are added, a different value for one it has is a conflict)
            for (const [k, v] of Object.entries(meta))
                if (Object.hasOwn(l.ep.meta, k) && l.ep.meta[k] !== v)
                    throw new HttpError(
                        409,
                        `episode ${key} is open with meta.${k} ${JSON.stringify(l.ep.meta[k])}, not ${JSON.stringify(v)}`,
                    );
            for (const [k, v] of Object.entries(meta))
                if (!Object.hasOwn(l.ep.meta, k) && Object.keys(l.ep.meta).length < 32) l.ep.meta[k] = v;
            return l.ep;
        }
        const open = this.live.size - this.closedCount;
        if (open >= this.limits.maxOpen)
            throw new HttpError(503, `${open} episodes are open, the most this gateway keeps (maxEpisodes)`);
        if (this.closedCount >= this.limits.maxClosed)
            throw new HttpError(
                503,
                `${this.closedCount} closed episodes wait to be taken, the most this gateway keeps (maxClosedEpisodes)`,
            );
        const ep: GatewayEpisode = {
            id: key,
            status: "open",
            openedAt: Date.now(),
            reward: NaN,
            agentRewards: {},
            milestones: [],
            calls: [],
            meta: { ...meta },
        };
        this.live.set(key, { ep, inFlight: new Set(), closing: null, last: Date.now(), waiters: [] });
        return ep;
    }

    /** A call of `agent` starts in episode `id` (opened if new): the call, to be recorded with `finish`; an HttpError
     * naming the limit when it may not. */
    begin(id: string, agent: string): { ep: GatewayEpisode; call: GatewayCall } {
        const ep = this.open(id),
            l = this.live.get(id)!;
        if (l.closing)
            throw new HttpError(
                409,
                `episode ${id} is closing (${l.closing} while calls were in flight): no more calls`,
            );
        if (ep.calls.length >= this.limits.maxCalls)
            throw new HttpError(
                429,
                `episode ${id} has made ${ep.calls.length} calls, the most one episode may (maxCallsPerEpisode)`,
            );
        l.last = Date.now();
        const call: GatewayCall = {
            index: ep.calls.length,
            agent,
            startedAt: Date.now(),
            latencyMs: 0,
            messages: [],
            sampling: {},
            samples: [],
        };
        ep.calls.push(call);
        l.inFlight.add(call);
        return { ep, call };
    }

    /** Call `call` of episode `id` ended: `record` writes its outcome into it, unless it was already ended (timed out,
     * or the episode closed while it was in flight: then its record stands and this changes nothing). Returns whether
     * it recorded. */
    finish(id: string, call: GatewayCall, record: (call: GatewayCall) => void): boolean {
        const l = this.live.get(id);
        if (!l || !l.inFlight.delete(call)) return false;
        record(call);
        l.last = Date.now();
        if (l.inFlight.size === 0 && l.closing && l.ep.status === "open") this.close(l, l.closing);
        return true;
    }

    /** Rewards open episode `id` and closes it (a reward body checked field by field); with calls in flight it closes
     * when the last one ends (their answers are part of it), and takes no new call meanwhile. */
    reward(id: string, body: unknown): GatewayEpisode {
        const l = this.live.get(id);
        if (!l) throw new HttpError(404, `no episode ${id}`);
        if (l.ep.status !== "open") throw new HttpError(409, `episode ${id} is closed (${l.ep.status})`);
        if (l.closing) throw new HttpError(409, `episode ${id} is closing (${l.closing})`);
        if (!body || typeof body !== "object" || Array.isArray(body))
            throw new HttpError(400, "the reward: expected { reward, agents?, milestones? }");
        const b = body as Record<string, unknown>;
        const reward = finite(b.reward, "reward");
        const agentRewards: Record<string, number> = {};
        if (b.agents !== undefined) {
            if (!b.agents || typeof b.agents !== "object" || Array.isArray(b.agents))
                throw new HttpError(400, "agents: expected { agentName: reward }");
            for (const [a, r] of Object.entries(b.agents)) {
                if (!this.agents.includes(a))
                    throw new HttpError(400, `agents.${a}: no such agent (agents: ${this.agents.join(", ")})`);
                agentRewards[a] = finite(r, `agents.${a}`);
            }
        }
        const milestones: Milestone[] = [];
        if (b.milestones !== undefined) {
            if (!Array.isArray(b.milestones) || b.milestones.length > 4096)
                throw new HttpError(
                    400,
                    "milestones: expected an array of at most 4096 { agent, reward, call?, name? }",
                );
            b.milestones.forEach((m: Record<string, unknown>, k) => {
                const at = `milestones[${k}]`;
                if (!m || typeof m !== "object") throw new HttpError(400, `${at}: expected an object`);
                if (typeof m.agent !== "string" || !this.agents.includes(m.agent))
                    throw new HttpError(400, `${at}.agent: expected one of ${this.agents.join(", ")}`);
                const call = m.call;
                if (
                    call !== undefined &&
                    !(Number.isInteger(call) && (call as number) >= 0 && (call as number) < l.ep.calls.length)
                )
                    throw new HttpError(
                        400,
                        `${at}.call: expected the index of one of the episode's ${l.ep.calls.length} calls, got ${JSON.stringify(call)}`,
                    );
                if (call !== undefined && l.ep.calls[call as number]!.agent !== m.agent)
                    throw new HttpError(
                        400,
                        `${at}.call: call ${String(call)} is ${l.ep.calls[call as number]!.agent}'s, not ${m.agent}'s`,
                    );
                milestones.push({
                    agent: m.agent,
                    reward: finite(m.reward, `${at}.reward`),
                    ...(call !== undefined ? { call: call as number } : {}),
                    ...(typeof m.name === "string" ? { name: m.name.slice(0, 200) } : {}),
                });
            });
        }
        // (each agent's return: the joint reward, its own and its milestones, finite as a sum too)
        for (const a of this.agents) {
            const sum =
                reward + (agentRewards[a] ?? 0) + milestones.reduce((t, m) => (m.agent === a ? t + m.reward : t), 0);
            if (!(Math.abs(sum) <= MAX_RETURN))
                throw new HttpError(
                    400,
                    `the reward: ${a}'s return (reward + agents.${a} + its milestones) is ${sum}; expected a finite sum of magnitude at most ${MAX_RETURN} (the trainers compute in float32)`,
                );
        }
        Object.assign(l.ep, { reward, agentRewards, milestones });
        if (l.inFlight.size > 0) l.closing = "rewarded";
        else this.close(l, "rewarded");
        return l.ep;
    }

    /** Fails open episode `id` (no effect on a closed or unknown one, nor on one closing: a reward already given
     * stands); with calls in flight it closes when the last one ends, unless `now` (the gateway stopping: those calls
     * are recorded as unfinished). Returns how it stands: 'failed', 'closing' (as failed, or as rewarded), or its
     * status. */
    fail(id: string, reason: string, now = false): EpisodeStatus | "closing" | "closing as rewarded" | undefined {
        const l = this.live.get(id);
        if (!l) return undefined;
        if (l.ep.status !== "open") return l.ep.status;
        if (l.closing && !now) return l.closing === "rewarded" ? "closing as rewarded" : "closing";
        if (l.closing === null) l.ep.reason = reason;
        if (l.inFlight.size > 0 && !now) {
            l.closing = "failed";
            return "closing";
        }
        for (const c of l.inFlight) c.error = `unfinished: ${reason} while the call was in flight`;
        l.inFlight.clear();
        this.close(l, l.closing ?? "failed");
        return l.ep.status;
    }

    /** The episode, open or closed (undefined when unknown or taken). */
    get(id: string): GatewayEpisode | undefined {
        return this.live.get(id)?.ep;
    }

    /** Resolves with episode `id` once it is closed (rejects when unknown, or on abort). */
    wait(id: string, signal?: AbortSignal): Promise<GatewayEpisode> {
        const l = this.live.get(id);
        if (!l) return Promise.reject(new Error(`no episode ${id}`));
        if (l.ep.status !== "open") return Promise.resolve(l.ep);
        return new Promise((resolve, reject) => {
            const onAbort = () => reject(signal!.reason as Error);
            signal?.addEventListener("abort", onAbort, { once: true });
            l.waiters.push((ep) => {
                signal?.removeEventListener("abort", onAbort);
                resolve(ep);
            });
        });
    }

    /** Removes closed episode `id` and returns it (undefined when unknown; an open one stays, and is an error). */
    take(id: string): GatewayEpisode | undefined {
        const l = this.live.get(id);
        if (!l) return undefined;
        if (l.ep.status === "open") throw new Error(`episode ${id} is still open`);
        this.live.delete(id);
        this.closedCount--;
        return l.ep;
    }

    /** Counts of open and closed (kept) episodes. */
    counts(): { open: number; closed: number } {
        return { open: this.live.size - this.closedCount, closed: this.closedCount };
    }

    /** Fails every open episode ('the gateway closed') and stops the timeout sweep. */
    shutdown(): void {
        clearInterval(this.sweeper);
        for (const l of this.live.values()) if (l.ep.status === "open") this.fail(l.ep.id, "the gateway closed", true);
    }

    private close(l: Live, status: EpisodeStatus): void {
        l.ep.status = status;
        l.ep.closedAt = Date.now();
        this.closedCount++;
        for (const w of l.waiters.splice(0)) w(l.ep);
        try {
            this.onClose?.(l.ep);
        } catch (e) {
            console.error(`maporl: gateway: onEpisodeClosed failed for ${l.ep.id}: ${(e as Error).message}`);
        }
    }

    private sweep(): void {
        const now = Date.now();
        for (const l of this.live.values())
            if (l.ep.status === "open" && l.inFlight.size === 0 && now - l.last > this.limits.timeoutMs)
                this.fail(
                    l.ep.id,
                    `timed out: no call for ${this.limits.timeoutMs} ms and no reward (episodeTimeoutMs)`,
                );
    }
}
