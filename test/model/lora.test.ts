// lora.test.ts: LoRA adapters on Hugging Face models (NativePolicy.load(dir, { lora }), withAdapter, saveAdapter /
// loadAdapter in PEFT's layout, mergeAdapter). An adapter saved by the package, applied outside it as
// W + (alpha / r) B A from PEFT's tensor names, gives the package's log-probs; the base stays the reference model
// (bit-identical while adapters train); generate batches several adapters in one decode with the tokens of each
// alone; a saved adapter resumes bit-identically; bad adapter directories are named errors that add nothing; and
// three agents on one base use less than 1.2x the memory of one (peak RSS of child processes).
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { readSafetensors, writeSafetensors } from "../../lib/model/safetensors.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "hf");
const dirs: string[] = [];
const tmp = () => {
    const d = mkdtempSync(join(tmpdir(), "maporl-lora-"));
    dirs.push(d);
    return d;
};
afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

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
const seqs = {
    tokens: Int32Array.from({ length: 2 * 10 }, (_, i) => (i * 29 + 4) % V),
    shape: [2, 10] as [number, number],
};

describe("LoRA adapters in PEFT's layout", () => {
    it("a saved adapter applied outside the package as W + (alpha / r) B A gives the package's log-probs", async () => {
        const p = await NativePolicy.load(join(FIX, "qwen2"), {
            tokenizer: null,
            lora: { rank: 4, alpha: 8, targets: ["q_proj", "v_proj", "o_proj", "down_proj"] },
        });
        expect(p.adapter).toBe("default");
        for (let s = 0; s < 3; s++) await p.trainStep(batch(s), { lr: 1e-2 }); // B away from zero
        const mine = await p.logprobs(seqs);
        const out = join(tmp(), "adapter");
        await p.saveAdapter(out);
        const cfg = JSON.parse(readFileSync(join(out, "adapter_config.json"), "utf8")) as Record<string, unknown>;
        expect(cfg).toMatchObject({
            peft_type: "LORA",
            task_type: "CAUSAL_LM",
            r: 4,
            lora_alpha: 8,
            lora_dropout: 0,
            bias: "none",
            target_modules: ["q_proj", "v_proj", "o_proj", "down_proj"],
            base_model_name_or_path: join(FIX, "qwen2"),
        });
        // Merge by hand from the files alone: PEFT's names, A [r, in], B [out, r].
        const ad = new Map(readSafetensors(join(out, "adapter_model.safetensors")).tensors.map((t) => [t.name, t]));
        expect(ad.size).toBe(2 * 4 * 2);
        const base = readSafetensors(join(FIX, "qwen2", "model.safetensors")).tensors;
        const scale = 8 / 4;
        let merged = 0;
        const tensors = base.map((t) => {
            const m = /^model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.weight$/.exec(t.name);
            const key = m ? `base_model.model.model.layers.${m[1]}.${m[2]}.${m[3]}` : "";
            const A = ad.get(`${key}.lora_A.weight`),
                B = ad.get(`${key}.lora_B.weight`);
            if (!A || !B) return t;
            const [out_, inn] = t.shape as [number, number],
                r = A.shape[0];
            expect(A.shape).toEqual([r, inn]);
            expect(B.shape).toEqual([out_, r]);
            const W = new Float32Array(t.data);
            for (let o = 0; o < out_; o++)
                for (let c = 0; c < inn; c++) {
                    let sum = 0;
                    for (let k = 0; k < r; k++) sum += B.data[o * r + k] * A.data[k * inn + c];
                    W[o * inn + c] = t.data[o * inn + c] + scale * sum;
                }
            merged++;
            return { ...t, data: W };
        });
        expect(merged).toBe(8);
        const dir = join(tmp(), "merged");
        cpSync(join(FIX, "qwen2"), dir, { recursive: true });
        writeSafetensors(join(dir, "model.safetensors"), tensors, { format: "pt" });
        const plain = await NativePolicy.load(dir, { tokenizer: null });
        const theirs = await plain.logprobs(seqs);
        let worst = 0;
        for (let i = 0; i < mine.length; i++) worst = Math.max(worst, Math.abs(mine[i] - theirs[i]));
        expect(worst).toBeLessThan(1e-5);
        // mergeAdapter does the same in place; save() then writes a plain model directory.
        await p.mergeAdapter();
        expect(p.adapter).toBeNull();
        const inPlace = await p.logprobs(seqs);
        for (let i = 0; i < mine.length; i++) expect(Math.abs(inPlace[i] - mine[i])).toBeLessThan(1e-5);
        const saved = join(tmp(), "plain");
        await p.save(saved);
        const again = await NativePolicy.load(saved, { tokenizer: null });
        expect(Array.from(await again.logprobs(seqs))).toEqual(Array.from(inPlace));
        await Promise.all([p.dispose(), plain.dispose(), again.dispose()]);
    });

    it("adapters train alone: the base (the reference) stays bit-identical, and each agent moves its own way", async () => {
        const base = await NativePolicy.load(join(FIX, "qwen3-bf16-sharded"), { tokenizer: null });
        const ref0 = await base.logprobs(seqs);
        const agents = await Promise.all(["a0", "a1", "a2"].map((n) => base.withAdapter(n, { rank: 2 })));
        expect(base.adapters).toEqual(["a0", "a1", "a2"]);
        expect(agents[0].parameterCount).toBeLessThan(base.parameterCount / 4);
        // A new adapter changes nothing (B = 0).
        expect(Array.from(await agents[1].logprobs(seqs))).toEqual(Array.from(ref0));
        for (let s = 0; s < 4; s++)
            for (const [k, a] of agents.entries()) await a.trainStep(batch(k * 10 + s), { lr: 2e-2 });
        const ref = await (await agents[0].withAdapter(null)).logprobs(seqs);
        expect(Array.from(ref)).toEqual(Array.from(ref0));
        expect(Array.from(await base.logprobs(seqs))).toEqual(Array.from(ref0));
        const lp = await Promise.all(agents.map((a) => a.logprobs(seqs)));
        expect(lp[0]).not.toEqual(lp[1]);
        expect(lp[1]).not.toEqual(lp[2]);
        for (const a of agents) await a.dispose();
        await base.dispose();
    });

    it("generate runs several adapters in one batch with the tokens and log-probs of each alone", async () => {
        const p = await NativePolicy.load(join(FIX, "llama"), { tokenizer: null, lora: { rank: 4 } });
        const q = await p.withAdapter("second");
        const r = await p.withAdapter("third", { rank: 2, targets: ["k_proj", "up_proj"] });
        for (const [k, a] of [p, q, r].entries())
            for (let s = 0; s < 3; s++) await a.trainStep(batch(k + s), { lr: 2e-2 });
        const ref = await p.withAdapter(null);
        const req = (i: number) => ({
            promptTokenIds: [3 + i, 9, 17 + i],
            seed: 40 + i,
            sampling: { temperature: 1, maxTokens: 10 },
        });
        const agents = [p, q, r, ref];
        const together = await Promise.all(agents.map((a, i) => a.generate([req(i), req(i + 4)])));
        for (const [i, a] of agents.entries()) {
            const alone = await a.generate([req(i), req(i + 4)]);
            expect(together[i].map((g) => g.tokens)).toEqual(alone.map((g) => g.tokens));
            expect(together[i].map((g) => g.logprobs)).toEqual(alone.map((g) => g.logprobs));
        }
        // The adapters differ, so the same request differs between them (the batch really ran each row's adapter).
        const same = await Promise.all(agents.map((a) => a.generate([req(0)])));
        expect(new Set(same.map((g) => JSON.stringify(g[0].logprobs))).size).toBe(4);
        // An aborted call fails alone.
        const ctl = new AbortController();
        const running = [p.generate([req(1)]), q.generate([req(2)], { signal: ctl.signal })];
        ctl.abort(new Error("stop that one"));
        const settled = await Promise.allSettled(running);
        expect(settled[0].status).toBe("fulfilled");
        expect(settled[1].status).toBe("rejected");
        for (const a of agents) await a.dispose();
    });

    it("a saved adapter (with its optimizer state) resumes bit-identically, on the same base or a freshly loaded one", async () => {
        const p = await NativePolicy.load(join(FIX, "mistral"), { tokenizer: null, lora: { rank: 3, dropout: 0.2 } });
        await p.trainStep(batch(1), { lr: 1e-2 });
        const dir = join(tmp(), "ckpt");
        await p.save(dir);
        const cont = await p.trainStep(batch(2), { lr: 1e-2 });
        const after = await p.logprobs(seqs);
        const q = await NativePolicy.load(dir, { base: join(FIX, "mistral"), tokenizer: null });
        expect(q.adapter).toBe("default");
        const res = await q.trainStep(batch(2), { lr: 1e-2 });
        expect(res.loss).toBe(cont.loss);
        expect(res.step).toBe(2);
        expect(Array.from(await q.logprobs(seqs))).toEqual(Array.from(after));
        const onSame = await p.loadAdapter(dir, { name: "restored" });
        expect(p.adapters).toEqual(["default", "restored"]);
        expect((await onSame.trainStep(batch(2), { lr: 1e-2 })).loss).toBe(cont.loss);
        await Promise.all([p.dispose(), q.dispose(), onSame.dispose()]);
    });
});

