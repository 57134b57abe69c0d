// serve.ts (test helper): `maporl serve` as a child process on 127.0.0.1 (any free port), and a tiny Hugging Face
// llama with a byte-level BPE tokenizer and a Qwen-style chat template, written as a model directory.
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { NativePolicy } from "../../lib/index.js";
import { type ServeProcess, startServeProcess } from "../../lib/serve/serveProcess.js";

const CLI = join(import.meta.dirname, "..", "..", "dist", "cli.js");
const TOK = join(import.meta.dirname, "..", "fixtures", "hf-tokenizer");

export type { ServeProcess };

/** Saves a tiny embedded GPT (1 layer, 2 heads, 16 wide) at dir and loads it back: the checkpoint a server reads and
 * the same model in process. */
export async function tinyCheckpoint(dir: string, contextLength: number, seed: number): Promise<NativePolicy> {
    const p = await NativePolicy.create({ contextLength, layers: 1, heads: 2, dModel: 16, seed, name: "tiny" });
    await p.save(dir);
    await p.dispose();
    return NativePolicy.load(dir);
}

/** Starts `maporl serve --checkpoint dir --port 0 --threads 1 ...args` (the built dist/cli.js); resolves with its base URL
 * once it listens. */
export const startServe = (dir: string, args: string[] = []): Promise<ServeProcess> =>
    startServeProcess(dir, ["--threads", "1", ...args], CLI);

/** Writes a tiny llama-architecture model (random weights, seed) with the fixtures' BPE tokenizer to `dir`; `shape`
 * overrides config.json fields (e.g. hidden_size, num_hidden_layers). */
export async function tinyHfModel(dir: string, seed = 3, shape: Record<string, number> = {}): Promise<void> {
    const tk = `${dir}-tokenizer`;
    mkdirSync(tk, { recursive: true });
    cpSync(join(TOK, "tokenizer.json"), join(tk, "tokenizer.json"));
    writeFileSync(join(tk, "tokenizer_config.json"), readFileSync(join(TOK, "tokenizer_config.qwen.json")));
    const p = await NativePolicy.fromConfig(
        {
            model_type: "llama",
            vocab_size: 320,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            max_position_embeddings: 1024,
            rms_norm_eps: 1e-6,
            rope_theta: 10000,
            tie_word_embeddings: true,
            eos_token_id: 308,
            ...shape,
        },
        { tokenizer: tk, seed },
    );
    await p.save(dir);
    await p.dispose();
}
