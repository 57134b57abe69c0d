// gguf.test.ts: llama.cpp GGUF files, written by an independent Python writer (test/helpers/gguf_writer.py, from
// the GGUF specification and llama.cpp's converter conventions: q/k rows permuted, dimensions reversed, Q8_0 as
// ggml quantizes) from a make-model directory. An F32 file computes the directory's float32 log-probs to the bit and
// its tokenizer (read from tokenizer.ggml.*) encodes and renders chats as the directory's; a Q8_0 file loaded as
// int8 takes the blocks as they are and computes them W8A8 (the same file widened to float32 up to the activations'
// rounding), close to the F32 model; bad files are errors naming what is wrong.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { shortestF32 } from "../../lib/model/gguf.js";
import { makeModel } from "../../lib/model/makeModel.js";

const WRITER = join(import.meta.dirname, "..", "helpers", "gguf_writer.py");

describe("GGUF files", () => {
    let root = "";
    let dir = "";
    const file = (kind: string) => join(root, `tiny-${kind}.gguf`);
    beforeAll(() => {
        root = mkdtempSync(join(tmpdir(), "maporl-gguf-"));
        dir = join(root, "tiny");
        makeModel(dir, { seed: 4 });
        for (const kind of ["f32", "q8_0"]) {
            const r = spawnSync("python3", [WRITER, dir, file(kind), kind], { encoding: "utf8" });
            expect(r.error).toBeUndefined(); // python3 with numpy, as the export tests need
            expect(r.status, r.stderr).toBe(0);
        }
    }, 60_000);
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    const seqs = {
        tokens: Int32Array.from({ length: 3 * 14 }, (_, i) => (i * 37 + 11) % 1021),
        shape: [3, 14] as [number, number],
    };

    it("float32 scalars read back as the config's decimals (the engine computes with doubles)", () => {
        expect(shortestF32(Math.fround(1e-6))).toBe(1e-6);
        expect(Math.fround(1e-6)).not.toBe(1e-6);
        expect(shortestF32(Math.fround(1e-5))).toBe(1e-5);
        expect(shortestF32(Math.fround(500000))).toBe(500000);
        expect(shortestF32(Math.fround(0.1))).toBe(0.1);
        expect(shortestF32(1e-6)).toBe(1e-6); // not a float32: as it is
        for (const x of [Math.fround(1 / 3), Math.fround(Math.PI), Math.fround(1e-30)])
            expect(Math.fround(shortestF32(x))).toBe(x);
    });

    it("an F32 file: the directory's log-probs to the bit, its tokenizer and chat template", async () => {
        const d = await NativePolicy.load(dir);
        const g = await NativePolicy.load(file("f32"));
        expect(g.family).toBe("llama");
        expect(g.parameterCount).toBe(d.parameterCount);
        expect(await g.logprobs(seqs)).toEqual(await d.logprobs(seqs));
        const text = "Weng earns $12 an hour for babysitting. How much did she earn?";
        expect(g.tokenizer.encode(text)).toEqual(d.tokenizer.encode(text));
        const req = [
            { messages: [{ role: "user" as const, content: "What is 17 * 3?" }], seed: 3, sampling: { maxTokens: 6 } },
        ];
        const [a, b] = [await d.generate(req), await g.generate(req)];
        expect(b.map((x) => [x.promptTokenIds, x.tokenIds])).toEqual(a.map((x) => [x.promptTokenIds, x.tokenIds]));
        await d.dispose();
        await g.dispose();
    }, 60_000);

    it("a Q8_0 file: as int8 its blocks as they are (W8A8: the file widened to float32 up to the activations' rounding), close to the F32 model", async () => {
        const q = await NativePolicy.load(file("q8_0"), { dtype: "int8" });
        const w = await NativePolicy.load(file("q8_0"));
        const f = await NativePolicy.load(file("f32"));
        expect([q.dtype, w.dtype]).toEqual(["int8", "float32"]);
        const [lq, lw, lf] = [await q.logprobs(seqs), await w.logprobs(seqs), await f.logprobs(seqs)];
        const gap = (a: Float32Array, b: Float32Array) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));
        console.log(`int8 vs widened ${gap(lq, lw).toExponential(2)}, widened vs F32 ${gap(lw, lf).toExponential(2)}`);
        expect(gap(lq, lw)).toBeGreaterThan(0);
        expect(gap(lq, lw)).toBeLessThan(gap(lw, lf));
        const worst = gap(lq, lf);
        expect(worst).toBeGreaterThan(0);
        expect(worst).toBeLessThan(0.02);
        // an adapter trains on the int8 base read from GGUF
        const a = await q.withAdapter("a", { rank: 2, alpha: 4 });
        const r = await a.trainStep(
            {
                tokens: seqs.tokens.slice(0, 13),
                targets: seqs.tokens.slice(1, 14),
                mask: new Uint8Array(13).fill(1),
                shape: [1, 13],
            },
            { lr: 1e-2 },
        );
        expect(Number.isFinite(r.loss)).toBe(true);
        for (const p of [a, q, w, f]) await p.dispose();
    }, 60_000);

    it("a truncated file, a missing or an extra tensor, another architecture: errors naming them", async () => {
        const bytes = readFileSync(file("f32"));
        const cut = join(root, "cut.gguf");
        writeFileSync(cut, bytes.subarray(0, bytes.length - 1000));
        await expect(NativePolicy.load(cut)).rejects.toThrow(/the file ends inside its data \(truncated\)/);
        // rename a tensor in place (same length): blk.0.ffn_up -> blk.0.ffn_uq
        const renamed = Buffer.from(bytes);
        const at = renamed.indexOf("blk.0.ffn_up.weight");
        renamed.write("q", at + "blk.0.ffn_u".length);
        writeFileSync(join(root, "renamed.gguf"), renamed);
        await expect(NativePolicy.load(join(root, "renamed.gguf"))).rejects.toThrow(
            /tensor blk\.0\.ffn_up\.weight \(model\.layers\.0\.mlp\.up_proj\.weight\) missing/,
        );
        const arch = Buffer.from(bytes);
        const a = arch.indexOf("llama", arch.indexOf("general.architecture"));
        arch.write("gemma", a);
        writeFileSync(join(root, "gemma.gguf"), arch);
        await expect(NativePolicy.load(join(root, "gemma.gguf"))).rejects.toThrow(
            /general\.architecture: expected one of llama, mistral, qwen2, qwen3, got "gemma"/,
        );
        const extra = join(root, "rope.gguf");
        const r = spawnSync("python3", [WRITER, dir, extra, "f32", "rope_freqs"], { encoding: "utf8" });
        expect(r.status, r.stderr).toBe(0);
        await expect(NativePolicy.load(extra)).rejects.toThrow(
            /tensor rope_freqs\.weight is not part of a llama model read here \(llama3 rope scaling is not read from GGUF/,
        );
        writeFileSync(join(root, "junk.gguf"), "not a gguf file at all");
        await expect(NativePolicy.load(join(root, "junk.gguf"))).rejects.toThrow(/not a readable GGUF file/);
    }, 60_000);
});
