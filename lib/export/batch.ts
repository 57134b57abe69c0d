// batch.ts: training batches for any trainer, from debate transcripts: one row per (question, turn, agent) answer
// with its prompt ids, response ids, behaviour log-probs, reward (influence-aware or any), advantages when given,
// masks, the agent, turn and served model (adapter version). Written as safetensors shards of padded tensors, laid
// out as verl's rollout batch (prompts left-padded, responses right-padded), plus batch.json (what the shards hold)
// and manifest.jsonl (one line per row: where it is and where it came from). readBatch reads it back exactly.
// A row must carry the exact ids the model read and sampled (Generation.tokenIdsExact); an answer from a backend
// without ids is refused unless `retokenize` is given (its log-probs are then NaN and the row says so).
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import type { Transcript, TurnEntry } from "../debate/transcript.js";
import { replaceDirDurable, writeFileDurable } from "../durable.js";
import { readRegularFile, readTextFile } from "../files.js";
import type { ChatMessage } from "../policy/types.js";
import { readSafetensors, writeSafetensors } from "../model/safetensors.js";
import { describe, requireOptions } from "../validate.js";

/** A value per (question, turn, agent): a [Q, T, A] array as transcriptScores lays it out (e.g. influenceRewards'
 * rewards), or a function of the answer. */
export type PerAnswer<T> = Float32Array | ((transcript: Transcript, entry: TurnEntry) => T);

export interface ExportOptions {
    /** Each answer's reward. */
    rewards: PerAnswer<number>;
    /** Each answer's advantage: a number (broadcast over its response tokens), or, from a function, one per response
     * token. Omitted: no advantages tensor. */
    advantages?: PerAnswer<number | readonly number[]>;
    /** Rows per shard. Defaults to 1024. */
    rowsPerShard?: number;
    /** The id written at padded positions. Defaults to 0. */
    padTokenId?: number;
    /** For answers without exact ids (a server that gave text only): a tokenizer whose encodeChat(prompt) and
     * encode(text) stand in; such rows get NaN log-probs and `retokenized: true`. Without it they are an error. */
    retokenize?: { encode(text: string): number[]; encodeChat(messages: readonly ChatMessage[]): number[] };
    /** An answer whose reward is not finite (its episode failed before it was scored): 'error' (default) or 'skip'
     * (counted in batch.json). */
    nonFinite?: "error" | "skip";
}

/** batch.json. */
export interface BatchInfo {
    format: "maporl-batch";
    /** 2: shards carry their SHA-256 and size (version 1 batches are still read, every check but the digests). */
    version: 1 | 2;
    rows: number;
    padTokenId: number;
    shards: {
        file: string;
        rows: number;
        promptLength: number;
        responseLength: number;
        sha256?: string;
        bytes?: number;
    }[];
    hasAdvantages: boolean;
    /** Answers left out under nonFinite 'skip'. */
    skipped: number;
}

/** A manifest.jsonl line. */
export interface ManifestRow {
    row: number;
    shard: number;
    /** The row's index within its shard. */
    index: number;
    episode: string;
    question: string;
    turn: number;
    agent: number;
    reward: number;
    promptLength: number;
    responseLength: number;
    finishReason: string;
    /** The served model that answered (an adapter's version), the endpoint, when known. */
    model: string | null;
    endpoint: string | null;
    retokenized: boolean;
    text: string;
}

/** A row as readBatch gives it back: the manifest line and its tensors without padding. */
export interface BatchRow extends ManifestRow {
    promptIds: number[];
    responseIds: number[];
    oldLogProbs: number[];
    advantages?: number[];
}

interface Row {
    meta: Omit<ManifestRow, "row" | "shard" | "index">;
    prompt: number[];
    response: number[];
    logp: number[];
    adv: number[] | null;
}

const FN = "exportBatch";

function perAnswer<T>(
    what: string,
    x: PerAnswer<T> | undefined,
    ts: Transcript[],
): ((q: number, e: TurnEntry) => T | number) | null {
    if (x === undefined) return null;
    if (typeof x === "function") return (q, e) => x(ts[q]!, e);
    const A = ts[0]!.agents,
        T = Math.max(...ts.map((t) => t.turns.length));
    if (!(x instanceof Float32Array) || x.length !== ts.length * T * A)
        throw new TypeError(
            `${FN}: ${what}: expected a function or a Float32Array of [Q, T, A] = [${ts.length}, ${T}, ${A}] (${ts.length * T * A} values, as transcriptScores), got ${describe(x)}`,
        );
    return (q, e) => x[(q * T + e.turn) * A + e.agent]!;
}

