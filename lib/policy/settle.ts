// settle.ts: generation with per-request outcomes, so that one failed request (an HTTP 500 after retries, a timeout,
// a malformed reply, a model that gives NaN) fails only the episode it belongs to. A policy may implement
// generateSettled itself (OpenAICompatiblePolicy does: its requests are independent HTTP calls); for any other
// policy the batch is sent as one generate call and, only if that call rejects, each request is sent again alone,
// so the failure lands on the requests that cause it (a deterministic, seeded policy gives the same answers alone
// as in the batch: NativePolicy does).
import { describe } from "../validate.js";
import type { GenerateRequest, Generation, Policy, SettledGeneration } from "./types.js";

export type { SettledGeneration } from "./types.js";

/** An error's message prefixed with the policy's name, unless it already starts with it. */
export function policyMessage(policy: Policy, error: Error): string {
    return error.message.startsWith(policy.name) ? error.message : `${policy.name}: ${error.message}`;
}

/** What a debate or rollout does when an episode's request fails (after the policy's own retries). */
export type EpisodeErrorPolicy = "fail-fast" | "skip" | "retry";

export const EPISODE_ERROR_POLICIES: readonly EpisodeErrorPolicy[] = ["fail-fast", "skip", "retry"];

const asError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

function checked(policy: Policy, gens: unknown, n: number): Generation[] {
    if (!Array.isArray(gens) || gens.length !== n)
        throw new TypeError(
            `${policy.name}: generate() returned ${Array.isArray(gens) ? `${gens.length} generations` : `${describe(gens)}, not an array of generations`}, expected ${n}`,
        );
    gens.forEach((g: unknown, k) => {
        if (g === null || typeof g !== "object")
            throw new TypeError(
                `${policy.name}: generate() returned ${describe(g)} as generation ${k}, expected an object with text`,
            );
        const text = (g as { text?: unknown }).text;
        if (typeof text !== "string")
            throw new TypeError(
                `${policy.name}: generate() returned generation ${k} with text ${describe(text)}, expected a string`,
            );
    });
    return gens as Generation[];
}

/**
 * Generates `requests` on `policy` and reports each request's outcome. Rejects only on abort (with signal.reason).
 */
export async function generateSettled(
    policy: Policy,
    requests: GenerateRequest[],
    options: { signal?: AbortSignal } = {},
): Promise<SettledGeneration[]> {
    const signal = options.signal;
    if (typeof policy.generateSettled === "function") {
        const out = await policy.generateSettled(requests, { signal });
        if (!Array.isArray(out) || out.length !== requests.length)
            throw new TypeError(
                `${policy.name}: generateSettled() returned ${Array.isArray(out) ? out.length : "no"} outcomes, expected ${requests.length}`,
            );
        return out;
    }
    try {
        return checked(policy, await policy.generate(requests, { signal }), requests.length).map((generation) => ({
            ok: true as const,
            generation,
        }));
    } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (requests.length === 1) return [{ ok: false, error: asError(e) }];
    }
    const out: SettledGeneration[] = [];
    for (const r of requests) {
        // one at a time: a policy that failed a batch is not sent all of it again at once
        try {
            out.push({ ok: true, generation: checked(policy, await policy.generate([r], { signal }), 1)[0]! });
        } catch (e) {
            if (signal?.aborted) throw signal.reason;
            out.push({ ok: false, error: asError(e) });
        }
    }
    return out;
}

/** Checks an `onError` option (named `where`); returns the policy, 'skip' when absent. */
export function episodeErrorPolicy(where: string, x: unknown): EpisodeErrorPolicy {
    if (x === undefined) return "skip";
    if (typeof x !== "string" || !EPISODE_ERROR_POLICIES.includes(x as EpisodeErrorPolicy))
        throw new RangeError(
            `${where}: onError: expected ${EPISODE_ERROR_POLICIES.map((p) => `'${p}'`).join(", ")}, got ${JSON.stringify(x)}`,
        );
    return x as EpisodeErrorPolicy;
}

/** Checks a `retries` option (episode retries under onError 'retry'): an integer in [0, 100], default 2. */
export function episodeRetries(where: string, x: unknown): number {
    if (x === undefined) return 2;
    if (typeof x !== "number" || !Number.isInteger(x) || x < 0 || x > 100)
        throw new RangeError(`${where}: retries: expected an integer in [0, 100], got ${String(x)}`);
    return x;
}

/** generate and generateSettled over `run`, which starts every request and gives each one's promise (a fleet's
 * requests each go alone): generate rejects with the first failure, generateSettled reports each outcome and
 * rejects only on abort. */
export function settledPolicy(
    run: (requests: GenerateRequest[], signal?: AbortSignal) => Promise<Promise<Generation>[]>,
): Pick<Policy, "generate"> & { generateSettled: NonNullable<Policy["generateSettled"]> } {
    return {
        generate: async (requests: GenerateRequest[], options: { signal?: AbortSignal } = {}): Promise<Generation[]> =>
            Promise.all(await run(requests, options.signal)),
        generateSettled: async (
            requests: GenerateRequest[],
            options: { signal?: AbortSignal } = {},
        ): Promise<SettledGeneration[]> => {
            const out = await Promise.allSettled(await run(requests, options.signal));
            if (options.signal?.aborted) throw options.signal.reason;
            return out.map((x) =>
                x.status === "fulfilled"
                    ? { ok: true as const, generation: x.value }
                    : {
                          ok: false as const,
                          error: x.reason instanceof Error ? x.reason : new Error(String(x.reason)),
                      },
            );
        },
    };
}
