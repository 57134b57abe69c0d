// ggufTokenizer.ts: a GGUF file's tokenizer (tokenizer.ggml.*) as the tokenizer.json and tokenizer_config.json a
// Hugging Face directory would hold, read by HfTokenizer (@huggingface/tokenizers, @huggingface/jinja). Byte-level
// BPE ("gpt2", the tokenizer of Llama 3, Qwen2 and SmolLM): tokens and merges as they are, control and user-defined
// tokens as added tokens, the pre-tokenizer's split pattern chosen by tokenizer.ggml.pre as llama.cpp chooses it
// (gpt2's, llama.cpp's default list, llama-bpe's, qwen2's, smollm's; another pre is an error that names it and the
// way out: options.tokenizer).
// SentencePiece ("llama": Llama 2, Mistral, TinyLlama): the tokenizer.json transformers writes for such a model
// (LlamaTokenizerFast): a BPE model with byte fallback whose merges come from the pieces' scores (every split of a
// piece into two pieces, ranked by the piece's score: sentencepiece merges the pair whose piece scores highest), a
// normalizer that prepends the dummy-prefix '▁' (tokenizer.ggml.add_space_prefix, default true) and writes spaces as
// '▁', and the decoder that undoes it; control and unknown pieces as special added tokens. Checked against
// sentencepiece's own ids (test/model/ggufSpm.test.ts). Where it differs from sentencepiece, as transformers' does:
// a control piece's text in the input ("<s>") is the control token, as a chat template needs. Merges are made of
// normal pieces only (transformers' extractor takes every piece; sentencepiece can merge into an unused piece and
// split it again): the same ids for vocabularies whose control, byte and unused pieces are not spelled by normal
// ones, as Llama 2's and Mistral's. The bos token is the chat template's {{ bos_token }}; encoding text adds no
// special token, as for every tokenizer here.
import { describe } from "../validate.js";
import { type AddedToken, tokenizerJson } from "./bpe.js";
import type { HfModelInfo } from "./hf.js";
import { HfTokenizer } from "./hfTokenizer.js";

// The split patterns of the pre-tokenizers read here (the patterns their Hugging Face tokenizer.json files hold).
const LLAMA3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// llama.cpp's default (a file naming no pre-tokenizer, or 'default'): punctuation runs, GPT-2's pattern, digit runs,
// then runs of three digits, each splitting the pieces of the one before.
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const DEFAULT = ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"];
// (llama.cpp's converter writes 'gpt-2' for GPT-2's pattern; 'smollm' splits every digit off first, then GPT-2's)
const SPLITS: Record<string, string | readonly string[] | null> = {
    gpt2: null,
    "gpt-2": null,
    default: DEFAULT,
    smollm: ["\\p{N}", GPT2],
    "llama-bpe": LLAMA3,
    llama3: LLAMA3,
    qwen2: QWEN2,
};

