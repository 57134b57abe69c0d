// llamaCpp.ts (bench): llama.cpp beside the native engine on the same GGUF files, where node-llama-cpp is installed
// (`npm i node-llama-cpp`; its prebuilt CPU binaries; never built here). Files of the SmolLM2-135M shape with random
// weights (std 0.02) in F32, BF16 and Q8_0 (ggufWrite.ts) are read by both: NativePolicy.load (dtype float32,
// bfloat16, int8: Q8_0 blocks as they are) and llama.cpp. Each measurement runs in its own process, one engine at a
// time: two thread pools in one process on the same cores (llama.cpp's threads poll for work between graphs) slowed
// both several-fold. Per precision, in three rounds alternating the engines (a shared VM's speed drifts):
// single-stream decoding after a 64-token prompt, the time per decoded token as (T(64 new) - T(1 new)) / 63 for both
// (the prompt's prefill cancels), and 8 streams of 64-token prompts and 64 new tokens each, prefill included, in
// tokens per second. Greedy, the same thread count; the files name no end-of-sequence token, so every answer runs its
// full length in both engines. A check file first (a small shape, std 0.25, so that greedy decoding is not
// degenerate): the row's note says whether both engines decoded the same 24 tokens from it at its precision.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { lcg } from "../random.js";
import { SMALL_LLAMA, writeRandomGguf, type GgufKind, type LlamaShape } from "./ggufWrite.js";
import { median } from "./measure.js";
import type { BenchContext, BenchRow } from "./types.js";

const DTYPE = { f32: "float32", bf16: "bfloat16", q8_0: "int8" } as const;
const LABEL = { f32: "F32", bf16: "BF16", q8_0: "Q8_0" } as const;

/** node-llama-cpp's entry point and version, or why it is not there. */
function nodeLlamaCpp(): { entry: string; version: string } | { error: string } {
    const name = "node-llama-cpp";
    let entry: string;
    try {
        entry = createRequire(import.meta.url).resolve(name);
    } catch (e) {
        return {
            error: `node-llama-cpp is not installed (npm i node-llama-cpp adds these rows): ${(e as Error).message.split("\n")[0]}`,
        };
    }
    // its package.json, above the entry point (an exports map hides it from require)
    let version = "?";
    for (let d = dirname(entry), up = 0; up < 4 && version === "?"; up++, d = dirname(d)) {
        const f = join(d, "package.json");
        if (!existsSync(f)) continue;
        const pkg = JSON.parse(readFileSync(f, "utf8")) as { name?: string; version?: string };
        if (pkg.name === name) version = String(pkg.version);
    }
    return { entry, version };
}

