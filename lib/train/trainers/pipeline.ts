// pipeline.ts: asynchronous rollouts with bounded staleness (MAPoRL, CoLLM, MAGRPO), in process or on a fleet. With
// asyncRollout.maxStaleness = d > 0, iteration i's update runs while the rollouts of iterations i + 1 .. i + d are
// sampled, each by a snapshot of the agents (clones; an adapter's clone for a LoRA agent) of the version current when
// it was launched. A pipeline that starts at iteration r launches iteration j's rollout at version max(r, j - d) (v
// updates done), so a row trained at iteration j has staleness j - max(r, j - d) <= d: no row exceeds the bound and
// none needs to be dropped or regenerated. The trainer's old log-probs come from the current weights and the rows keep
// the snapshot's log-probs, so `rolloutCorrection` corrects the lag (AReaL's decoupled PPO) and `mismatchK3` measures
// it. The snapshots are taken in the models' call queues before the update's steps, so they hold exactly version v;
// MAGRPO's snapshots grow the iteration's joint-action trees (its rows keep their log-probs, so rolloutCorrection
// corrects the lag as for the others; uncorrected, its REINFORCE step is off-policy by the lag); every draw is seeded
// as on-policy, and a run is deterministic for a given d.
//
// Resumable: a checkpoint after iteration i keeps the snapshots of the versions that the rollouts of i + 1 .. i + d
// were launched at (checkpoint()); a resumed run relaunches them on those versions (`restored`), so it ends exactly
// as an uninterrupted run. One snapshot per version is alive at a time, d of them at most between iterations.
//
// With a rollout fleet (fleetRollout.ts) the servers hold the versions instead of snapshots: iteration j's rollout is
// launched on the fleet's current adapters, the update's new adapters are pushed when it ends, and every request asks
// for the version current when it starts, so a rollout's later turns may be sampled by a newer version than its
// first. Each entry names its version; staleness is the trained iteration minus the oldest version in its rollout,
// still <= d (launched at most d versions ahead, versions only grow). maxStaleness 0 is the on-policy loop on a fleet.
// A fleet's versions depend on when each request started, so a resumed run on a fleet launches its rollouts again on
// the version it resumes at (staleness 0 .. d, as at a stage's start).
import { setMaxListeners } from "node:events";

import type { NativePolicy } from "../../model/nativePolicy.js";
import type { TrainConfig } from "../job/config.js";
import type { PipelineState } from "../job/types.js";
import type { Task } from "../tasks/tasks.js";
import type { RolloutFleet } from "./fleetRollout.js";
import type { IterationResult } from "./iteration.js";
import { rolloutTeam, type TeamRollout } from "./rollout.js";
import { rollOptions, scheduled, updateIteration, type StageModels } from "./stage.js";
import { magrpoSample, magrpoServed, magrpoUpdate, type MagrpoSample } from "./magrpo.js";

interface Launched {
    /** MAPoRL, CoLLM: the team's rollout; MAGRPO: its sampled trees. */
    r: TeamRollout | MagrpoSample;
    version: number;
}

/** A snapshot of the agents at one version: each distinct agent model and its copy. */
export type Snapshot = Map<NativePolicy, NativePolicy>;

/** Releases a snapshot's copies (an adapter copy's name is taken on its base until it is deleted). */
export async function releaseSnapshot(snap: Snapshot): Promise<void> {
    for (const [orig, copy] of snap) {
        const name = copy.adapter;
        await copy.dispose();
        if (name !== null) await orig.deleteAdapter(name);
    }
}

/** The checkpoint name of agent model `name`'s snapshot at `version`. */
export const snapshotName = (version: number, name: string): string => `pipeline-v${version}-${name}`;