describe("bad adapters and options", () => {
    it("name the setting, file or tensor, and add nothing", async () => {
        const p = await NativePolicy.load(join(FIX, "qwen2"), { tokenizer: null, lora: { rank: 4 } });
        const good = join(tmp(), "good");
        await p.saveAdapter(good);
        const variant = (edit: (cfg: Record<string, unknown>) => void) => {
            const d = join(tmp(), "bad");
            cpSync(good, d, { recursive: true });
            const cfg = JSON.parse(readFileSync(join(d, "adapter_config.json"), "utf8")) as Record<string, unknown>;
            edit(cfg);
            writeFileSync(join(d, "adapter_config.json"), JSON.stringify(cfg));
            return d;
        };
        await expect(
            p.loadAdapter(
                variant((c) => {
                    c.use_dora = true;
                }),
            ),
        ).rejects.toThrow(/use_dora/);
        await expect(
            p.loadAdapter(
                variant((c) => {
                    c.target_modules = ["q_proj", "lm_head"];
                }),
            ),
        ).rejects.toThrow(/target_modules.*lm_head/);
        await expect(
            p.loadAdapter(
                variant((c) => {
                    c.peft_type = "IA3";
                }),
            ),
        ).rejects.toThrow(/peft_type/);
        await expect(p.loadAdapter(good)).rejects.toThrow(
            /adapter 'default' exists on this base \(pass options\.name\)/,
        );
        await expect(
            p.loadAdapter(
                variant((c) => {
                    c.r = 8;
                }),
                { name: "x" },
            ),
        ).rejects.toThrow(/shape \[4, 16\], expected \[8, 16\]/);
        await expect(
            p.loadAdapter(
                variant((c) => {
                    c.target_modules = ["q_proj"];
                }),
                { name: "x" },
            ),
        ).rejects.toThrow(/k_proj.*not a tensor of this adapter/);
        const fewer = join(tmp(), "fewer");
        cpSync(good, fewer, { recursive: true });
        const t = readSafetensors(join(good, "adapter_model.safetensors")).tensors;
        writeSafetensors(join(fewer, "adapter_model.safetensors"), t.slice(1));
        await expect(p.loadAdapter(fewer, { name: "x" })).rejects.toThrow(/lora_A\.weight missing/);
        expect(p.adapters).toEqual(["default"]);
        const elsewhere = join(tmp(), "elsewhere");
        cpSync(good, elsewhere, { recursive: true });
        writeFileSync(
            join(elsewhere, "adapter_config.json"),
            JSON.stringify({
                ...JSON.parse(readFileSync(join(good, "adapter_config.json"), "utf8")),
                base_model_name_or_path: "Qwen/Qwen2-0.5B",
            }),
        );
        await expect(NativePolicy.load(elsewhere)).rejects.toThrow(
            /base: expected the base model.*base_model_name_or_path/,
        );
        // A maporl adapter names its local base: it loads without options.base.
        const alone = await NativePolicy.load(good, { tokenizer: null });
        expect(Array.from(await alone.logprobs(seqs))).toEqual(Array.from(await p.logprobs(seqs)));
        await alone.dispose();
        await expect(p.withAdapter("x", { rank: 0 })).rejects.toThrow(/lora\.rank/);
        await expect(p.withAdapter("x", { targets: ["lm_head" as never] })).rejects.toThrow(/lora\.targets/);
        await expect(p.withAdapter("x", { dropout: 1 })).rejects.toThrow(/lora\.dropout/);
        await expect(p.withAdapter("default", { rank: 2 })).rejects.toThrow(/exists/);
        const gpt = await NativePolicy.create({ contextLength: 16, layers: 1, heads: 1, dModel: 8 });
        await expect(gpt.withAdapter("x")).rejects.toThrow(/Llama-family/);
        const other = await p.withAdapter("other");
        await p.deleteAdapter("other");
        await expect(other.logprobs(seqs)).rejects.toThrow(/merged or deleted/);
        await Promise.all([p.dispose(), gpt.dispose(), other.dispose()]);
    });
});

