// bf16.test.ts: a Hugging Face model loaded with dtype 'bfloat16' (its matrices kept bf16 in memory, frozen). On a
// bf16 checkpoint it computes the very bits of the float32 load (the kernels widen the same values): log-probs,
// greedy generation, and a LoRA adapter trained on it; its own training, save and clone are named errors; and
// it holds the matrices in half the memory (peak RSS of child processes).
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";

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
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}

describe("a bfloat16 base", () => {
    it("on a bf16 checkpoint: the float32 load's log-probs, greedy tokens and adapter training, to the bit", async () => {
        const dir = join(FIX, "qwen3-bf16-sharded");
        const f = await NativePolicy.load(dir, { tokenizer: null });
        const h = await NativePolicy.load(dir, { tokenizer: null, dtype: "bfloat16" });
        expect([f.dtype, h.dtype]).toEqual(["float32", "bfloat16"]);
        expect(h.parameterCount).toBe(f.parameterCount);
        const seqs = {
            tokens: Int32Array.from({ length: 3 * 11 }, (_, i) => (i * 29 + 4) % V),
            shape: [3, 11] as [number, number],
        };
        expect(await h.logprobs(seqs)).toEqual(await f.logprobs(seqs));
        const reqs = [[5, 9, 17], [40, 41, 42, 43, 44], [88]].map((q, i) => ({
            promptTokenIds: q,
            seed: i,
            sampling: { temperature: 0.8, maxTokens: 10 },
        }));
        const [gf, gh] = [await f.generate(reqs), await h.generate(reqs)];
        expect(gh.map((g) => [g.tokenIds, g.logprobs])).toEqual(gf.map((g) => [g.tokenIds, g.logprobs]));
        // The same adapter trained on each base: the same losses and the same model after.
        const [af, ah] = [
            await f.withAdapter("a", { rank: 4, alpha: 8 }),
            await h.withAdapter("a", { rank: 4, alpha: 8 }),
        ];
        for (let s = 0; s < 3; s++) {
            const [lf, lh] = [await af.trainStep(batch(s), { lr: 1e-2 }), await ah.trainStep(batch(s), { lr: 1e-2 })];
            expect(lh.loss).toBe(lf.loss);
        }
        expect(await ah.logprobs(seqs)).toEqual(await af.logprobs(seqs));
        // (save's baseModel, the base an adapter records, is checked by name)
        await expect(af.save(join(FIX, "never-written"), { baseModel: "" })).rejects.toThrow(
            /save: baseModel: expected a non-empty string/,
        );
        await expect(f.save(join(FIX, "never-written"), { baseModel: dir })).rejects.toThrow(
            /baseModel: .*this policy runs no adapter/,
        );
        // The base itself: frozen, not readable back as float32 parameters.
        await expect(h.trainStep(batch(0), { lr: 1e-2 })).rejects.toThrow(/bfloat16 and frozen: train a LoRA adapter/);
        await expect(h.save(join(FIX, "never-written"))).rejects.toThrow(
            /matrices are bfloat16 in memory .* load the model with dtype 'float32'/,
        );
        await expect(h.clone()).rejects.toThrow(/clone an adapter of it \(withAdapter\)/);
        await expect(ah.mergeAdapter()).rejects.toThrow(/merge: the base's matrices are bfloat16/);
        expect(ah.adapter).toBe("a");
        expect(await h.logprobs(seqs)).toEqual(await f.logprobs(seqs)); // (nothing of it changed)
        for (const p of [af, ah, f, h]) await p.dispose();
    });

    it("dtype is checked and only for Hugging Face directories", async () => {
        await expect(
            NativePolicy.load(join(FIX, "qwen2"), { tokenizer: null, dtype: "float16" as never }),
        ).rejects.toThrow(/dtype: expected 'float32', 'bfloat16' or 'int8', got "float16"/);
        await expect(
            NativePolicy.fromConfig(
                {
                    model_type: "llama",
                    vocab_size: 16,
                    hidden_size: 8,
                    intermediate_size: 8,
                    num_hidden_layers: 1,
                    num_attention_heads: 2,
                    num_key_value_heads: 1,
                },
                { tokenizer: null, dtype: "bf16" as never },
            ),
        ).rejects.toThrow(/dtype: expected/);
        // A float32 checkpoint loaded as bf16 rounds its matrices: close to, not equal to, the float32 load.
        const f = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null });
        const h = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null, dtype: "bfloat16" });
        const seqs = {
            tokens: Int32Array.from({ length: 2 * 9 }, (_, i) => (i * 13 + 1) % V),
            shape: [2, 9] as [number, number],
        };
        const [lf, lh] = [await f.logprobs(seqs), await h.logprobs(seqs)];
        const worst = Math.max(...Array.from(lf, (x, i) => Math.abs(x - lh[i])));
        expect(worst).toBeGreaterThan(0);
        expect(worst).toBeLessThan(0.05);
        await f.dispose();
        await h.dispose();
    });

    it("holds the matrices in half the memory (peak RSS of a fresh process, 55 MiB of float32 matrices)", () => {
        const index = join(import.meta.dirname, "..", "..", "dist", "index.js");
        const peak = (dtype: string): number => {
            const script = `
                import { NativePolicy } from ${JSON.stringify(index)};
                const cfg = { model_type: "llama", vocab_size: 32000, hidden_size: 256, intermediate_size: 768, num_hidden_layers: 8,
                    num_attention_heads: 8, num_key_value_heads: 4, max_position_embeddings: 256, tie_word_embeddings: true };
                const p = await NativePolicy.fromConfig(cfg, { tokenizer: null, seed: 1, dtype: ${JSON.stringify(dtype)} });
                await p.generate([{ promptTokenIds: [1, 2, 3], sampling: { maxTokens: 4 } }]);
                console.log(JSON.stringify({ rss: process.resourceUsage().maxRSS * 1024, params: p.parameterCount }));`;
            const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
                encoding: "utf8",
                timeout: 120_000,
            });
            expect(r.status, r.stderr).toBe(0);
            return (JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { rss: number }).rss;
        };
        const f32 = peak("float32"),
            b16 = peak("bfloat16");
        const matrices = 4 * (32000 * 256 + 8 * (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 768)); // float32 bytes
        console.log(
            `peak RSS: float32 ${(f32 / 2 ** 20).toFixed(0)} MiB, bfloat16 ${(b16 / 2 ** 20).toFixed(0)} MiB; matrices ${(matrices / 2 ** 20).toFixed(0)} MiB in float32`,
        );
        expect(f32 - b16).toBeGreaterThan(0.35 * matrices); // half of them saved, less the allocator's noise
    });
});
