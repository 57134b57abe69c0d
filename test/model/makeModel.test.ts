// makeModel.test.ts: `maporl make-model` writes a Hugging Face directory that loads and runs as a downloaded one:
// its tokenizer (byte-level BPE learned here, read back by @huggingface/tokenizers) encodes and decodes text
// exactly, the chat template renders ChatML and generation stops at <|im_end|>, the model scores, trains a LoRA step
// and loads as int8; the BPE trainer's merges are the most frequent pairs of a hand-counted text; a non-empty
// directory or a bad option is refused, naming it, with nothing written.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { trainByteBpe } from "../../lib/model/bpe.js";
import { makeModel } from "../../lib/model/makeModel.js";

describe("make-model", () => {
    let root = "";
    let dir = "";
    beforeAll(() => {
        root = mkdtempSync(join(tmpdir(), "maporl-make-"));
        dir = join(root, "tiny");
    });
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it("writes a directory that loads, tokenizes exactly, chats, generates, trains and loads as int8", async () => {
        const made = makeModel(dir, { seed: 1 });
        expect(readdirSync(dir).sort()).toEqual([
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
        ]);
        expect(made.tokenizerSize).toBe(1024);
        const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
        expect(config).toMatchObject({ model_type: "llama", vocab_size: 1024, eos_token_id: 1023 });
        const p = await NativePolicy.load(dir);
        expect(p.parameterCount).toBe(made.parameters + 65); // (+ the value head the engine adds: 64 + 1)
        const text = "Natalia sold 48/2 = 24 clips in May. How many clips? #### 72 — ünïcode ✓";
        const ids = p.tokenizer.encode(text);
        expect(p.tokenizer.decode(ids)).toBe(text);
        // merges learned from GSM8K shorten its text: fewer tokens than bytes
        expect(ids.length).toBeLessThan(0.6 * Buffer.byteLength(text));
        expect(Math.max(...ids)).toBeLessThan(1021);
        const [g] = await p.generate([
            { messages: [{ role: "user", content: "What is 17 * 3?" }], sampling: { maxTokens: 8, temperature: 1 } },
        ]);
        // ChatML: <|im_start|>system ... <|im_end|> <|im_start|>user ... <|im_end|> <|im_start|>assistant
        const prompt = g.promptTokenIds ?? [];
        expect(prompt[0]).toBe(1022); // <|im_start|>
        expect(prompt.filter((t) => t >= 1022)).toEqual([1022, 1023, 1022, 1023, 1022]);
        expect(p.tokenizer.decode(prompt)).toBe(
            "system\nYou are a helpful assistant.\nuser\nWhat is 17 * 3?\nassistant\n",
        );
        expect(g.tokenIds?.length).toBeGreaterThan(0);
        const a = await p.withAdapter("a", { rank: 4, alpha: 8 });
        const T = 6;
        const r = await a.trainStep(
            {
                tokens: Int32Array.from({ length: T }, (_, i) => ids[i]),
                targets: Int32Array.from({ length: T }, (_, i) => ids[i + 1]),
                mask: new Uint8Array(T).fill(1),
                shape: [1, T],
            },
            { lr: 1e-2 },
        );
        expect(Number.isFinite(r.loss)).toBe(true);
        const q = await NativePolicy.load(dir, { dtype: "int8" });
        expect(q.dtype).toBe("int8");
        await q.generate([{ promptTokenIds: ids.slice(0, 5), sampling: { maxTokens: 3 } }]);
        for (const x of [a, p, q]) await x.dispose();
        // The same seed writes the same weights; bfloat16 halves the file.
        const again = join(root, "again"),
            half = join(root, "half");
        makeModel(again, { seed: 1 });
        expect(readFileSync(join(again, "model.safetensors"))).toEqual(readFileSync(join(dir, "model.safetensors")));
        const h = makeModel(half, { seed: 1, dtype: "bfloat16" });
        expect(h.bytes).toBeLessThan(0.55 * made.bytes);
        const hp = await NativePolicy.load(half, { tokenizer: null });
        await hp.dispose();
    }, 60_000);

    it("refuses a non-empty directory and bad options, naming them, writing nothing", () => {
        const full = join(root, "full");
        mkdirSync(full);
        writeFileSync(join(full, "keep.txt"), "x");
        expect(() => makeModel(full)).toThrow(/full exists and is not empty: give a new directory/);
        expect(readdirSync(full)).toEqual(["keep.txt"]);
        expect(() => makeModel(join(root, "s"), { shape: "gpt-5" as never })).toThrow(
            /shape: expected one of tiny, smollm2-135m, qwen2.5-0.5b, got "gpt-5"/,
        );
        expect(() => makeModel(join(root, "d"), { dtype: "int8" as never })).toThrow(
            /dtype: expected 'float32' or 'bfloat16'/,
        );
        expect(() => makeModel(join(root, "e"), { seed: -1 })).toThrow(/seed: expected an integer >= 0/);
        for (const d of ["s", "d", "e"]) expect(existsSync(join(root, d))).toBe(false);
    });

    it("learns the most frequent pairs first (a hand-counted text)", () => {
        // words: "aaab" x1, "aab" x3 (pre-tokenized as is). Pairs: (a,a) 2 + 3 = 5, (a,b) 1 + 3 = 4.
        // Merge 1: "a a" -> "aa": "aaab" -> aa a b, "aab" -> aa b. Pairs: (aa,a) 1, (a,b) 1, (aa,b) 3.
        // Merge 2: "aa b" (3). Then "aaab" is aa a b: (aa,a) 1, (a,b) 1, tie: the smaller string "a b".
        const m = trainByteBpe(["aaab", "aab", "aab", "aab"], 259);
        expect(m.merges).toEqual(["a a", "aa b", "a b"]);
        expect(m.vocab).toMatchObject({ aa: 256, aab: 257, ab: 258 });
        expect(Object.keys(m.vocab)).toHaveLength(259);
        // out of pairs: stops early
        expect(trainByteBpe(["ab"], 300).merges).toEqual(["a b"]);
        expect(() => trainByteBpe(["x"], 100)).toThrow(/vocabSize: expected an integer >= 256, got 100/);
    });
});
