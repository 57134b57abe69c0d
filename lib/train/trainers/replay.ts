// replay.ts: a replay buffer of successful team trajectories and the offline phase between online bursts (the
// stability trick the seed documents name). An episode is successful when the team's last-turn majority is right (a
// strict majority of the answerers' last answers correct); its trained turns' answers (prompt and completion token ids,
// by agent) enter the buffer, oldest out first past `capacity`. Every `every` iterations each trained model takes
// `steps` supervised steps on batches drawn from its agents' samples (draws seeded by the run's seed and the
// iteration, so a resumed run draws the same). The buffer is part of the checkpoint. Off by default.
import type { NativePolicy } from "../../model/nativePolicy.js";
import { mulberry32 } from "../../random.js";
import { packRows, type TeamRollout } from "./rollout.js";

export interface ReplaySample {
    agent: number;
    prompt: number[];
    completion: number[];
    stopped: boolean;
    iteration: number;
}
export interface ReplayState {
    stage: string;
    added: number;
    samples: ReplaySample[];
}

export class ReplayBuffer {
    private samples: ReplaySample[];
    private added: number;

    constructor(
        readonly stage: string,
        private readonly capacity: number,
        state?: ReplayState | null,
    ) {
        const mine = state && state.stage === stage ? state : null; // a new stage starts empty
        this.samples = mine ? mine.samples.map((s) => ({ ...s })) : [];
        this.added = mine ? mine.added : 0;
    }

    get size(): number {
        return this.samples.length;
    }

    /** Adds the trained turns of the successful episodes of a rollout; returns how many episodes were successful. */
    add(
        r: TeamRollout,
        trainTurn: (t: number) => boolean,
        trained: (agent: number) => boolean,
        iteration: number,
    ): number {
        let ok = 0;
        const who = r.task?.answerers;
        r.entries.forEach((turns) => {
            const last = turns[turns.length - 1]?.filter((_, a) => !who || who.includes(a));
            if (!last || last.filter((e) => e.correct).length * 2 <= last.length) return;
            ok += 1;
            turns.forEach((row, t) => {
                if (!trainTurn(t)) return;
                row.forEach((e, agent) => {
                    if (!trained(agent)) return;
                    this.samples.push({
                        agent,
                        prompt: [...e.prompt],
                        completion: [...e.completion],
                        stopped: e.stopped,
                        iteration,
                    });
                    this.added += 1;
                });
            });
        });
        if (this.samples.length > this.capacity) this.samples.splice(0, this.samples.length - this.capacity);
        return ok;
    }

    /** The offline phase: `steps` supervised steps per trained model on its agents' samples; the mean loss, or null when
     * the buffer held nothing for any model. */
    async offline(
        trainable: (NativePolicy | null)[],
        o: { steps: number; batchSize: number; lr: number; seed: number; signal?: AbortSignal },
    ): Promise<number | null> {
        const models = [...new Set(trainable.filter((m): m is NativePolicy => m !== null))];
        const losses: number[] = [];
        for (const [k, model] of models.entries()) {
            const mine = this.samples.filter((s) => trainable[s.agent] === model);
            if (mine.length === 0) continue;
            const rng = mulberry32(o.seed * 15_485_863 + k);
            for (let s = 0; s < o.steps; s++) {
                o.signal?.throwIfAborted();
                const rows = Array.from(
                    { length: Math.min(o.batchSize, mine.length) },
                    () => mine[Math.floor(rng() * mine.length)]!,
                );
                const b = packRows(rows, model.tokenizer.eos, model.config.contextLength);
                const r = await model.trainStep(
                    { tokens: b.tokens, targets: b.targets, mask: b.mask, shape: b.shape },
                    { lr: o.lr, ...(o.signal ? { signal: o.signal } : {}) },
                );
                losses.push(r.loss);
            }
        }
        return losses.length ? losses.reduce((a, b) => a + b, 0) / losses.length : null;
    }

    toJSON(): ReplayState {
        return { stage: this.stage, added: this.added, samples: this.samples };
    }
}
