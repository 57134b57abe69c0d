// fleetHealth.ts: FleetPolicy's endpoint health: the periodic check (probe, and the adapters a restarted server lost),
// ejection, and the probe that re-admits an ejected endpoint, backing off with each ejection since it last answered.
import type { Endpoint } from "./fleetEndpoint.js";
import type { AdapterVersion } from "./fleetOptions.js";

/** What the health checks need of their fleet. */
export interface HealthHost {
    /** The current version of every pushed adapter, by name. */
    readonly current: ReadonlyMap<string, AdapterVersion>;
    /** The adapter versions requests still need: the current ones and retired ones with requests in flight. */
    live(): { served: string; dir: string }[];
    readonly probeIntervalMs: number;
    closed(): boolean;
    /** Wakes the requests waiting for a change. */
    notify(): void;
}

export class FleetHealth {
    constructor(private readonly f: HealthHost) {}

    // A health check: the probe, and once adapters have been pushed the server's model list, so that a server restarted
    // between two checks (it answers, but has lost the adapters loaded at run time) gets the current versions again.
    async check(ep: Endpoint): Promise<void> {
        if (!(await ep.probe())) {
            if (ep.healthy) this.eject(ep);
            return;
        }
        if (this.f.current.size === 0 || !ep.healthy || this.f.closed()) return;
        const models = await ep.servedModels();
        if (models)
            await this.restore(
                ep,
                this.f.live().filter((v) => !models.includes(v.served)),
            );
    }

    // Loads the given versions on `ep` again (a server that lost them) while requests still need them, then wakes the
    // waiting requests.
    async restore(ep: Endpoint, versions: { served: string; dir: string }[]): Promise<void> {
        for (const v of versions)
            if (this.f.live().some((x) => x.served === v.served))
                await ep.reload(v.served, v.dir).catch(() => undefined);
        if (versions.length > 0) this.f.notify();
    }

    eject(ep: Endpoint): void {
        ep.eject();
        this.scheduleProbe(ep);
    }

    scheduleProbe(ep: Endpoint): void {
        if (ep.probing || this.f.closed()) return;
        const probe = async () => {
            ep.probing = null;
            if (this.f.closed() || ep.removed) return;
            if (await ep.probe()) {
                // The adapter versions requests need first (the current ones, and retired ones still asked for: an
                // ejected endpoint forgot them all); the base is served meanwhile.
                for (const v of this.f.live()) await ep.loadAdapter(v.served, v.dir).catch(() => undefined);
                ep.readmit();
                this.f.notify();
            } else this.scheduleProbe(ep);
        };
        // (A probe that throws is a failed probe: retried later, never an unhandled rejection.)
        ep.probing = setTimeout(
            () => void probe().catch(() => this.scheduleProbe(ep)),
            this.f.probeIntervalMs * 2 ** Math.min(5, Math.max(0, ep.ejectionStreak - 1)),
        );
        ep.probing.unref?.();
    }
}
