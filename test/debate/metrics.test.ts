// metrics.test.ts: the debate metrics on hand-made transcripts, and the dataset loaders on the real GSM8K test
// file and on broken files (errors name the line).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { debateMetrics, majorityCredit, readAnli, readGsm8k, type EpisodeRecord } from "../../lib/index.js";

const a = (extracted: string | null, completionTokens?: number) => ({
    extracted,
    ...(completionTokens ? { completionTokens } : {}),
});

describe("debateMetrics", () => {
    it("majority vote: ties give 1/k, invalid leaves a tied majority", () => {
        const ep: EpisodeRecord = { reference: "18", turns: [] };
        expect(majorityCredit(ep, [a("18"), a("18"), a("7")])).toBe(1);
        expect(majorityCredit(ep, [a("18"), a("7"), a("9")])).toBeCloseTo(1 / 3);
        expect(majorityCredit(ep, [a("18"), a("7")])).toBe(0.5);
        expect(majorityCredit(ep, [a("18"), a(null)])).toBe(1); // invalid dropped from the tie
        expect(majorityCredit(ep, [a(null), a(null), a("18")])).toBe(0); // invalid is the majority
        expect(majorityCredit(ep, [a("7"), a("7"), a("18")])).toBe(0);
        expect(majorityCredit(ep, [a("$18.0"), a("1,8")])).toBe(0.5); // "$18.0" is 18; "1,8" is not
    });

    it("per-turn and per-agent accuracy, transitions split by the majority, lengths and tokens", () => {
        const eps: EpisodeRecord[] = [
            {
                reference: 5,
                turns: [
                    [a("5", 10), a("4", 20), a("4", 30)],
                    [a("5", 12), a("5", 8), a("4", 10)],
                    [a("5"), a("5"), a("5")],
                ],
            },
            {
                reference: 2,
                turns: [
                    [a("2", 5), a("2", 5), a("3", 5)],
                    [a("3", 5), a("2", 5), a("2", 5)],
                ],
            }, // stopped after 2 turns
        ];
        const m = debateMetrics(eps);
        expect(m.majorityAccuracy).toEqual([0.5, 1, 1]);
        expect(m.agentAccuracy[0]).toEqual([1, 0.5, 0]);
        expect(m.agentAccuracy[1]).toEqual([0.5, 1, 0.5]);
        expect(m.averageTurns).toBe(2.5);
        expect(m.tokensPerTurn[0]).toBeCloseTo(75 / 6);
        expect(m.tokensPerTurn[2]).toBeNaN();
        // turn 0 -> 1: episode 1 (majority wrong): R->R, W->R, W->W; episode 2 (majority right): R->W, R->R, W->R
        expect(m.transitions[0].all).toEqual({ rightToRight: 2, rightToWrong: 1, wrongToRight: 2, wrongToWrong: 1 });
        expect(m.transitions[0].majorityWrong).toEqual({
            rightToRight: 1,
            rightToWrong: 0,
            wrongToRight: 1,
            wrongToWrong: 1,
        });
        expect(m.transitions[0].majorityRight).toEqual({
            rightToRight: 1,
            rightToWrong: 1,
            wrongToRight: 1,
            wrongToWrong: 0,
        });
        expect(m.transitions[1].all).toEqual({ rightToRight: 2, rightToWrong: 0, wrongToRight: 1, wrongToWrong: 0 });
        expect(m.episodes).toBe(2);
    });
});

describe("datasets", () => {
    it("streams the real GSM8K test file", async () => {
        let n = 0,
            first = null as null | { answer: number; line: number };
        for await (const r of readGsm8k(new URL("../fixtures/gsm8k/test.jsonl", import.meta.url).pathname)) {
            if (!first) first = r;
            expect(Number.isFinite(r.answer)).toBe(true);
            n++;
        }
        expect(n).toBe(1319);
        expect(first).toMatchObject({ answer: 18, line: 1 });
    });

    it("names the line of a bad record", async () => {
        const dir = mkdtempSync(join(tmpdir(), "maporl-ds-"));
        const gsm = join(dir, "g.jsonl");
        writeFileSync(gsm, '{"question": "q", "answer": "x\\n#### 4"}\n\nnot json\n');
        const seen: number[] = [];
        await expect(
            (async () => {
                for await (const r of readGsm8k(gsm)) seen.push(r.answer);
            })(),
        ).rejects.toThrow(/g.jsonl:3: expected a JSON object/);
        expect(seen).toEqual([4]);
        writeFileSync(gsm, '{"question": "q", "answer": "no final line"}\n');
        await expect(
            (async () => {
                for await (const _ of readGsm8k(gsm)) void _;
            })(),
        ).rejects.toThrow(/g.jsonl:1: "answer": expected a last line "#### <number>"/);
        const anli = join(dir, "a.jsonl");
        writeFileSync(
            anli,
            '{"premise": "p", "hypothesis": "h", "label": "c"}\n{"premise": "p", "hypothesis": "h", "label": 1}\n{"premise": "p", "label": 0}\n',
        );
        const labels: string[] = [];
        await expect(
            (async () => {
                for await (const r of readAnli(anli)) labels.push(r.label);
            })(),
        ).rejects.toThrow(/a.jsonl:3: "hypothesis": expected a string, got nothing/);
        expect(labels).toEqual(["contradiction", "neutral"]);
    });
});