export class RolloutPipeline {
    private readonly pending = new Map<number, Promise<Launched>>();
    /** version -> the agents' snapshot at it (in process). */
    private readonly snaps = new Map<number, Promise<Snapshot>>();
    // The rollouts launched ahead stop with the run's signal, or when the pipeline is closed (an iteration failed).
    private readonly stop = new AbortController();
    /** The iteration the pipeline started at (the stage's first, or a resumed run's original start). */
    private start: number | null;

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
        /** A resumed run's pipeline: where it started and the snapshots its checkpoint held, by version. */
        restored?: { start: number; snapshots: Map<number, Snapshot> },
    ) {
        this.rolloutSignal = signal ? AbortSignal.any([signal, this.stop.signal]) : this.stop.signal;
        // every request, tool call and step in flight listens to it (a MAGRPO depth's tool calls: hundreds at once)
        setMaxListeners(0, this.rolloutSignal);
        this.start = restored && !fleet ? restored.start : null;
        if (restored && !fleet) for (const [v, s] of restored.snapshots) this.snaps.set(v, Promise.resolve(s));
    }
    private readonly rolloutSignal: AbortSignal;

    /** Starts iteration j's rollout on the fleet's current adapters (version `version` or, once pushed, newer). */
    private launchOnFleet(j: number, version: number, fleet: RolloutFleet): void {
        const seed = this.seedOf(j);
        const items = this.task.generate(this.cfg.episodesPerIteration, seed);
        const roll = rollOptions(this.cfg, this.m, this.ref, seed, this.rolloutSignal);
        const remote = { ...roll, ...(roll.turn0 ? { turn0: roll.turn0.map(() => fleet.base) } : {}) };
        const agents = fleet.samplers(this.m);
        const p = (
            this.cfg.algo === "magrpo"
                ? magrpoSample(this.cfg, this.task, items, agents, remote, this.ref.tokenizer)
                : rolloutTeam(this.task, items, agents, remote)
        ).then((r) => ({ r, version }));
        p.catch(() => undefined); // a failure is reported where the rollout is awaited
        this.pending.set(j, p);
    }

    /** The agents' snapshot at version `v`: taken now when `v` is the current version (queued before the update's
     * steps, so it holds exactly version v), else the one taken (or restored) earlier. */
    private snapshot(v: number, current: number): Promise<Snapshot> {
        let s = this.snaps.get(v);
        if (s) return s;
        if (v !== current) throw new Error(`rollout pipeline: no snapshot of version ${v} (at version ${current})`);
        const distinct = [...new Set(this.m.agents)];
        const clones = distinct.map((a) => a.clone(`${a.adapter ?? a.name}-v${v}`));
        s = Promise.all(clones).then((c) => new Map(distinct.map((a, k) => [a, c[k]!])));
        s.catch(() => undefined); // a failure is reported where the rollout is awaited
        this.snaps.set(v, s);
        return s;
    }

    private async release(v: number): Promise<void> {
        const s = this.snaps.get(v);
        this.snaps.delete(v);
        const snap = await s?.catch(() => null);
        if (snap) await releaseSnapshot(snap);
    }

    /** The version iteration j's rollout is launched at. */
    private versionOf(j: number): number {
        return Math.max(this.start!, j - this.cfg.asyncRollout.maxStaleness);
    }

    /** Starts iteration j's rollout on the agents' snapshot at its version (`current`: the version now). */
    private launch(j: number, current: number): void {
        if (this.pending.has(j) || j >= this.end) return;
        if (this.fleet) return this.launchOnFleet(j, current, this.fleet);
        const version = this.versionOf(j);
        const snap = this.snapshot(version, current);
        const p = (async () => {
            const of = await snap;
            const seed = this.seedOf(j);
            const items = this.task.generate(this.cfg.episodesPerIteration, seed);
            const roll = rollOptions(this.cfg, this.m, this.ref, seed, this.rolloutSignal);
            const agents = this.m.agents.map((a) => of.get(a)!);
            const r =
                this.cfg.algo === "magrpo"
                    ? await magrpoSample(this.cfg, this.task, items, agents, roll, this.m.agents[0]!.tokenizer)
                    : await rolloutTeam(this.task, items, agents, roll);
            return { r, version };
        })();
        p.catch(() => undefined); // a failure is reported where the rollout is awaited
        this.pending.set(j, p);
    }

    /** Iteration `it` (its rollout, launched earlier or now, then its update); version = `it` updates done. */
    async run(
        it: number,
    ): Promise<IterationResult & { staleness: number; policyVersion: number; stalenessMean?: number }> {
        const d = this.cfg.asyncRollout.maxStaleness;
        this.start ??= it;
        for (let j = it; j <= it + d; j++) this.launch(j, it);
        const launched = this.pending.get(it)!;
        this.pending.delete(it);
        const { r, version } = await launched;
        // the snapshots no rollout after `it` is launched at (every rollout that used them is in: the last was `it`'s)
        for (const v of [...this.snaps.keys()]) if (v < this.versionOf(it + 1)) await this.release(v);
        let res: IterationResult;
        if ("grown" in r) {
            const { trainable, trainTurn } = scheduled(this.cfg, this.schedule, this.m, it);
            const roll = rollOptions(this.cfg, this.m, this.ref, this.seedOf(it), this.signal);
            res = await magrpoUpdate(this.cfg, this.task, r, trainable, trainTurn, this.ref, roll);
        } else
            res = await updateIteration(this.cfg, r, this.schedule, this.m, this.ref, it, this.seedOf(it), this.signal);
        if (!this.fleet) return { ...res, staleness: it - version, policyVersion: version };
        await this.fleet.push(this.m, it + 1);
        const v = this.fleet.versionsOf(
            "grown" in r ? magrpoServed(r) : r.entries.flatMap((ep) => ep.flatMap((turn) => turn.map((e) => e.model))),
        );
        return {
            ...res,
            staleness: v ? it - v.min : 0,
            policyVersion: v ? v.min : it,
            ...(v ? { stalenessMean: it - v.mean } : {}),
        };
    }

    /**
     * What a checkpoint after iteration `next - 1` keeps so that a resumed run relaunches the rollouts of next ..
     * next + d - 1 as they were launched: the state, and the snapshots of the versions before `next` they need, by
     * checkpoint name (`named`: the stage's models by name). Null on a fleet, or when an agent has no name.
     */
    async checkpoint(next: number): Promise<{ state: PipelineState; models: Record<string, NativePolicy> } | null> {
        if (this.fleet || this.start === null) return null;
        const versions = new Set<number>();
        // (each is before `next`: rollout j <= next + d - 1 is launched at max(start, j - d) <= next - 1)
        for (let j = next; j < Math.min(this.end, next + this.cfg.asyncRollout.maxStaleness); j++)
            versions.add(this.versionOf(j));
        const nameOf = new Map(Object.entries(this.m.named).map(([k, v]) => [v, k]));
        if (this.m.agents.some((a) => !nameOf.has(a))) return null;
        const models: Record<string, NativePolicy> = {};
        for (const v of versions)
            for (const [orig, copy] of await this.snapshot(v, -1)) models[snapshotName(v, nameOf.get(orig)!)] = copy;
        return {
            state: {
                start: this.start,
                maxStaleness: this.cfg.asyncRollout.maxStaleness,
                versions: [...versions].sort((a, b) => a - b),
            },
            models,
        };
    }

    /** Stops the rollouts still running and waits for them, then releases the snapshots; their results are not
     * used. After the last iteration none is running; after a failed one, this ends the launched-ahead requests. */
    async close(): Promise<void> {
        const all = [...this.pending.values()];
        this.pending.clear();
        this.stop.abort(new Error("the rollout pipeline was closed"));
        await Promise.allSettled(all);
        for (const v of [...this.snaps.keys()]) await this.release(v);
    }
}