// The child processes' scripts: `args` in MAPORL_BENCH_ARGS; mode "check" prints the greedy tokens, "time" the timings.
const OURS = (index: string) => `
const { NativePolicy, setThreads } = await import(${JSON.stringify(pathToFileURL(index).href)});
const a = JSON.parse(process.env.MAPORL_BENCH_ARGS);
setThreads(a.threads);
const p = await NativePolicy.load(a.file, { dtype: a.dtype, tokenizer: null, contextLength: 512 });
const gen = (n, s) => p.generate(a.prompts.slice(0, s).map((promptTokenIds) => ({ promptTokenIds, sampling: { temperature: 0, maxTokens: n } })));
if (a.mode === "check") console.log(JSON.stringify({ tokens: (await gen(24, 1))[0].tokens }));
else {
    const time = async (n, s) => {
        const t0 = performance.now(), g = await gen(n, s), ms = performance.now() - t0;
        if (g.some((x) => x.tokens.length !== n)) throw new Error("an answer stopped before " + n + " tokens");
        return ms;
    };
    await time(4, 1);
    const t64 = await time(64, 1), t1 = await time(1, 1), t8 = await time(64, 8);
    console.log(JSON.stringify({ perToken: (t64 - t1) / 63, streams8: t8 }));
}`;
const THEIRS = (entry: string) => `
const { getLlama } = await import(${JSON.stringify(pathToFileURL(entry).href)});
const a = JSON.parse(process.env.MAPORL_BENCH_ARGS);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: a.file });
const decode = async (seq, prompt, n) => {
    const out = [];
    for await (const t of seq.evaluate(prompt, { temperature: 0, yieldEogToken: true })) { out.push(t); if (out.length >= n) break; }
    return out;
};
const c1 = await model.createContext({ contextSize: 256, batchSize: 64, threads: a.threads, sequences: 1 });
if (a.mode === "check") console.log(JSON.stringify({ tokens: await decode(c1.getSequence(), a.prompts[0], 24) }));
else {
    const c8 = await model.createContext({ contextSize: 8 * 256, batchSize: 512, threads: a.threads, sequences: 8 });
    const time = async (n, s) => {
        const seqs = a.prompts.slice(0, s).map(() => (s === 1 ? c1 : c8).getSequence());
        const t0 = performance.now();
        await Promise.all(seqs.map((q, i) => decode(q, a.prompts[i], n)));
        const ms = performance.now() - t0;
        for (const q of seqs) q.dispose();
        return ms;
    };
    await time(4, 1);
    const t64 = await time(64, 1), t1 = await time(1, 1), t8 = await time(64, 8);
    console.log(JSON.stringify({ perToken: (t64 - t1) / 63, streams8: t8 }));
}
process.exit(0);`;

// (a script file, not `node -e`: node-llama-cpp tests its binary in a child of its own, which `-e` breaks)
function child<T>(script: string, args: object): T | { error: string } {
    const r = spawnSync(process.execPath, [script], {
        encoding: "utf8",
        env: { ...process.env, MAPORL_BENCH_ARGS: JSON.stringify(args) },
        maxBuffer: 1 << 24,
        timeout: 600_000,
    });
    const line = (r.stdout ?? "").trim().split("\n").pop() ?? "";
    try {
        return JSON.parse(line) as T;
    } catch {
        // the error's own line (a stack and Node's version line follow it)
        const lines = (r.stderr ?? "").split("\n").filter((l) => l.trim() !== "" && !/^Node\.js v/.test(l));
        const why = lines.find((l) => /Error/.test(l)) ?? lines.at(-1) ?? "";
        return { error: `exit ${r.status}: ${why.trim().slice(0, 300)}` };
    }
}

