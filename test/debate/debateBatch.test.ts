// debateBatch.test.ts: Debate.runBatch runs several episodes turn by turn with one generate call per distinct
// policy per turn, and each transcript equals run(item): with in-process policies (call sizes counted, a shared
// policy for two agents, consensus dropping episodes out) and with a NativePolicy team (batched KV-cache decoding
// of prompts of different lengths gives the same tokens as one episode at a time).
import { describe, expect, it } from "vitest";

import {
    CharTokenizer,
    Debate,
    gsm8kVerifier,
    NativePolicy,
    type GenerateRequest,
    type Generation,
    type Policy,
} from "../../lib/index.js";

// Answers from the last user message and the seed: "<name> says N" with N from a hash of both, so a transcript
// depends on every prompt and seed.
function hashPolicy(name: string, calls: number[]): Policy {
    return {
        name,
        async generate(reqs: GenerateRequest[]): Promise<Generation[]> {
            calls.push(reqs.length);
            return reqs.map((r) => {
                const text = `${r.messages?.at(-1)?.content ?? ""}|${r.seed}`;
                let h = 7;
                for (let i = 0; i < text.length; i++) h = (h * 31 + text.charCodeAt(i)) % 1000003;
                const n = text.includes("0 + 0") ? 0 : h % 4; // episode q0 agrees at once (consensus)
                return {
                    text: `${name} says ${n}`,
                    finishReason: "stop",
                    usage: { promptTokens: 1, completionTokens: 1 },
                    latencyMs: 0,
                };
            });
        },
    };
}

const items = [0, 1, 2, 3, 4].map((i) => ({ id: `q${i}`, question: `What is ${i} + ${i}?`, reference: String(2 * i) }));

describe("Debate.runBatch", () => {
    it("one generate call per distinct policy per turn; transcripts equal run(item); consensus drops episodes", async () => {
        const calls: number[] = [];
        const shared = hashPolicy("s", calls),
            other = hashPolicy("o", calls);
        const debate = new Debate({
            agents: [shared, shared, other],
            turns: 3,
            seed: 5,
            verifier: gsm8kVerifier(),
            feedback: true,
            consensus: { share: 1 },
        });
        const batch = await debate.runBatch(items);
        const turnsRun = batch.map((t) => t.turns.length);
        // per turn: the shared policy gets 2 requests per live episode, the other 1
        let k = 0;
        for (let t = 0; t < 3; t++) {
            const live = turnsRun.filter((n) => n > t).length;
            if (live === 0) break;
            expect(calls.slice(k, k + 2).sort((a, b) => a - b)).toEqual([live, 2 * live]);
            k += 2;
        }
        expect(k).toBe(calls.length);
        for (const [i, item] of items.entries()) {
            const alone = await debate.run(item);
            expect(batch[i]).toEqual(alone);
        }
        expect(batch[0].stoppedEarly).toBe(true);
        expect(batch[0].turns.length).toBe(1);
        expect(batch.filter((t) => t.turns.length === 3).length).toBeGreaterThan(0);
        await expect(debate.runBatch("x" as never)).rejects.toThrow(/items: expected an array/);
        await expect(debate.runBatch([items[0], { question: 3 } as never])).rejects.toThrow(
            /items\[1\]\.question: expected a string/,
        );
        expect(await debate.runBatch([])).toEqual([]);
        const anonymous = await debate.runBatch([
            { question: "1 + 1?", reference: "2" },
            { question: "2 + 2?", reference: "4" },
        ]);
        expect(new Set(anonymous.map((t) => t.id)).size).toBe(2); // default ids stay unique within a batch
    });

    it("a NativePolicy team: the batch gives the episodes of one-at-a-time runs, token for token", async () => {
        const tok = CharTokenizer.ascii();
        const p = await NativePolicy.create({
            contextLength: 2048,
            layers: 1,
            heads: 2,
            dModel: 16,
            seed: 9,
            tokenizer: tok,
        });
        const debate = new Debate({ agents: [p, p], turns: 2, seed: 1, sampling: { temperature: 1, maxTokens: 6 } });
        const some = items.slice(0, 3);
        const batch = await debate.runBatch(some);
        for (const [i, item] of some.entries()) {
            const alone = await debate.run(item);
            expect(batch[i].turns.map((t) => t.map((e) => e.tokens))).toEqual(
                alone.turns.map((t) => t.map((e) => e.tokens)),
            );
            expect(batch[i].turns.map((t) => t.map((e) => e.logprobs))).toEqual(
                alone.turns.map((t) => t.map((e) => e.logprobs)),
            );
        }
        await p.dispose();
    });
});
