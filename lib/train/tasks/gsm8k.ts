// gsm8k.ts: GSM8K (Cobbe et al., 2021) as a training task for real models: the train split for training, the test
// split for the held-out table, every agent seeing the whole question, in natural language with MAPoRL's math
// prompts (lib/debate/prompts.ts: "Question: ... Answer: \boxed{ XXX }", and at turn t >= 1 the verifier's verdicts
// and the other agents' solutions). Where maporl differs from MAPoRL's code: the trainers send one user message per
// turn (the agent's own previous answer is quoted in it) instead of the agent's whole chat history.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { defaultPrompts } from "../../debate/prompts.js";
import { mulberry32 } from "../../random.js";
import { extractFinalNumber } from "../../rewards/extract.js";
import { gsm8kVerifier } from "../../rewards/verifiers.js";
import { requireInteger } from "../../validate.js";
import type { Task, TaskItem } from "./tasks.js";

/** The copy of GSM8K the tests ship (test/fixtures/gsm8k: train.jsonl, test.jsonl; MIT licence). */
export const GSM8K_FIXTURE = fileURLToPath(new URL("../../../test/fixtures/gsm8k", import.meta.url));

// GSM8K's answer field: the rationale with <<a*b=c>> calculator annotations, then "#### n".
function parse(path: string, split: string): TaskItem[] {
    if (!existsSync(path))
        throw new Error(
            `gsm8kTask: ${path}: missing (a GSM8K directory holds train.jsonl and test.jsonl; pass --data DIR)`,
        );
    return readFileSync(path, "utf8")
        .split("\n")
        .filter((l) => l.trim())
        .map((line, k) => {
            let row: { question?: unknown; answer?: unknown };
            try {
                row = JSON.parse(line) as typeof row;
            } catch {
                throw new SyntaxError(`gsm8kTask: ${path}: line ${k + 1}: not JSON`);
            }
            if (typeof row.question !== "string" || typeof row.answer !== "string" || !row.answer.includes("####"))
                throw new SyntaxError(`gsm8kTask: ${path}: line ${k + 1}: expected {question, answer: '... #### n'}`);
            const at = row.answer.lastIndexOf("####");
            const reference = row.answer
                .slice(at + 4)
                .trim()
                .replace(/,/g, "");
            const rationale = row.answer
                .slice(0, at)
                .replace(/<<[^>]*>>/g, "")
                .trim();
            return {
                id: `gsm8k-${split}-${k}`,
                question: row.question,
                views: [],
                reference,
                solution: `${rationale}\nAnswer: \\boxed{ ${reference} }`,
            };
        });
}

/** GSM8K from `dataDir` (default: the fixture copy) for `agents` agents. */
export function gsm8kTask(options: { agents?: number; dataDir?: string } = {}): Task {
    const agents = requireInteger("gsm8kTask", "agents", options.agents ?? 3, 1, 16);
    const dir = options.dataDir || GSM8K_FIXTURE;
    const withViews = (x: TaskItem): TaskItem => ({ ...x, views: Array.from({ length: agents }, () => x.question) });
    const train = parse(join(dir, "train.jsonl"), "train").map(withViews);
    let test: TaskItem[] | null = null;
    return {
        name: "gsm8k",
        agents,
        verifier: gsm8kVerifier({ name: "gsm8k" }),
        // `count` training questions drawn without replacement (a fresh permutation for each seed; wraps past 7,473).
        generate(count, seed) {
            if (!Number.isInteger(count) || count < 0)
                throw new RangeError(`gsm8k: count: expected an integer >= 0, got ${String(count)}`);
            const next = mulberry32(seed ^ 0x65b8),
                order = train.map((_, i) => i);
            for (let i = order.length - 1; i > 0; i--) {
                const j = Math.floor(next() * (i + 1));
                [order[i], order[j]] = [order[j]!, order[i]!];
            }
            return Array.from({ length: count }, (_, i) => train[order[i % order.length]!]!);
        },
        heldOut(count) {
            test ??= parse(join(dir, "test.jsonl"), "test").map(withViews);
            return test.slice(0, Math.min(count, test.length));
        },
        prompt(item, agent, previous, scores) {
            if (!previous) return defaultPrompts.question({ task: "math", question: item.question });
            const own = previous[agent]!,
                s = Array.isArray(scores) ? scores : undefined;
            return (
                `Your previous answer: \`\`\`${own.text}\`\`\`\n\n` +
                defaultPrompts.followUp({
                    task: "math",
                    question: item.question,
                    turn: 1,
                    agent,
                    ...(s ? { ownScore: s[agent]! } : {}),
                    peers: previous.flatMap((p, j) =>
                        j === agent ? [] : [{ agent: j, text: p.text, ...(s ? { score: s[j]! } : {}) }],
                    ),
                })
            );
        },
        extract: (text) => extractFinalNumber(text)?.text ?? null,
    };
}
