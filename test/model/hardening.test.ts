// hardening.test.ts: what a hostile caller did to the process, each as a reproducer that failed before its fix.
// The sampler on overflowing logits / temperatures (in a child process with a timeout, at every SIMD level: they
// hung or crashed it), sampleAsync after such a call lets the process exit, NativePolicy on NaN weights fails
// naming the requests, the raw model handle survives gptFree during an async forward and refuses overlapping
// calls, and undisposed models' native memory is visible to V8 as external memory.
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { MaporlError, NativePolicy } from "../../lib/index.js";
import { native } from "../../lib/native.js";

const root = join(import.meta.dirname, "..", "..");

// Runs `code` (an ES module body with `m` = the package) in a fresh node; a hang is killed after `ms`.
function child(code: string, env: Record<string, string> = {}, ms = 20_000) {
    const src = `import * as m from ${JSON.stringify(join(root, "dist", "index.js"))};\n${code}`;
    return spawnSync(process.execPath, ["--input-type=module", "-e", src], {
        encoding: "utf8",
        timeout: ms,
        killSignal: "SIGKILL",
        env: { ...process.env, ...env },
    });
}

describe("the sampler on extreme inputs (child processes, every SIMD level)", () => {
    for (const simd of ["scalar", "avx2", "avx512"])
        it(`${simd}: overflowing quotients and subnormal temperatures give the first argmax; nothing hangs or crashes`, () => {
            const r = child(
                `
                const cases = [[[5, 0], 1e-38, 1], [[3e38], 0.7, 1], [[1, 0.5], 1e-45, 0.9], [[3e38, 3e38], 0.7, 0.9], [[-3e38, -3.2e38], 1e-30, 0.5]];
                const out = cases.map(([l, t, p]) => {
                    const r = m.sample({ logits: Float32Array.from(l), shape: [1, l.length] }, { temperature: t, topP: p, device: "cpu" });
                    return [r.tokens[0], r.logprobs[0], r.valid[0]];
                });
                const a = await m.sampleAsync({ logits: Float32Array.of(5, 0), shape: [1, 2] }, { temperature: 1e-38, signal: AbortSignal.timeout(5000) });
                out.push([a.tokens[0], a.logprobs[0], a.valid[0]]);
                console.log(JSON.stringify(out));`,
                { MAPORL_SIMD: simd },
            );
            expect(r.signal, `killed (hang or crash): ${r.stderr}`).toBeNull();
            expect(r.status, r.stderr).toBe(0);
            expect(JSON.parse(r.stdout)).toEqual(Array.from({ length: 6 }, () => [0, 0, 1]));
        });
});

describe("NativePolicy and the model handle", () => {
    it("generate on NaN weights fails naming the requests, never feeding token -1 on", async () => {
        const p = await NativePolicy.create({
            contextLength: 32,
            layers: 1,
            heads: 2,
            dModel: 16,
            seed: 1,
            name: "nan-model",
        });
        const h = p.h(),
            n = p.parameterCount;
        const w = new Float32Array(n);
        native.gptGet(h, { which: 0, out: w });
        w.fill(NaN, 0, n);
        native.gptSet(h, { which: 0, input: w });
        const err = await p.generate([{ prompt: "hi" }, { prompt: "yo" }], {}).catch((e) => e);
        expect(err).toBeInstanceOf(MaporlError);
        expect(err.message).toMatch(
            /nan-model\.generate: requests\[0, 1\]: the logits for completion token 1 hold NaN or \+Inf/,
        );
        await p.dispose();
    });

    it("gptFree during an async forward frees after it (20 runs, no crash); overlapping calls are refused", async () => {
        const cfg = { vocab: 50, context: 16, layers: 1, heads: 2, dModel: 32, mlpRatio: 4, tieEmbeddings: true };
        for (let run = 0; run < 20; run++) {
            const h = native.gptCreate({ ...cfg, seed: run });
            const B = 8,
                T = 16,
                tokens = new Int32Array(B * T).fill(3),
                logits = new Float32Array(B * T * 50);
            const fwd = native.gptForwardAsync(h, { tokens, B, T, logits, values: null });
            expect(() => native.gptForward(h, { tokens, B, T, logits, values: null })).toThrow(
                /busy with an async call/,
            );
            expect(native.gptParamCount(h)).toBeGreaterThan(0); // read-only metadata stays available
            native.gptFree(h);
            expect(() => native.gptZeroGrad(h)).toThrow(/the model was freed/);
            await fwd;
            expect(Number.isFinite(logits[0])).toBe(true);
            expect(() => native.gptForward(h, { tokens, B, T, logits, values: null })).toThrow(/the model was freed/);
        }
    });

    it("undisposed models' native memory is reported to V8, so garbage collection frees them (RSS stays bounded)", () => {
        // 150 models of 1.6M parameters (25 MB each with gradients and AdamW moments: 3.8 GB if none were freed), each
        // dropped at once; before the report V8 saw a few bytes per model and never collected them.
        const r = child(
            `
            const { native } = await import(${JSON.stringify(join(root, "dist", "native.js"))});
            const cfg = { vocab: 103, context: 64, layers: 2, heads: 4, dModel: 256, mlpRatio: 4, tieEmbeddings: true };
            let peak = 0;
            for (let i = 0; i < 150; i++) {
                native.gptCreate({ ...cfg, seed: i });
                if (i % 10 === 9) { await new Promise((r) => setTimeout(r, 0)); peak = Math.max(peak, process.memoryUsage().rss); }
            }
            console.log(JSON.stringify({ peak }));`,
            {},
            120_000,
        );
        expect(r.status, r.stderr).toBe(0);
        const { peak } = JSON.parse(r.stdout) as { peak: number };
        console.log(`peak RSS with 150 undisposed 25 MB models: ${(peak / 2 ** 20).toFixed(0)} MiB`);
        expect(peak).toBeLessThan(1.5 * 2 ** 30);
    });
});
