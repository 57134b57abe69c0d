// recorder.ts (gateway): the policy a gateway request is answered by: the agent's upstream policy, with every call
// recorded as a turn of that agent in its episode (episodes.ts). Each request carries its seed (the routes draw one
// where the client gave none, so every recorded call can be replayed), and a routing key `<episode>/<agent>` (a fleet
// keeps an episode's agent on one server, whose prefix cache serves its growing conversation). The tool messages a
// call sends back are matched to the calls they answer, in any earlier turn of the episode, and recorded as their
// results. A call has a deadline (callTimeoutMs): past it the call is recorded as failed and answered 504, whether or
// not the upstream heeds the abort; an answer the client went away from is recorded as failed (the program never read
// it), never trained on.
import type { EpisodeStore, GatewayCall, GatewayEpisode, GatewaySample } from "./episodes.js";
import { HttpError } from "../serve/serverModels.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "../policy/types.js";

// Results of earlier tool calls that `messages` carries (role 'tool' with a tool_call_id), recorded on those calls.
function attachResults(ep: GatewayEpisode, messages: readonly ChatMessage[]): void {
    const results = new Map<string, string>();
    for (const m of messages) if (m.role === "tool" && m.toolCallId) results.set(m.toolCallId, m.content);
    if (results.size === 0) return;
    // (the latest call of that id without a result: ids repeat only where a client reuses them)
    for (let k = ep.calls.length - 1; k >= 0 && results.size > 0; k--)
        for (const s of ep.calls[k]!.samples)
            for (const t of s.toolCalls ?? [])
                if (t.result === undefined && results.has(t.id)) {
                    t.result = results.get(t.id);
                    results.delete(t.id);
                }
}

function sampleOf(g: Generation, seed: bigint | number | undefined, prompt: number[] | undefined): GatewaySample {
    const exact = g.tokenIdsExact === true && Array.isArray(g.tokenIds) && Array.isArray(g.promptTokenIds);
    return {
        text: g.text,
        promptTokenIds: exact ? (prompt ?? [...g.promptTokenIds!]) : [],
        tokenIds: exact ? [...g.tokenIds!] : [],
        logprobs: exact && g.logprobs ? [...g.logprobs] : [],
        tokenIdsExact: exact,
        finishReason: g.finishReason,
        ...(g.toolCalls?.length ? { toolCalls: g.toolCalls.map((t) => ({ ...t })) } : {}),
        ...(g.model !== undefined ? { model: g.model } : {}),
        ...(g.endpoint !== undefined ? { endpoint: g.endpoint } : {}),
        seed: String(seed),
    };
}

// The prompt ids of each of a call's samples: one array where they are equal (n choices read the same prompt).
function promptsOf(gens: Generation[]): (number[] | undefined)[] {
    const first = gens[0]?.promptTokenIds;
    if (!Array.isArray(first)) return gens.map(() => undefined);
    const shared = [...first];
    return gens.map((g) =>
        Array.isArray(g.promptTokenIds) &&
        g.promptTokenIds.length === shared.length &&
        g.promptTokenIds.every((t, i) => t === shared[i])
            ? shared
            : undefined,
    );
}

const sameMessage = (a: ChatMessage, b: ChatMessage): boolean =>
    a.role === b.role &&
    a.content === b.content &&
    a.toolCallId === b.toolCallId &&
    JSON.stringify(a.toolCalls) === JSON.stringify(b.toolCalls);

// The messages of a call, sharing the objects of the agent's previous call where its conversation starts the same (a
// conversation grows by a few messages a turn: recorded as copies, the episode would hold every turn's whole history).
function messagesOf(ep: GatewayEpisode, agent: string, messages: readonly ChatMessage[]): ChatMessage[] {
    let prev: ChatMessage[] = [];
    for (let k = ep.calls.length - 1; k >= 0; k--)
        if (ep.calls[k]!.agent === agent && ep.calls[k]!.messages.length > 0) {
            prev = ep.calls[k]!.messages;
            break;
        }
    return messages.map((m, j) => (j < prev.length && sameMessage(prev[j]!, m) ? prev[j]! : { ...m }));
}

