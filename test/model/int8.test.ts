// int8.test.ts: a Hugging Face model loaded with dtype 'int8' (its matrices quantized to llama.cpp's Q8_0 as they
// load, frozen, and computed W8A8: each activation row quantized per block of 32 too). The quantizer written again
// here in float64 (a half scale to nearest even, then round-half-even of x / d) gives the dequantized weights; a
// float32 load of a directory holding them differs from the int8 load by the activations' rounding only, well inside
// the weights' own rounding (log-probs, adapter training). Against the float32 load of the original weights it is
// close; an adapter trained on the int8 base saves in the PEFT layout and loads on the float base; its own training
// is a named error. On the device (its CPU emulation here) the base is uploaded as it is held: the CPU's bits.
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { backend, NativePolicy, rolloutCorrection } from "../../lib/index.js";
import { readSafetensors, writeSafetensors } from "../../lib/model/safetensors.js";
import { native } from "../../lib/native.js";
import { tinyHfModel } from "../helpers/serve.js";

// The nearest IEEE half to x, ties to even (x >= 0, below 65520): the half grid's step at x's binade, in float64.
function f16(x: number): number {
    if (x === 0) return 0;
    const e = Math.max(Math.floor(Math.log2(x)), -14);
    const step = 2 ** (e - 10);
    let k = x / step;
    const fl = Math.floor(k);
    k = k - fl > 0.5 || (k - fl === 0.5 && fl % 2 === 1) ? fl + 1 : fl;
    return k * step;
}
const roundEven = (x: number): number => {
    const fl = Math.floor(x),
        r = x - fl;
    return r > 0.5 || (r === 0.5 && fl % 2 !== 0) ? fl + 1 : fl;
};
// A matrix's values as the int8 base holds them (rows a multiple of 32 long).
function dequantized(w: Float32Array): Float32Array {
    const out = new Float32Array(w.length);
    for (let b = 0; b < w.length; b += 32) {
        let amax = 0;
        for (let i = b; i < b + 32; i++) amax = Math.max(amax, Math.abs(w[i]));
        const d = f16(Math.fround(amax / 127));
        for (let i = b; i < b + 32; i++) {
            const q = d > 0 ? Math.min(127, Math.max(-127, roundEven(Math.fround(w[i] / d)))) : 0;
            out[i] = q * d;
        }
    }
    return out;
}

const V = 320;
function batch(seed: number) {
    const B = 2,
        T = 12,
        tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T),
        mask = new Uint8Array(B * T).fill(1);
    for (let i = 0; i < B * T; i++) {
        tokens[i] = (i * 37 + seed * 11 + 5) % V;
        targets[i] = (i * 53 + seed * 7 + 3) % V;
    }
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}