/** The tokenizer of GGUF metadata `md` for the model `info`. */
export function ggufTokenizer(
    file: string,
    md: Record<string, unknown>,
    info: HfModelInfo,
    chatTemplate?: string,
): HfTokenizer {
    const fn = "NativePolicy.load";
    const model = md["tokenizer.ggml.model"];
    if (model !== "gpt2" && model !== "llama")
        throw new RangeError(
            `${fn}: ${file}: tokenizer.ggml.model: '${String(model)}' is not read in this version (byte-level BPE, 'gpt2', and SentencePiece, 'llama', are); pass tokenizer: a directory with tokenizer.json, or null`,
        );
    if (model === "llama") return finish(file, md, info, sentencePieceJson(file, md), chatTemplate);
    const pre = typeof md["tokenizer.ggml.pre"] === "string" ? md["tokenizer.ggml.pre"] : "default";
    if (!Object.hasOwn(SPLITS, pre))
        throw new RangeError(
            `${fn}: ${file}: tokenizer.ggml.pre: '${pre}' is not read in this version (${Object.keys(SPLITS).join(", ")} are); pass tokenizer: a directory with tokenizer.json, or null`,
        );
    const tokens = md["tokenizer.ggml.tokens"],
        merges = md["tokenizer.ggml.merges"],
        types = md["tokenizer.ggml.token_type"];
    if (!Array.isArray(tokens) || tokens.some((t) => typeof t !== "string"))
        throw new SyntaxError(
            `${fn}: ${file}: tokenizer.ggml.tokens: expected an array of strings, got ${describe(tokens)}`,
        );
    if (!Array.isArray(merges) || merges.some((t) => typeof t !== "string"))
        throw new SyntaxError(
            `${fn}: ${file}: tokenizer.ggml.merges: expected an array of strings, got ${describe(merges)}`,
        );
    const type = (i: number) => (Array.isArray(types) ? Number(types[i]) : 1);
    const vocab: Record<string, number> = Object.create(null) as Record<string, number>; // ('__proto__' is a token too)
    const added: AddedToken[] = [];
    (tokens as string[]).forEach((t, i) => {
        vocab[t] = i;
        if (type(i) === 3 || type(i) === 4) added.push({ id: i, content: t, special: type(i) === 3 });
    });
    const split = SPLITS[pre]!;
    // (llama.cpp ignores merges for Llama 3's pre-tokenizer only)
    return finish(
        file,
        md,
        info,
        tokenizerJson({ vocab, merges: merges as string[] }, added, split, split === LLAMA3),
        chatTemplate,
    );
}

// The HfTokenizer of a tokenizer.json made from the file, with the special tokens and chat template of its metadata.
function finish(
    file: string,
    md: Record<string, unknown>,
    info: HfModelInfo,
    json: Record<string, unknown>,
    chatTemplate: string | undefined,
): HfTokenizer {
    const fn = "NativePolicy.load";
    const tokens = md["tokenizer.ggml.tokens"] as string[];
    const name = (k: string): string | null => {
        const v = md[k];
        const i = typeof v === "bigint" ? Number(v) : v;
        return typeof i === "number" && Number.isInteger(i) && i >= 0 && i < tokens.length
            ? (tokens[i] as string)
            : null;
    };
    const template = md["tokenizer.chat_template"];
    const tokenizerConfig: Record<string, unknown> = {
        // (a SentencePiece vocabulary adds its bos unless the file says otherwise, as llama.cpp reads it)
        bos_token:
            (md["tokenizer.ggml.add_bos_token"] ?? md["tokenizer.ggml.model"] === "llama") === true
                ? name("tokenizer.ggml.bos_token_id")
                : null,
        eos_token: name("tokenizer.ggml.eos_token_id"),
        pad_token: name("tokenizer.ggml.padding_token_id"),
        unk_token: null,
        ...(typeof template === "string" ? { chat_template: template } : {}),
    };
    try {
        return new HfTokenizer(json, tokenizerConfig, {
            vocabSize: info.engine.vocab,
            stopIds: info.stopIds,
            ...(chatTemplate !== undefined ? { chatTemplate } : {}),
        });
    } catch (e) {
        throw new Error(`${fn}: ${file}: the GGUF tokenizer: ${(e as Error).message}`);
    }
}

// The longest SentencePiece piece read (in UTF-16 units; real vocabularies' are under a hundred).
const MAX_PIECE = 4096;