/** `upstream` answering for `agent` with its calls recorded in episode `episode` of `store`. */
export function recordingPolicy(
    store: EpisodeStore,
    episode: string,
    agent: string,
    upstream: Policy,
    callTimeoutMs: number,
    onCall?: (call: GatewayCall, episode: string) => void,
): Policy & { tokenizer?: unknown } {
    return {
        name: upstream.name,
        // (the upstream's tokenizer, where it has one: the routes stream text pieces and encode raw prompts with it)
        tokenizer: (upstream as { tokenizer?: unknown }).tokenizer,
        async generate(requests, options = {}) {
            const { ep, call } = store.begin(episode, agent);
            const r0 = requests[0]!;
            const messages = r0.messages
                ? messagesOf(ep, agent, r0.messages)
                : r0.promptTokenIds
                  ? [] // (/v1/completions: no template; promptTokenIds below)
                  : [{ role: "user" as const, content: r0.prompt ?? "" }];
            call.messages = messages;
            if (!r0.messages && r0.promptTokenIds) call.promptTokenIds = [...r0.promptTokenIds];
            if (r0.tools) call.tools = r0.tools;
            call.sampling = { ...r0.sampling };
            attachResults(ep, messages);
            const reqs: GenerateRequest[] = requests.map((r) => ({ ...r, routingKey: `${episode}/${agent}` }));
            // The upstream's signal: the client's, or the deadline's.
            const abort = new AbortController();
            const onClientAbort = () => abort.abort(options.signal!.reason);
            if (options.signal?.aborted) onClientAbort();
            else options.signal?.addEventListener("abort", onClientAbort, { once: true });
            let timer: NodeJS.Timeout | undefined;
            const deadline = new Promise<never>((_, reject) => {
                timer = setTimeout(() => {
                    const e = new HttpError(
                        504,
                        `the upstream gave no answer within ${callTimeoutMs} ms (callTimeoutMs); the call is recorded as failed`,
                    );
                    abort.abort(e);
                    reject(e);
                }, callTimeoutMs);
            });
            const t0 = performance.now();
            let settled = false;
            let outcome: { gens: Generation[] } | { error: unknown };
            try {
                // (tokens streamed after the call settled, at its deadline say, are not passed on)
                const onToken = options.onToken;
                const answer = upstream.generate(reqs, {
                    ...options,
                    signal: abort.signal,
                    ...(onToken
                        ? { onToken: (...a: Parameters<typeof onToken>) => void (settled || onToken(...a)) }
                        : {}),
                });
                answer.catch(() => {}); // (past the deadline, its late rejection is nobody's)
                const gens = await Promise.race([answer, deadline]);
                outcome = options.signal?.aborted
                    ? { error: new Error("the client went away before the answer was sent") }
                    : { gens };
            } catch (e) {
                outcome = { error: e };
            } finally {
                settled = true;
                clearTimeout(timer);
                options.signal?.removeEventListener("abort", onClientAbort);
            }
            const recorded = store.finish(episode, call, (c) => {
                c.latencyMs = performance.now() - t0;
                if ("gens" in outcome) {
                    const prompts = promptsOf(outcome.gens);
                    c.samples = outcome.gens.map((g, i) => sampleOf(g, reqs[i]!.seed, prompts[i]));
                } else c.error = outcome.error instanceof Error ? outcome.error.message : String(outcome.error);
            });
            if (recorded)
                try {
                    onCall?.(call, episode);
                } catch (e) {
                    // (a tracer that fails loses its span, never the answer)
                    console.error(
                        `maporl: gateway: the span of ${episode} call ${call.index} was not written: ${(e as Error).message}`,
                    );
                }
            if ("error" in outcome) throw outcome.error;
            return outcome.gens;
        },
    };
}
