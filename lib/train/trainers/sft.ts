// sft.ts: the warm start. A weak base stays weak together, so the embedded policy first learns the task from
// its worked solutions (cross-entropy on the answer tokens). Follow-up turns are shown with *uninformative* previous
// answers (random numbers), so the warm-started model answers every turn on its own: an untrained team that does
// not yet use the discussion, which is what co-training has to teach.
import type { NativePolicy } from "../../model/nativePolicy.js";
import { mulberry32 } from "../../random.js";
import { packRows, protocolSolution, turnPrompt } from "./rollout.js";
import type { Task } from "../tasks/tasks.js";

export interface SftOptions {
    steps: number;
    batchSize: number;
    lr: number;
    turns: number;
    seed: number;
    /** The prompts carry verifier verdicts (see turnPrompt); the warm start shows random ones. */
    feedback?: boolean;
    /** Called after every step. */
    onStep?: (step: number, loss: number) => void;
    signal?: AbortSignal;
    /** Start at this step (resume). Defaults to 0. */
    from?: number;
}

/** Trains `policy` on the task's solutions; the items of step s come from seed (seed, s), so a resumed run repeats them. */
export async function sftWarmStart(policy: NativePolicy, task: Task, o: SftOptions): Promise<void> {
    const tok = policy.tokenizer;
    for (let s = o.from ?? 0; s < o.steps; s++) {
        o.signal?.throwIfAborted();
        const items = task.generate(o.batchSize, o.seed * 100_003 + s);
        const rng = mulberry32(o.seed * 7919 + s);
        const rows = items.map((item, k) => {
            if (task.demonstration) {
                const d = task.demonstration(
                    item,
                    k % task.agents,
                    Math.floor(rng() * o.turns),
                    rng,
                    o.feedback ?? false,
                );
                return {
                    prompt: tok.encodeChat([{ role: "user", content: d.prompt }]),
                    completion: tok.encode(d.answer),
                    stopped: true,
                };
            }
            if (!item.solution && !task.warmStart)
                throw new TypeError(`sft: task ${task.name}: item ${item.id} has no solution to learn from`);
            const a = k % task.agents,
                turn = Math.floor(rng() * o.turns);
            const noise =
                turn === 0 ? null : Array.from({ length: task.agents }, () => String(Math.floor(rng() * 200)));
            const marks = !o.feedback ? undefined : noise ? noise.map(() => rng()) : ("empty" as const);
            // Words tasks (GSM8K): their own prompts, the noise as previous answers, and the solution as written.
            const prompt = task.prompt
                ? task.prompt(
                      item,
                      a,
                      noise ? noise.map((n) => ({ text: `Answer: \\boxed{ ${n} }`, extracted: n })) : null,
                      marks,
                  )
                : turnPrompt(item.views[a]!, a, task.agents, noise, marks);
            const answer = task.warmStart
                ? task.warmStart(item, a, turn, noise, rng)
                : task.prompt
                  ? item.solution!
                  : protocolSolution(item.solution!);
            return {
                prompt: tok.encodeChat([{ role: "user", content: prompt }]),
                completion: tok.encode(answer),
                stopped: true,
            };
        });
        const b = packRows(rows, tok.eos, policy.config.contextLength);
        const warm = Math.min(1, (s + 1) / Math.max(1, Math.floor(o.steps / 10)));
        const r = await policy.trainStep(
            { tokens: b.tokens, targets: b.targets, mask: b.mask, shape: b.shape },
            { lr: o.lr * warm, ...(o.signal ? { signal: o.signal } : {}) },
        );
        o.onStep?.(s + 1, r.loss);
    }
}
