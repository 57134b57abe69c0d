// gatewayTeam.ts (test helper): a tiny Hugging Face llama with two LoRA agents (researcher, solver) on one base, and
// `teach`, which trains a policy (supervised) until greedy decoding of a prompt gives a completion. The gateway tests
// teach the base, from the prompts the gateway recorded of a framework's program, to call the tool and then to answer,
// so that a real framework runs a real tool loop against a real model. (The base, not an adapter: a random base's
// embeddings are too small for a LoRA adapter alone to make any token likely; a warm start trains the base too.)
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { NativePolicy } from "../../lib/index.js";
import { packRows } from "../../lib/train/trainers/rollout.js";
import { tinyHfModel } from "./serve.js";

export async function lookupAgents(): Promise<{
    work: string;
    base: NativePolicy;
    researcher: NativePolicy;
    solver: NativePolicy;
}> {
    const work = mkdtempSync(join(tmpdir(), "maporl-gwteam-"));
    await tinyHfModel(join(work, "m"), 5, { max_position_embeddings: 2048 });
    const base = await NativePolicy.load(join(work, "m"));
    const researcher = await base.withAdapter("researcher", { rank: 16, alpha: 32, seed: 1 });
    const solver = await base.withAdapter("solver", { rank: 16, alpha: 32, seed: 2 });
    return { work, base, researcher, solver };
}

/** Trains `p` (all its weights, where it is a base) on every (prompt -> text + its stop token) at once until greedy
 * decoding of each prompt gives exactly that; returns the steps it took (throws past maxSteps). */
export async function teach(
    p: NativePolicy,
    pairs: readonly { prompt: readonly number[]; text: string }[],
    maxSteps = 400,
): Promise<number> {
    const rows = pairs.map((x) => ({
        prompt: [...x.prompt],
        completion: [...p.tokenizer.encode(x.text), p.tokenizer.eos],
        stopped: false,
    }));
    const b = packRows(rows, p.tokenizer.eos, 1 << 20);
    for (let step = 0; step < maxSteps; step++) {
        if (step % 10 === 0) {
            const gens = await p.generate(
                rows.map((r) => ({
                    promptTokenIds: r.prompt,
                    sampling: { temperature: 0, maxTokens: r.completion.length + 2 },
                })),
            );
            if (gens.every((g, i) => JSON.stringify(g.tokenIds) === JSON.stringify(rows[i].completion))) return step;
        }
        await p.trainStep(
            {
                tokens: b.tokens,
                targets: b.targets,
                mask: b.mask,
                shape: b.shape,
                advantages: new Float32Array(rows.length).fill(1),
            },
            { loss: { type: "reinforce", aggregation: "seq-mean-token-sum" }, lr: 1e-2 },
        );
    }
    throw new Error(`teach: ${JSON.stringify(pairs.map((x) => x.text))} not learned in ${maxSteps} steps`);
}
