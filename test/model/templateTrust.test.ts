// templateTrust.test.ts: a model directory's tokenizer and chat template are outside input. A template that loops a
// billion times, builds a huge string, or raises is a TemplateError within its bounds (the process survives and the
// next rendering works); a tokenizer.json id past the model's vocabulary is a load error naming it.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Template } from "@huggingface/jinja";
import { describe, expect, it } from "vitest";

import { HfTokenizer } from "../../lib/model/hfTokenizer.js";
import { renderTemplate, TemplateError } from "../../lib/model/template.js";

const DIR = join(import.meta.dirname, "..", "fixtures", "hf-tokenizer");
const tokenizerJson = () =>
    JSON.parse(readFileSync(join(DIR, "tokenizer.json"), "utf8")) as {
        model: { vocab: Record<string, number> };
        added_tokens: { id: number }[];
    };
const config = JSON.parse(readFileSync(join(DIR, "tokenizer_config.qwen.json"), "utf8")) as Record<string, unknown>;
const chat = [{ role: "user" as const, content: "hi" }];
const withTemplate = (t: string) =>
    new HfTokenizer(tokenizerJson(), { ...config, chat_template: t }, { vocabSize: 320 });

describe("chat templates render within bounds", () => {
    it("range(1e9) is refused before it is built (it ended the process before)", () => {
        const t0 = performance.now();
        expect(() => withTemplate("{% for i in range(1000000000) %}{% endfor %}x").applyChatTemplate(chat)).toThrow(
            TemplateError,
        );
        expect(() => withTemplate("{% for i in range(1000000000) %}{% endfor %}x").applyChatTemplate(chat)).toThrow(
            /range\(\) of 1000000000 numbers, more than 1000000 \(maxSteps\)/,
        );
        expect(performance.now() - t0).toBeLessThan(1000);
    });

    it("nested loops stop at maxSteps, a growing string at maxChars, a slow one at timeoutMs", () => {
        const nested = "{% for i in range(1000) %}{% for j in range(1000) %}{{ 'ab' }}{% endfor %}{% endfor %}";
        const t0 = performance.now();
        expect(() => withTemplate(nested).applyChatTemplate(chat)).toThrow(
            /more than 1000000 steps \(maxSteps\)|took more than 2000 ms \(timeoutMs\)/,
        );
        expect(performance.now() - t0).toBeLessThan(4000);
        expect(() => renderTemplate(new Template(nested), {}, { maxSteps: 10_000 })).toThrow(
            /more than 10000 steps \(maxSteps\)/,
        );
        const grow =
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}";
        expect(() => renderTemplate(new Template(grow), {})).toThrow(/more than 16777216 characters \(maxChars\)/);
        expect(() => renderTemplate(new Template(grow), {}, { maxChars: 1000 })).toThrow(/more than 1000 characters/);
        const slow = "{% for i in range(900000) %}{{ i }}{% endfor %}";
        expect(() => renderTemplate(new Template(slow), {}, { timeoutMs: 5 })).toThrow(
            /took more than 5 ms \(timeoutMs\)/,
        );
    });

    it("raise_exception is a TemplateError with the template's message, and the next rendering works", () => {
        const t = withTemplate("{{ raise_exception('Conversation roles must alternate user/assistant') }}");
        expect(() => t.applyChatTemplate(chat)).toThrow(
            /chat template raised: Conversation roles must alternate user\/assistant/,
        );
        const e = (() => {
            try {
                t.applyChatTemplate(chat);
            } catch (x) {
                return x;
            }
        })();
        expect(e).toBeInstanceOf(TemplateError);
        expect((e as TemplateError).code).toBe("TEMPLATE");
        expect(
            withTemplate(
                "{% for m in messages %}[{{ m.content }}]{% endfor %}{% for i in range(3) %}{{ i }}{% endfor %}",
            ).applyChatTemplate(chat),
        ).toBe("[hi]012");
        // range as Python's: negative steps, empty ranges.
        expect(
            renderTemplate(
                new Template(
                    "{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|{% for i in range(3, 1) %}{{ i }}{% endfor %}",
                ),
                {},
            ),
        ).toBe("531|");
    });
});

describe("tokenizer.json ids are below the model's vocabulary", () => {
    it("a vocab id of 2^40 is a load error (it was read as id 0 by the engine)", () => {
        const tj = tokenizerJson();
        const token = Object.keys(tj.model.vocab)[5];
        tj.model.vocab[token] = 2 ** 40;
        expect(() => new HfTokenizer(tj, config, { vocabSize: 320 })).toThrow(
            /tokenizer\.json: model\.vocab\[".*"\] = 1099511627776: expected an id in \[0, 320\)/,
        );
    });
    it("an added token's id past the vocabulary, or not an integer, is a load error", () => {
        for (const bad of [2 ** 40, 320, -1, 1.5]) {
            const tj = tokenizerJson();
            tj.added_tokens[0].id = bad;
            expect(() => new HfTokenizer(tj, config, { vocabSize: 320 })).toThrow(
                /added_tokens\[0\]\.id = .*: expected an id in \[0, 320\)/,
            );
        }
    });
});
