// fleetRollout.ts: the trainers' rollouts (MAPoRL's and CoLLM's debates, MAGRPO's joint-action trees) sampled on a
// fleet (config `rolloutFleet`): `maporl serve` processes the job starts on its base (`serve: N`) or servers the
// user runs (`endpoints`: vLLM, SGLang or maporl serve with runtime LoRA loading), the agents' LoRA adapters trained
// in process and pushed (FleetPolicy.pushAdapter) after every update.
// Policy version v = v updates done in the stage; every rollout entry names the served version that sampled it, so the
// trainer knows each row's staleness. A request in flight when a version is pushed finishes on the version it asked
// for (the fleet unloads a retired version once its requests are answered).
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import type { NativePolicy } from "../../model/nativePolicy.js";
import type { Policy } from "../../policy/types.js";
import { FleetPolicy } from "../../remote/fleet.js";
import { startServeProcess, type ServeProcess } from "../../serve/serveProcess.js";
import type { TrainConfig } from "../job/config.js";
import type { StageModels } from "./stage.js";

/** The built CLI the job's servers run: next to this module in the package, dist/cli.js when run from the sources. */
function cliPath(): string {
    const here = fileURLToPath(new URL("../../cli.js", import.meta.url));
    return existsSync(here) ? here : fileURLToPath(new URL("../../../dist/cli.js", import.meta.url));
}

export const fleetActive = (cfg: TrainConfig): boolean =>
    cfg.rolloutFleet.serve > 0 || cfg.rolloutFleet.endpoints.length > 0;

export class RolloutFleet {
    /** served name -> policy version (updates done in the stage when it was pushed). */
    private readonly versions = new Map<string, number>();
    /** adapter name -> directories pushed, oldest first (the oldest are removed once no row can ask for them). */
    private readonly dirs = new Map<string, string[]>();
    private pushes = 0;

    private constructor(
        readonly fleet: FleetPolicy,
        private readonly servers: ServeProcess[],
        private readonly root: string,
        private readonly keep: number,
        private readonly log: (s: string) => void,
    ) {}

    /**
     * Connects to `rolloutFleet.endpoints`, or starts `rolloutFleet.serve` servers on `baseDir` (the warm-started base
     * the job saved, else model.dir) with runtime LoRA loading under `<out>/fleet`. Rejects, stopping any server it
     * started, when a server does not come up.
     */
    static async open(
        cfg: TrainConfig,
        out: string,
        baseDir: string,
        log: (s: string) => void,
        vocabSize?: number,
    ): Promise<RolloutFleet> {
        const f = cfg.rolloutFleet;
        const root = resolve(out, "fleet");
        mkdirSync(root, { recursive: true });
        const servers: ServeProcess[] = [];
        if (f.serve > 0) {
            const args = [
                "--served-model-name",
                f.model,
                "--enable-lora",
                "--lora-root",
                root,
                "--max-loras",
                "64",
                "--threads",
                String(f.threads),
                "--dtype",
                f.dtype,
            ];
            const started = await Promise.allSettled(
                Array.from({ length: f.serve }, () =>
                    startServeProcess(resolve(baseDir), args, cliPath(), {
                        MAPORL_EXIT_WITH_PARENT: String(process.pid),
                    }),
                ),
            );
            for (const s of started) if (s.status === "fulfilled") servers.push(s.value);
            const bad = started.find((s) => s.status === "rejected");
            if (bad) {
                await Promise.all(servers.map((s) => s.stop()));
                throw new Error(`rolloutFleet.serve: a server did not start: ${(bad.reason as Error).message}`);
            }
            log(
                `rollout fleet: ${f.serve} maporl serve process(es) on ${baseDir} (${f.dtype}, ${f.threads} thread(s) each): ${servers.map((s) => s.baseUrl).join(", ")}`,
            );
        } else log(`rollout fleet: ${f.endpoints.join(", ")} (model '${f.model}')`);
        const fleet = new FleetPolicy({
            endpoints: [...f.endpoints, ...servers.map((s) => s.baseUrl)],
            model: f.model,
            name: "rolloutFleet",
            concurrency: f.concurrency,
            // every id a server names must be one of the trainer's (checked before it becomes a training row)
            ...(vocabSize !== undefined ? { vocabSize } : {}),
        });
        return new RolloutFleet(fleet, servers, root, cfg.asyncRollout.maxStaleness + 2, log);
    }

    /** The adapter name the fleet knows trainable model `m` by. */
    private static nameOf(m: NativePolicy): string {
        if (m.adapter === null)
            throw new Error(`rolloutFleet: ${m.name} is not a LoRA adapter (a fleet samples adapters on its base)`);
        return m.adapter;
    }

    /** Saves every distinct trained adapter and pushes it as policy version `version` (all agents' in parallel). */
    async push(m: StageModels, version: number): Promise<void> {
        const distinct = [...new Set(m.trainable.filter((x): x is NativePolicy => x !== null))];
        const n = ++this.pushes;
        await Promise.all(
            distinct.map(async (model) => {
                const name = RolloutFleet.nameOf(model);
                const dir = join(this.root, `${name}-${n}`);
                rmSync(dir, { recursive: true, force: true });
                await model.saveAdapter(dir);
                // (rejects when no endpoint loaded it; endpoints that failed serve it once they load it, and until
                // then get no request for it: the others' rollouts go on)
                const { version: v, failed } = await this.fleet.pushAdapter(name, dir);
                if (failed.length)
                    this.log(
                        `rollout fleet: adapter ${name} version ${version} did not load on ${failed.map((x) => `${x.url} (${x.error})`).join(", ")}`,
                    );
                this.versions.set(v.served, version);
                const list = this.dirs.get(name) ?? [];
                list.push(dir);
                // a directory older than the last `keep` pushes is no longer served (nothing samples that far behind)
                while (list.length > this.keep) rmSync(list.shift()!, { recursive: true, force: true });
                this.dirs.set(name, list);
            }),
        );
    }

    /** The policies that sample for the stage's agents: each trained agent's adapter, the base for the others (one
     * Policy per adapter, so that agents sharing one send a turn's requests as one batch). */
    samplers(m: StageModels): Policy[] {
        return m.agents.map((a) => {
            if (a.adapter === null) return this.fleet;
            let p = this.policies.get(a.adapter);
            if (!p) this.policies.set(a.adapter, (p = this.fleet.adapter(a.adapter)));
            return p;
        });
    }
    private readonly policies = new Map<string, Policy>();

    /** The base model on the fleet (the frozen turn-0 answers of separateTurn0). */
    get base(): Policy {
        return this.fleet;
    }

    /** The oldest policy version among `served` (the served models that sampled a rollout's answers: entries of the
     * base model are not versioned), and the mean version; null when none names a pushed version. */
    versionsOf(served: Iterable<string | undefined>): { min: number; mean: number } | null {
        let min = Infinity,
            sum = 0,
            n = 0;
        for (const name of served) {
            const v = name !== undefined ? this.versions.get(name) : undefined;
            if (v === undefined) continue;
            min = Math.min(min, v);
            sum += v;
            n++;
        }
        return n ? { min, mean: sum / n } : null;
    }

    /** Stops the fleet's timers and the servers the job started; removes the pushed adapters' directories. */
    async close(): Promise<void> {
        this.fleet.close();
        await Promise.all(this.servers.map((s) => s.stop()));
        rmSync(this.root, { recursive: true, force: true });
    }
}
