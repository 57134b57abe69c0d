// recorder.ts (gateway): the policy a gateway request is answered by: the agent's upstream policy, with every call
// recorded as a turn of that agent in its episode (episodes.ts). Each request gets a seed where the client gave none
// (so every recorded call can be replayed), and a routing key `<episode>/<agent>` (a fleet keeps an episode's agent on
// one server, whose prefix cache serves its growing conversation). The tool messages a call sends back are matched to
// the calls they answer, in any earlier turn of the episode, and recorded as their results.
import { randomBytes } from "node:crypto";

import type { EpisodeStore, GatewayCall, GatewayEpisode, GatewaySample } from "./episodes.js";
import type { ChatMessage, GenerateRequest, Generation, Policy } from "../policy/types.js";

// A seed for a request that gives none: a safe integer (52 bits, so that base + choice stays safe), so that it survives
// JSON to a remote upstream.
const drawSeed = (): number => Number(randomBytes(8).readBigUInt64LE() >> 12n);

// The requests of one call with seeds: where the client gave none (choice 0 without a seed; the routes then number
// choices 1..n-1 as seeds 1..n-1), one drawn base seed + i for choice i, so that every choice is a fresh draw.
const seeded = (requests: GenerateRequest[]): GenerateRequest[] => {
    if (requests[0]?.seed !== undefined) return requests;
    const base = drawSeed();
    return requests.map((r, i) => ({ ...r, seed: base + i }));
};

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

function sampleOf(g: Generation, seed: bigint | number | undefined): GatewaySample {
    const exact = g.tokenIdsExact === true && Array.isArray(g.tokenIds) && Array.isArray(g.promptTokenIds);
    return {
        text: g.text,
        promptTokenIds: exact ? [...g.promptTokenIds!] : [],
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

/** `upstream` with a seed drawn for every request that gives none (an OpenAI client that sends no seed expects a
 * fresh draw; a native policy would otherwise decode every such request with seed 0). For calls not recorded. */
export function seededPolicy(upstream: Policy): Policy & { tokenizer?: unknown } {
    return {
        name: upstream.name,
        tokenizer: (upstream as { tokenizer?: unknown }).tokenizer,
        generate: (requests, options) => upstream.generate(seeded(requests), options),
    };
}

/** `upstream` answering for `agent` with its calls recorded in episode `episode` of `store`. */
export function recordingPolicy(
    store: EpisodeStore,
    episode: string,
    agent: string,
    upstream: Policy,
    onCall?: (call: GatewayCall, episode: string) => void,
): Policy & { tokenizer?: unknown } {
    return {
        name: upstream.name,
        // (the upstream's tokenizer, where it has one: the routes stream text pieces and encode raw prompts with it)
        tokenizer: (upstream as { tokenizer?: unknown }).tokenizer,
        async generate(requests, options = {}) {
            const { ep, index } = store.begin(episode, agent);
            const call: GatewayCall = ep.calls[index]!;
            const r0 = requests[0]!;
            if (r0.messages) call.messages = r0.messages.map((m) => ({ ...m }));
            else if (r0.promptTokenIds)
                call.promptTokenIds = [...r0.promptTokenIds]; // (/v1/completions: no template)
            else call.messages = [{ role: "user", content: r0.prompt ?? "" }];
            if (r0.tools) call.tools = r0.tools;
            call.sampling = { ...r0.sampling };
            attachResults(ep, call.messages);
            const reqs: GenerateRequest[] = seeded(requests).map((r) => ({ ...r, routingKey: `${episode}/${agent}` }));
            const t0 = performance.now();
            try {
                const gens = await upstream.generate(reqs, options);
                call.samples = gens.map((g, i) => sampleOf(g, reqs[i]!.seed));
                return gens;
            } catch (e) {
                call.error = e instanceof Error ? e.message : String(e);
                throw e;
            } finally {
                call.latencyMs = performance.now() - t0;
                store.end(episode);
                try {
                    onCall?.(call, episode);
                } catch (e) {
                    // (a tracer that fails loses its span, never the answer)
                    console.error(
                        `maporl: gateway: the span of ${episode} call ${call.index} was not written: ${(e as Error).message}`,
                    );
                }
            }
        },
    };
}
