// tokenizer.ts: the embedded policy's character-level tokenizer. Ids 0..S-1 are the special tokens (pad, bos, eos,
// and the role separators of the chat template), then one id per character of the alphabet. Unknown characters
// map to <unk> (there is one) instead of failing, and are counted. It serialises to tokenizer.json.
import type { ChatMessage } from "./types.js";
import { describe } from "../validate.js";

export const SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"] as const;
export type SpecialToken = (typeof SPECIAL_TOKENS)[number];

/** What NativePolicy and the trainers need of a tokenizer: CharTokenizer (the embedded GPT's) or HfTokenizer (a Hugging
 * Face model directory's). */
export interface PolicyTokenizer {
    /** The ids the model may produce (its vocabulary size). */
    readonly vocabSize: number;
    readonly pad: number;
    /** The id that closes a turn (appended to training rows). */
    readonly eos: number;
    /** Whether `id` ends a generation (eos, or any id of the model's list). */
    isStop(id: number): boolean;
    encode(text: string): number[];
    decode(ids: ArrayLike<number>): string;
    /** A chat in the model's own format, ending where the assistant's reply begins. */
    encodeChat(messages: readonly ChatMessage[]): number[];
    /** At least as many UTF-16 code units as the text of any one token covers: a text of n code units encodes to at
     * least ceil(n / maxTokenChars) tokens, so a prompt far past the context is refused before it is tokenized. */
    readonly maxTokenChars?: number;
}

/** The fewest tokens `chars` code units of text can encode to with `tk` (0 when the tokenizer gives no bound). */
export function fewestTokens(tk: { maxTokenChars?: number }, chars: number): number {
    return typeof tk.maxTokenChars === "number" && tk.maxTokenChars >= 1 ? Math.ceil(chars / tk.maxTokenChars) : 0;
}

export interface TokenizerJSON {
    type: "maporl-char";
    version: 1;
    specials: string[];
    alphabet: string[];
}

export class CharTokenizer implements PolicyTokenizer {
    readonly alphabet: readonly string[];
    /** One token per code point: at most 2 code units. */
    readonly maxTokenChars = 2;
    private readonly index = new Map<string, number>();

    /** `alphabet`: the characters (each a single code point, no duplicates). */
    constructor(alphabet: string | readonly string[]) {
        if (typeof alphabet !== "string" && !Array.isArray(alphabet))
            throw new TypeError(
                `CharTokenizer: alphabet: expected a string or an array of characters, got ${describe(alphabet)}`,
            );
        const chars = [...alphabet];
        chars.forEach((c, i) => {
            if (typeof c !== "string" || [...c].length !== 1)
                throw new TypeError(`CharTokenizer: alphabet[${i}]: expected one character, got ${JSON.stringify(c)}`);
            if (this.index.has(c)) throw new RangeError(`CharTokenizer: alphabet: ${JSON.stringify(c)} appears twice`);
            this.index.set(c, SPECIAL_TOKENS.length + i);
        });
        this.alphabet = chars;
    }

    /** A tokenizer for printable ASCII plus newline (the shipped tasks' vocabulary). */
    static ascii(): CharTokenizer {
        let s = "\n";
        for (let c = 32; c < 127; c++) s += String.fromCharCode(c);
        return new CharTokenizer(s);
    }

    get vocabSize(): number {
        return SPECIAL_TOKENS.length + this.alphabet.length;
    }
    id(special: SpecialToken): number {
        return SPECIAL_TOKENS.indexOf(special);
    }
    get pad(): number {
        return 0;
    }
    get bos(): number {
        return 1;
    }
    get eos(): number {
        return 2;
    }
    get unk(): number {
        return 3;
    }
    isStop(id: number): boolean {
        return id === 2;
    }

    encode(text: string): number[] {
        if (typeof text !== "string")
            throw new TypeError(`CharTokenizer.encode: text: expected a string, got ${typeof text}`);
        const out: number[] = [];
        for (const c of text) out.push(this.index.get(c) ?? this.unk);
        return out;
    }

    /** Special tokens other than <unk> are dropped; <unk> becomes U+FFFD. */
    decode(ids: ArrayLike<number>): string {
        let s = "";
        for (let i = 0; i < ids.length; i++) {
            const id = ids[i]!;
            if (id === this.unk) s += "\uFFFD";
            else if (id >= SPECIAL_TOKENS.length && id < this.vocabSize) s += this.alphabet[id - SPECIAL_TOKENS.length];
        }
        return s;
    }

    /** <bos> then, per message, its role separator and text; ends with <|assistant|> for the reply. */
    encodeChat(messages: readonly ChatMessage[]): number[] {
        const out = [this.bos];
        for (const m of messages) {
            // (no push(...ids): a spread of a long prompt overflows the call stack)
            out.push(this.id(`<|${m.role}|>` as SpecialToken));
            for (const id of this.encode(m.content)) out.push(id);
        }
        out.push(this.id("<|assistant|>"));
        return out;
    }

    toJSON(): TokenizerJSON {
        return { type: "maporl-char", version: 1, specials: [...SPECIAL_TOKENS], alphabet: [...this.alphabet] };
    }

    static fromJSON(j: unknown): CharTokenizer {
        const t = j as Partial<TokenizerJSON>;
        if (
            !t ||
            t.type !== "maporl-char" ||
            t.version !== 1 ||
            !Array.isArray(t.alphabet) ||
            !Array.isArray(t.specials) ||
            t.specials.join("\u0000") !== SPECIAL_TOKENS.join("\u0000")
        )
            throw new SyntaxError(
                "CharTokenizer.fromJSON: expected a maporl-char tokenizer (version 1) with the standard special tokens",
            );
        return new CharTokenizer(t.alphabet);
    }
}