/** Writes `transcripts`' answers as a batch directory `dir` (replacing it atomically); returns batch.json's content. */
export function exportBatch(dir: string, transcripts: Transcript[], options: ExportOptions): BatchInfo {
    if (typeof dir !== "string" || !dir)
        throw new TypeError(`${FN}: dir: expected a directory path, got ${describe(dir)}`);
    if (!Array.isArray(transcripts) || transcripts.length === 0)
        throw new TypeError(`${FN}: transcripts: expected a non-empty array`);
    const o = requireOptions<ExportOptions>(FN, "options", options, [
        "rewards",
        "advantages",
        "rowsPerShard",
        "padTokenId",
        "retokenize",
        "nonFinite",
    ]);
    const per = o.rowsPerShard ?? 1024,
        pad = o.padTokenId ?? 0,
        nonFinite = o.nonFinite ?? "error";
    if (!Number.isInteger(per) || per < 1)
        throw new RangeError(`${FN}: rowsPerShard: expected an integer >= 1, got ${describe(per)}`);
    if (!Number.isInteger(pad) || pad < 0)
        throw new RangeError(`${FN}: padTokenId: expected an integer >= 0, got ${describe(pad)}`);
    if (nonFinite !== "error" && nonFinite !== "skip")
        throw new RangeError(`${FN}: nonFinite: expected 'error' or 'skip', got ${describe(nonFinite)}`);
    transcripts.forEach((t, q) => {
        if (!t || !Array.isArray(t.turns)) throw new TypeError(`${FN}: transcripts[${q}]: expected a transcript`);
    });
    const reward = perAnswer("rewards", o.rewards, transcripts);
    if (reward === null) throw new TypeError(`${FN}: rewards: required`);
    const advantage = perAnswer("advantages", o.advantages, transcripts);
    const rows: Row[] = [];
    let skipped = 0;
    transcripts.forEach((tr, q) =>
        tr.turns.forEach((turn) =>
            turn.forEach((e) => {
                const at = `transcripts[${q}] (${tr.id}) turn ${e.turn} agent ${e.agent}`;
                const r = Number(reward(q, e));
                if (!Number.isFinite(r)) {
                    if (nonFinite === "skip") {
                        skipped++;
                        return;
                    }
                    throw new RangeError(
                        `${FN}: ${at}: the reward is ${r} (nonFinite: 'skip' leaves such answers out)`,
                    );
                }
                let prompt: number[],
                    response: number[],
                    logp: number[],
                    retokenized = false;
                if (e.tokenIdsExact === true && e.tokenIds && e.promptTokenIds) {
                    prompt = e.promptTokenIds;
                    response = e.tokenIds;
                    logp = e.logprobs ?? [];
                    if (logp.length !== response.length)
                        throw new RangeError(`${FN}: ${at}: ${response.length} token ids but ${logp.length} log-probs`);
                } else if (o.retokenize) {
                    prompt = o.retokenize.encodeChat(e.prompt);
                    response = o.retokenize.encode(e.text);
                    logp = response.map(() => NaN);
                    retokenized = true;
                } else
                    throw new Error(
                        `${FN}: ${at}: the answer has no exact token ids (its backend gave text only${e.endpoint ? `: ${e.endpoint}` : ""}); ` +
                            "use a server that returns ids (vLLM, SGLang, maporl serve), or pass retokenize: a tokenizer, accepting ids that may differ from the sampled ones",
                    );
                let adv: number[] | null = null;
                if (advantage) {
                    const a = advantage(q, e);
                    adv = typeof a === "number" ? response.map(() => a) : Array.isArray(a) ? [...(a as number[])] : [];
                    if (adv.length !== response.length || adv.some((x) => typeof x !== "number"))
                        throw new RangeError(
                            `${FN}: ${at}: advantages: expected a number or ${response.length} numbers (one per response token), got ${describe(a)}`,
                        );
                }
                rows.push({
                    meta: {
                        episode: tr.id,
                        question: tr.question,
                        turn: e.turn,
                        agent: e.agent,
                        reward: r,
                        promptLength: prompt.length,
                        responseLength: response.length,
                        finishReason: e.finishReason,
                        model: e.model ?? null,
                        endpoint: e.endpoint ?? null,
                        retokenized,
                        text: e.text,
                    },
                    prompt,
                    response,
                    logp,
                    adv,
                });
            }),
        ),
    );
    if (rows.length === 0)
        throw new RangeError(`${FN}: no answer to export (${skipped} skipped for a non-finite reward)`);
    const info: BatchInfo = {
        format: "maporl-batch",
        version: 2,
        rows: rows.length,
        padTokenId: pad,
        shards: [],
        hasAdvantages: advantage !== null,
        skipped,
    };
    replaceDirDurable(dir, (tmp) => {
        const manifest: string[] = [];
        for (let s = 0; s * per < rows.length; s++) {
            const part = rows.slice(s * per, (s + 1) * per),
                n = part.length;
            const P = Math.max(1, ...part.map((r) => r.prompt.length)),
                R = Math.max(1, ...part.map((r) => r.response.length));
            const promptIds = new Int32Array(n * P).fill(pad),
                responseIds = new Int32Array(n * R).fill(pad);
            const attention = new Int32Array(n * (P + R)),
                responseMask = new Int32Array(n * R);
            const logp = new Float32Array(n * R),
                adv = new Float32Array(advantage ? n * R : 0),
                rew = new Float32Array(n);
            const agent = new Int32Array(n),
                turn = new Int32Array(n),
                row = new Int32Array(n);
            part.forEach((r, i) => {
                const off = P - r.prompt.length; // prompts left-padded, responses right-padded (verl's layout)
                r.prompt.forEach((id, k) => {
                    promptIds[i * P + off + k] = id;
                    attention[i * (P + R) + off + k] = 1;
                });
                r.response.forEach((id, k) => {
                    responseIds[i * R + k] = id;
                    responseMask[i * R + k] = 1;
                    attention[i * (P + R) + P + k] = 1;
                    logp[i * R + k] = r.logp[k]!;
                    if (r.adv) adv[i * R + k] = r.adv[k]!;
                });
                rew[i] = r.meta.reward;
                agent[i] = r.meta.agent;
                turn[i] = r.meta.turn;
                row[i] = s * per + i;
                manifest.push(JSON.stringify({ row: s * per + i, shard: s, index: i, ...r.meta }));
            });
            const file = `batch-${String(s).padStart(5, "0")}.safetensors`;
            writeSafetensors(
                join(tmp, file),
                [
                    { name: "prompt_ids", shape: [n, P], data: promptIds },
                    { name: "response_ids", shape: [n, R], data: responseIds },
                    { name: "attention_mask", shape: [n, P + R], data: attention },
                    { name: "response_mask", shape: [n, R], data: responseMask },
                    { name: "old_log_probs", shape: [n, R], data: logp },
                    // verl's name for the sampler's log-probs: its rollout correction compares them with the
                    // old_log_probs a trainer recomputes (the same values here, until one does)
                    { name: "rollout_log_probs", shape: [n, R], data: logp },
                    { name: "rewards", shape: [n], data: rew },
                    ...(advantage ? [{ name: "advantages", shape: [n, R], data: adv }] : []),
                    { name: "agent", shape: [n], data: agent },
                    { name: "turn", shape: [n], data: turn },
                    { name: "row", shape: [n], data: row },
                ],
                { format: "pt", maporl: "batch", version: "1" },
            );
            const bytes = readFileSync(join(tmp, file));
            info.shards.push({
                file,
                rows: n,
                promptLength: P,
                responseLength: R,
                sha256: createHash("sha256").update(bytes).digest("hex"),
                bytes: bytes.length,
            });
        }
        writeFileDurable(join(tmp, "manifest.jsonl"), manifest.join("\n") + "\n");
        writeFileDurable(join(tmp, "batch.json"), JSON.stringify(info, null, 2));
    });
    return info;
}

