// bpe.ts: a byte-level BPE vocabulary learned from text, written as a Hugging Face tokenizer.json (the format of
// GPT-2, Llama 3 and Qwen2 tokenizers; loaded back by @huggingface/tokenizers like any downloaded one). For
// `maporl make-model`, which needs a working tokenizer without a download; the npm registry has no maintained
// byte-level BPE trainer that writes this format, so the classic algorithm is written here: text split with GPT-2's
// pre-tokenization pattern (the pattern the ByteLevel pre-tokenizer applies when loading), words as bytes in
// GPT-2's printable byte alphabet, then the most frequent adjacent pair merged, again and again (ties: the smaller
// pair as a string), until the vocabulary holds `vocabSize` entries.

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for code points from 256 on.
function byteAlphabet(): string[] {
    const keep: number[] = [];
    for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
    for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
    for (let b = 0xae; b <= 0xff; b++) keep.push(b);
    const out = new Array<string>(256);
    let extra = 0;
    for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
    return out;
}

// GPT-2's pre-tokenization pattern (contractions, letters, digits, other symbols, whitespace).
const SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** The learned vocabulary: token -> id (the 256 byte symbols first, then one token per merge) and the merges in
 * order, as tokenizer.json's model holds them. */
export interface BpeModel {
    vocab: Record<string, number>;
    merges: string[];
}

/** Learns merges from `texts` until the vocabulary has `vocabSize` tokens (at least 256; fewer when the text runs
 * out of pairs). Deterministic. */
export function trainByteBpe(texts: Iterable<string>, vocabSize: number): BpeModel {
    if (!Number.isInteger(vocabSize) || vocabSize < 256)
        throw new RangeError(`trainByteBpe: vocabSize: expected an integer >= 256, got ${vocabSize}`);
    const alphabet = byteAlphabet();
    const enc = new TextEncoder();
    const counts = new Map<string, number>();
    for (const t of texts) for (const m of t.matchAll(SPLIT)) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
    // Each distinct word as its symbols, with its count.
    const words = [...counts.keys()].sort().map((w) => ({
        syms: Array.from(enc.encode(w), (b) => alphabet[b]!),
        n: counts.get(w)!,
    }));
    const vocab: Record<string, number> = Object.create(null) as Record<string, number>; // ('constructor' is a word)
    alphabet.forEach((s, i) => (vocab[s] = i));
    const merges: string[] = [];
    // Pair counts over all words, and the words each pair occurs in (a merge rewrites only those).
    const pairs = new Map<string, number>(),
        where = new Map<string, Set<number>>();
    const count = (wi: number, sign: 1 | -1) => {
        const { syms, n } = words[wi]!;
        for (let i = 0; i + 1 < syms.length; i++) {
            const k = `${syms[i]} ${syms[i + 1]}`;
            pairs.set(k, (pairs.get(k) ?? 0) + sign * n);
            if (sign > 0) {
                let set = where.get(k);
                if (!set) where.set(k, (set = new Set()));
                set.add(wi);
            }
        }
    };
    for (let wi = 0; wi < words.length; wi++) count(wi, 1);
    while (256 + merges.length < vocabSize) {
        let best = "",
            bestN = 0;
        for (const [k, n] of pairs) if (n > bestN || (n === bestN && n > 0 && k < best)) [best, bestN] = [k, n];
        if (bestN === 0) break;
        const [a, b] = best.split(" ") as [string, string];
        const joined = a + b;
        if (Object.hasOwn(vocab, joined)) break; // (cannot happen with distinct pairs; a guard against a loop)
        vocab[joined] = 256 + merges.length;
        merges.push(best);
        for (const wi of where.get(best) ?? []) {
            const s = words[wi]!.syms;
            count(wi, -1);
            const out: string[] = [];
            for (let i = 0; i < s.length; i++)
                if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
                    out.push(joined);
                    i++;
                } else out.push(s[i]!);
            words[wi]!.syms = out;
            count(wi, 1);
        }
        where.delete(best);
        pairs.delete(best);
    }
    return { vocab, merges };
}

/** A token tokenizer.json lists in added_tokens (its id also in the vocabulary, or past it). */
export interface AddedToken {
    id: number;
    content: string;
    special: boolean;
}

/** tokenizer.json of a byte-level BPE tokenizer (GPT-2's, Llama 3's, Qwen2's) for `model` and its `added` tokens.
 * `split`: a pre-tokenization pattern (or patterns, in turn) applied before the byte-level step (null: GPT-2's own
 * pattern);
 * `ignoreMerges`: a word found whole in the vocabulary is one token (Llama 3's setting). */
export function tokenizerJson(
    model: BpeModel,
    added: AddedToken[],
    split: string | readonly string[] | null = null,
    ignoreMerges = false,
): Record<string, unknown> {
    const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: split === null };
    // (several patterns split in turn, each the pieces of the one before: llama.cpp's regex lists)
    const splits = split === null ? [] : typeof split === "string" ? [split] : split;
    const pre =
        split !== null
            ? {
                  type: "Sequence",
                  pretokenizers: [
                      ...splits.map((p) => ({
                          type: "Split",
                          pattern: { Regex: p },
                          behavior: "Isolated",
                          invert: false,
                      })),
                      byteLevel,
                  ],
              }
            : byteLevel;
    return {
        version: "1.0",
        truncation: null,
        padding: null,
        added_tokens: added.map((t) => ({
            id: t.id,
            content: t.content,
            single_word: false,
            lstrip: false,
            rstrip: false,
            normalized: false,
            special: t.special,
        })),
        normalizer: null,
        pre_tokenizer: pre,
        post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: true },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
        model: {
            type: "BPE",
            dropout: null,
            unk_token: null,
            continuing_subword_prefix: null,
            end_of_word_suffix: null,
            fuse_unk: false,
            byte_fallback: false,
            ignore_merges: ignoreMerges,
            vocab: model.vocab,
            merges: model.merges,
        },
    };
}
