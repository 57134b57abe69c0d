// llamaCpp.ts (bench): llama.cpp beside the native engine on the same GGUF files, where node-llama-cpp is installed
// (`npm i node-llama-cpp`; its prebuilt CPU binaries; never built here). Files of the SmolLM2-135M shape with random
// weights (std 0.02) in F32, BF16 and Q8_0 (ggufWrite.ts) are read by both: NativePolicy.load (dtype float32,
// bfloat16, int8: Q8_0 blocks as they are) and llama.cpp. Per precision, in interleaved rounds (a shared VM's speed
// drifts): single-stream decoding after a 64-token prompt, the time per decoded token as (T(64 new) - T(1 new)) / 63
// for both engines (the prompt's prefill cancels), and 8 streams of 64-token prompts and 64 new tokens each, prefill
// included, in tokens per second. Greedy, the same thread count. A check file (a small shape, std 0.25, so that
// greedy decoding is not degenerate) first: both engines must decode the same 24 tokens from it at each precision, or
// the row says they differ.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { NativePolicy } from "../model/nativePolicy.js";
import { lcg } from "../random.js";
import { writeRandomGguf, type GgufKind, type LlamaShape } from "./ggufWrite.js";
import { median } from "./measure.js";
import type { BenchContext, BenchRow } from "./types.js";

// The part of node-llama-cpp's API used here.
interface LlamaSequence {
    evaluate(tokens: number[], o: { temperature: number; yieldEogToken: boolean }): AsyncGenerator<number>;
    dispose(): void;
}
interface LlamaContext {
    getSequence(): LlamaSequence;
    dispose(): Promise<void>;
}
interface LlamaModel {
    createContext(o: {
        contextSize: number;
        batchSize: number;
        threads: number;
        sequences: number;
    }): Promise<LlamaContext>;
    dispose(): Promise<void>;
}
interface Llama {
    loadModel(o: { modelPath: string }): Promise<LlamaModel>;
}
interface NodeLlamaCpp {
    getLlama(o: { gpu: false; build: "never"; logLevel: "error" }): Promise<Llama>;
}

const DTYPE = { f32: "float32", bf16: "bfloat16", q8_0: "int8" } as const;
const LABEL = { f32: "F32", bf16: "BF16", q8_0: "Q8_0" } as const;

/** node-llama-cpp and its version, or why it is not there. */
async function nodeLlamaCpp(): Promise<{ mod: NodeLlamaCpp; version: string } | { error: string }> {
    const name = "node-llama-cpp";
    try {
        const mod = (await import(name)) as NodeLlamaCpp;
        // its package.json, above the resolved entry point (an exports map hides it from require)
        let version = "?";
        try {
            let d = dirname(createRequire(import.meta.url).resolve(name));
            for (let up = 0; up < 4 && version === "?"; up++, d = dirname(d)) {
                const f = join(d, "package.json");
                if (existsSync(f)) {
                    const pkg = JSON.parse(readFileSync(f, "utf8")) as { name?: string; version?: string };
                    if (pkg.name === name) version = String(pkg.version);
                }
            }
        } catch {
            /* the version stays unknown */
        }
        return { mod, version };
    } catch (e) {
        return {
            error: `node-llama-cpp is not installed (npm i node-llama-cpp adds these rows): ${(e as Error).message.split("\n")[0]}`,
        };
    }
}

async function decode(seq: LlamaSequence, prompt: number[], n: number): Promise<number[]> {
    const out: number[] = [];
    if (n === 0) return out;
    for await (const t of seq.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
        out.push(t);
        if (out.length >= n) break;
    }
    return out;
}