// tokenizer.ggml.tokens, .scores and .token_type of a SentencePiece ("llama") vocabulary as transformers'
// LlamaTokenizerFast tokenizer.json (the header says how).
function sentencePieceJson(file: string, md: Record<string, unknown>): Record<string, unknown> {
    const fn = "NativePolicy.load";
    const tokens = md["tokenizer.ggml.tokens"],
        scores = md["tokenizer.ggml.scores"],
        types = md["tokenizer.ggml.token_type"];
    const bad = (key: string, expected: string, got: string) =>
        new SyntaxError(`${fn}: ${file}: tokenizer.ggml.${key}: expected ${expected}, got ${got}`);
    if (!Array.isArray(tokens) || tokens.length === 0)
        throw bad("tokens", "a non-empty array of strings", describe(tokens));
    // (a piece is a few characters; a huge one is a broken or hostile file, and its splits would cost its length^2)
    const i0 = tokens.findIndex((t) => typeof t !== "string" || t.length > MAX_PIECE);
    if (i0 >= 0)
        throw bad(
            `tokens[${i0}]`,
            `a string of at most ${MAX_PIECE} characters`,
            typeof tokens[i0] === "string" ? `${tokens[i0].length} characters` : describe(tokens[i0]),
        );
    const n = tokens.length;
    if (!Array.isArray(scores) || scores.length !== n)
        throw bad("scores", `${n} finite numbers (one per token)`, describe(scores));
    const s0 = scores.findIndex((x) => typeof x !== "number" || !Number.isFinite(x));
    if (s0 >= 0) throw bad(`scores[${s0}]`, "a finite number", describe(scores[s0]));
    if (types !== undefined) {
        if (!Array.isArray(types) || types.length !== n)
            throw bad("token_type", `${n} types (one per token)`, describe(types));
        const t0 = types.findIndex((x) => !(Number.isInteger(x) && (x as number) >= 1 && (x as number) <= 6));
        if (t0 >= 0) throw bad(`token_type[${t0}]`, "an integer in 1..6 (normal .. byte)", describe(types[t0]));
    }
    const type = (i: number) => (Array.isArray(types) ? Number(types[i]) : 1);
    const vocab: Record<string, number> = Object.create(null) as Record<string, number>;
    const added: Record<string, unknown>[] = [];
    (tokens as string[]).forEach((t, i) => {
        if (vocab[t] === undefined) vocab[t] = i; // (a duplicate piece keeps its first id, as sentencepiece does)
        const k = type(i); // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
        if (k === 2 || k === 3 || k === 4)
            added.push({
                id: i,
                content: t,
                single_word: false,
                lstrip: false,
                rstrip: false,
                normalized: false,
                special: k !== 4,
            });
    });
    // Every split of a normal piece into two normal pieces, the piece's score its rank (higher first; then the
    // piece's id, and the halves' ids, as transformers' SentencePieceExtractor orders them).
    const normal = (t: string) => {
        const i = vocab[t];
        return i !== undefined && type(i) === 1;
    };
    const merges: { l: string; r: string; score: number; id: number; li: number; ri: number }[] = [];
    (tokens as string[]).forEach((t, id) => {
        if (type(id) !== 1 || vocab[t] !== id) return;
        const cps = Array.from(t);
        for (let k = 1; k < cps.length; k++) {
            const l = cps.slice(0, k).join(""),
                r = cps.slice(k).join("");
            if (normal(l) && normal(r))
                merges.push({ l, r, score: (scores as number[])[id]!, id, li: vocab[l]!, ri: vocab[r]! });
        }
    });
    merges.sort((a, b) => b.score - a.score || a.id - b.id || a.li - b.li || a.ri - b.ri);
    const unk = (tokens as string[]).find((_, i) => type(i) === 2) ?? null;
    const prefix = md["tokenizer.ggml.add_space_prefix"] !== false;
    const spaces = { type: "Replace", pattern: { String: " " }, content: "\u2581" };
    return {
        version: "1.0",
        truncation: null,
        padding: null,
        added_tokens: added,
        normalizer: prefix
            ? { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, spaces] }
            : spaces,
        pre_tokenizer: null,
        post_processor: null,
        decoder: {
            type: "Sequence",
            decoders: [
                { type: "Replace", pattern: { String: "\u2581" }, content: " " },
                { type: "ByteFallback" },
                { type: "Fuse" },
                ...(prefix ? [{ type: "Strip", content: " ", start: 1, stop: 0 }] : []),
            ],
        },
        model: {
            type: "BPE",
            dropout: null,
            unk_token: unk,
            continuing_subword_prefix: null,
            end_of_word_suffix: null,
            fuse_unk: true,
            byte_fallback: true,
            ignore_merges: false,
            vocab,
            merges: merges.map((m) => [m.l, m.r]),
        },
    };
}
