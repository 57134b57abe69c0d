// gsm8k.test.ts: the GSM8K task (lib/train/tasks/gsm8k.ts) on the real data the tests ship: the splits' sizes, references
// parsed from "#### n" (commas dropped), worked solutions without calculator annotations ending in \boxed{},
// seeded draws without repeats, MAPoRL's prompts (the question prompt at turn 0; verdicts and the other agents'
// solutions after), and the answer extraction the verifier shares.
import { describe, expect, it } from "vitest";

import { gsm8kTask } from "../../lib/train/tasks/gsm8k.js";

describe("gsm8k task", () => {
    const task = gsm8kTask({ agents: 3 });

    it("reads both splits: 7,473 training questions drawn by seed without repeats, the 1,319 test questions held out in order", () => {
        const a = task.generate(7473, 5),
            b = task.generate(50, 5),
            c = task.generate(50, 6);
        expect(new Set(a.map((x) => x.id)).size).toBe(7473);
        expect(b.map((x) => x.id)).toEqual(a.slice(0, 50).map((x) => x.id));
        expect(c.map((x) => x.id)).not.toEqual(b.map((x) => x.id));
        const held = task.heldOut!(2000);
        expect(held.length).toBe(1319);
        expect(held[0].id).toBe("gsm8k-test-0");
        expect(held[0].reference).toBe("18"); // Janet's ducks
        for (const x of [...a.slice(0, 200), ...held]) {
            expect(x.reference).toMatch(/^-?\d+(\.\d+)?$/);
            expect(x.views).toEqual([x.question, x.question, x.question]);
            expect(x.solution).not.toMatch(/<<|>>/);
            expect(x.solution!.endsWith(`\\boxed{ ${x.reference} }`)).toBe(true);
            expect(task.extract!(x.solution!)).toBe(x.reference);
        }
        expect(a.some((x) => /,/.test(x.reference))).toBe(false);
    });

    it("speaks MAPoRL's math prompts", async () => {
        const item = task.heldOut!(1)[0];
        const p0 = task.prompt!(item, 0, null, "empty");
        expect(p0).toBe(
            `Question: ${item.question}\nProvide a reasoning for your solution. At the end, you MUST write the answer in the following format: Answer: \\boxed{ XXX }`,
        );
        const prev = [
            "I think 16 - 3 - 4 = 9, 9 * 2 = 18. Answer: \\boxed{ 18 }",
            "Answer: \\boxed{ 20 }",
            "no idea",
        ].map((text) => ({ text, extracted: task.extract!(text) }));
        const p1 = task.prompt!(item, 1, prev, [1, 0, 0]);
        expect(p1.startsWith("Your previous answer: ```Answer: \\boxed{ 20 }```")).toBe(true);
        expect(p1).toContain(
            "Reward from a verifier of your answer: 0.000 out of 1.0, which means your answer is highly likely wrong.",
        );
        expect(p1).toContain("These are the solutions to the problem from other agents:");
        expect(p1).toContain("Agent 1 solution: ```I think 16 - 3 - 4 = 9, 9 * 2 = 18. Answer: \\boxed{ 18 }```");
        expect(p1).toContain("Reward associated with agent 1's solution calculated by verifier: 1.000 out of 1.0.");
        expect(p1).toContain("Agent 3 solution: ```no idea```");
        expect(p1).not.toContain("Agent 2 solution");
        expect(p1.endsWith(`Once again, the question is: ${item.question}`)).toBe(true);
        expect(
            (await task.verifier.score({ question: item.question, response: prev[0].text, reference: item.reference }))
                .score,
        ).toBe(1);
    });

    it("a missing or damaged data directory is named", () => {
        expect(() => gsm8kTask({ dataDir: "/nonexistent" })).toThrow(/\/nonexistent\/train\.jsonl: missing/);
    });
});
