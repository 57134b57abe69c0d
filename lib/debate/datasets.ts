// datasets.ts: streaming loaders for the debate tasks' JSONL files. Each yields records with their 1-based
// line number; a line that is not JSON, or lacks a field, is an error that names the file and the line.
//   readGsm8k: {"question", "answer"} with the answer's last line "#### <number>" (the published GSM8K files).
//   readAnli:  {"premise", "hypothesis", "label"} with label 0/1/2 or "e"/"n"/"c" or the words.
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";

import { extractFinalNumber } from "../rewards/extract.js";

export interface Gsm8kRecord {
    question: string;
    /** The full reference solution. */
    solution: string;
    /** The final answer, from the "#### n" line. */
    answer: number;
    line: number;
}

export interface AnliRecord {
    premise: string;
    hypothesis: string;
    label: "entailment" | "neutral" | "contradiction";
    line: number;
}

async function* jsonLines(
    path: string,
    what: string,
    signal?: AbortSignal,
): AsyncGenerator<{ value: Record<string, unknown>; line: number }> {
    if (typeof path !== "string" || !path)
        throw new TypeError(`${what}: path: expected a file path, got ${typeof path}`);
    const rl = createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity });
    let line = 0;
    try {
        for await (const text of rl) {
            signal?.throwIfAborted();
            line++;
            if (!text.trim()) continue;
            let value: unknown;
            try {
                value = JSON.parse(text);
            } catch (e) {
                throw new SyntaxError(
                    `${what}: ${path}:${line}: expected a JSON object, got ${JSON.stringify(text.slice(0, 60))} (${(e as Error).message})`,
                );
            }
            if (value === null || typeof value !== "object" || Array.isArray(value))
                throw new SyntaxError(
                    `${what}: ${path}:${line}: expected a JSON object, got ${JSON.stringify(text.slice(0, 60))}`,
                );
            yield { value: value as Record<string, unknown>, line };
        }
    } finally {
        rl.close();
    }
}

function field(what: string, path: string, line: number, v: Record<string, unknown>, key: string): string {
    const x = v[key];
    if (typeof x !== "string")
        throw new TypeError(
            `${what}: ${path}:${line}: "${key}": expected a string, got ${x === undefined ? "nothing" : typeof x}`,
        );
    return x;
}

/** Streams a GSM8K JSONL file. */
export async function* readGsm8k(path: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<Gsm8kRecord> {
    for await (const { value, line } of jsonLines(path, "readGsm8k", options.signal)) {
        const question = field("readGsm8k", path, line, value, "question");
        const solution = field("readGsm8k", path, line, value, "answer");
        const m = /####\s*([^\n]+)\s*$/.exec(solution);
        const n = m ? extractFinalNumber(`#### ${m[1]}`) : null;
        if (!n)
            throw new RangeError(
                `readGsm8k: ${path}:${line}: "answer": expected a last line "#### <number>", got ${JSON.stringify(solution.slice(-40))}`,
            );
        yield { question, solution, answer: n.value, line };
    }
}

const NLI: Record<string, AnliRecord["label"]> = {
    "0": "entailment",
    e: "entailment",
    entailment: "entailment",
    "1": "neutral",
    n: "neutral",
    neutral: "neutral",
    "2": "contradiction",
    c: "contradiction",
    contradiction: "contradiction",
};

/** Streams an ANLI-style JSONL file (label as 0/1/2, e/n/c or the word). */
export async function* readAnli(path: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<AnliRecord> {
    for await (const { value, line } of jsonLines(path, "readAnli", options.signal)) {
        const premise = field("readAnli", path, line, value, "premise");
        const hypothesis = field("readAnli", path, line, value, "hypothesis");
        const raw = value.label;
        const label = NLI[String(raw).trim().toLowerCase()];
        if (!label)
            throw new RangeError(
                `readAnli: ${path}:${line}: "label": expected 0/1/2, e/n/c or entailment/neutral/contradiction, got ${JSON.stringify(raw)}`,
            );
        yield { premise, hypothesis, label, line };
    }
}
