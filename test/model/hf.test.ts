// hf.test.ts: Hugging Face directories in the native engine (NativePolicy.load of llama / mistral / qwen2 / qwen3),
// against bench/python/llama_ref.py's float64 reference (test/fixtures/hf: per-token log-probs and greedy
// continuations, f32, f16 and sharded bf16 checkpoints, the rope scalings); decoding against the full forward;
// ragged batches against one-by-one; training through log-probs against the fused kernel on the full logits; saving
// as a Hugging Face directory and back; bad directories.
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, describe, expect, it } from "vitest";

import { fusedPolicyLoss, NativePolicy, setThreads } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { readSafetensorsHeader } from "../../lib/model/safetensors.js";

afterAll(() => {
    setThreads(0);
});

const FIX = join(import.meta.dirname, "..", "fixtures", "hf");
const ARCHS = ["llama", "llama-f16", "llama-linear-bias", "mistral", "qwen2", "qwen3-bf16-sharded"];
type Expected = {
    dtype: string;
    sequences: { tokens: number[]; logprobs: number[] }[];
    greedy: { prompt: number[]; tokens: number[] }[];
};
const expected = (a: string): Expected => JSON.parse(readFileSync(join(FIX, a, "expected.json"), "utf8")) as Expected;
const tmp = () => mkdtempSync(join(tmpdir(), "maporl-hf-"));
const stopIds = (a: string): number[] => {
    const e = JSON.parse(readFileSync(join(FIX, a, "config.json"), "utf8")).eos_token_id as number | number[];
    return Array.isArray(e) ? e : [e];
};

describe("Hugging Face checkpoints against the float64 reference", () => {
    for (const a of ARCHS) {
        it(`${a}: per-token log-probs within 1e-4 and the greedy continuation`, async () => {
            const p = await NativePolicy.load(join(FIX, a), { tokenizer: null });
            expect(p.family).toBe("llama");
            const exp = expected(a);
            let worst = 0;
            for (const s of exp.sequences) {
                const T = s.tokens.length;
                const lp = await p.logprobs({ tokens: Int32Array.from(s.tokens), shape: [1, T] });
                for (let t = 0; t < T - 1; t++) worst = Math.max(worst, Math.abs(lp[t] - s.logprobs[t]));
                expect(lp[T - 1]).toBe(0);
            }
            expect(worst).toBeLessThan(1e-4); // measured ~5e-7 (float32 activations)
            const gens = await p.generate(
                exp.greedy.map((g) => ({ promptTokenIds: g.prompt, sampling: { temperature: 0, maxTokens: 8 } })),
            );
            gens.forEach((g, i) => {
                const want = exp.greedy[i].tokens;
                expect(g.tokens).toEqual(want.slice(0, g.tokens!.length));
                // Generation ends early only on one of the model's stop ids (generation_config.json's eos_token_id).
                if (g.tokens!.length < want.length) {
                    expect(g.finishReason).toBe("stop");
                    expect(stopIds(a)).toContain(want[g.tokens!.length]);
                }
            });
            await p.dispose();
        });
    }
});

describe("decoding", () => {
    it("sampled log-probs equal the full forward's at every completion position, batched and ragged as one by one", async () => {
        const p = await NativePolicy.load(join(FIX, "qwen2"), { tokenizer: null });
        const prompts = [[5, 9, 17], [40, 41, 42, 43, 44, 45, 46], [88]];
        const reqs = prompts.map((q, i) => ({
            promptTokenIds: q,
            seed: 100 + i,
            sampling: { temperature: 1, maxTokens: 12 },
        }));
        const batched = await p.generate(reqs);
        for (let i = 0; i < reqs.length; i++) {
            const [alone] = await p.generate([reqs[i]]);
            expect(alone.tokens).toEqual(batched[i].tokens);
            expect(alone.logprobs).toEqual(batched[i].logprobs);
            expect(alone.tokenIds).toEqual(batched[i].tokenIds);
            expect(batched[i].promptTokenIds).toEqual(prompts[i]);
            const seq = [...prompts[i], ...batched[i].tokenIds!]; // (a stop token sampled is in tokenIds and logprobs)
            expect(batched[i].logprobs!.length).toBe(batched[i].tokenIds!.length);
            const lp = await p.logprobs({ tokens: Int32Array.from(seq), shape: [1, seq.length] });
            batched[i].logprobs!.forEach((x, k) =>
                expect(Math.abs(x - lp[prompts[i].length - 1 + k])).toBeLessThan(2e-5),
            );
        }
        await p.dispose();
    });
});

