// decodeTurns.ts: generation batches that take turns on one model, so that a short request does not wait for a long
// one to finish. A batch that arrives while others decode starts at once with a KV cache of its own (a native cache
// slot, gptCacheSwap) and the batches alternate one native call at a time (a decode step, a prefill), each swapping
// its cache in first: two O(1) swaps, no copy. A short request's latency is then about its own decoding time times
// the batches running beside it, not the long request's length. This is step-level interleaving of separate batches,
// not vLLM's continuous batching (new rows joining the running batch's GEMV): each batch still runs its own steps.
// Work that changes the model (a training step, a move to another device) queues behind every running batch and
// stops new ones from joining until it has run. Models on a GPU keep one batch at a time (slots are CPU-only).
import { native, type GptHandle } from "../native.js";

/** One batch's access to the model: `run` executes a native call with the batch's cache in place. */
export interface DecodeLease {
    run<T>(fn: () => T | Promise<T>): Promise<T>;
}

export class DecodeTurns {
    private active = 0;
    // The batch whose cache is in the model: an id, or 0 (none, or a finished batch's, free to reuse).
    private live = 0;
    private readonly stashed = new Set<number>();
    private lock: Promise<unknown> = Promise.resolve();
    private nextId = 1;
    private idle: (() => void) | null = null;
    /** Calls that change the model, queued: while any waits, new batches queue too. */
    waitingSerial = 0;

    constructor(private readonly handle: () => GptHandle) {}

    /** Batches running now. */
    get running(): number {
        return this.active;
    }

    /** Whether a new batch may start beside the running ones now (some run, none waits to change the model, CPU). */
    canJoin(): boolean {
        return this.active > 0 && this.waitingSerial === 0 && native.gptGetDevice(this.handle()) === 0;
    }

    /**
     * Runs `batch` as the first batch of a session: resolves once it and every batch that joined meanwhile have ended
     * (the caller holds the model's queue for that long).
     */
    session(batch: (lease: DecodeLease) => Promise<void>, prepare: () => void, big: () => boolean): Promise<void> {
        const ended = new Promise<void>((resolve) => {
            this.idle = resolve;
        });
        void this.join(batch, prepare, big);
        return ended;
    }

    /** Starts `batch` beside the running ones (canJoin() first). `prepare` runs before each of its native calls (the
     * adapter selection of the policy that made it); its cache is freed when it ends if `big()` (read then), a small one kept
     * for the next batch unless others still run. */
    async join(batch: (lease: DecodeLease) => Promise<void>, prepare: () => void, big: () => boolean): Promise<void> {
        const id = this.nextId++;
        this.active++;
        const lease: DecodeLease = {
            run: (fn) =>
                this.turn(id, () => {
                    prepare();
                    return fn();
                }),
        };
        try {
            await batch(lease);
        } finally {
            // Its cache is freed when large or when others still run, else left for the next batch.
            await this.turn(id, () => {
                if (big() || this.active > 1) native.gptCacheRelease(this.handle());
                this.live = 0;
            }).catch(() => undefined);
            this.active--;
            if (this.active === 0) {
                const idle = this.idle;
                this.idle = null;
                idle?.();
            }
        }
    }

    // One native call of batch `id`, after the calls queued before it, with its cache in the model.
    private turn<T>(id: number, fn: () => T | Promise<T>): Promise<T> {
        const run = this.lock.then(() => {
            this.place(id);
            return fn();
        });
        this.lock = run.catch(() => undefined);
        return run;
    }

    private place(id: number): void {
        if (this.live === id) return;
        const h = this.handle();
        if (this.live !== 0) {
            native.gptCacheSwap(h, this.live); // the live batch's cache to its slot
            this.stashed.add(this.live);
        } else if (this.stashed.has(id)) {
            native.gptCacheRelease(h); // a finished batch's cache: nobody's
        }
        if (this.stashed.delete(id)) native.gptCacheSwap(h, id); // (a new batch adopts what is there: it resets first)
        this.live = id;
    }
}