export async function benchLlamaCpp(ctx: BenchContext, shape: LlamaShape, label: string): Promise<BenchRow[]> {
    const lib = await nodeLlamaCpp();
    const size = `${label}, same GGUF file`;
    if ("error" in lib)
        return [
            {
                kernel: "llama decode B=1",
                size,
                impl: "llama.cpp (node-llama-cpp)",
                medianMs: null,
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: null,
                note: lib.error,
            },
        ];
    const llama = await lib.mod.getLlama({ gpu: false, build: "never", logLevel: "error" });
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-gguf-"));
    const rows: BenchRow[] = [];
    const impl = `llama.cpp (node-llama-cpp ${lib.version}, prebuilt CPU)`;
    try {
        // The check: both engines decode the same greedy tokens from a small, non-degenerate file.
        const small: LlamaShape = {
            ...shape,
            vocab_size: 320,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
        };
        const agree: Record<string, boolean> = {};
        for (const kind of ["f32", "bf16", "q8_0"] as GgufKind[]) {
            const f = join(dir, `check-${kind}.gguf`);
            writeRandomGguf(f, small, kind, 1, 0.25);
            const prompt = [5, 9, 33, 70, 100, 2, 7, 8];
            const p = await NativePolicy.load(f, { dtype: DTYPE[kind], tokenizer: null });
            const [g] = await p.generate([{ promptTokenIds: prompt, sampling: { temperature: 0, maxTokens: 24 } }]);
            await p.dispose();
            const m = await llama.loadModel({ modelPath: f });
            const c = await m.createContext({ contextSize: 128, batchSize: 64, threads: ctx.threads, sequences: 1 });
            const theirs = await decode(c.getSequence(), prompt, 24);
            await c.dispose();
            await m.dispose();
            agree[kind] = JSON.stringify(g!.tokens) === JSON.stringify(theirs);
        }
        const next = lcg(11);
        const V = shape.vocab_size;
        const prompts = Array.from({ length: 8 }, () => Array.from({ length: 64 }, () => Math.floor(next() * V)));
        for (const kind of ["f32", "bf16", "q8_0"] as GgufKind[]) {
            const f = join(dir, `smol-${kind}.gguf`);
            writeRandomGguf(f, shape, kind, 0);
            const p = await NativePolicy.load(f, { dtype: DTYPE[kind], tokenizer: null, contextLength: 512 });
            const m = await llama.loadModel({ modelPath: f });
            const c1 = await m.createContext({ contextSize: 256, batchSize: 64, threads: ctx.threads, sequences: 1 });
            const c8 = await m.createContext({
                contextSize: 8 * 256,
                batchSize: 512,
                threads: ctx.threads,
                sequences: 8,
            });
            const ours = async (n: number, streams: number) => {
                const t0 = performance.now();
                await p.generate(
                    prompts
                        .slice(0, streams)
                        .map((promptTokenIds) => ({ promptTokenIds, sampling: { temperature: 0, maxTokens: n } })),
                );
                return performance.now() - t0;
            };
            const theirs = async (n: number, streams: number) => {
                const c = streams === 1 ? c1 : c8;
                const seqs = prompts.slice(0, streams).map(() => c.getSequence());
                const t0 = performance.now();
                await Promise.all(seqs.map((s, i) => decode(s, prompts[i]!, n)));
                const ms = performance.now() - t0;
                for (const s of seqs) s.dispose();
                return ms;
            };
            const per: Record<"ours1" | "theirs1" | "ours8" | "theirs8", number[]> = {
                ours1: [],
                theirs1: [],
                ours8: [],
                theirs8: [],
            };
            await ours(4, 1); // warm-up, both
            await theirs(4, 1);
            for (let r = 0; r < 3; r++) {
                per.ours1.push(((await ours(64, 1)) - (await ours(1, 1))) / 63);
                per.theirs1.push(((await theirs(64, 1)) - (await theirs(1, 1))) / 63);
                per.ours8.push(await ours(64, 8));
                per.theirs8.push(await theirs(64, 8));
            }
            await c1.dispose();
            await c8.dispose();
            await m.dispose();
            await p.dispose();
            rmSync(f, { force: true });
            const o1 = median(per.ours1),
                t1 = median(per.theirs1),
                o8 = median(per.ours8),
                t8 = median(per.theirs8);
            const check = agree[kind]
                ? "the same 24 greedy tokens on the check file"
                : "the check file's greedy tokens DIFFER";
            ctx.log?.(
                `  llama.cpp ${LABEL[kind]}: decode ${o1.toFixed(1)} vs ${t1.toFixed(1)} ms/token; 8 streams ${o8.toFixed(0)} vs ${t8.toFixed(0)} ms`,
            );
            const common = { peakExtraBytes: null, bytesMoved: 0, readOnly: true };
            rows.push(
                {
                    kernel: "llama decode B=1",
                    size: `${size} (${LABEL[kind]}), prompt=64, per token`,
                    impl: `maporl NativePolicy.load(.gguf), dtype ${DTYPE[kind]}`,
                    medianMs: o1,
                    baselineMs: t1,
                    ...common,
                    note: `${(1000 / o1).toFixed(1)} tokens/s; ${(t1 / o1).toFixed(2)}x llama.cpp's speed; ${check}`,
                },
                {
                    kernel: "llama decode B=1",
                    size: `${size} (${LABEL[kind]}), prompt=64, per token`,
                    impl,
                    medianMs: t1,
                    baselineMs: null,
                    ...common,
                    note: `${(1000 / t1).toFixed(1)} tokens/s`,
                },
                {
                    kernel: "llama generate",
                    size: `${size} (${LABEL[kind]}), B=8 prompt=64 new=64`,
                    impl: `maporl NativePolicy.generate, dtype ${DTYPE[kind]}`,
                    medianMs: o8,
                    baselineMs: t8,
                    ...common,
                    note: `${Math.round(512 / (o8 / 1000))} tokens/s; ${(t8 / o8).toFixed(2)}x llama.cpp's`,
                },
                {
                    kernel: "llama generate",
                    size: `${size} (${LABEL[kind]}), B=8 prompt=64 new=64`,
                    impl: `${impl}, 8 sequences`,
                    medianMs: t8,
                    baselineMs: null,
                    ...common,
                    note: `${Math.round(512 / (t8 / 1000))} tokens/s`,
                },
            );
        }
    } finally {
        rmSync(dir, { recursive: true, force: true });
    }
    return rows;
}