// A batch of 3 rows of 10 tokens from the fixture's vocabulary, the last 6 positions trained.
function batchOf(V: number) {
    const B = 3,
        T = 10,
        tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T),
        mask = new Uint8Array(B * T);
    for (let i = 0; i < B * T; i++) {
        tokens[i] = (i * 37 + 11) % V;
        targets[i] = (i * 53 + 7) % V;
        mask[i] = i % T >= 4 ? 1 : 0;
    }
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}

describe("training through log-probs", () => {
    it("trainStep's PPO loss and statistics equal the fused kernel's on the full logits", async () => {
        const p = await NativePolicy.load(join(FIX, "qwen3-bf16-sharded"), { tokenizer: null });
        const b = batchOf(96),
            N = 30;
        const oldLogp = Float32Array.from({ length: N }, (_, i) => -4.5 + 0.1 * Math.sin(i));
        const refLogp = Float32Array.from({ length: N }, (_, i) => -4.6 + 0.1 * Math.cos(i));
        const advantages = Float32Array.from([1, -0.5, 2]);
        const loss = {
            type: "ppo" as const,
            clip: 0.2,
            kl: { estimator: "low_var_kl" as const, coef: 0.1 },
            entropyCoef: 0.01,
            aggregation: "seq-mean-token-mean" as const,
        };
        const logits = new Float32Array(N * 96);
        native.gptForward(p.h(), { tokens: b.tokens, B: 3, T: 10, logits, values: null });
        const ref = fusedPolicyLoss(
            { logits, targets: b.targets, mask: b.mask, shape: [3, 10, 96], advantages, oldLogp, refLogp },
            loss,
        );
        const r = await p.trainStep({ ...b, advantages, oldLogp, refLogp }, { loss, lr: 0 });
        expect(Math.abs(r.loss - ref.loss)).toBeLessThan(1e-5 * Math.max(1, Math.abs(ref.loss)));
        for (const k of [
            "pgLoss",
            "klLoss",
            "entropyLoss",
            "clipFrac",
            "approxKl",
            "entropyMean",
            "ratioMean",
        ] as const)
            expect(Math.abs(r.stats[k] - ref.stats[k]), k).toBeLessThan(1e-5);
        expect(r.gradNorm).toBeGreaterThan(0);
        await p.dispose();
    });

    it("SFT lowers the loss, gives the same parameters for 1 and 2 threads, and resumes exactly from a saved directory", async () => {
        const b = batchOf(96);
        const run = async (threads: number) => {
            setThreads(threads);
            const p = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null });
            const losses: number[] = [];
            for (let i = 0; i < 30; i++) losses.push((await p.trainStep(b, { lr: 1e-2 })).loss);
            const params = new Float32Array(p.parameterCount);
            native.gptGet(p.h(), { which: 0, out: params });
            return { p, losses, params };
        };
        const one = await run(1),
            two = await run(2);
        setThreads(0);
        expect(one.losses.at(-1)!).toBeLessThan(0.5 * one.losses[0]);
        expect(Buffer.from(two.params.buffer).equals(Buffer.from(one.params.buffer))).toBe(true);
        // The first SFT loss is the mean cross-entropy of the trained targets.
        const fresh = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null });
        const logits = new Float32Array(30 * 96);
        native.gptForward(fresh.h(), { tokens: b.tokens, B: 3, T: 10, logits, values: null });
        let ce = 0,
            n = 0;
        for (let i = 0; i < 30; i++) {
            if (!b.mask[i]) continue;
            const z = logits.subarray(i * 96, (i + 1) * 96),
                m = Math.max(...z);
            ce += Math.log(z.reduce((s, x) => s + Math.exp(x - m), 0)) + m - z[b.targets[i]];
            n++;
        }
        expect(Math.abs(one.losses[0] - ce / n)).toBeLessThan(1e-5);
        // Save after 30 steps, load, and take one more step on both: the same parameters.
        const dir = join(tmp(), "ckpt");
        await one.p.save(dir);
        const back = await NativePolicy.load(dir, { tokenizer: null });
        await one.p.trainStep(b, { lr: 3e-3 });
        await back.trainStep(b, { lr: 3e-3 });
        const x = new Float32Array(one.p.parameterCount),
            y = new Float32Array(one.p.parameterCount);
        native.gptGet(one.p.h(), { which: 0, out: x });
        native.gptGet(back.h(), { which: 0, out: y });
        expect(Buffer.from(y.buffer).equals(Buffer.from(x.buffer))).toBe(true);
        for (const q of [one.p, two.p, fresh, back]) await q.dispose();
    });
    it("keepLogitsBytes: the kept logits give the recomputation's losses and parameters bit for bit; bad budgets are named", async () => {
        const b = batchOf(96),
            h = (q: NativePolicy) => q.h();
        const advantages = Float32Array.from([1, -0.5, 2]),
            oldLogp = Float32Array.from({ length: 30 }, (_, i) => -4.5 + 0.1 * Math.sin(i));
        const loss = { type: "ppo" as const, clip: 0.2, entropyCoef: 0.01 };
        const run = async (keepLogitsBytes: number | undefined) => {
            const p = await NativePolicy.load(join(FIX, "qwen2"), { tokenizer: null });
            const out: number[] = [];
            for (let i = 0; i < 3; i++) {
                const r = await p.trainStep(
                    { ...b, advantages, oldLogp },
                    { loss, lr: 1e-2, ...(keepLogitsBytes === undefined ? {} : { keepLogitsBytes }) },
                );
                out.push(r.loss, r.gradNorm);
            }
            const params = new Float32Array(p.parameterCount);
            native.gptGet(h(p), { which: 0, out: params });
            await p.dispose();
            return { out, params };
        };
        // (30 rows x 96 x 4 bytes = 11,520: the default keeps them; 11,519 recomputes; 0 recomputes.)
        const kept = await run(undefined),
            exact = await run(30 * 96 * 4),
            short = await run(30 * 96 * 4 - 1),
            never = await run(0);
        for (const r of [exact, short, never]) {
            expect(r.out).toEqual(kept.out);
            expect(Buffer.from(r.params.buffer).equals(Buffer.from(kept.params.buffer))).toBe(true);
        }
        const p = await NativePolicy.load(join(FIX, "qwen2"), { tokenizer: null });
        await expect(p.trainStep(b, { keepLogitsBytes: -1 })).rejects.toThrow(
            /keepLogitsBytes: expected an integer in \[0, 1099511627776\], got -1/,
        );
        await expect(p.trainStep(b, { keepLogitsBytes: 1.5 })).rejects.toThrow(/keepLogitsBytes/);
        await expect(p.trainStep(b, { keepLogitsBytes: "big" as unknown as number })).rejects.toThrow(TypeError);
        await p.dispose();
    });
});