export function benchLlamaCpp(ctx: BenchContext, shape: LlamaShape, label: string): BenchRow[] {
    const lib = nodeLlamaCpp();
    const size = `${label}, same GGUF file`;
    const none = (note: string): BenchRow[] => [
        {
            kernel: "llama decode B=1",
            size,
            impl: "llama.cpp (node-llama-cpp)",
            medianMs: null,
            peakExtraBytes: null,
            bytesMoved: 0,
            baselineMs: null,
            note,
        },
    ];
    if ("error" in lib) return none(lib.error);
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-gguf-"));
    const ours = join(dir, "maporl.mjs"),
        theirs = join(dir, "llama-cpp.mjs");
    // the package's entry point next to this module (dist/), or dist/index.js when run from the sources
    const index = fileURLToPath(new URL("../index.js", import.meta.url));
    writeFileSync(
        ours,
        OURS(existsSync(index) ? index : fileURLToPath(new URL("../../dist/index.js", import.meta.url))),
    );
    writeFileSync(theirs, THEIRS(lib.entry));
    const rows: BenchRow[] = [];
    const impl = `llama.cpp (node-llama-cpp ${lib.version}, prebuilt CPU)`;
    try {
        // The check: both engines decode the same greedy tokens from a small, non-degenerate file.
        const agree: Record<string, string> = {};
        for (const kind of ["f32", "bf16", "q8_0"] as GgufKind[]) {
            const file = join(dir, `check-${kind}.gguf`);
            writeRandomGguf(file, SMALL_LLAMA, kind, 1, 0.25, false);
            const args = {
                mode: "check",
                file,
                dtype: DTYPE[kind],
                threads: ctx.threads,
                prompts: [[5, 9, 33, 70, 100, 2, 7, 8]],
            };
            const a = child<{ tokens: number[] }>(ours, args),
                b = child<{ tokens: number[] }>(theirs, args);
            agree[kind] =
                "error" in a || "error" in b
                    ? `the check did not run (${"error" in a ? a.error : ""} ${"error" in b ? b.error : ""})`
                    : JSON.stringify(a.tokens) === JSON.stringify(b.tokens)
                      ? "the same 24 greedy tokens on the check file"
                      : "the check file's greedy tokens DIFFER";
        }
        const next = lcg(11);
        const prompts = Array.from({ length: 8 }, () =>
            Array.from({ length: 64 }, () => Math.floor(next() * shape.vocab_size)),
        );
        for (const kind of ["f32", "bf16", "q8_0"] as GgufKind[]) {
            const file = join(dir, `model-${kind}.gguf`);
            writeRandomGguf(file, shape, kind, 0, 0.02, false);
            const args = { mode: "time", file, dtype: DTYPE[kind], threads: ctx.threads, prompts };
            const o: { perToken: number; streams8: number }[] = [],
                t: typeof o = [];
            let error = "";
            for (let round = 0; round < 3; round++) {
                const a = child<{ perToken: number; streams8: number }>(ours, args),
                    b = child<{ perToken: number; streams8: number }>(theirs, args);
                if ("error" in a) error = `maporl: ${a.error}`;
                else o.push(a);
                if ("error" in b) error = `llama.cpp: ${b.error}`;
                else t.push(b);
            }
            rmSync(file, { force: true });
            if (o.length === 0 || t.length === 0) {
                rows.push(...none(`${LABEL[kind]}: ${error}`));
                continue;
            }
            const o1 = median(o.map((x) => x.perToken)),
                t1 = median(t.map((x) => x.perToken)),
                o8 = median(o.map((x) => x.streams8)),
                t8 = median(t.map((x) => x.streams8));
            ctx.log?.(
                `  llama.cpp ${LABEL[kind]}: decode ${o1.toFixed(1)} vs ${t1.toFixed(1)} ms/token; 8 streams ${o8.toFixed(0)} vs ${t8.toFixed(0)} ms`,
            );
            const common = { peakExtraBytes: null, bytesMoved: 0, readOnly: true };
            const s1 = `${size} (${LABEL[kind]}), prompt=64, per decoded token`,
                s8 = `${size} (${LABEL[kind]}), B=8 prompt=64 new=64`;
            rows.push(
                {
                    kernel: "llama decode B=1",
                    size: s1,
                    impl: `maporl NativePolicy.load(.gguf), dtype ${DTYPE[kind]}`,
                    medianMs: o1,
                    baselineMs: t1,
                    ...common,
                    note: `${(1000 / o1).toFixed(1)} tokens/s, ${(t1 / o1).toFixed(2)}x llama.cpp's speed; ${agree[kind]}`,
                },
                {
                    kernel: "llama decode B=1",
                    size: s1,
                    impl,
                    medianMs: t1,
                    baselineMs: null,
                    ...common,
                    note: `${(1000 / t1).toFixed(1)} tokens/s`,
                },
                {
                    kernel: "llama generate",
                    size: s8,
                    impl: `maporl NativePolicy.generate, dtype ${DTYPE[kind]}`,
                    medianMs: o8,
                    baselineMs: t8,
                    ...common,
                    note: `${Math.round(512 / (o8 / 1000))} tokens/s, ${(t8 / o8).toFixed(2)}x llama.cpp's`,
                },
                {
                    kernel: "llama generate",
                    size: s8,
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
