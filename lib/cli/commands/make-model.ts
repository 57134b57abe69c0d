// make-model.ts: `maporl make-model DIR`: a Hugging Face model directory with random weights and a working tokenizer,
// written without a download (lib/model/makeModel.ts), for every documented `--model DIR` command.
import { type Command, Option } from "commander";

import { makeModel, MODEL_SHAPES, type ModelShapeName } from "../../model/makeModel.js";
import { integer } from "../parse.js";

export interface MakeModelArgs {
    dir: string;
    shape: ModelShapeName;
    dtype: "float32" | "bfloat16";
    seed: number;
}

/** Declares `maporl make-model` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: MakeModelArgs) => Promise<void>): void {
    cmd.description(
        "write a Hugging Face model directory with random weights and a byte-level BPE tokenizer (no download): config.json, model.safetensors, tokenizer.json with a chat template",
    )
        .argument("<dir>", "the directory to write (new, or empty)")
        .addOption(
            new Option(
                "--shape <shape>",
                "the architecture: tiny (2 layers, hidden 64), SmolLM2-135M's or Qwen2.5-0.5B's",
            )
                .choices(Object.keys(MODEL_SHAPES))
                .default("tiny"),
        )
        .addOption(
            new Option("--dtype <dtype>", "the weights' dtype in the file")
                .choices(["float32", "bfloat16"])
                .default("float32"),
        )
        .option("--seed <n>", "the weights' seed", integer(0, Number.MAX_SAFE_INTEGER), 0)
        .action(async (dir: string, o: Omit<MakeModelArgs, "dir">) => act({ dir, ...o }));
}

/** Writes the directory; prints what it holds and the next command. */
export function run(a: MakeModelArgs): Promise<number> {
    const t0 = performance.now();
    const m = makeModel(a.dir, { shape: a.shape, dtype: a.dtype, seed: a.seed });
    console.log(
        `wrote ${m.dir}: ${a.shape} (${(m.parameters / 1e6).toFixed(m.parameters < 1e7 ? 2 : 0)}M parameters, ${a.dtype}, ` +
            `${(m.bytes / 2 ** 20).toFixed(0)} MiB), a byte-level BPE tokenizer of ${m.tokenizerSize} ids with a ChatML template, ` +
            `in ${((performance.now() - t0) / 1e3).toFixed(1)} s`,
    );
    console.log(`next: npx maporl train --model ${m.dir}   (random weights: it runs every command, it knows nothing)`);
    return Promise.resolve(0);
}