describe("the value head on a Hugging Face model", () => {
    it("trains toward the returns with loss 'value' (the forward computes no logits) and moves only the value head", async () => {
        const p = await NativePolicy.load(join(FIX, "mistral"), { tokenizer: null });
        const b = batchOf(96);
        const returns = Float32Array.from({ length: 30 }, (_, i) => (i % 3) - 1);
        const h = p.h();
        const before = new Float32Array(p.parameterCount);
        native.gptGet(h, { which: 0, out: before });
        const mse = async () => {
            const v = await p.values({ tokens: b.tokens, shape: b.shape });
            let s = 0,
                n = 0;
            for (let i = 0; i < 30; i++)
                if (b.mask[i]) {
                    s += (v[i] - returns[i]) ** 2;
                    n++;
                }
            return s / n;
        };
        const first = await mse();
        for (let s = 0; s < 40; s++) await p.trainStep({ ...b, returns }, { loss: "value", lr: 1e-2 });
        expect(await mse()).toBeLessThan(0.7 * first);
        const after = new Float32Array(p.parameterCount);
        native.gptGet(h, { which: 0, out: after });
        const moved = native
            .gptTensors(h)
            .filter((t) => {
                const n = t.shape.filter((d) => d > 0).reduce((a, c) => a * c, 1);
                return after.subarray(t.offset, t.offset + n).some((x, k) => x !== before[t.offset + k]);
            })
            .map((t) => t.name);
        // The whole trunk trains through the value loss (full fine-tuning), but never the LM head (no logits in the loss).
        expect(moved).toContain("value_head.weight");
        expect(moved).not.toContain("lm_head.weight");
        await p.dispose();
    });
});

describe("saving a Hugging Face directory", () => {
    it("writes transformers' names and layout, sharded above maxShardBytes, and loads back to the same log-probs", async () => {
        const p = await NativePolicy.load(join(FIX, "qwen3-bf16-sharded"), { tokenizer: null });
        const seq = Int32Array.from(expected("qwen3-bf16-sharded").sequences[1].tokens);
        const want = await p.logprobs({ tokens: seq, shape: [1, seq.length] });
        const root = tmp();
        await p.save(join(root, "one"));
        await p.save(join(root, "sharded"), { maxShardBytes: 8000 });
        const cfg = JSON.parse(readFileSync(join(root, "one", "config.json"), "utf8"));
        expect(cfg.model_type).toBe("qwen3");
        expect(cfg.torch_dtype).toBe("float32");
        const h = readSafetensorsHeader(join(root, "one", "model.safetensors"));
        const orig = JSON.parse(readFileSync(join(FIX, "qwen3-bf16-sharded", "model.safetensors.index.json"), "utf8"))
            .weight_map as Record<string, string>;
        expect(h.tensors.map((t) => t.name).sort()).toEqual(Object.keys(orig).sort());
        expect(h.tensors.every((t) => t.dtype === "F32")).toBe(true);
        expect(existsSync(join(root, "one", "optimizer.safetensors"))).toBe(false); // never trained
        const idx = JSON.parse(readFileSync(join(root, "sharded", "model.safetensors.index.json"), "utf8"));
        const shards = new Set(Object.values(idx.weight_map as Record<string, string>));
        expect(shards.size).toBeGreaterThan(2);
        for (const d of ["one", "sharded"]) {
            const q = await NativePolicy.load(join(root, d), { tokenizer: null });
            expect(await q.logprobs({ tokens: seq, shape: [1, seq.length] })).toEqual(want);
            await q.dispose();
        }
        rmSync(root, { recursive: true, force: true });
        await p.dispose();
    });
});

