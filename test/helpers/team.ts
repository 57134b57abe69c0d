// team.ts: the tiny two-agent team the trainer tests run one iteration of (1-layer, 32-wide embedded GPT models,
// 2 turns, MAGRPO with G = 2), with a verifier the untrained model can earn something from (the answer's length
// parity) unless the test gives its own.
import { fnVerifier, NativePolicy, type Verifier } from "../../lib/index.js";
import { resolveConfig, type TrainConfig } from "../../lib/train/job/config.js";
import { makeTask } from "../../lib/train/job/job.js";
import type { Task } from "../../lib/train/tasks/tasks.js";

export const TINY_TEAM = {
    agents: 2,
    turns: 2,
    episodesPerIteration: 3,
    magrpo: { generations: 2, baseline: "mean", discount: 0.9, klCoef: 0, joint: "aligned" },
    model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
    critic: { layers: 1, heads: 2, dModel: 32 },
    lr: 1e-2,
    criticLr: 1e-2,
};

/** The tiny team's config (with `config` over it), its task (with `verifier`, default length parity) and a base. */
export async function tinyTeam(
    config: Record<string, unknown>,
    verifier: Verifier = fnVerifier("parity", ({ response }) => response.length % 2),
): Promise<{ cfg: TrainConfig; task: Task; base: NativePolicy }> {
    const cfg = resolveConfig({ ...TINY_TEAM, ...config });
    const task = { ...makeTask(cfg), verifier };
    const base = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 32, seed: 3 });
    return { cfg, task, base };
}
