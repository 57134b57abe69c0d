// serve.ts (test helper): `maporl serve` as a child process on 127.0.0.1 (any free port), and a tiny Hugging Face
// llama with a byte-level BPE tokenizer and a Qwen-style chat template, written as a model directory.
import { type ChildProcess, spawn } from "node:child_process";
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { NativePolicy } from "../../lib/index.js";

const CLI = join(import.meta.dirname, "..", "..", "dist", "cli.js");
const TOK = join(import.meta.dirname, "..", "fixtures", "hf-tokenizer");

export interface ServeProcess { baseUrl: string; proc: ChildProcess; output: () => string; stop(signal?: NodeJS.Signals): Promise<number | null> }

/** Saves a tiny embedded GPT (1 layer, 2 heads, 16 wide) at dir and loads it back: the checkpoint a server reads and
 * the same model in process. */
export async function tinyCheckpoint(dir: string, contextLength: number, seed: number): Promise<NativePolicy> {
    const p = await NativePolicy.create({ contextLength, layers: 1, heads: 2, dModel: 16, seed, name: "tiny" });
    await p.save(dir);
    await p.dispose();
    return NativePolicy.load(dir);
}

/** Starts `maporl serve --checkpoint dir ...args --port 0`; resolves with its base URL once it listens. */
export function startServe(dir: string, args: string[] = []): Promise<ServeProcess> {
    const proc = spawn(process.execPath, [CLI, "serve", "--checkpoint", dir, "--port", "0", "--threads", "1", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    const stop = async (signal: NodeJS.Signals = "SIGTERM") => { if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal); return exited; };
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => { proc.kill("SIGKILL"); reject(new Error(`maporl serve did not start in 30 s: ${out}`)); }, 30_000);
        const onData = (c: Buffer) => {
            out += c.toString();
            const m = /at (http:\/\/[^\s]+\/v1)\/chat\/completions/.exec(out);
            if (m) { clearTimeout(timer); resolve({ baseUrl: m[1]!, proc, output: () => out, stop }); }
        };
        proc.stdout!.on("data", onData);
        proc.stderr!.on("data", (c: Buffer) => { out += c.toString(); });
        proc.once("exit", (code) => { clearTimeout(timer); reject(new Error(`maporl serve exited (${code}) before listening: ${out}`)); });
    });
}

/** Writes a tiny llama-architecture model (random weights, seed) with the fixtures' BPE tokenizer to `dir`. */
export async function tinyHfModel(dir: string, seed = 3): Promise<void> {
    const tk = `${dir}-tokenizer`;
    mkdirSync(tk, { recursive: true });
    cpSync(join(TOK, "tokenizer.json"), join(tk, "tokenizer.json"));
    writeFileSync(join(tk, "tokenizer_config.json"), readFileSync(join(TOK, "tokenizer_config.qwen.json")));
    const p = await NativePolicy.fromConfig({ model_type: "llama", vocab_size: 320, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
        num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 1024, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: true,
        eos_token_id: 308 }, { tokenizer: tk, seed });
    await p.save(dir);
    await p.dispose();
}
