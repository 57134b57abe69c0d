// hfTokenizer.ts: a Hugging Face model directory's own tokenizer for the native engine: tokenizer.json through
// @huggingface/tokenizers (the pure-JS port of the `tokenizers` crate that transformers.js uses: BPE, byte-level,
// added and special tokens), tokenizer_config.json's chat_template rendered with @huggingface/jinja, and the stop
// ids from generation_config.json / config.json (eos_token_id may be a list). Encoding a chat renders the template
// with add_generation_prompt and tokenizes the text without adding special tokens again, as transformers'
// apply_chat_template(tokenize=True) does. Ids the model has but the tokenizer does not (a padded embedding, as
// Qwen's) decode to nothing.
import { existsSync } from "node:fs";
import { join } from "node:path";

import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";

import { readTextFile } from "../files.js";
import { describe } from "../validate.js";
import { renderTemplate, type TemplateLimits } from "./template.js";
import type { PolicyTokenizer } from "../policy/tokenizer.js";
import type { ChatMessage } from "../policy/types.js";

export interface HfTokenizerOptions {
    /** The model's vocabulary size (>= the tokenizer's): the ids the sampler may produce. */
    vocabSize: number;
    /** Ids that end a generation (generation_config.json's eos_token_id, else config.json's). */
    stopIds?: readonly number[];
    /** Overrides tokenizer_config.json's chat_template. */
    chatTemplate?: string;
}