describe("bad directories are clear errors", () => {
    const copy = (a: string) => {
        const d = join(tmp(), a);
        cpSync(join(FIX, a), d, { recursive: true });
        return d;
    };
    const editConfig = (d: string, f: (c: Record<string, unknown>) => void) => {
        const c = JSON.parse(readFileSync(join(d, "config.json"), "utf8"));
        f(c);
        writeFileSync(join(d, "config.json"), JSON.stringify(c));
    };
    it("names the key, the tensor or the file", async () => {
        const load = (d: string, o: Record<string, unknown> = { tokenizer: null }) => NativePolicy.load(d, o);
        let d = copy("qwen2");
        editConfig(d, (c) => {
            c.model_type = "gpt_neox";
        });
        await expect(load(d)).rejects.toThrow(
            /model_type: expected one of llama, mistral, qwen2, qwen3.*got 'gpt_neox'|model_type.*gpt_neox/,
        );
        d = copy("qwen2");
        editConfig(d, (c) => {
            c.rope_scaling = { rope_type: "yarn", factor: 4 };
        });
        await expect(load(d)).rejects.toThrow(/rope_scaling.rope_type.*yarn/);
        d = copy("qwen2");
        editConfig(d, (c) => {
            c.hidden_act = "gelu";
        });
        await expect(load(d)).rejects.toThrow(/hidden_act/);
        d = copy("qwen2");
        editConfig(d, (c) => {
            c.intermediate_size = 41;
        });
        await expect(load(d)).rejects.toThrow(/mlp\.gate_proj\.weight: shape \[40,16\], expected \[41,16\]/);
        d = copy("qwen2");
        editConfig(d, (c) => {
            c.tie_word_embeddings = false;
        });
        await expect(load(d)).rejects.toThrow(/lm_head\.weight is missing/);
        d = copy("llama-linear-bias");
        editConfig(d, (c) => {
            c.attention_bias = false;
        });
        await expect(load(d)).rejects.toThrow(/q_proj\.bias is not part of this architecture/);
        d = copy("qwen3-bf16-sharded");
        truncateSync(join(d, "model-00002-of-00003.safetensors"), 5000);
        await expect(load(d)).rejects.toThrow(/model-00002-of-00003\.safetensors.*truncated/);
        d = copy("qwen3-bf16-sharded");
        rmSync(join(d, "model-00003-of-00003.safetensors"));
        await expect(load(d)).rejects.toThrow(/model-00003-of-00003\.safetensors: missing/);
        d = copy("llama");
        rmSync(join(d, "model.safetensors"));
        await expect(load(d)).rejects.toThrow(/no model\.safetensors/);
        d = copy("llama");
        await expect(load(d, {})).rejects.toThrow(/tokenizer\.json: missing.*tokenizer: null/);
        // A tensor of another dtype (I32 bytes in place of F32): named.
        d = copy("llama");
        const buf = readFileSync(join(d, "model.safetensors"));
        const n = Number(buf.readBigUInt64LE(0));
        const header = buf
            .subarray(8, 8 + n)
            .toString("utf8")
            .replace(/"F32"/, '"I32"');
        writeFileSync(
            join(d, "model.safetensors"),
            Buffer.concat([buf.subarray(0, 8), Buffer.from(header.padEnd(n)), buf.subarray(8 + n)]),
        );
        await expect(load(d)).rejects.toThrow(/dtype I32, expected F32, BF16 or F16/);
        d = copy("mistral");
        editConfig(d, (c) => {
            c.sliding_window = 16;
        });
        await expect(load(d, { tokenizer: null, contextLength: 32 })).rejects.toThrow(/sliding_window 16/);
        expect((await load(d)).config.contextLength).toBe(16);
        await expect(NativePolicy.load(join(FIX, "llama"), { tokenizer: null, device: "cuda" })).rejects.toThrow(
            /MAPORL_ERR_NO_DEVICE|CUDA|device/,
        );
    });
});
