// llamaDevice.test.ts: a Llama-family NativePolicy on the device path without a GPU. gptSetDevice(h, 2) moves the model
// onto the CPU emulation of its CUDA model (native/model/llama_device_host.h: llama_device.h's composition, the one
// cuda/model/llama.cu runs, over the CPU layers), so every device branch of the C entry points runs here: the chunked
// scoring forward and backward, the value head, AdamW on device buffers, prefill and per-row decoding, the moves
// back. Against the same checkpoint on the CPU: log-probs, values, losses and gradient norms to the bit (the same
// layers in the same order), greedy tokens equal (decoding differs from the CPU's only in the attention rows' and
// the GEMV's rounding); LoRA adapters on the device base trained and decoded together as on the CPU.
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { backend, NativePolicy } from "../../lib/index.js";
import { native } from "../../lib/native.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "hf");
const V = 96;

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
    mask[0] = 0;
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}
const handle = (p: NativePolicy) => p.h();

describe("the Llama family's device model, emulated on the CPU", () => {
    for (const name of ["llama", "qwen2", "qwen3-bf16-sharded", "llama-linear-bias"]) {
        it(`${name}: scores, trains and decodes as the CPU model`, async () => {
            const dir = join(FIX, name);
            const cpu = await NativePolicy.load(dir, { tokenizer: null });
            const dev = await NativePolicy.load(dir, { tokenizer: null });
            native.gptSetDevice(handle(dev), 2);
            expect([cpu.device, dev.device]).toEqual(["cpu", "cuda"]);
            const seqs = {
                tokens: Int32Array.from({ length: 3 * 11 }, (_, i) => (i * 29 + 4) % V),
                shape: [3, 11] as [number, number],
            };
            expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs));
            expect(await dev.values(seqs)).toEqual(await cpu.values(seqs));
            // SFT, a clipped policy loss with a KL term, and the value head: the same losses and norms step by step.
            const ppo = { type: "ppo" as const, kl: { coef: 0.1, estimator: "k3" as const }, entropyCoef: 0.01 };
            for (let s = 0; s < 3; s++) {
                const b = batch(s),
                    advantages = Float32Array.from({ length: 24 }, (_, i) => Math.sin(i + s));
                const oldLogp = Float32Array.from({ length: 24 }, (_, i) => -2 - 0.1 * (i % 5)),
                    refLogp = oldLogp.map((x) => x - 0.05);
                const returns = Float32Array.from({ length: 24 }, (_, i) => Math.cos(i * s));
                for (const [opts, extra] of [
                    [{ lr: 1e-2 }, {}],
                    [
                        { lr: 1e-2, loss: ppo },
                        { advantages, oldLogp, refLogp },
                    ],
                    [{ lr: 1e-2, loss: "value" as const }, { returns }],
                ] as const) {
                    const [rc, rd] = [
                        await cpu.trainStep({ ...b, ...extra }, opts),
                        await dev.trainStep({ ...b, ...extra }, opts),
                    ];
                    expect([rd.loss, rd.gradNorm, rd.step]).toEqual([rc.loss, rc.gradNorm, rc.step]);
                }
            }
            // Accumulated gradients over two calls, then one step.
            for (const p of [cpu, dev]) await p.trainStep(batch(7), { lr: 1e-2, accumulate: true });
            const [ac, ad] = [await cpu.trainStep(batch(8), { lr: 1e-2 }), await dev.trainStep(batch(8), { lr: 1e-2 })];
            expect(ad.gradNorm).toBe(ac.gradNorm);
            expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs));
            // Ragged prompts, greedy, in one batch: prefill and per-row decoding on the device.
            const reqs = [[5, 9, 17], [40, 41, 42, 43, 44], [88]].map((q) => ({
                promptTokenIds: q,
                sampling: { temperature: 0, maxTokens: 8 },
            }));
            const [gc, gd] = [await cpu.generate(reqs), await dev.generate(reqs)];
            expect(gd.map((g) => g.tokenIds)).toEqual(gc.map((g) => g.tokenIds));
            gd.forEach((g, i) =>
                g.logprobs!.forEach((x, t) => expect(Math.abs(x - gc[i].logprobs![t])).toBeLessThan(1e-4)),
            );
            // LoRA adapters on the device base: trained (SFT and the value head), then three of them and the base
            // decoding in one batch, as on the CPU.
            const adapters: NativePolicy[][] = [];
            for (const p of [cpu, dev]) {
                const a = await p.withAdapter("a", { rank: 4, alpha: 8 }),
                    b = await p.withAdapter("b", { rank: 2, alpha: 4, targets: ["q_proj", "v_proj", "down_proj"] });
                const c = await p.withAdapter("c", { rank: 3, alpha: 3 });
                adapters.push([a, b, c]);
            }
            for (let s = 0; s < 2; s++)
                for (let i = 0; i < 3; i++) {
                    const opts = i === 2 ? { lr: 1e-2, loss: "value" as const } : { lr: 2e-2 };
                    const bt = {
                        ...batch(s + 3 * i),
                        returns: Float32Array.from({ length: 24 }, (_, j) => Math.sin(j + i)),
                    };
                    const [rc, rd] = [
                        await adapters[0][i].trainStep(bt, opts),
                        await adapters[1][i].trainStep(bt, opts),
                    ];
                    expect([rd.loss, rd.gradNorm]).toEqual([rc.loss, rc.gradNorm]);
                }
            for (let i = 0; i < 3; i++)
                expect(await adapters[1][i].logprobs(seqs)).toEqual(await adapters[0][i].logprobs(seqs));
            expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs)); // (the base is untouched)
            const mixed = async (ps: NativePolicy[]) =>
                (await Promise.all(ps.map((p, i) => p.generate([reqs[i % 3]])))).map((g) => g[0].tokenIds);
            expect(await mixed([...adapters[1], dev])).toEqual(await mixed([...adapters[0], cpu]));
            await expect(adapters[1][0].mergeAdapter()).rejects.toThrow(
                /lora_merge: the base is on CUDA; merging runs on the CPU/,
            );
            for (const p of adapters.flat()) await p.dispose();
            // Back to the CPU with its moments: training goes on as the CPU twin's.
            await dev.to("cpu");
            expect(dev.device).toBe("cpu");
            const [lc, ld] = [await cpu.trainStep(batch(9), { lr: 1e-2 }), await dev.trainStep(batch(9), { lr: 1e-2 })];
            expect([ld.loss, ld.gradNorm]).toEqual([lc.loss, lc.gradNorm]);
            expect(await dev.logprobs(seqs)).toEqual(await cpu.logprobs(seqs));
            for (const p of [cpu, dev]) await p.dispose();
        });
    }

    it("a bf16 base moves as it is held (the CPU's log-probs); a model with adapters moves with them", async () => {
        const h = await NativePolicy.load(join(FIX, "qwen3-bf16-sharded"), { tokenizer: null, dtype: "bfloat16" });
        const hc = await NativePolicy.load(join(FIX, "qwen3-bf16-sharded"), { tokenizer: null, dtype: "bfloat16" });
        native.gptSetDevice(handle(h), 2);
        expect([h.device, h.dtype]).toEqual(["cuda", "bfloat16"]);
        const s = {
            tokens: Int32Array.from({ length: 2 * 9 }, (_, i) => (i * 13 + 1) % V),
            shape: [2, 9] as [number, number],
        };
        expect(await h.logprobs(s)).toEqual(await hc.logprobs(s));
        await expect(h.trainStep(batch(1), { lr: 1e-2 })).rejects.toThrow(/bfloat16 and frozen: train a LoRA adapter/);
        await hc.dispose();
        const a = await (
            await NativePolicy.load(join(FIX, "llama"), { tokenizer: null })
        ).withAdapter("a", { rank: 2, alpha: 4 });
        await a.trainStep(batch(1), { lr: 5e-2 });
        const seq = { tokens: Int32Array.from([1, 2, 3, 4]), shape: [1, 4] as [number, number] };
        const before = await a.logprobs(seq);
        native.gptSetDevice(handle(a), 2);
        expect(await a.logprobs(seq)).toEqual(before);
        const dropout = await (
            await NativePolicy.load(join(FIX, "llama"), { tokenizer: null })
        ).withAdapter("d", { rank: 2, alpha: 4, dropout: 0.1 });
        native.gptSetDevice(handle(dropout), 2);
        await expect(dropout.trainStep(batch(1), { lr: 1e-2 })).rejects.toThrow(
            /lora.dropout: training with dropout runs on the CPU/,
        );
        // Without a GPU (or a CUDA build), 'cuda' is MAPORL_ERR_NO_DEVICE and 'auto' stays on the CPU; with one,
        // both are on it.
        const gpus = backend().cuda.devices.length;
        const load = NativePolicy.load(join(FIX, "llama"), { tokenizer: null, device: "cuda" });
        if (gpus === 0) await expect(load).rejects.toMatchObject({ code: "MAPORL_ERR_NO_DEVICE" });
        else await (await load).dispose();
        const auto = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null, device: "auto" });
        expect(auto.device).toBe(gpus > 0 ? "cuda" : "cpu");
        for (const p of [h, a, dropout, auto]) await p.dispose();
    });
});
