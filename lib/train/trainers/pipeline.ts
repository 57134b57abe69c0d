// pipeline.ts: asynchronous rollouts with bounded staleness, in process (MAPoRL, CoLLM, MAGRPO). With
// asyncRollout.maxStaleness = d > 0, iteration i's update runs while the rollouts of iterations i + 1 .. i + d are
// sampled, each by a snapshot of the agents (clones; an adapter's clone for a LoRA agent) taken when it was launched.
// A rollout launched at policy version v (v updates done) and trained at iteration i has staleness i - v <= d: rollouts
// are launched at most d versions ahead, so no row exceeds the bound and none needs to be dropped or regenerated.
// The trainer's old log-probs come from the current weights and the rows keep the snapshot's log-probs, so
// `rolloutCorrection` corrects the lag (AReaL's decoupled PPO) and `mismatchK3` measures it. The snapshots are taken
// in the models' call queues before the update's steps, so they hold exactly version v; MAGRPO's snapshots grow the
// iteration's joint-action trees (its rows keep their log-probs, so rolloutCorrection corrects the lag as for the
// others; uncorrected, its REINFORCE step is off-policy by the lag); every draw is seeded as
// on-policy, and a run is deterministic for a given d. Not resumable mid-pipeline: a resumed run starts it again (its
// first iterations on-policy), so it differs from an uninterrupted one.
//
// With a rollout fleet (fleetRollout.ts) the servers hold the versions instead of snapshots: iteration j's rollout is
// launched on the fleet's current adapters, the update's new adapters are pushed when it ends, and every request asks
// for the version current when it starts, so a rollout's later turns may be sampled by a newer version than its
// first. Each entry names its version; staleness is the trained iteration minus the oldest version in its rollout,
// still <= d (launched at most d versions ahead, versions only grow). maxStaleness 0 is the on-policy loop on a fleet.
import type { NativePolicy } from "../../model/nativePolicy.js";
import type { TrainConfig } from "../job/config.js";
import type { Task } from "../tasks/tasks.js";
import type { RolloutFleet } from "./fleetRollout.js";
import type { IterationResult } from "./iteration.js";
import { rolloutTeam, type TeamRollout } from "./rollout.js";
import { rollOptions, scheduled, updateIteration, type StageModels } from "./stage.js";
import { magrpoSample, magrpoUpdate, type MagrpoSample } from "./magrpo.js";

interface Launched {
    /** MAPoRL, CoLLM: the team's rollout; MAGRPO: its sampled trees. */
    r: TeamRollout | MagrpoSample;
    version: number;
}

export class RolloutPipeline {
    private readonly pending = new Map<number, Promise<Launched>>();
    // The rollouts launched ahead stop with the run's signal, or when the pipeline is closed (an iteration failed).
    private readonly stop = new AbortController();

    constructor(
        private readonly cfg: TrainConfig,
        private readonly task: Task,
        private readonly schedule: TrainConfig["schedule"],
        private readonly m: StageModels,
        private readonly ref: NativePolicy,
        private readonly seedOf: (iteration: number) => number,
        private readonly end: number,
        private readonly signal?: AbortSignal,
        private readonly fleet: RolloutFleet | null = null,
    ) {
        this.rolloutSignal = signal ? AbortSignal.any([signal, this.stop.signal]) : this.stop.signal;
    }
    private readonly rolloutSignal: AbortSignal;

    /** Starts iteration j's rollout on the fleet's current adapters (version `version` or, once pushed, newer). */
    private launchOnFleet(j: number, version: number, fleet: RolloutFleet): void {
        const seed = this.seedOf(j);
        const items = this.task.generate(this.cfg.episodesPerIteration, seed);
        const roll = rollOptions(this.cfg, this.m, this.ref, seed, this.rolloutSignal);
        const p = rolloutTeam(this.task, items, fleet.samplers(this.m), {
            ...roll,
            ...(roll.turn0 ? { turn0: roll.turn0.map(() => fleet.base) } : {}),
        }).then((r) => ({ r, version }));
        p.catch(() => undefined); // a failure is reported where the rollout is awaited
        this.pending.set(j, p);
    }

    /** Starts iteration j's rollout on snapshots of the agents as they are now (version `version`). */
    private launch(j: number, version: number): void {
        if (this.pending.has(j) || j >= this.end) return;
        if (this.fleet) return this.launchOnFleet(j, version, this.fleet);
        // Every clone is queued now, before the update's steps: the snapshots hold version `version`.
        const distinct = [...new Set(this.m.agents)];
        const clones = distinct.map((a) => a.clone(`${a.adapter ?? a.name}-v${version}-i${j}`));
        const p = (async () => {
            const snaps = await Promise.all(clones);
            const of = new Map(distinct.map((a, k) => [a, snaps[k]!]));
            try {
                const seed = this.seedOf(j);
                const items = this.task.generate(this.cfg.episodesPerIteration, seed);
                const roll = rollOptions(this.cfg, this.m, this.ref, seed, this.rolloutSignal);
                const agents = this.m.agents.map((a) => of.get(a)!);
                const r =
                    this.cfg.algo === "magrpo"
                        ? await magrpoSample(this.cfg, this.task, items, agents, roll)
                        : await rolloutTeam(this.task, items, agents, roll);
                return { r, version };
            } finally {
                for (const [orig, s] of of) {
                    const name = s.adapter;
                    await s.dispose();
                    if (name !== null) await orig.deleteAdapter(name);
                }
            }
        })();
        p.catch(() => undefined); // a failure is reported where the rollout is awaited
        this.pending.set(j, p);
    }

    /** Iteration `it` (its rollout, launched earlier or now, then its update); version = `it` updates done. */
    async run(
        it: number,
    ): Promise<IterationResult & { staleness: number; policyVersion: number; stalenessMean?: number }> {
        const d = this.cfg.asyncRollout.maxStaleness;
        for (let j = it; j <= it + d; j++) this.launch(j, it);
        const launched = this.pending.get(it)!;
        this.pending.delete(it);
        const { r, version } = await launched;
        let res: IterationResult;
        if ("grown" in r) {
            const { trainable, trainTurn } = scheduled(this.cfg, this.schedule, this.m, it);
            const roll = rollOptions(this.cfg, this.m, this.ref, this.seedOf(it), this.signal);
            res = await magrpoUpdate(this.cfg, this.task, r, trainable, trainTurn, this.ref, roll);
        } else
            res = await updateIteration(this.cfg, r, this.schedule, this.m, this.ref, it, this.seedOf(it), this.signal);
        if (!this.fleet) return { ...res, staleness: it - version, policyVersion: version };
        await this.fleet.push(this.m, it + 1);
        const v = this.fleet.versionsOf(r as TeamRollout);
        return {
            ...res,
            staleness: v ? it - v.min : 0,
            policyVersion: v ? v.min : it,
            ...(v ? { stalenessMean: it - v.mean } : {}),
        };
    }

    /** Stops the rollouts still running and waits for them (their snapshots are released); their results are not
     * used. After the last iteration none is running; after a failed one, this ends the launched-ahead requests. */
    async close(): Promise<void> {
        const all = [...this.pending.values()];
        this.pending.clear();
        this.stop.abort(new Error("the rollout pipeline was closed"));
        await Promise.allSettled(all);
    }
}
