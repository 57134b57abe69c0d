// runs.ts (gateway): running an agent program for a list of episodes, at most `concurrency` at once, as training and
// evaluation both do: each episode opened with its labels, the program run against its base URL, its reward given
// (by `reward`, or posted by the program; an episode the program ended without rewarding fails), and waited for until
// it has closed (a call still in flight closes it once it ends). An episode the gateway refuses to open (a limit), a
// program that throws, one never rewarded: each fails only its own episode. An abort starts no new program and
// rejects once those under way have ended.
import type { GatewayEpisode } from "./episodes.js";
import type { Gateway } from "./gateway.js";

/** What the program is given for one episode. */
export interface GatewayRun<I> {
    item: I;
    /** The episode's id and its base URL (set it as the agents' OpenAI base URL). */
    episode: string;
    baseUrl: string;
    /** The item's index in this iteration's items, and the episode's index in its group. */
    index: number;
    group: number;
    signal: AbortSignal;
}

export interface EpisodeSpec<I> {
    id: string;
    item: I;
    index: number;
    group: number;
    meta: Record<string, string | number>;
}

export interface RunOptions<I> {
    gateway: Gateway;
    program: (run: GatewayRun<I>) => Promise<unknown>;
    reward?: (item: I, output: unknown, episode: GatewayEpisode) => number | Promise<number>;
    concurrency: number;
    signal?: AbortSignal;
}

// A failed episode the gateway does not hold (refused at opening, or taken by its onEpisodeClosed).
const failedEpisode = (id: string, reason: string, meta: Record<string, string | number>): GatewayEpisode => ({
    id,
    status: "failed",
    reason,
    openedAt: Date.now(),
    closedAt: Date.now(),
    reward: NaN,
    agentRewards: {},
    milestones: [],
    calls: [],
    meta,
});

/** Runs every episode of `specs` and takes it from the gateway: the episodes in the order of `specs`. */
export async function runEpisodes<I>(specs: EpisodeSpec<I>[], o: RunOptions<I>): Promise<GatewayEpisode[]> {
    const refused = new Map<string, GatewayEpisode>();
    const one = async (s: EpisodeSpec<I>) => {
        const abort = new AbortController();
        const onAbort = () => abort.abort(o.signal!.reason);
        o.signal?.addEventListener("abort", onAbort, { once: true });
        const eps = o.gateway.episodes;
        try {
            try {
                o.gateway.open(s.id, s.meta);
            } catch (e) {
                refused.set(s.id, failedEpisode(s.id, `not opened: ${(e as Error).message}`, s.meta));
                return;
            }
            try {
                const output = await o.program({
                    item: s.item,
                    episode: s.id,
                    baseUrl: o.gateway.episodeUrl(s.id),
                    index: s.index,
                    group: s.group,
                    signal: abort.signal,
                });
                const ep = eps.get(s.id);
                if (o.reward && ep?.status === "open") eps.reward(s.id, { reward: await o.reward(s.item, output, ep) });
                // (the program has ended: an episode it did not reward fails now, once its calls in flight end)
                else eps.fail(s.id, "the program ended without rewarding its episode (POST MAPORL_REWARD_URL)");
            } catch (e) {
                eps.fail(s.id, `the program failed: ${e instanceof Error ? e.message : String(e)}`);
            }
            // (closed at once, or once its calls in flight end; on abort (wait's only rejection here) no longer waited
            // for: the abort is raised below, once every program under way has ended)
            if (eps.get(s.id)) await eps.wait(s.id, o.signal).catch(() => {});
        } finally {
            o.signal?.removeEventListener("abort", onAbort);
        }
    };
    let next = 0;
    await Promise.all(
        Array.from({ length: Math.min(specs.length, o.concurrency) }, async () => {
            while (next < specs.length && !o.signal?.aborted) await one(specs[next++]!);
        }),
    );
    o.signal?.throwIfAborted();
    return specs.map(
        (s) =>
            refused.get(s.id) ??
            o.gateway.episodes.take(s.id) ??
            failedEpisode(s.id, "taken from the gateway before the trainer read it", s.meta),
    );
}
