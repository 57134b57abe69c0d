// ggufTokenizer.ts: a GGUF file's tokenizer (tokenizer.ggml.*) as the tokenizer.json and tokenizer_config.json a
// Hugging Face directory would hold, read by HfTokenizer (@huggingface/tokenizers, @huggingface/jinja). Byte-level
// BPE ("gpt2", the tokenizer of Llama 3, Qwen2 and SmolLM): tokens and merges as they are, control and user-defined
// tokens as added tokens, the pre-tokenizer's split pattern chosen by tokenizer.ggml.pre as llama.cpp chooses it
// (gpt2's, llama.cpp's default list, llama-bpe's, qwen2's, smollm's; another pre is an error that names it and the
// way out: options.tokenizer).
// SentencePiece ("llama") tokenizers are not read in this version.
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
    if (model !== "gpt2")
        throw new RangeError(
            `${fn}: ${file}: tokenizer.ggml.model: '${String(model)}' is not read in this version (byte-level BPE, 'gpt2', is); pass tokenizer: a directory with tokenizer.json, or null`,
        );
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
    const json = tokenizerJson({ vocab, merges: merges as string[] }, added, split, split === LLAMA3);
    const name = (k: string): string | null => {
        const v = md[k];
        const i = typeof v === "bigint" ? Number(v) : v;
        return typeof i === "number" && Number.isInteger(i) && i >= 0 && i < tokens.length
            ? (tokens[i] as string)
            : null;
    };
    const template = md["tokenizer.chat_template"];
    const tokenizerConfig: Record<string, unknown> = {
        bos_token: md["tokenizer.ggml.add_bos_token"] === true ? name("tokenizer.ggml.bos_token_id") : null,
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
