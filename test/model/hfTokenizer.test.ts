// hfTokenizer.test.ts: a model directory's own tokenizer (tokenizer.json through @huggingface/tokenizers, the chat
// template through @huggingface/jinja; test/fixtures/hf-tokenizer is a byte-level BPE written by
// bench/python/bpe_fixture.py with ChatML and Llama 3 templates): round trips on multilingual text, special tokens
// kept whole, both templates rendered as their documented output, a padded vocabulary, and the whole path: a small
// llama-architecture model created from a config.json object learns a toy task through SFT on the chat format and
// answers it through generate(messages).
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { HfTokenizer, NativePolicy } from "../../lib/index.js";

const DIR = join(import.meta.dirname, "..", "fixtures", "hf-tokenizer");
const tokenizerJson = JSON.parse(readFileSync(join(DIR, "tokenizer.json"), "utf8"));
const config = (f: "qwen" | "llama3") =>
    JSON.parse(readFileSync(join(DIR, `tokenizer_config.${f}.json`), "utf8")) as Record<string, unknown>;

describe("HfTokenizer", () => {
    const qwen = new HfTokenizer(tokenizerJson, config("qwen"), { vocabSize: 320 });
    it("round-trips multilingual text byte for byte and keeps special tokens whole", () => {
        for (const text of [
            "Natalia sold 48 clips in April.",
            "Grüße aus Köln, ça va ? ¿Qué tal?",
            "数学的答案是 72。",
            "Ответ: 72",
            "emoji 🙂 and tabs\t\n  spaces",
            "नमस्ते दुनिया",
            "",
        ]) {
            const ids = qwen.encode(text);
            expect(qwen.decode(ids)).toBe(text);
            expect(ids.every((x) => x >= 0 && x < 306)).toBe(true); // plain text never makes a special token
        }
        const ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
        expect(ids[0]).toBe(307);
        expect(ids.at(-1)).toBe(308);
        expect(qwen.decode(ids)).toBe("user\nhi"); // special tokens skipped in decoded text, as skip_special_tokens
        expect(qwen.eos).toBe(308);
        expect(qwen.pad).toBe(306);
        expect(qwen.isStop(308)).toBe(true);
    });
    it("decodes ids past the tokenizer (a padded embedding) to nothing", () => {
        expect(qwen.tokenizerSize).toBe(313);
        expect(qwen.decode([315, 319])).toBe("");
        expect(qwen.decode([...qwen.encode("abc"), 316])).toBe("abc");
        expect(() => new HfTokenizer(tokenizerJson, config("qwen"), { vocabSize: 300 })).toThrow(
            /tokenizer.json: .* = 30[0-9]: expected an id in \[0, 300\) \(the model's vocab_size\)/,
        );
    });
    it("renders ChatML (Qwen) and Llama 3 templates as documented", () => {
        const chat = [{ role: "user" as const, content: " What is 2+3? " }];
        expect(qwen.applyChatTemplate(chat)).toBe(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n What is 2+3? <|im_end|>\n<|im_start|>assistant\n",
        );
        expect(
            qwen.applyChatTemplate([{ role: "system", content: "Be brief." }, ...chat], { addGenerationPrompt: false }),
        ).toBe("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n What is 2+3? <|im_end|>\n");
        const llama = new HfTokenizer(tokenizerJson, config("llama3"), { vocabSize: 313, stopIds: [312, 306] });
        expect(llama.applyChatTemplate(chat)).toBe(
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        );
        const ids = llama.encodeChat(chat);
        expect(ids[0]).toBe(309);
        expect(ids.filter((x) => x >= 306)).toEqual([309, 310, 311, 312, 310, 311]);
        expect(llama.eos).toBe(312);
        expect(llama.isStop(306) && llama.isStop(312) && !llama.isStop(308)).toBe(true);
        expect(
            () =>
                new HfTokenizer(
                    tokenizerJson,
                    { ...config("qwen"), chat_template: "{% for m in messages %}" },
                    { vocabSize: 320 },
                ),
        ).toThrow(/chat_template does not parse/);
        // A directory whose template is in chat_template.jinja (newer transformers) rather than tokenizer_config.json.
        const dir = mkdtempSync(join(tmpdir(), "maporl-jinja-"));
        cpSync(join(DIR, "tokenizer.json"), join(dir, "tokenizer.json"));
        const { chat_template: tpl, ...rest } = config("llama3");
        writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(rest));
        writeFileSync(join(dir, "chat_template.jinja"), tpl as string);
        expect(HfTokenizer.fromDir(dir, { vocabSize: 313 }).applyChatTemplate(chat)).toBe(
            llama.applyChatTemplate(chat),
        );
    });
});

