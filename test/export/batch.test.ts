// batch.test.ts: exportBatch / readBatch. Debates on a native policy (exact ids) with a verifier, rewarded by
// influenceRewards, exported in shards and read back: every row equals its transcript entry (prompt ids, response
// ids, behaviour log-probs, reward, advantages, agent, turn, model); the padded tensors hold verl's layout (prompts
// left-padded, responses right-padded, the masks where the tokens are); answers without exact ids are refused unless
// re-tokenisation is asked for; failed episodes (non-finite rewards) are refused or skipped and counted; a damaged
// batch is a named error.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    Debate,
    exportBatch,
    fnVerifier,
    influenceRewards,
    NativePolicy,
    readBatch,
    readSafetensors,
    transcriptScores,
    type Transcript,
} from "../../lib/index.js";

const work = mkdtempSync(join(tmpdir(), "maporl-batch-"));
let policy: NativePolicy;
let ts: Transcript[];
afterAll(async () => {
    await policy?.dispose();
    rmSync(work, { recursive: true, force: true });
});

beforeAll(async () => {
    policy = await NativePolicy.create({ contextLength: 2048, layers: 1, heads: 2, dModel: 16, seed: 4, name: "tiny" });
    const verifier = fnVerifier("length", (x) => (x.response.length % 3 === 0 ? 1 : 0));
    ts = await new Debate({
        agents: [policy, policy, policy],
        turns: 2,
        verifier,
        sampling: { temperature: 1, maxTokens: 10 },
        seed: 3,
    }).runBatch(Array.from({ length: 5 }, (_, i) => ({ id: `q${i}`, question: `${i} + 1?`, reference: i + 1 })));
});