// A special token in tokenizer_config.json: a string, null, or an AddedToken object {content, ...}.
function tokenString(v: unknown): string | null {
    if (typeof v === "string") return v;
    if (v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string")
        return (v as { content: string }).content;
    return null;
}

export class HfTokenizer implements PolicyTokenizer {
    readonly vocabSize: number;
    /** The tokenizer's own size: ids below it have a string. */
    readonly tokenizerSize: number;
    readonly eos: number;
    readonly pad: number;
    readonly bos: number | null;
    readonly stopIds: ReadonlySet<number>;
    /** bos_token, eos_token, pad_token, unk_token as tokenizer_config.json names them (null when absent). */
    readonly specialTokens: Readonly<Record<"bos_token" | "eos_token" | "pad_token" | "unk_token", string | null>>;
    readonly chatTemplate: string | null;
    /** tokenizer.json and tokenizer_config.json as given (save() writes them back). */
    readonly files: { readonly tokenizerJson: unknown; readonly tokenizerConfig: Readonly<Record<string, unknown>> };
    private readonly tk: Tokenizer;
    private readonly template: Template | null;
    /** At least the text one token covers, in UTF-16 code units (PolicyTokenizer.maxTokenChars). */
    readonly maxTokenChars: number;

    constructor(tokenizerJson: unknown, tokenizerConfig: Record<string, unknown>, options: HfTokenizerOptions) {
        if (tokenizerJson === null || typeof tokenizerJson !== "object")
            throw new TypeError(`HfTokenizer: tokenizer.json: expected a JSON object, got ${describe(tokenizerJson)}`);
        this.maxTokenChars = tokenizerIds(tokenizerJson as Record<string, unknown>, options.vocabSize);
        this.tk = new Tokenizer(tokenizerJson, tokenizerConfig);
        this.files = {
            tokenizerJson,
            tokenizerConfig:
                options.chatTemplate === undefined
                    ? tokenizerConfig
                    : { ...tokenizerConfig, chat_template: options.chatTemplate },
        };
        let size = 0;
        for (const id of this.tk.get_vocab(true).values()) size = Math.max(size, id + 1);
        this.tokenizerSize = size;
        if (!Number.isInteger(options.vocabSize) || options.vocabSize < size)
            throw new RangeError(
                `HfTokenizer: the tokenizer has ids up to ${size - 1}, the model's vocab_size is ${options.vocabSize}`,
            );
        this.vocabSize = options.vocabSize;
        this.specialTokens = {
            bos_token: tokenString(tokenizerConfig.bos_token),
            eos_token: tokenString(tokenizerConfig.eos_token),
            pad_token: tokenString(tokenizerConfig.pad_token),
            unk_token: tokenString(tokenizerConfig.unk_token),
        };
        const id = (s: string | null) => (s === null ? undefined : this.tk.token_to_id(s));
        const stops = (options.stopIds ?? []).filter((x) => Number.isInteger(x) && x >= 0 && x < this.vocabSize);
        const eos = id(this.specialTokens.eos_token) ?? stops[0];
        if (eos === undefined)
            throw new RangeError(
                "HfTokenizer: no end-of-sequence token: tokenizer_config.json has no eos_token and config.json no eos_token_id",
            );
        this.eos = eos;
        this.stopIds = new Set(stops.length > 0 ? stops : [eos]);
        this.pad = id(this.specialTokens.pad_token) ?? eos;
        this.bos = id(this.specialTokens.bos_token) ?? null;
        const t = options.chatTemplate ?? tokenizerConfig.chat_template;
        // A list of named templates (some tokenizers ship [{name: 'default', template}, ...]): the default one.
        const chosen = Array.isArray(t) ? (t.find((x) => x?.name === "default") ?? t[0])?.template : t;
        this.chatTemplate = typeof chosen === "string" ? chosen : null;
        try {
            this.template = this.chatTemplate === null ? null : new Template(this.chatTemplate);
        } catch (e) {
            throw new SyntaxError(`HfTokenizer: chat_template does not parse: ${(e as Error).message}`);
        }
    }

    /** tokenizer.json and tokenizer_config.json of a model directory (the chat template from tokenizer_config.json, else
     * chat_template.jinja). */
    static fromDir(dir: string, options: HfTokenizerOptions): HfTokenizer {
        const read = (f: string, required: boolean): Record<string, unknown> | null => {
            let text: string;
            if (!existsSync(join(dir, f))) {
                if (!required) return null;
                throw new Error(`HfTokenizer: ${join(dir, f)}: missing (a model directory needs tokenizer.json)`);
            }
            try {
                text = readTextFile(join(dir, f), f);
            } catch (e) {
                throw new Error(`HfTokenizer: ${(e as Error).message}`);
            }
            try {
                return JSON.parse(text) as Record<string, unknown>;
            } catch {
                throw new SyntaxError(`HfTokenizer: ${join(dir, f)}: not JSON (truncated or corrupted?)`);
            }
        };
        const tj = read("tokenizer.json", true)!;
        const cfg = read("tokenizer_config.json", false) ?? {};
        // Newer transformers versions save the template beside the config, as chat_template.jinja.
        if (
            cfg.chat_template === undefined &&
            options.chatTemplate === undefined &&
            existsSync(join(dir, "chat_template.jinja"))
        )
            return new HfTokenizer(tj, cfg, {
                ...options,
                chatTemplate: readTextFile(join(dir, "chat_template.jinja"), "chat_template.jinja"),
            });
        return new HfTokenizer(tj, cfg, options);
    }

    isStop(id: number): boolean {
        return this.stopIds.has(id);
    }

    /** Token ids of `text`, without added special tokens (a chat template writes its own). */
    encode(text: string): number[] {
        if (typeof text !== "string")
            throw new TypeError(`HfTokenizer.encode: text: expected a string, got ${describe(text)}`);
        const ids = this.tk.encode(text, { add_special_tokens: false }).ids;
        for (const id of ids)
            if (!(id >= 0 && id < this.vocabSize))
                throw new RangeError(
                    `HfTokenizer.encode: the tokenizer gave id ${id}, outside the model's vocab_size ${this.vocabSize}`,
                );
        return ids;
    }

    /** Text of `ids`, special tokens skipped; ids without a string (padded vocabulary) decode to nothing. */
    decode(ids: ArrayLike<number>): string {
        const keep: number[] = [];
        for (let i = 0; i < ids.length; i++) {
            const x = ids[i]!;
            if (Number.isInteger(x) && x >= 0 && x < this.tokenizerSize) keep.push(x);
        }
        return keep.length === 0 ? "" : this.tk.decode(keep, { skip_special_tokens: true });
    }

    /** Bounds of every rendering of the chat template (template.ts; the defaults when unset). */
    templateLimits: Partial<TemplateLimits> = {};

    /** The chat template rendered for `messages` (with the assistant's header when addGenerationPrompt); a TemplateError
     * when the template raises or passes a bound. */
    applyChatTemplate(messages: readonly ChatMessage[], options: { addGenerationPrompt?: boolean } = {}): string {
        if (!this.template)
            throw new Error("HfTokenizer: the tokenizer has no chat_template (pass one as chatTemplate when loading)");
        return renderTemplate(
            this.template,
            {
                messages: messages.map((m) => ({ role: m.role, content: m.content })),
                add_generation_prompt: options.addGenerationPrompt ?? true,
                ...this.specialTokens,
            },
            this.templateLimits,
        );
    }

    encodeChat(messages: readonly ChatMessage[]): number[] {
        return this.encode(this.applyChatTemplate(messages));
    }
}

/**
 * The stand-in for a model directory loaded with `tokenizer: null` (no tokenizer.json, e.g. a weights-only test
 * checkpoint): requests give `promptTokenIds`, generations carry token ids and an empty text; encoding text is an
 * error that says so.
 */
export class IdsOnlyTokenizer implements PolicyTokenizer {
    readonly vocabSize: number;
    readonly eos: number;
    readonly pad: number;
    private readonly stops: ReadonlySet<number>;
    constructor(vocabSize: number, stopIds: readonly number[]) {
        this.vocabSize = vocabSize;
        const stops = stopIds.filter((x) => Number.isInteger(x) && x >= 0 && x < vocabSize);
        this.eos = stops[0] ?? 0;
        this.pad = this.eos;
        this.stops = new Set(stops);
    }
    isStop(id: number): boolean {
        return this.stops.has(id);
    }
    encode(): number[] {
        throw new Error("this model was loaded without a tokenizer (tokenizer: null): give requests promptTokenIds");
    }
    decode(): string {
        return "";
    }
    encodeChat(): number[] {
        return this.encode();
    }
}

/** Checks that every id tokenizer.json names (model.vocab, a map or Unigram's [piece, score] list whose index is the
 * id, and added_tokens[].id) is an integer in [0, vocabSize): an id past the model's embedding is a load error, not a
 * token the engine would read as another. Returns maxTokenChars: 4 x the longest piece's length. */
function tokenizerIds(tj: Record<string, unknown>, vocabSize: number): number {
    if (!Number.isInteger(vocabSize) || vocabSize < 1)
        throw new RangeError(`HfTokenizer: vocabSize: expected an integer >= 1, got ${describe(vocabSize)}`);
    const check = (where: string, id: unknown) => {
        if (!(typeof id === "number" && Number.isInteger(id) && id >= 0 && id < vocabSize))
            throw new RangeError(
                `HfTokenizer: tokenizer.json: ${where} = ${describe(id)}: expected an id in [0, ${vocabSize}) (the model's vocab_size)`,
            );
    };
    let longest = 1;
    const vocab = (tj.model as { vocab?: unknown } | undefined)?.vocab;
    if (Array.isArray(vocab)) {
        if (vocab.length > vocabSize)
            throw new RangeError(
                `HfTokenizer: tokenizer.json: model.vocab has ${vocab.length} pieces, more than the model's vocab_size ${vocabSize}`,
            );
        for (const piece of vocab)
            if (Array.isArray(piece) && typeof piece[0] === "string") longest = Math.max(longest, piece[0].length);
    } else if (vocab !== null && typeof vocab === "object") {
        for (const [token, id] of Object.entries(vocab)) {
            check(`model.vocab[${JSON.stringify(token.slice(0, 40))}]`, id);
            longest = Math.max(longest, token.length);
        }
    }
    const added = tj.added_tokens;
    if (Array.isArray(added))
        added.forEach((t: { id?: unknown; content?: unknown }, k) => {
            check(`added_tokens[${k}].id`, t?.id);
            if (typeof t?.content === "string") longest = Math.max(longest, t.content.length);
        });
    // A piece's text is at most its length (byte-level pieces are a character per byte); x4 leaves room for a
    // normalizer that shortens text (NFKC composing characters) before it is split.
    return 4 * longest;
}