describe("memory", () => {
    // Each measurement in a fresh process: peak RSS after loading a ~58 MB base, training and generating.
    const cli = join(import.meta.dirname, "..", "..", "dist", "index.js");
    const peak = (agents: number, mode: "lora" | "full"): number => {
        const script = `
            import { NativePolicy } from ${JSON.stringify(cli)};
            const cfg = { model_type: "llama", vocab_size: 32000, hidden_size: 256, intermediate_size: 768, num_hidden_layers: 8,
                num_attention_heads: 8, num_key_value_heads: 4, max_position_embeddings: 256, tie_word_embeddings: true };
            const base = await NativePolicy.fromConfig(cfg, { tokenizer: null, seed: 1 });
            const agents = [];
            for (let k = 0; k < ${agents}; k++) agents.push(${mode === "lora" ? "await base.withAdapter('a' + k, { rank: 8 })" : "await base.clone('a' + k)"});
            const B = 2, T = 64, tokens = new Int32Array(B * T).map((_, i) => (i * 131) % 32000);
            const b = { tokens, targets: tokens.map((x) => (x + 1) % 32000), mask: new Uint8Array(B * T).fill(1), shape: [B, T] };
            for (const a of agents) { await a.trainStep(b, { lr: 1e-3 }); await a.generate([{ promptTokenIds: [1, 2, 3], sampling: { maxTokens: 4 } }]); }
            console.log(JSON.stringify({ rss: process.resourceUsage().maxRSS * 1024 }));`;
        const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
            encoding: "utf8",
            timeout: 120_000,
        });
        expect(r.status, r.stderr).toBe(0);
        return (JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { rss: number }).rss;
    };

    it("three agents as adapters on one base use less than 1.2x the memory of one (three full copies would not)", () => {
        const one = peak(1, "lora"),
            three = peak(3, "lora"),
            full = peak(3, "full");
        console.log(
            `peak RSS: 1 adapter ${(one / 2 ** 20).toFixed(0)} MiB, 3 adapters ${(three / 2 ** 20).toFixed(0)} MiB (${(three / one).toFixed(3)}x), ` +
                `3 full copies ${(full / 2 ** 20).toFixed(0)} MiB (${(full / one).toFixed(2)}x)`,
        );
        expect(three / one).toBeLessThan(1.2);
        expect(full / one).toBeGreaterThan(1.5); // the measurement sees a model's size
    });
});
