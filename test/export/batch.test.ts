// batch.test.ts: exportBatch / readBatch. Debates on a native policy (exact ids) with a verifier, rewarded by
// influenceRewards, exported in shards and read back: every row equals its transcript entry (prompt ids, response
// ids, behaviour log-probs, reward, advantages, agent, turn, model); the padded tensors hold verl's layout (prompts
// left-padded, responses right-padded, the masks where the tokens are); answers without exact ids are refused unless
// re-tokenisation is asked for; failed episodes (non-finite rewards) are refused or skipped and counted; a damaged
// batch is a named error.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    Debate, exportBatch, fnVerifier, influenceRewards, NativePolicy, readBatch, readSafetensors, transcriptScores, type Transcript,
} from "../../lib/index.js";

const work = mkdtempSync(join(tmpdir(), "maporl-batch-"));
let policy: NativePolicy;
let ts: Transcript[];
afterAll(async () => { await policy?.dispose(); rmSync(work, { recursive: true, force: true }); });

beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 2048, layers: 1, heads: 2, dModel: 16, seed: 4, name: "tiny" });
    const verifier = fnVerifier("length", (x) => (x.response.length % 3 === 0 ? 1 : 0));
    ts = await new Debate({ agents: [policy, policy, policy], turns: 2, verifier, sampling: { temperature: 1, maxTokens: 10 }, seed: 3 })
        .runBatch(Array.from({ length: 5 }, (_, i) => ({ id: `q${i}`, question: `${i} + 1?`, reference: i + 1 })));
});