describe("an int8 base", () => {
    let root = "";
    let dir = "";
    let twin = "";
    beforeAll(async () => {
        root = mkdtempSync(join(tmpdir(), "maporl-int8-"));
        dir = join(root, "model");
        twin = join(root, "twin");
        // (hidden 64; the MLP's down projection reads 96 values a row: a multiple of 32 as well)
        await tinyHfModel(dir, 5, {
            hidden_size: 64,
            intermediate_size: 96,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
        });
        cpSync(dir, twin, { recursive: true });
        const { tensors } = readSafetensors(join(dir, "model.safetensors"));
        writeSafetensors(
            join(twin, "model.safetensors"),
            tensors.map((t) => (t.shape.length === 2 ? { ...t, data: dequantized(t.data as Float32Array) } : t)),
        );
    }, 60_000);
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it("is the float32 model of its dequantized weights up to the activations' rounding: log-probs, training", async () => {
        const q = await NativePolicy.load(dir, { tokenizer: null, dtype: "int8" });
        const f = await NativePolicy.load(twin, { tokenizer: null });
        expect([q.dtype, f.dtype]).toEqual(["int8", "float32"]);
        expect(q.parameterCount).toBe(f.parameterCount);
        const seqs = {
            tokens: Int32Array.from({ length: 3 * 11 }, (_, i) => (i * 29 + 4) % V),
            shape: [3, 11] as [number, number],
        };
        const orig = await NativePolicy.load(dir, { tokenizer: null });
        const [lpq, lpf, lpo] = [await q.logprobs(seqs), await f.logprobs(seqs), await orig.logprobs(seqs)];
        const gap = (a: Float32Array, b: Float32Array) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));
        // the activations' rounding: nonzero, and below the weights' (twin against the original float32 weights)
        console.log(
            `int8 vs twin ${gap(lpq, lpf).toExponential(2)}, twin vs float32 ${gap(lpf, lpo).toExponential(2)}`,
        );
        expect(gap(lpq, lpf)).toBeGreaterThan(0);
        expect(gap(lpq, lpf)).toBeLessThan(gap(lpf, lpo));
        const reqs = [[5, 9, 17], [40, 41, 42, 43, 44], [88]].map((p, i) => ({
            promptTokenIds: p,
            seed: i,
            sampling: { temperature: 1, maxTokens: 10 },
        }));
        // the log-probs sampling reports are the int8 forward's own (the decoding GEMV and the GEMM: one kernel)
        const outs = await q.generate(reqs);
        for (const [i, g] of outs.entries()) {
            const prompt = reqs[i].promptTokenIds,
                toks = g.tokenIds ?? [],
                ids = [...prompt, ...toks];
            const lp = await q.logprobs({ tokens: Int32Array.from(ids), shape: [1, ids.length] });
            const mine = lp.subarray(prompt.length - 1, ids.length - 1);
            expect([toks.length, g.logprobs?.length]).toEqual([10, 10]);
            expect(gap(mine, Float32Array.from(g.logprobs ?? []))).toBeLessThan(1e-4);
        }
        const [aq, af] = [
            await q.withAdapter("a", { rank: 4, alpha: 8 }),
            await f.withAdapter("a", { rank: 4, alpha: 8 }),
        ];
        for (let s = 0; s < 3; s++) {
            const [lq, lf] = [await aq.trainStep(batch(s), { lr: 1e-2 }), await af.trainStep(batch(s), { lr: 1e-2 })];
            expect(Math.abs(lq.loss - lf.loss)).toBeLessThan(2e-3 * Math.abs(lf.loss));
        }
        expect(gap(await aq.logprobs(seqs), await af.logprobs(seqs))).toBeLessThan(gap(lpf, lpo) * 2);
        // The adapter saves in the PEFT layout and loads on the float32 base of the original weights.
        const saved = join(root, "adapter");
        await aq.save(saved, { baseModel: dir });
        const base = await NativePolicy.load(dir, { tokenizer: null });
        const onFloat = await base.loadAdapter(saved);
        const [lq, lo] = [await aq.logprobs(seqs), await onFloat.logprobs(seqs)];
        expect(Math.max(...Array.from(lq, (x, i) => Math.abs(x - lo[i])))).toBeLessThan(0.05);
        // The base itself is frozen.
        await expect(q.trainStep(batch(0), { lr: 1e-2 })).rejects.toThrow(/int8 and frozen: train a LoRA adapter/);
        await expect(q.save(join(root, "never-written"))).rejects.toThrow(
            /matrices are int8 in memory .* load the model with dtype 'float32'/,
        );
        await expect(aq.mergeAdapter()).rejects.toThrow(/merge: the base's matrices are int8/);
        for (const p of [aq, af, q, f, onFloat, base, orig]) await p.dispose();
    }, 60_000);

    it("stays within the order of bfloat16's error of the float32 load: log-prob differences", async () => {
        const f = await NativePolicy.load(dir, { tokenizer: null });
        const h = await NativePolicy.load(dir, { tokenizer: null, dtype: "bfloat16" });
        const q = await NativePolicy.load(dir, { tokenizer: null, dtype: "int8" });
        const seqs = {
            tokens: Int32Array.from({ length: 4 * 16 }, (_, i) => (i * 13 + 1) % V),
            shape: [4, 16] as [number, number],
        };
        const [lf, lh, lq] = [await f.logprobs(seqs), await h.logprobs(seqs), await q.logprobs(seqs)];
        const stats = (l: Float32Array) => {
            const d = Array.from(l, (x, i) => Math.abs(x - lf[i]));
            return { max: Math.max(...d), mean: d.reduce((a, b) => a + b, 0) / d.length };
        };
        const [sh, sq] = [stats(lh), stats(lq)];
        console.log(
            `|logp - logp(float32)|: bfloat16 mean ${sh.mean.toExponential(2)} max ${sh.max.toExponential(2)}; ` +
                `int8 mean ${sq.mean.toExponential(2)} max ${sq.max.toExponential(2)}`,
        );
        // int8 keeps 7 bits and a shared scale per 32 (bf16: 8 bits per value): the same order of error.
        expect(sq.mean).toBeGreaterThan(0);
        expect(sq.mean).toBeLessThan(8 * sh.mean);
        expect(sq.max).toBeLessThan(0.05);
        for (const p of [f, h, q]) await p.dispose();
    }, 60_000);

    it("rollouts sampled on the int8 base while a float32 model trains: the mismatch the rollout correction measures", async () => {
        // The sampler's log-probs (Generation.logprobs) against the trainer's of the same ids: k3 > 0 and small for
        // int8, larger than bf16's; token-level TIS weights close to 1.
        const f = await NativePolicy.load(dir, { tokenizer: null });
        const k3 = async (dtype: "bfloat16" | "int8") => {
            const s = await NativePolicy.load(dir, { tokenizer: null, dtype });
            const prompt = [5, 9, 17, 33];
            const gens = await s.generate(
                Array.from({ length: 8 }, (_, i) => ({
                    promptTokenIds: prompt,
                    seed: i,
                    sampling: { temperature: 1, maxTokens: 12 },
                })),
            );
            const T = prompt.length + 12;
            const tokens = new Int32Array(8 * T),
                rollout = new Float32Array(8 * T),
                mask = new Uint8Array(8 * T);
            gens.forEach((g, b) => {
                const ids = [...prompt, ...(g.tokenIds ?? [])]; // (shorter where it ended at eos: padded with 0)
                tokens.set(ids, b * T);
                // logprobs[b, t] scores token t + 1: the completion's tokens sit at t = P - 1 .. T - 2
                (g.logprobs ?? []).forEach((lp, i) => {
                    rollout[b * T + prompt.length - 1 + i] = lp;
                    mask[b * T + prompt.length - 1 + i] = 1;
                });
            });
            const old = await f.logprobs({ tokens, shape: [8, T] });
            const r = rolloutCorrection(
                { oldLogp: old, rolloutLogp: rollout, mask, shape: [8, T] },
                { rolloutIs: "token", rolloutIsThreshold: 2 },
            );
            await s.dispose();
            return r.stats;
        };
        const [h, q] = [await k3("bfloat16"), await k3("int8")];
        console.log(
            `sampler vs float32 trainer: mismatch k3 bfloat16 ${h.k3Kl.toExponential(2)}, int8 ${q.k3Kl.toExponential(2)}; ` +
                `int8 token IS weights mean ${q.isMean.toFixed(5)}`,
        );
        expect(q.k3Kl).toBeGreaterThan(0);
        expect(q.k3Kl).toBeLessThan(1e-3);
        expect(q.k3Kl).toBeGreaterThan(h.k3Kl);
        expect(Math.abs(q.isMean - 1)).toBeLessThan(0.01);
        await f.dispose();
    }, 60_000);

    it("moves onto the device as it is held: the CPU's log-probs, adapter steps and greedy tokens, and back", async () => {
        // (gptSetDevice(h, 2): the CPU emulation of the CUDA model, llama_device_host.h; its products are the CPU's)
        const cpu = await NativePolicy.load(dir, { tokenizer: null, dtype: "int8" });
        const dev = await NativePolicy.load(dir, { tokenizer: null, dtype: "int8" });
        native.gptSetDevice(dev.h(), 2);
        expect([dev.device, dev.dtype]).toEqual(["cuda", "int8"]);
        const seqs = {
            tokens: Int32Array.from({ length: 3 * 11 }, (_, i) => (i * 29 + 4) % V),
            shape: [3, 11] as [number, number],
        };
        expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs));
        await expect(dev.trainStep(batch(0), { lr: 1e-2 })).rejects.toThrow(/int8 and frozen: train a LoRA adapter/);
        const [ac, ad] = [
            await cpu.withAdapter("a", { rank: 4, alpha: 8 }),
            await dev.withAdapter("a", { rank: 4, alpha: 8 }),
        ];
        for (let s = 0; s < 3; s++) {
            const [lc, ld] = [await ac.trainStep(batch(s), { lr: 1e-2 }), await ad.trainStep(batch(s), { lr: 1e-2 })];
            expect([ld.loss, ld.gradNorm]).toEqual([lc.loss, lc.gradNorm]);
        }
        expect(await ad.logprobs(seqs)).toEqual(await ac.logprobs(seqs));
        const reqs = [
            [5, 9, 17],
            [40, 41, 42, 43, 44],
        ].map((p) => ({
            promptTokenIds: p,
            sampling: { temperature: 0, maxTokens: 8 },
        }));
        const tokens = async (p: NativePolicy) => (await p.generate(reqs)).map((g) => g.tokenIds);
        expect(await tokens(ad)).toEqual(await tokens(ac));
        await ad.dispose();
        await dev.to("cpu");
        expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs));
        for (const p of [ac, cpu, dev]) await p.dispose();
    }, 60_000);

    it("dtype 'int8' is named in errors; device 'cuda' loads it on a GPU, or is the no-device error", async () => {
        await expect(NativePolicy.load(dir, { tokenizer: null, dtype: "q8" as never })).rejects.toThrow(
            /dtype: expected 'float32', 'bfloat16' or 'int8', got "q8"/,
        );
        const load = NativePolicy.load(dir, { tokenizer: null, dtype: "int8", device: "cuda" });
        if (backend().cuda.devices.length === 0)
            await expect(load).rejects.toMatchObject({ code: "MAPORL_ERR_NO_DEVICE" });
        else {
            const p = await load;
            expect([p.device, p.dtype]).toEqual(["cuda", "int8"]);
            await p.dispose();
        }
    });
});
