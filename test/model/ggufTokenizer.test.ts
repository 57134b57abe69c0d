// ggufTokenizer.test.ts: a GGUF file's byte-level BPE tokenizer, pre-tokenized as llama.cpp does for its
// tokenizer.ggml.pre: 'gpt-2' (the name llama.cpp's converter writes) as GPT-2's pattern, 'smollm' (SmolLM and
// SmolLM2 files) splitting every digit off before GPT-2's pattern, so that "12" is two tokens even though a merge makes
// "12" one, 'default' (or none) as llama.cpp's default list (digit runs cut into threes); an unknown pre is an error
// naming it. (Checked once against llama.cpp itself through node-llama-cpp on five texts: the same ids for each.)
import { describe, expect, it } from "vitest";

import type { HfModelInfo } from "../../lib/model/hf.js";
import { ggufTokenizer } from "../../lib/model/ggufTokenizer.js";

// ids: 0 "1", 1 "2", 2 "12" (the merge "1 2"), 3 "a", 4 "b", 5 "ab", 6 "Ġ" (a space, byte-level), 7 "<eos>" (control)
const md = (pre: string) => ({
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": pre,
    "tokenizer.ggml.tokens": ["1", "2", "12", "a", "b", "ab", "Ġ", "<eos>"],
    "tokenizer.ggml.token_type": [1, 1, 1, 1, 1, 1, 1, 3],
    "tokenizer.ggml.merges": ["1 2", "a b"],
    "tokenizer.ggml.eos_token_id": 7,
});
const info = { engine: { vocab: 8 }, stopIds: [7] } as unknown as HfModelInfo;

describe("GGUF tokenizer pre-tokenizers", () => {
    it("'gpt-2' and 'gpt2' merge digits as GPT-2 does; 'smollm' splits every digit first", () => {
        for (const pre of ["gpt-2", "gpt2", "default"]) {
            const t = ggufTokenizer("x.gguf", md(pre), info);
            expect(t.encode("12ab"), pre).toEqual([2, 5]);
        }
        const s = ggufTokenizer("x.gguf", md("smollm"), info);
        expect(s.encode("12ab")).toEqual([0, 1, 5]); // the letters still merge
        expect(s.encode("ab 12")).toEqual([5, 6, 0, 1]);
        expect(s.decode([0, 1, 5])).toBe("12ab");
    });

    it("'default' (and no pre at all) splits as llama.cpp's default: digit runs cut into threes", () => {
        // ids: 0..4 "1".."5", 5 "12", 6 "123", 7 "1234", 8 "12345", 9 "<eos>"; merges build "12345" whole
        const digits = (pre?: string) => ({
            "tokenizer.ggml.model": "gpt2",
            ...(pre !== undefined ? { "tokenizer.ggml.pre": pre } : {}),
            "tokenizer.ggml.tokens": ["1", "2", "3", "4", "5", "12", "123", "1234", "12345", "<eos>"],
            "tokenizer.ggml.token_type": [1, 1, 1, 1, 1, 1, 1, 1, 1, 3],
            "tokenizer.ggml.merges": ["1 2", "12 3", "123 4", "1234 5"],
            "tokenizer.ggml.eos_token_id": 9,
        });
        const i10 = { engine: { vocab: 10 }, stopIds: [9] } as unknown as HfModelInfo;
        expect(ggufTokenizer("x.gguf", digits("gpt-2"), i10).encode("12345")).toEqual([8]);
        for (const pre of ["default", undefined])
            // "123" then "45", which has no merge
            expect(ggufTokenizer("x.gguf", digits(pre), i10).encode("12345"), String(pre)).toEqual([6, 3, 4]);
    });

    it("an unknown pre-tokenizer names itself and the ones read", () => {
        expect(() => ggufTokenizer("x.gguf", md("tekken"), info)).toThrow(
            /x.gguf: tokenizer.ggml.pre: 'tekken' is not read in this version \(gpt2, gpt-2, default, smollm, llama-bpe/,
        );
    });
});