describe("exportBatch / readBatch", () => {
    it("round-trips every answer exactly, in verl's padded layout, over several shards", () => {
        const { scores, shape } = transcriptScores(ts);
        const rewards = influenceRewards({ scores, shape }, { discount: 0.3 });
        const dir = join(work, "b1");
        const info = exportBatch(dir, ts, { rewards, advantages: (_t, e) => e.agent - 1 + e.turn * 0.5, rowsPerShard: 7, padTokenId: 0 });
        const entries = ts.flatMap((t, q) => t.turns.flatMap((row) => row.map((e) => ({ t, q, e }))));
        expect(info).toMatchObject({ format: "maporl-batch", version: 1, rows: entries.length, hasAdvantages: true, skipped: 0 });
        expect(info.shards.map((s) => s.rows)).toEqual([7, 7, 7, 7, 2]);
        const back = readBatch(dir);
        expect(back.info).toEqual(info);
        back.rows.forEach((r, i) => {
            const { t, q, e } = entries[i]!;
            expect(r).toMatchObject({ row: i, episode: t.id, question: t.question, turn: e.turn, agent: e.agent, text: e.text, model: null, retokenized: false,
                finishReason: e.finishReason });
            expect(r.promptIds).toEqual(e.promptTokenIds);
            expect(r.responseIds).toEqual(e.tokenIds);
            expect(r.oldLogProbs).toEqual(e.logprobs);  // float32 on both sides
            expect(r.reward).toBe(rewards[(q * shape[1] + e.turn) * shape[2] + e.agent]);
            expect(r.advantages).toEqual(e.tokenIds!.map(() => Math.fround(e.agent - 1 + e.turn * 0.5)));
            expect(r.promptIds).toEqual(policy.tokenizer.encodeChat(e.prompt));  // the prompt the model read
        });
        // The tensors themselves: prompts left-padded, responses right-padded, masks over the tokens.
        const s0 = info.shards[0]!, t0 = new Map(readSafetensors(join(dir, s0.file)).tensors.map((x) => [x.name, x]));
        const P = s0.promptLength, R = s0.responseLength, r0 = back.rows[0]!;
        expect(t0.get("prompt_ids")!.shape).toEqual([7, P]);
        const row0 = Array.from(t0.get("prompt_ids")!.data.subarray(0, P));
        expect(row0).toEqual([...new Array(P - r0.promptLength).fill(0), ...r0.promptIds]);
        const att = Array.from(t0.get("attention_mask")!.data.subarray(0, P + R));
        expect(att).toEqual([...new Array(P - r0.promptLength).fill(0), ...new Array(r0.promptLength).fill(1), ...new Array(r0.responseLength).fill(1),
            ...new Array(R - r0.responseLength).fill(0)]);
        expect(Array.from(t0.get("response_mask")!.data.subarray(0, R))).toEqual(att.slice(P));
        expect(t0.get("response_ids")!.data).toBeInstanceOf(Int32Array);
        expect(Array.from(t0.get("row")!.data)).toEqual([0, 1, 2, 3, 4, 5, 6]);
        const lines = readFileSync(join(dir, "manifest.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { row: number; shard: number; index: number });
        expect(lines.map((l) => [l.shard, l.index])).toEqual(entries.map((_, i) => [Math.floor(i / 7), i % 7]));
    });

    it("the Python reader (numpy alone) reads what readBatch reads", () => {
        const dir = join(work, "b1");
        const r = spawnSync("python3", [join(import.meta.dirname, "..", "..", "bench", "python", "read_batch.py"), dir], { encoding: "utf8" });
        expect(r.stderr).toBe("");
        const py = JSON.parse(r.stdout) as { row: number; promptIds: number[]; responseIds: number[]; oldLogProbs: number[]; reward: number; agent: number; turn: number }[];
        const js = readBatch(dir).rows;
        expect(py.length).toBe(js.length);
        py.forEach((p, i) => expect(p).toEqual({ row: js[i]!.row, promptIds: js[i]!.promptIds, responseIds: js[i]!.responseIds, oldLogProbs: js[i]!.oldLogProbs,
            reward: js[i]!.reward, agent: js[i]!.agent, turn: js[i]!.turn }));
    });

    it("refuses answers without exact ids unless re-tokenisation is asked for", () => {
        const textOnly = ts.map((t) => ({ ...t, turns: t.turns.map((row) => row.map((e) => ({ ...e, tokenIdsExact: false, endpoint: "http://x/v1" }))) }));
        const rewards = () => 1;
        expect(() => exportBatch(join(work, "b2"), textOnly, { rewards })).toThrow(/transcripts\[0\] \(q0\) turn 0 agent 0: the answer has no exact token ids .*http:\/\/x\/v1.*retokenize/);
        const info = exportBatch(join(work, "b2"), textOnly, { rewards, retokenize: policy.tokenizer });
        const back = readBatch(join(work, "b2"));
        expect(info.hasAdvantages).toBe(false);
        const e = textOnly[0]!.turns[0]![0]!;
        expect(back.rows[0]).toMatchObject({ retokenized: true, responseIds: policy.tokenizer.encode(e.text), promptIds: policy.tokenizer.encodeChat(e.prompt) });
        expect(back.rows[0]!.oldLogProbs.every((x) => Number.isNaN(x))).toBe(true);
    });

    it("non-finite rewards (failed episodes) are an error, or skipped and counted; bad options and damaged batches are named", () => {
        const { scores, shape } = transcriptScores(ts);
        const rewards = influenceRewards({ scores, shape });
        rewards[0] = NaN;
        expect(() => exportBatch(join(work, "b3"), ts, { rewards })).toThrow(/transcripts\[0\] \(q0\) turn 0 agent 0: the reward is NaN \(nonFinite: 'skip'/);
        const info = exportBatch(join(work, "b3"), ts, { rewards, nonFinite: "skip" });
        expect(info.skipped).toBe(1);
        expect(readBatch(join(work, "b3")).rows.length).toBe(info.rows);
        expect(() => exportBatch(join(work, "b4"), ts, { rewards: new Float32Array(3) })).toThrow(/rewards: expected a function or a Float32Array of \[Q, T, A\] = \[5, 2, 3\]/);
        expect(() => exportBatch(join(work, "b4"), ts, { rewards, rowsPerShard: 0 })).toThrow(/rowsPerShard: expected an integer >= 1/);
        expect(() => exportBatch(join(work, "b4"), ts, { rewards, nonFinite: "skip", advantages: () => [1, 2] })).toThrow(/advantages: expected a number or \d+ numbers/);
        expect(() => exportBatch(join(work, "b4"), ts, { rewards, shards: 2 } as never)).toThrow(/shards/);
        writeFileSync(join(work, "b3", "batch.json"), "{oops");
        expect(() => readBatch(join(work, "b3"))).toThrow(/batch\.json: not JSON/);
        expect(() => readBatch(join(work, "nothing"))).toThrow(/batch\.json: missing/);
    });
});
