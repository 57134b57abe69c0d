// tasks.test.ts: the collaboration tasks are deterministic by seed, their references are right (recomputed here
// from the text), split-sum views hide the other operands, and each task's verifier scores its own references
// as right and a wrong answer as wrong.
import { describe, expect, it } from "vitest";

import { arithDebateTask, splitSumTask } from "../../lib/index.js";

describe("tasks", () => {
    it("split-sum: deterministic, each agent sees only its operand, the sum needs all of them", async () => {
        const task = splitSumTask({ agents: 3, digits: 2 });
        const a = task.generate(50, 7),
            b = task.generate(50, 7),
            c = task.generate(50, 8);
        expect(a).toEqual(b);
        expect(a).not.toEqual(c);
        for (const item of a) {
            const ops = item.question.match(/\d+/g)!.map(Number);
            expect(ops.length).toBe(3);
            expect(Number(item.reference)).toBe(ops[0] + ops[1] + ops[2]);
            item.views.forEach((v, k) => {
                const nums = v
                    .replace(/agent \d+ of \d+/, "")
                    .replace(/all \d+ agents/, "")
                    .match(/\d+/g)!
                    .map(Number);
                expect(nums).toEqual([ops[k]]); // only its own operand
            });
            expect(
                (await task.verifier.score({ response: `Answer: ${item.reference}`, reference: item.reference })).score,
            ).toBe(1);
            expect(
                (
                    await task.verifier.score({
                        response: `Answer: ${Number(item.reference) + 1}`,
                        reference: item.reference,
                    })
                ).score,
            ).toBe(0);
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

    it("arith-debate compact: the same problems as the words format, with a left-to-right worked solution", () => {
        const words = arithDebateTask({ steps: 3 }).generate(100, 9),
            compact = arithDebateTask({ steps: 3, format: "compact" }).generate(100, 9);
        compact.forEach((item, i) => {
            expect(item.reference).toBe(words[i].reference);
            // Evaluate "7+2*3-4" left to right, and check every step of the solution.
            const toks = item.question.match(/\d+|[+*-]/g)!;
            let v = Number(toks[0]);
            for (let k = 1; k < toks.length; k += 2)
                v =
                    toks[k] === "+"
                        ? v + Number(toks[k + 1])
                        : toks[k] === "-"
                          ? v - Number(toks[k + 1])
                          : v * Number(toks[k + 1]);
            expect(String(v)).toBe(item.reference);
            const [chain, answer] = item.solution!.split(";");
            expect(answer).toBe(item.reference);
            for (const step of chain.split(",")) {
                const m = /^(\d+)([+*-])(\d+)=(\d+)$/.exec(step)!;
                const [a, op, b, r] = [Number(m[1]), m[2], Number(m[3]), Number(m[4])];
                expect(op === "+" ? a + b : op === "-" ? a - b : a * b).toBe(r);
            }
        });
        expect(() => arithDebateTask({ format: "json" as "words" })).toThrow(/format: expected 'words' or 'compact'/);
    });

    it("split-sum compact: each view holds only its digit; the weak warm start guesses, and builds on a peer at the given rate", () => {
        const task = splitSumTask({ agents: 2, format: "compact", peerUse: 0.4 });
        const items = task.generate(50, 2);
        for (const item of items) {
            const [x, y] = item.question.split("+").map(Number);
            expect(item.views).toEqual([`a=${x}`, `b=${y}`]);
            expect(item.reference).toBe(String(x + y));
        }
        let s = 5;
        const rng = () => (s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32;
        const item = items[0],
            x = Number(item.views[0].slice(2));
        let onPeer0 = 0,
            onPeer1 = 0;
        const n = 20000;
        for (let k = 0; k < n; k++) {
            const d0 = /^(\d+)\+(\d+)=(\d+);(\d+)$/.exec(task.warmStart!(item, 0, 0, null, rng))!;
            expect(Number(d0[1])).toBe(x);
            expect(Number(d0[3])).toBe(x + Number(d0[2]));
            if (Number(d0[2]) === 7) onPeer0++;
            const d1 = /^(\d+)\+(\d+)=/.exec(task.warmStart!(item, 0, 1, ["3", "17"], rng))!;
            if (Number(d1[2]) === 7) onPeer1++; // 17 mod 10: the peer's answer
        }
        expect(Math.abs(onPeer0 / n - 0.1)).toBeLessThan(0.01); // turn 0: a uniform guess
        expect(Math.abs(onPeer1 / n - (0.4 + 0.6 * 0.1))).toBeLessThan(0.015); // follow-up: the peer 40 % of the time
        expect(() => splitSumTask({ peerUse: 2 })).toThrow(/peerUse: expected a number in \[0, 1\], got 2/);
    });
});
