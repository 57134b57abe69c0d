// batch.test.ts: exportBatch / readBatch. Debates on a native policy (exact ids) with a verifier, rewarded by
// influenceRewards, exported in shards and read back: every row equals its transcript entry (prompt ids, response
// ids, behaviour log-probs, reward, advantages, agent, turn, model); the padded tensors hold verl's layout (prompts
// left-padded, responses right-padded, the masks where the tokens are); answers without exact ids are refused unless
// re-tokenisation is asked for; failed episodes (non-finite rewards) are refused or skipped and counted; a damaged
// batch is a named error.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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
        expect(info).toMatchObject({ format: "maporl-batch", version: 2, rows: entries.length, hasAdvantages: true, skipped: 0 });
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

describe("a batch that does not verify is refused by both readers, naming what", () => {
    const py = join(import.meta.dirname, "..", "..", "bench", "python", "read_batch.py");
    type Header = Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
    // The shard's header and data section, edited in place.
    const editShard = (dir: string, f: (h: Header, data: Buffer) => Buffer | void) => {
        const path = join(dir, "batch-00000.safetensors"), buf = readFileSync(path), n = Number(buf.readBigUInt64LE(0));
        const h = JSON.parse(buf.subarray(8, 8 + n).toString()) as Header;
        const data = Buffer.from(buf.subarray(8 + n));
        const out = f(h, data) ?? data;
        const text = Buffer.from(JSON.stringify(h)), len = Buffer.alloc(8);
        len.writeBigUInt64LE(BigInt(text.length));
        writeFileSync(path, Buffer.concat([len, text, out]));
    };
    const f32 = (h: Header, data: Buffer, name: string, k: number, v: number) => data.writeFloatLE(v, h[name]!.data_offsets[0] + 4 * k);
    const i32 = (h: Header, data: Buffer, name: string, k: number, v: number) => data.writeInt32LE(v, h[name]!.data_offsets[0] + 4 * k);
    const manifest = (dir: string, f: (rows: Record<string, unknown>[]) => Record<string, unknown>[]) => {
        const rows = readFileSync(join(dir, "manifest.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
        writeFileSync(join(dir, "manifest.jsonl"), f(rows).map((r) => JSON.stringify(r)).join("\n") + "\n");
    };
    const info = (dir: string, f: (i: Record<string, unknown> & { shards: Record<string, unknown>[] }) => void) => {
        const i = JSON.parse(readFileSync(join(dir, "batch.json"), "utf8")) as Record<string, unknown> & { shards: Record<string, unknown>[] };
        f(i);
        writeFileSync(join(dir, "batch.json"), JSON.stringify(i));
    };
    // After a tensor edit, the digests written again: the field-by-field checks must catch it on their own.
    const resign = (dir: string) => info(dir, (i) => i.shards.forEach((s) => {
        const b = readFileSync(join(dir, s.file as string));
        s.sha256 = createHash("sha256").update(b).digest("hex");
        s.bytes = b.length;
    }));
    const cases: [string, (dir: string) => void, RegExp][] = [
        ["a flipped data byte (a log-prob of -3.4e37)", (d) => {
            const p = join(d, "batch-00000.safetensors"), b = readFileSync(p), n = Number(b.readBigUInt64LE(0));
            const h = JSON.parse(b.subarray(8, 8 + n).toString()) as Header;
            b.writeFloatLE(-3.4e37, 8 + n + h.old_log_probs!.data_offsets[0]);
            writeFileSync(p, b);
        }, /SHA-256 [0-9a-f]+, batch\.json says/],
        ["a truncated shard", (d) => { const p = join(d, "batch-00000.safetensors"); writeFileSync(p, readFileSync(p).subarray(0, 200)); }, /200 bytes, batch\.json says \d+/],
        ["header dtype I32 -> F32", (d) => { editShard(d, (h) => { h.response_ids!.dtype = "F32"; }); resign(d); }, /response_ids: expected I32/],
        ["overlapping offsets", (d) => { editShard(d, (h) => { h.turn!.data_offsets = [...h.agent!.data_offsets]; }); resign(d); }, /overlap|gap/],
        ["bytes after the tensors", (d) => { editShard(d, (_h, x) => Buffer.concat([x, Buffer.alloc(8)])); resign(d); }, /the data section has/],
        ["manifest responseLength + 2", (d) => manifest(d, (r) => { r[0]!.responseLength = (r[0]!.responseLength as number) + 2; return r; }), /row 0.*responseLength/],
        ["manifest promptLength + 3", (d) => manifest(d, (r) => { r[0]!.promptLength = (r[0]!.promptLength as number) + 3; return r; }), /row 0.*promptLength/],
        ["a duplicated index", (d) => manifest(d, (r) => { r[1]!.index = r[0]!.index; return r; }), /row 1.*index|named twice/],
        ["a manifest reward that disagrees", (d) => manifest(d, (r) => { r[0]!.reward = 99; return r; }), /rewards .*the manifest says 99|disagree/],
        ["shard \"0\" as a string", (d) => manifest(d, (r) => { r[0]!.shard = "0"; return r; }), /row 0: shard|row 0 is not valid/],
        ["batch.json rows + 1", (d) => info(d, (i) => { i.rows = (i.rows as number) + 1; }), /rows/],
        ["a manifest line missing", (d) => manifest(d, (r) => r.slice(1)), /rows, batch\.json says|row 0/],
        ["rows out of order", (d) => manifest(d, (r) => [r[1]!, r[0]!, ...r.slice(2)]), /row 0: row|row 0 is not valid/],
        ["a missing shard", (d) => rmSync(join(d, "batch-00001.safetensors")), /batch-00001\.safetensors/],
        ["a shard renamed in batch.json", (d) => info(d, (i) => { i.shards[0]!.file = "../x.safetensors"; }), /shards\[0\]/],
        ["the digest removed", (d) => info(d, (i) => { delete i.shards[0]!.sha256; }), /shards\[0\]: expected sha256/],
        ["an unknown version", (d) => info(d, (i) => { i.version = 3; }), /not a maporl batch/],
        ["NaN in old_log_probs", (d) => { editShard(d, (h, x) => { f32(h, x, "old_log_probs", 0, NaN); }); resign(d); }, /old_log_probs|log-probs/],
        ["a positive log-prob", (d) => { editShard(d, (h, x) => { f32(h, x, "old_log_probs", 0, 5.5); }); resign(d); }, /old_log_probs|log-probs/],
        ["a response mask bit flipped", (d) => { editShard(d, (h, x) => { i32(h, x, "response_mask", 0, 0); }); resign(d); }, /mask/],
        ["the agent tensor changed", (d) => { editShard(d, (h, x) => { i32(h, x, "agent", 0, 7); }); resign(d); }, /agent/],
        ["a reward tensor changed", (d) => { editShard(d, (h, x) => { f32(h, x, "rewards", 1, 42); }); resign(d); }, /rewards/],
        ["a negative response id", (d) => { editShard(d, (h, x) => { i32(h, x, "response_ids", 0, -5); }); resign(d); }, /response_ids|token ids/],
        ["padding changed", (d) => {
            editShard(d, (h, x) => { const [n, R] = h.response_ids!.shape as [number, number]; for (let i = 0; i < n; i++) i32(h, x, "response_ids", i * R + R - 1, 77); });
            resign(d);
        }, /response_ids|padding/],
        ["a manifest line that is not JSON", (d) => writeFileSync(join(d, "manifest.jsonl"), readFileSync(join(d, "manifest.jsonl"), "utf8").replace(/^\{/, "[")), /line 1: not JSON|manifest/],
    ];
    it.each(cases)("%s", (_what, corrupt, error) => {
        const src = join(work, "clean");
        if (!existsSync(src)) {
            const { scores, shape } = transcriptScores(ts);
            exportBatch(src, ts, { rewards: influenceRewards({ scores, shape }), rowsPerShard: 20 });
        }
        const dir = mkdtempSync(join(work, "corrupt-"));
        cpSync(src, dir, { recursive: true });
        corrupt(dir);
        expect(() => readBatch(dir)).toThrow(error);
        const r = spawnSync("python3", [py, dir], { encoding: "utf8" });
        expect(r.status).not.toBe(0);
        expect(r.stderr).toMatch(/BatchError|Error/);
    });
});