describe("a llama-architecture model with a BPE tokenizer, end to end", () => {
    it("learns single-digit sums through SFT on the chat format and answers them through generate(messages)", async () => {
        const dir = mkdtempSync(join(tmpdir(), "maporl-bpe-"));
        cpSync(join(DIR, "tokenizer.json"), join(dir, "tokenizer.json"));
        writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config("qwen")));
        const p = await NativePolicy.fromConfig(
            {
                model_type: "llama",
                vocab_size: 320,
                hidden_size: 64,
                intermediate_size: 128,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                max_position_embeddings: 64,
                rms_norm_eps: 1e-6,
                rope_theta: 10000,
                tie_word_embeddings: true,
                eos_token_id: 308,
            },
            { tokenizer: dir, seed: 1 },
        );
        const items: { q: string; a: string }[] = [];
        for (let a = 0; a < 5; a++) for (let b = 0; b < 5; b++) items.push({ q: `${a}+${b}=`, a: String(a + b) });
        const rows = items.map((it) => {
            const prompt = p.tokenizer.encodeChat([{ role: "user", content: it.q }]);
            return { prompt, answer: [...p.tokenizer.encode(it.a), p.tokenizer.eos] };
        });
        const T = Math.max(...rows.map((r) => r.prompt.length + r.answer.length)) - 1,
            B = rows.length;
        const tokens = new Int32Array(B * T).fill(p.tokenizer.pad),
            targets = new Int32Array(B * T).fill(p.tokenizer.pad),
            mask = new Uint8Array(B * T);
        rows.forEach((r, b) => {
            const seq = [...r.prompt, ...r.answer];
            for (let t = 0; t + 1 < seq.length; t++) {
                tokens[b * T + t] = seq[t]!;
                targets[b * T + t] = seq[t + 1]!;
                mask[b * T + t] = t + 1 >= r.prompt.length ? 1 : 0;
            }
        });
        const losses: number[] = [];
        for (let s = 0; s < 160; s++)
            losses.push((await p.trainStep({ tokens, targets, mask, shape: [B, T] }, { lr: 5e-3 })).loss);
        const gens = await p.generate(
            items.map((it) => ({
                messages: [{ role: "user" as const, content: it.q }],
                sampling: { temperature: 0, maxTokens: 4 },
            })),
        );
        const right = gens.filter((g, i) => g.text === items[i].a && g.finishReason === "stop").length;
        console.log(
            `  SFT loss ${losses[0].toFixed(3)} -> ${losses.at(-1)!.toFixed(4)}; ${right}/${items.length} answered exactly`,
        );
        expect(right).toBeGreaterThanOrEqual(23);
        // Saved as a Hugging Face directory with its tokenizer, it loads and answers the same.
        await p.save(join(dir, "saved"));
        const q = await NativePolicy.load(join(dir, "saved"));
        const again = await q.generate(
            items.slice(0, 5).map((it) => ({
                messages: [{ role: "user" as const, content: it.q }],
                sampling: { temperature: 0, maxTokens: 4 },
            })),
        );
        expect(again.map((g) => g.text)).toEqual(gens.slice(0, 5).map((g) => g.text));
        await p.dispose();
        await q.dispose();
    });
});
