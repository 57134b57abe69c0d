// tasks.test.ts: the collaboration tasks are deterministic by seed, their references are right (recomputed here
// from the text), split-sum views hide the other operands, and each task's verifier scores its own references
// as right and a wrong answer as wrong.
import { describe, expect, it } from "vitest";

import { arithDebateTask, splitSumTask } from "../../lib/index.js";

describe("tasks", () => {
    it("split-sum: deterministic, each agent sees only its operand, the sum needs all of them", async () => {
        const task = splitSumTask({ agents: 3, digits: 2 });
        const a = task.generate(50, 7), b = task.generate(50, 7), c = task.generate(50, 8);
        expect(a).toEqual(b);
        expect(a).not.toEqual(c);
        for (const item of a) {
            const ops = item.question.match(/\d+/g)!.map(Number);
            expect(ops.length).toBe(3);
            expect(Number(item.reference)).toBe(ops[0]! + ops[1]! + ops[2]!);
            item.views.forEach((v, k) => {
                const nums = v.replace(/agent \d+ of \d+/, "").replace(/all \d+ agents/, "").match(/\d+/g)!.map(Number);
                expect(nums).toEqual([ops[k]!]);  // only its own operand
            });
            expect((await task.verifier.score({ response: `Answer: ${item.reference}`, reference: item.reference })).score).toBe(1);
            expect((await task.verifier.score({ response: `Answer: ${Number(item.reference) + 1}`, reference: item.reference })).score).toBe(0);
        }
        expect(() => splitSumTask({ agents: 1 })).toThrow(/agents: expected an integer in \[2, 16\]/);
        expect(() => task.generate(-1, 0)).toThrow(/count: expected an integer >= 0/);
    });

    it("arith-debate: deterministic word problems whose reference is the text's arithmetic", async () => {
        const task = arithDebateTask({ steps: 4 });
        const items = task.generate(200, 3);
        expect(task.generate(200, 3)).toEqual(items);
        for (const item of items) {
            // Recompute from the sentences.
            let v = Number(/has (\d+)/.exec(item.question)![1]);
            for (const m of item.question.matchAll(/gets (\d+) more|gives away (\d+)|multiplied by (\d+)/g)) {
                if (m[1]) v += Number(m[1]);
                else if (m[2]) v -= Number(m[2]);
                else v *= Number(m[3]);
            }
            expect(String(v)).toBe(item.reference);
            expect(v).toBeGreaterThanOrEqual(0);
            expect(item.views.length).toBe(3);
            expect((await task.verifier.score({ response: `so #### ${v}`, reference: item.reference })).score).toBe(1);
        }
        expect(new Set(items.map((i) => i.question)).size).toBeGreaterThan(190);
    });
});