/**
 * Reads a batch directory written by exportBatch: batch.json and every row (manifest line and unpadded tensors). The
 * batch is verified before any row is returned, and a batch that does not verify is an error naming the file, the row
 * and the field: each shard's SHA-256 and size (version 2), its tensors' names, dtypes and shapes (and their byte
 * ranges, by the safetensors reader), and the manifest against the tensors field by field: every (shard, index) once,
 * the counts of batch.json, lengths within the padded widths, the masks and padding where the lengths put them, the
 * rewards, agents, turns and rows equal, token ids non-negative, log-probs finite and <= 1e-3 (NaN for re-tokenised
 * rows).
 */
export function readBatch(dir: string): { info: BatchInfo; rows: BatchRow[] } {
    const fn = "readBatch";
    const bad = (where: string, what: string) => new SyntaxError(`${fn}: ${join(dir, where)}: ${what}`);
    let info: BatchInfo;
    try {
        info = JSON.parse(readTextFile(join(dir, "batch.json"), "batch.json")) as BatchInfo;
    } catch (e) {
        throw new SyntaxError(
            `${fn}: ${join(dir, "batch.json")}: ${existsSync(join(dir, "batch.json")) ? "not JSON" : "missing"} (${(e as Error).message})`,
        );
    }
    if (info?.format !== "maporl-batch" || (info.version !== 1 && info.version !== 2))
        throw new SyntaxError(`${fn}: ${dir}: not a maporl batch (version 1 or 2)`);
    const int = (x: unknown, lo = 0) => Number.isSafeInteger(x) && (x as number) >= lo;
    if (
        !int(info.rows, 1) ||
        !int(info.padTokenId) ||
        !Array.isArray(info.shards) ||
        info.shards.length === 0 ||
        typeof info.hasAdvantages !== "boolean"
    )
        throw bad("batch.json", "expected rows, padTokenId, shards and hasAdvantages");
    info.shards.forEach((s, k) => {
        if (
            !s ||
            typeof s.file !== "string" ||
            !/^batch-\d{5}\.safetensors$/.test(s.file) ||
            !int(s.rows, 1) ||
            !int(s.promptLength, 1) ||
            !int(s.responseLength, 1)
        )
            throw bad(
                "batch.json",
                `shards[${k}]: expected { file: batch-NNNNN.safetensors, rows, promptLength, responseLength } (integers >= 1)`,
            );
        if (info.version === 2 && (typeof s.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(s.sha256) || !int(s.bytes)))
            throw bad("batch.json", `shards[${k}]: expected sha256 (64 hex digits) and bytes`);
    });
    if (info.shards.reduce((a, s) => a + s.rows, 0) !== info.rows)
        throw bad(
            "batch.json",
            `the shards hold ${info.shards.reduce((a, s) => a + s.rows, 0)} rows, rows says ${info.rows}`,
        );
    const lines = readTextFile(join(dir, "manifest.jsonl"), "manifest.jsonl")
        .split("\n")
        .filter((l) => l.length > 0);
    if (lines.length !== info.rows) throw bad("manifest.jsonl", `${lines.length} rows, batch.json says ${info.rows}`);
    const rows = lines.map((l, i) => {
        let m: ManifestRow;
        try {
            m = JSON.parse(l) as ManifestRow;
        } catch {
            throw bad("manifest.jsonl", `line ${i + 1}: not JSON`);
        }
        const field = (k: keyof ManifestRow, ok: boolean) => {
            if (!ok) throw bad("manifest.jsonl", `row ${i}: ${k}: ${JSON.stringify(m?.[k]) ?? "absent"} is not valid`);
        };
        field("row", m?.row === i);
        field("shard", int(m.shard) && m.shard < info.shards.length);
        field("index", int(m.index) && m.index < info.shards[m.shard]!.rows);
        field("promptLength", int(m.promptLength, 1) && m.promptLength <= info.shards[m.shard]!.promptLength);
        field("responseLength", int(m.responseLength) && m.responseLength <= info.shards[m.shard]!.responseLength);
        field("reward", typeof m.reward === "number" && Number.isFinite(m.reward));
        field("agent", int(m.agent));
        field("turn", int(m.turn));
        field("retokenized", typeof m.retokenized === "boolean");
        return m;
    });
    const seen = new Set<string>();
    for (const m of rows) {
        const k = `${m.shard}/${m.index}`;
        if (seen.has(k)) throw bad("manifest.jsonl", `row ${m.row}: shard ${m.shard} index ${m.index} is named twice`);
        seen.add(k);
    }
    const ids = ["prompt_ids", "response_ids", "attention_mask", "response_mask", "agent", "turn", "row"];
    const shards = info.shards.map((s) => {
        const path = join(dir, s.file);
        if (info.version === 2) {
            const bytes = readRegularFile(path, Number.MAX_SAFE_INTEGER, "a batch shard");
            if (bytes.length !== s.bytes)
                throw bad(s.file, `${bytes.length} bytes, batch.json says ${s.bytes} (truncated or changed)`);
            const digest = createHash("sha256").update(bytes).digest("hex");
            if (digest !== s.sha256)
                throw bad(
                    s.file,
                    `SHA-256 ${digest}, batch.json says ${s.sha256} (the shard changed after it was written)`,
                );
        }
        let tensors: ReturnType<typeof readSafetensors>["tensors"];
        try {
            tensors = readSafetensors(path).tensors;
        } catch (e) {
            throw new SyntaxError(`${fn}: ${(e as Error).message}`);
        }
        const t = new Map(tensors.map((x) => [x.name, x]));
        const n = s.rows,
            P = s.promptLength,
            R = s.responseLength;
        const need = <K extends "i" | "f">(
            name: string,
            shape: number[],
            kind: K,
        ): K extends "i" ? Int32Array : Float32Array => {
            const x = t.get(name);
            if (!x || x.shape.join() !== shape.join()) throw bad(s.file, `${name} missing or not of shape [${shape}]`);
            if ((kind === "i") !== x.data instanceof Int32Array)
                throw bad(s.file, `${name}: expected ${kind === "i" ? "I32" : "F32"}`);
            return x.data as K extends "i" ? Int32Array : Float32Array;
        };
        for (const name of ids)
            if (t.has(name) && !(t.get(name)!.data instanceof Int32Array)) throw bad(s.file, `${name}: expected I32`);
        return {
            P,
            R,
            prompt: need("prompt_ids", [n, P], "i"),
            response: need("response_ids", [n, R], "i"),
            mask: need("response_mask", [n, R], "i"),
            attention: need("attention_mask", [n, P + R], "i"),
            logp: need("old_log_probs", [n, R], "f"),
            rewards: need("rewards", [n], "f"),
            agent: need("agent", [n], "i"),
            turn: need("turn", [n], "i"),
            row: need("row", [n], "i"),
            adv: info.hasAdvantages ? need("advantages", [n, R], "f") : null,
        };
    });
    const pad = info.padTokenId;
    return {
        info,
        rows: rows.map((m) => {
            const s = shards[m.shard]!,
                i = m.index,
                { P, R } = s,
                file = info.shards[m.shard]!.file;
            const wrong = (what: string) => bad(file, `row ${m.row} (index ${i}): ${what}`);
            if (s.rewards[i] !== Math.fround(m.reward))
                throw wrong(`rewards ${s.rewards[i]}, the manifest says ${m.reward}`);
            for (const k of ["agent", "turn", "row"] as const)
                if (s[k][i] !== m[k]) throw wrong(`${k} ${s[k][i]}, the manifest says ${m[k]}`);
            const lp = m.promptLength,
                lr = m.responseLength;
            for (let k = 0; k < P; k++) {
                const inPrompt = k >= P - lp,
                    id = s.prompt[i * P + k]!;
                if (s.attention[i * (P + R) + k] !== (inPrompt ? 1 : 0) || (inPrompt ? id < 0 : id !== pad))
                    throw wrong(
                        `prompt position ${k}: attention_mask / prompt_ids disagree with promptLength ${lp} (left-padded with ${pad})`,
                    );
            }
            for (let k = 0; k < R; k++) {
                const inResp = k < lr,
                    id = s.response[i * R + k]!,
                    on = inResp ? 1 : 0;
                if (
                    s.mask[i * R + k] !== on ||
                    s.attention[i * (P + R) + P + k] !== on ||
                    (inResp ? id < 0 : id !== pad)
                )
                    throw wrong(
                        `response position ${k}: response_mask / attention_mask / response_ids disagree with responseLength ${lr} (right-padded with ${pad})`,
                    );
                const l = s.logp[i * R + k]!;
                if (inResp && !(m.retokenized ? Number.isNaN(l) : Number.isFinite(l) && l <= 1e-3))
                    throw wrong(
                        `old_log_probs[${k}] = ${l}: expected ${m.retokenized ? "NaN (a re-tokenised row)" : "a finite log-prob <= 0"}`,
                    );
            }
            const promptIds = Array.from(s.prompt.subarray(i * P + P - lp, (i + 1) * P));
            const take = (a: Float32Array | Int32Array) => Array.from(a.subarray(i * R, i * R + lr));
            return {
                ...m,
                promptIds,
                responseIds: take(s.response),
                oldLogProbs: take(s.logp),
                ...(s.adv ? { advantages: take(s.adv) } : {}),
            };
        }),
    };
}