describe("exportBatch / readBatch", () => {
    it("round-trips every answer exactly, in verl's padded layout, over several shards", () => {
        const { scores, shape } = transcriptScores(ts);
        const rewards = influenceRewards({ scores, shape }, { discount: 0.3 });
        const dir = join(work, "b1");
        const info = exportBatch(dir, ts, {
            rewards,
            advantages: (_t, e) => e.agent - 1 + e.turn * 0.5,
            rowsPerShard: 7,
            padTokenId: 0,
        });
        const entries = ts.flatMap((t, q) => t.turns.flatMap((row) => row.map((e) => ({ t, q, e }))));
        expect(info).toMatchObject({
            format: "maporl-batch",
            version: 2,
            rows: entries.length,
            hasAdvantages: true,
            skipped: 0,
        });
        expect(info.shards.map((s) => s.rows)).toEqual([7, 7, 7, 7, 2]);
        const back = readBatch(dir);
        expect(back.info).toEqual(info);
        back.rows.forEach((r, i) => {
            const { t, q, e } = entries[i];
            expect(r).toMatchObject({
                row: i,
                episode: t.id,
                question: t.question,
                turn: e.turn,
                agent: e.agent,
                text: e.text,
                model: null,
                retokenized: false,
                finishReason: e.finishReason,
            });
            expect(r.promptIds).toEqual(e.promptTokenIds);
            expect(r.responseIds).toEqual(e.tokenIds);
            expect(r.oldLogProbs).toEqual(e.logprobs); // float32 on both sides
            expect(r.reward).toBe(rewards[(q * shape[1] + e.turn) * shape[2] + e.agent]);
            expect(r.advantages).toEqual(e.tokenIds!.map(() => Math.fround(e.agent - 1 + e.turn * 0.5)));
            expect(r.promptIds).toEqual(policy.tokenizer.encodeChat(e.prompt)); // the prompt the model read
        });
        // The tensors themselves: prompts left-padded, responses right-padded, masks over the tokens.
        const s0 = info.shards[0],
            t0 = new Map(readSafetensors(join(dir, s0.file)).tensors.map((x) => [x.name, x]));
        const P = s0.promptLength,
            R = s0.responseLength,
            r0 = back.rows[0];
        expect(t0.get("prompt_ids")!.shape).toEqual([7, P]);
        // verl's rollout_log_probs carries the sampler's log-probs beside old_log_probs (NaN padding compares by bits)
        expect(t0.get("rollout_log_probs")!.shape).toEqual([7, R]);
        const bytes = (x: { data: ArrayBufferView }) =>
            Buffer.from(x.data.buffer, x.data.byteOffset, x.data.byteLength);
        expect(bytes(t0.get("rollout_log_probs")!).equals(bytes(t0.get("old_log_probs")!))).toBe(true);
        const row0 = Array.from(t0.get("prompt_ids")!.data.subarray(0, P));
        expect(row0).toEqual([...new Array(P - r0.promptLength).fill(0), ...r0.promptIds]);
        const att = Array.from(t0.get("attention_mask")!.data.subarray(0, P + R));
        expect(att).toEqual([
            ...new Array(P - r0.promptLength).fill(0),
            ...new Array(r0.promptLength).fill(1),
            ...new Array(r0.responseLength).fill(1),
            ...new Array(R - r0.responseLength).fill(0),
        ]);
        expect(Array.from(t0.get("response_mask")!.data.subarray(0, R))).toEqual(att.slice(P));
        expect(t0.get("response_ids")!.data).toBeInstanceOf(Int32Array);
        expect(Array.from(t0.get("row")!.data)).toEqual([0, 1, 2, 3, 4, 5, 6]);
        const lines = readFileSync(join(dir, "manifest.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as { row: number; shard: number; index: number });
        expect(lines.map((l) => [l.shard, l.index])).toEqual(entries.map((_, i) => [Math.floor(i / 7), i % 7]));
    });

    it("the Python reader (numpy alone) reads what readBatch reads", () => {
        const dir = join(work, "b1");
        const r = spawnSync(
            "python3",
            [join(import.meta.dirname, "..", "..", "bench", "python", "read_batch.py"), dir],
            { encoding: "utf8" },
        );
        expect(r.stderr).toBe("");
        const py = JSON.parse(r.stdout) as {
            row: number;
            promptIds: number[];
            responseIds: number[];
            oldLogProbs: number[];
            reward: number;
            agent: number;
            turn: number;
        }[];
        const js = readBatch(dir).rows;
        expect(py.length).toBe(js.length);
        py.forEach((p, i) =>
            expect(p).toEqual({
                row: js[i].row,
                promptIds: js[i].promptIds,
                responseIds: js[i].responseIds,
                oldLogProbs: js[i].oldLogProbs,
                reward: js[i].reward,
                agent: js[i].agent,
                turn: js[i].turn,
            }),
        );
    });

    it("refuses answers without exact ids unless re-tokenisation is asked for", () => {
        const textOnly = ts.map((t) => ({
            ...t,
            turns: t.turns.map((row) => row.map((e) => ({ ...e, tokenIdsExact: false, endpoint: "http://x/v1" }))),
        }));
        const rewards = () => 1;
        expect(() => exportBatch(join(work, "b2"), textOnly, { rewards })).toThrow(
            /transcripts\[0\] \(q0\) turn 0 agent 0: the answer has no exact token ids .*http:\/\/x\/v1.*retokenize/,
        );
        const info = exportBatch(join(work, "b2"), textOnly, { rewards, retokenize: policy.tokenizer });
        const back = readBatch(join(work, "b2"));
        expect(info.hasAdvantages).toBe(false);
        const e = textOnly[0].turns[0][0];
        expect(back.rows[0]).toMatchObject({
            retokenized: true,
            responseIds: policy.tokenizer.encode(e.text),
            promptIds: policy.tokenizer.encodeChat(e.prompt),
        });
        expect(back.rows[0].oldLogProbs.every((x) => Number.isNaN(x))).toBe(true);
    });

    it("non-finite rewards (failed episodes) are an error, or skipped and counted; bad options and damaged batches are named", () => {
        const { scores, shape } = transcriptScores(ts);
        const rewards = influenceRewards({ scores, shape });
        rewards[0] = NaN;
        expect(() => exportBatch(join(work, "b3"), ts, { rewards })).toThrow(
            /transcripts\[0\] \(q0\) turn 0 agent 0: the reward is NaN \(nonFinite: 'skip'/,
        );
        const info = exportBatch(join(work, "b3"), ts, { rewards, nonFinite: "skip" });
        expect(info.skipped).toBe(1);
        expect(readBatch(join(work, "b3")).rows.length).toBe(info.rows);
        expect(() => exportBatch(join(work, "b4"), ts, { rewards: new Float32Array(3) })).toThrow(
            /rewards: expected a function or a Float32Array of \[Q, T, A\] = \[5, 2, 3\]/,
        );
        expect(() => exportBatch(join(work, "b4"), ts, { rewards, rowsPerShard: 0 })).toThrow(
            /rowsPerShard: expected an integer >= 1/,
        );
        expect(() =>
            exportBatch(join(work, "b4"), ts, { rewards, nonFinite: "skip", advantages: () => [1, 2] }),
        ).toThrow(/advantages: expected a number or \d+ numbers/);
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
        const path = join(dir, "batch-00000.safetensors"),
            buf = readFileSync(path),
            n = Number(buf.readBigUInt64LE(0));
        const h = JSON.parse(buf.subarray(8, 8 + n).toString()) as Header;
        const data = Buffer.from(buf.subarray(8 + n));
        const out = f(h, data) ?? data;
        const text = Buffer.from(JSON.stringify(h)),
            len = Buffer.alloc(8);
        len.writeBigUInt64LE(BigInt(text.length));
        writeFileSync(path, Buffer.concat([len, text, out]));
    };
    const f32 = (h: Header, data: Buffer, name: string, k: number, v: number) =>
        data.writeFloatLE(v, h[name].data_offsets[0] + 4 * k);
    const i32 = (h: Header, data: Buffer, name: string, k: number, v: number) =>
        data.writeInt32LE(v, h[name].data_offsets[0] + 4 * k);
    const manifest = (dir: string, f: (rows: Record<string, unknown>[]) => Record<string, unknown>[]) => {
        const rows = readFileSync(join(dir, "manifest.jsonl"), "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as Record<string, unknown>);
        writeFileSync(
            join(dir, "manifest.jsonl"),
            f(rows)
                .map((r) => JSON.stringify(r))
                .join("\n") + "\n",
        );
    };
    const info = (dir: string, f: (i: Record<string, unknown> & { shards: Record<string, unknown>[] }) => void) => {
        const i = JSON.parse(readFileSync(join(dir, "batch.json"), "utf8")) as Record<string, unknown> & {
            shards: Record<string, unknown>[];
        };
        f(i);
        writeFileSync(join(dir, "batch.json"), JSON.stringify(i));
    };
    // After a tensor edit, the digests written again: the field-by-field checks must catch it on their own.
    const resign = (dir: string) =>
        info(dir, (i) =>
            i.shards.forEach((s) => {
                const b = readFileSync(join(dir, s.file as string));
                s.sha256 = createHash("sha256").update(b).digest("hex");
                s.bytes = b.length;
            }),
        );
    const shard0 = "batch-00000\\.safetensors",
        shard1 = "batch-00001\\.safetensors";
    // [what, the corruption, what both readers' errors must say]: each names the file, and the row and field where
    // there is one. The clean batch: 30 rows in shards of 20 and 10, no advantages, pad id 0.
    const cases: [string, (dir: string) => void, RegExp][] = [
        [
            "a flipped data byte (a log-prob of -3.4e37)",
            (d) => {
                const p = join(d, "batch-00000.safetensors"),
                    b = readFileSync(p),
                    n = Number(b.readBigUInt64LE(0));
                const h = JSON.parse(b.subarray(8, 8 + n).toString()) as Header;
                b.writeFloatLE(-3.4e37, 8 + n + h.old_log_probs.data_offsets[0]);
                writeFileSync(p, b);
            },
            new RegExp(`${shard0}: SHA-256 [0-9a-f]{64}, batch\\.json says [0-9a-f]{64}`),
        ],
        [
            "a truncated shard",
            (d) => {
                const p = join(d, "batch-00000.safetensors");
                writeFileSync(p, readFileSync(p).subarray(0, 200));
            },
            new RegExp(`${shard0}: 200 bytes, batch\\.json says \\d+`),
        ],
        [
            "bytes appended to a shard",
            (d) => {
                const p = join(d, "batch-00001.safetensors");
                writeFileSync(p, Buffer.concat([readFileSync(p), Buffer.alloc(4)]));
            },
            new RegExp(`${shard1}: \\d+ bytes, batch\\.json says \\d+`),
        ],
        [
            "header dtype I32 -> F32",
            (d) => {
                editShard(d, (h) => {
                    h.response_ids.dtype = "F32";
                });
                resign(d);
            },
            new RegExp(`${shard0}: response_ids: expected I32`),
        ],
        [
            "header dtype F32 -> I32",
            (d) => {
                editShard(d, (h) => {
                    h.rewards.dtype = "I32";
                });
                resign(d);
            },
            new RegExp(`${shard0}: rewards: expected F32`),
        ],
        [
            "a header shape transposed",
            (d) => {
                editShard(d, (h) => {
                    h.response_ids.shape.reverse();
                });
                resign(d);
            },
            new RegExp(`${shard0}: response_ids missing or not of shape \\[?20, ?\\d+\\]?`),
        ],
        [
            "overlapping offsets",
            (d) => {
                editShard(d, (h) => {
                    h.turn.data_offsets = [...h.agent.data_offsets];
                });
                resign(d);
            },
            new RegExp(`${shard0}: .*overlap`),
        ],
        [
            "bytes after the tensors",
            (d) => {
                editShard(d, (_h, x) => Buffer.concat([x, Buffer.alloc(8)]));
                resign(d);
            },
            new RegExp(`${shard0}: .*the data section has`),
        ],
        [
            "a tensor missing",
            (d) => {
                editShard(d, (h, x) => {
                    const [b, e] = h.row.data_offsets;
                    delete h.row;
                    for (const v of Object.values(h))
                        if (v.data_offsets?.[0] >= e)
                            v.data_offsets = [v.data_offsets[0] - (e - b), v.data_offsets[1] - (e - b)];
                    return Buffer.concat([x.subarray(0, b), x.subarray(e)]);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row missing or not of shape`),
        ],
        [
            "hasAdvantages set without an advantages tensor",
            (d) =>
                info(d, (i) => {
                    i.hasAdvantages = true;
                }),
            new RegExp(`${shard0}: advantages missing`),
        ],
        [
            "manifest responseLength + 2",
            (d) =>
                manifest(d, (r) => {
                    r[0].responseLength = (r[0].responseLength as number) + 2;
                    return r;
                }),
            /(manifest\.jsonl: row 0: responseLength: \d+ is not valid|batch-00000\.safetensors: row 0 \(index 0\): response position \d+)/,
        ],
        [
            "manifest promptLength + 3",
            (d) =>
                manifest(d, (r) => {
                    r[0].promptLength = (r[0].promptLength as number) + 3;
                    return r;
                }),
            /(manifest\.jsonl: row 0: promptLength: \d+ is not valid|batch-00000\.safetensors: row 0 \(index 0\): prompt position \d+)/,
        ],
        [
            "manifest responseLength - 1",
            (d) =>
                manifest(d, (r) => {
                    r[2].responseLength = (r[2].responseLength as number) - 1;
                    return r;
                }),
            new RegExp(`${shard0}: row 2 \\(index 2\\): response position \\d+: .*responseLength`),
        ],
        [
            "a duplicated index (row 1 lost)",
            (d) =>
                manifest(d, (r) => {
                    r[1].index = r[0].index;
                    return r;
                }),
            /manifest\.jsonl: row 1: shard 0 index 0 is named twice/,
        ],
        [
            "an index out of its shard",
            (d) =>
                manifest(d, (r) => {
                    r[25].index = 10;
                    return r;
                }),
            /manifest\.jsonl: row 25: index: 10 is not valid/,
        ],
        [
            "a manifest reward that disagrees",
            (d) =>
                manifest(d, (r) => {
                    r[0].reward = 99;
                    return r;
                }),
            new RegExp(`${shard0}: row 0 \\(index 0\\): rewards \\S+, the manifest says 99`),
        ],
        [
            "a manifest reward that is a string",
            (d) =>
                manifest(d, (r) => {
                    r[0].reward = String(r[0].reward);
                    return r;
                }),
            /manifest\.jsonl: row 0: reward: "\S+" is not valid/,
        ],
        [
            "a manifest turn that disagrees",
            (d) =>
                manifest(d, (r) => {
                    r[0].turn = (r[0].turn as number) + 1;
                    return r;
                }),
            new RegExp(`${shard0}: row 0 \\(index 0\\): turn 0, the manifest says 1`),
        ],
        [
            'shard "0" as a string',
            (d) =>
                manifest(d, (r) => {
                    r[0].shard = "0";
                    return r;
                }),
            /manifest\.jsonl: row 0: shard: "0" is not valid/,
        ],
        [
            "retokenized absent",
            (d) =>
                manifest(d, (r) => {
                    delete r[3].retokenized;
                    return r;
                }),
            /manifest\.jsonl: row 3: retokenized: absent is not valid/,
        ],
        [
            "batch.json rows + 1",
            (d) =>
                info(d, (i) => {
                    i.rows = (i.rows as number) + 1;
                }),
            /batch\.json: the shards hold 30 rows, rows says 31/,
        ],
        [
            "batch.json: a shard's rows + 1 (and rows)",
            (d) =>
                info(d, (i) => {
                    i.rows = 31;
                    i.shards[1].rows = 11;
                }),
            /manifest\.jsonl: 30 rows, batch\.json says 31/,
        ],
        [
            "batch.json: a shard's promptLength + 1",
            (d) =>
                info(d, (i) => {
                    i.shards[0].promptLength = (i.shards[0].promptLength as number) + 1;
                }),
            new RegExp(`${shard0}: prompt_ids missing or not of shape`),
        ],
        [
            "batch.json: padTokenId changed",
            (d) =>
                info(d, (i) => {
                    i.padTokenId = 5;
                }),
            /row \d+ \(index \d+\): (prompt|response) position \d+: .*padded with 5/,
        ],
        [
            "a manifest line missing",
            (d) => manifest(d, (r) => r.slice(1)),
            /manifest\.jsonl: 29 rows, batch\.json says 30/,
        ],
        [
            "a manifest line added",
            (d) => manifest(d, (r) => [...r, r[29]]),
            /manifest\.jsonl: 31 rows, batch\.json says 30/,
        ],
        [
            "rows out of order",
            (d) => manifest(d, (r) => [r[1], r[0], ...r.slice(2)]),
            /manifest\.jsonl: row 0: row: 1 is not valid/,
        ],
        ["a missing shard", (d) => rmSync(join(d, "batch-00001.safetensors")), new RegExp(`${shard1}: missing`)],
        [
            "a shard renamed on disk",
            (d) => renameSync(join(d, "batch-00000.safetensors"), join(d, "batch-00002.safetensors")),
            new RegExp(`${shard0}: missing`),
        ],
        [
            "two shards swapped",
            (d) => {
                const a = join(d, "batch-00000.safetensors"),
                    b = join(d, "batch-00001.safetensors"),
                    x = readFileSync(a);
                writeFileSync(a, readFileSync(b));
                writeFileSync(b, x);
            },
            new RegExp(`${shard0}: \\d+ bytes, batch\\.json says \\d+`),
        ],
        [
            "a shard renamed in batch.json",
            (d) =>
                info(d, (i) => {
                    i.shards[0].file = "../x.safetensors";
                }),
            /batch\.json: shards\[0\]: expected \{ file: batch-NNNNN/,
        ],
        [
            "the digest removed",
            (d) =>
                info(d, (i) => {
                    delete i.shards[0].sha256;
                }),
            /batch\.json: shards\[0\]: expected sha256/,
        ],
        [
            "an unknown version",
            (d) =>
                info(d, (i) => {
                    i.version = 3;
                }),
            /not a maporl batch \(version 1 or 2\)/,
        ],
        [
            "NaN in old_log_probs",
            (d) => {
                editShard(d, (h, x) => {
                    f32(h, x, "old_log_probs", 0, NaN);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): old_log_probs\\[0\\] = (NaN|nan): expected a finite log-prob`),
        ],
        [
            "-Infinity in old_log_probs",
            (d) => {
                editShard(d, (h, x) => {
                    f32(h, x, "old_log_probs", 1, -Infinity);
                });
                resign(d);
            },
            new RegExp(
                `${shard0}: row 0 \\(index 0\\): old_log_probs\\[1\\] = -(Infinity|inf): expected a finite log-prob`,
            ),
        ],
        [
            "a positive log-prob",
            (d) => {
                editShard(d, (h, x) => {
                    f32(h, x, "old_log_probs", 0, 5.5);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): old_log_probs\\[0\\] = 5\\.5: expected a finite log-prob`),
        ],
        [
            "a response mask bit flipped",
            (d) => {
                editShard(d, (h, x) => {
                    i32(h, x, "response_mask", 0, 0);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): response position 0: response_mask`),
        ],
        [
            "an attention mask bit flipped",
            (d) => {
                editShard(d, (h, x) => {
                    const [, W] = h.attention_mask.shape as [number, number];
                    i32(
                        h,
                        x,
                        "attention_mask",
                        W + W - 1,
                        1 - x.readInt32LE(h.attention_mask.data_offsets[0] + 4 * (2 * W - 1)),
                    );
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 1 \\(index 1\\): (prompt|response) position \\d+: .*attention_mask`),
        ],
        [
            "the agent tensor changed",
            (d) => {
                editShard(d, (h, x) => {
                    i32(h, x, "agent", 0, 7);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): agent 7, the manifest says 0`),
        ],
        [
            "the row tensor changed",
            (d) => {
                editShard(d, (h, x) => {
                    i32(h, x, "row", 4, 5);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 4 \\(index 4\\): row 5, the manifest says 4`),
        ],
        [
            "a reward tensor changed",
            (d) => {
                editShard(d, (h, x) => {
                    f32(h, x, "rewards", 1, 42);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 1 \\(index 1\\): rewards 42(\\.0)?, the manifest says`),
        ],
        [
            "a negative response id",
            (d) => {
                editShard(d, (h, x) => {
                    i32(h, x, "response_ids", 0, -5);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): response position 0: .*response_ids`),
        ],
        [
            "padding changed",
            (d) => {
                editShard(d, (h, x) => {
                    const [n, R] = h.response_ids.shape as [number, number];
                    for (let i = 0; i < n; i++) i32(h, x, "response_ids", i * R + R - 1, 77);
                });
                resign(d);
            },
            new RegExp(`${shard0}: row \\d+ \\(index \\d+\\): response position \\d+: .*right-padded with 0`),
        ],
        [
            "a manifest line that is not JSON",
            (d) =>
                writeFileSync(
                    join(d, "manifest.jsonl"),
                    readFileSync(join(d, "manifest.jsonl"), "utf8").replace(/^\{/, "["),
                ),
            /manifest\.jsonl: line 1: not JSON/,
        ],
        ["batch.json not JSON", (d) => writeFileSync(join(d, "batch.json"), "{"), /batch\.json: not JSON/],
        // Version 1 (no digests) is still read, so a version 1 batch gets every other check: the reward edit.
        [
            "a version 1 batch whose manifest reward disagrees",
            (d) => {
                info(d, (i) => {
                    i.version = 1;
                    for (const s of i.shards) {
                        delete s.sha256;
                        delete s.bytes;
                    }
                });
                manifest(d, (r) => {
                    r[0].reward = 99;
                    return r;
                });
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): rewards \\S+, the manifest says 99`),
        ],
        // (A version 1 log-prob changed to another plausible one, such as -3.4e37, cannot be told from a true one: the
        // digests of version 2 are what catch that.)
        [
            "a version 1 batch with a positive log-prob",
            (d) => {
                info(d, (i) => {
                    i.version = 1;
                    for (const s of i.shards) {
                        delete s.sha256;
                        delete s.bytes;
                    }
                });
                editShard(d, (h, x) => {
                    f32(h, x, "old_log_probs", 2, 2);
                });
            },
            new RegExp(`${shard0}: row 0 \\(index 0\\): old_log_probs\\[2\\] = 2(\\.0)?: expected a finite log-prob`),
        ],
    ];
    const clean = () => {
        const src = join(work, "clean");
        if (!existsSync(src)) {
            const { scores, shape } = transcriptScores(ts);
            exportBatch(src, ts, { rewards: influenceRewards({ scores, shape }), rowsPerShard: 20 });
        }
        const dir = mkdtempSync(join(work, "corrupt-"));
        cpSync(src, dir, { recursive: true });
        return dir;
    };
    const python = (dir: string) => spawnSync("python3", [py, dir], { encoding: "utf8" });
    it.each(cases)("%s", (_what, corrupt, error) => {
        const dir = clean();
        corrupt(dir);
        expect(() => readBatch(dir)).toThrow(error);
        const r = python(dir);
        expect(r.error).toBeUndefined(); // python3 (with numpy) is required, as for the round trip above
        expect(r.stdout).toBe("");
        expect(r.stderr).toMatch(/^read_batch\.py: BatchError: /);
        expect(r.stderr).toMatch(error);
        expect(r.status).toBe(1);
    });
    it("the clean batch, and the same batch as version 1 (no digests), are read by both", () => {
        const dir = clean(),
            v2 = readBatch(dir).rows;
        expect(v2.length).toBe(30);
        info(dir, (i) => {
            i.version = 1;
            for (const s of i.shards) {
                delete s.sha256;
                delete s.bytes;
            }
        });
        expect(readBatch(dir).rows).toEqual(v2);
        const r = python(dir);
        expect(r.status, r.stderr).toBe(0);
        expect((JSON.parse(r.stdout) as { reward: number }[]).map((x) => x.reward)).toEqual(v2.map((x) => x.reward));
    });
});
