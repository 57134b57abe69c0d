// ggufSpm.test.ts: a GGUF file's SentencePiece vocabulary (tokenizer.ggml.model 'llama': Llama 2, Mistral) read as
// transformers' LlamaTokenizerFast tokenizer.json (lib/model/ggufTokenizer.ts), against sentencepiece itself: the
// fixture test/fixtures/gguf-spm/spm.json holds a BPE model trained by sentencepiece 0.2 with Llama 2's settings
// (byte fallback, identity normalization, a dummy prefix, extra whitespace kept, digits split) on GSM8K questions,
// and the ids and decoded text sentencepiece gives for held-out questions and for texts with leading, repeated and
// trailing spaces, newlines, tabs, accents, CJK and emoji (byte fallback), digits, one character and one space
// (written by test/helpers/spm_fixture.py). Then the same vocabulary in a GGUF file written by the independent
// writer (test/helpers/gguf_writer.py), loaded by NativePolicy.load: its tokenizer, bos and chat template.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import type { HfModelInfo } from "../../lib/model/hf.js";
import { ggufTokenizer } from "../../lib/model/ggufTokenizer.js";
import { makeModel } from "../../lib/model/makeModel.js";

const FIXTURE = join(import.meta.dirname, "..", "fixtures", "gguf-spm", "spm.json");
const WRITER = join(import.meta.dirname, "..", "helpers", "gguf_writer.py");

interface Fixture {
    tokens: string[];
    scores: number[];
    token_type: number[];
    add_space_prefix: boolean;
    cases: { text: string; ids: number[]; decoded: string }[];
}
const fx = JSON.parse(readFileSync(FIXTURE, "utf8")) as Fixture;
const md = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    "tokenizer.ggml.model": "llama",
    "tokenizer.ggml.tokens": fx.tokens,
    "tokenizer.ggml.scores": fx.scores,
    "tokenizer.ggml.token_type": fx.token_type,
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.add_space_prefix": fx.add_space_prefix,
    ...extra,
});
const info = { engine: { vocab: fx.tokens.length }, stopIds: [2] } as unknown as HfModelInfo;

describe("a GGUF SentencePiece vocabulary", () => {
    it("encodes and decodes as sentencepiece does", () => {
        const tk = ggufTokenizer("spm.gguf", md(), info);
        expect(fx.cases.length).toBeGreaterThan(40);
        let bytes = 0;
        for (const c of fx.cases) {
            expect(tk.encode(c.text), JSON.stringify(c.text)).toEqual(c.ids);
            expect(tk.decode(c.ids)).toBe(c.decoded);
            bytes += c.ids.filter((i) => fx.token_type[i] === 6).length;
        }
        expect(bytes).toBeGreaterThan(10); // (the byte fallback ran)
        expect([tk.bos, tk.eos]).toEqual([1, 2]);
    });

    it("reads a control piece's text as the control token, as transformers' tokenizer.json does", () => {
        const tk = ggufTokenizer("spm.gguf", md(), info);
        const rest = fx.cases.find((c) => c.text.startsWith(" is a control"))!;
        expect(tk.encode(`<s>${rest.text}`)).toEqual([1, ...rest.ids]);
    });

    it("names what is wrong in a bad vocabulary", () => {
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.scores": fx.scores.slice(1) }), info)).toThrow(
            /tokenizer.ggml.scores: expected 600 finite numbers/,
        );
        const nan = [...fx.scores];
        nan[7] = NaN;
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.scores": nan }), info)).toThrow(
            /tokenizer.ggml.scores\[7\]: expected a finite number, got NaN/,
        );
        const types = [...fx.token_type];
        types[9] = 9;
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.token_type": types }), info)).toThrow(
            /tokenizer.ggml.token_type\[9\]: expected an integer in 1..6/,
        );
        const huge = [...fx.tokens];
        huge[300] = "a".repeat(1 << 20); // (its splits would cost 10^12 steps)
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.tokens": huge }), info)).toThrow(
            /tokenizer.ggml.tokens\[300\]: expected a string of at most 4096 characters, got 1048576 characters/,
        );
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.tokens": [] }), info)).toThrow(
            /tokenizer.ggml.tokens: expected a non-empty array of strings/,
        );
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.token_type": [1, 2] }), info)).toThrow(
            /tokenizer.ggml.token_type: expected 600 types/,
        );
        expect(() => ggufTokenizer("spm.gguf", md({ "tokenizer.ggml.model": "bert" }), info)).toThrow(
            /tokenizer.ggml.model: 'bert' is not read in this version/,
        );
    });

    describe("in a GGUF file", () => {
        let root = "";
        beforeAll(() => {
            root = mkdtempSync(join(tmpdir(), "maporl-gguf-spm-"));
            makeModel(join(root, "tiny"), { seed: 3 });
            const r = spawnSync(
                "python3",
                [WRITER, join(root, "tiny"), join(root, "spm.gguf"), "f32", `spm=${FIXTURE}`],
                { encoding: "utf8" },
            );
            expect(r.error).toBeUndefined();
            expect(r.status, r.stderr).toBe(0);
        }, 60_000);
        afterAll(() => rmSync(root, { recursive: true, force: true }));

        it("loads with its tokenizer: sentencepiece's ids, bos, the chat template", async () => {
            const p = await NativePolicy.load(join(root, "spm.gguf"));
            for (const c of fx.cases.slice(0, 10)) expect(p.tokenizer.encode(c.text)).toEqual(c.ids);
            const q = fx.cases[0];
            const chat = p.tokenizer.encodeChat([{ role: "user", content: q.text }]);
            expect(chat[0]).toBe(1); // {{ bos_token }}
            expect(p.tokenizer.decode(chat)).toContain(q.text);
            const [g] = await p.generate([{ prompt: q.text, sampling: { temperature: 0, maxTokens: 4 } }]);
            expect(g.tokenIds!.length).toBeGreaterThan(0);
            await p.dispose();
        }, 60_000);
    });
});
