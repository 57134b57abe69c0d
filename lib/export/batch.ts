// batch.ts: training batches for any trainer, from debate transcripts: one row per (question, turn, agent) answer
// with its prompt ids, response ids, behaviour log-probs, reward (influence-aware or any), advantages when given,
// masks, the agent, turn and served model (adapter version). Written as safetensors shards of padded tensors, laid
// out as verl's rollout batch (prompts left-padded, responses right-padded), plus batch.json (what the shards hold)
// and manifest.jsonl (one line per row: where it is and where it came from). readBatch reads it back exactly.
// A row must carry the exact ids the model read and sampled (Generation.tokenIdsExact); an answer from a backend
// without ids is refused unless `retokenize` is given (its log-probs are then NaN and the row says so).
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import type { Transcript, TurnEntry } from "../debate/transcript.js";
import { replaceDirDurable, writeFileDurable } from "../durable.js";
import type { ChatMessage } from "../policy/types.js";
import { readSafetensors, writeSafetensors } from "../policy/safetensors.js";
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
    version: 1;
    rows: number;
    padTokenId: number;
    shards: { file: string; rows: number; promptLength: number; responseLength: number }[];
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

interface Row { meta: Omit<ManifestRow, "row" | "shard" | "index">; prompt: number[]; response: number[]; logp: number[]; adv: number[] | null }

const FN = "exportBatch";

function perAnswer<T>(what: string, x: PerAnswer<T> | undefined, ts: Transcript[]): ((q: number, e: TurnEntry) => T | number) | null {
    if (x === undefined) return null;
    if (typeof x === "function") return (q, e) => x(ts[q]!, e);
    const A = ts[0]!.agents, T = Math.max(...ts.map((t) => t.turns.length));
    if (!(x instanceof Float32Array) || x.length !== ts.length * T * A)
        throw new TypeError(`${FN}: ${what}: expected a function or a Float32Array of [Q, T, A] = [${ts.length}, ${T}, ${A}] (${ts.length * T * A} values, as transcriptScores), got ${describe(x)}`);
    return (q, e) => x[(q * T + e.turn) * A + e.agent]!;
}

/** Writes `transcripts`' answers as a batch directory `dir` (replacing it atomically); returns batch.json's content. */
export function exportBatch(dir: string, transcripts: Transcript[], options: ExportOptions): BatchInfo {
    if (typeof dir !== "string" || !dir) throw new TypeError(`${FN}: dir: expected a directory path, got ${describe(dir)}`);
    if (!Array.isArray(transcripts) || transcripts.length === 0) throw new TypeError(`${FN}: transcripts: expected a non-empty array`);
    const o = requireOptions<ExportOptions>(FN, "options", options, ["rewards", "advantages", "rowsPerShard", "padTokenId", "retokenize", "nonFinite"]);
    const per = o.rowsPerShard ?? 1024, pad = o.padTokenId ?? 0, nonFinite = o.nonFinite ?? "error";
    if (!Number.isInteger(per) || per < 1) throw new RangeError(`${FN}: rowsPerShard: expected an integer >= 1, got ${describe(per)}`);
    if (!Number.isInteger(pad) || pad < 0) throw new RangeError(`${FN}: padTokenId: expected an integer >= 0, got ${describe(pad)}`);
    if (nonFinite !== "error" && nonFinite !== "skip") throw new RangeError(`${FN}: nonFinite: expected 'error' or 'skip', got ${describe(nonFinite)}`);
    transcripts.forEach((t, q) => { if (!t || !Array.isArray(t.turns)) throw new TypeError(`${FN}: transcripts[${q}]: expected a transcript`); });
    const reward = perAnswer("rewards", o.rewards, transcripts);
    if (reward === null) throw new TypeError(`${FN}: rewards: required`);
    const advantage = perAnswer("advantages", o.advantages, transcripts);
    const rows: Row[] = [];
    let skipped = 0;
    transcripts.forEach((tr, q) => tr.turns.forEach((turn) => turn.forEach((e) => {
        const at = `transcripts[${q}] (${tr.id}) turn ${e.turn} agent ${e.agent}`;
        const r = Number(reward(q, e));
        if (!Number.isFinite(r)) {
            if (nonFinite === "skip") { skipped++; return; }
            throw new RangeError(`${FN}: ${at}: the reward is ${r} (nonFinite: 'skip' leaves such answers out)`);
        }
        let prompt: number[], response: number[], logp: number[], retokenized = false;
        if (e.tokenIdsExact === true && e.tokenIds && e.promptTokenIds) {
            prompt = e.promptTokenIds;
            response = e.tokenIds;
            logp = e.logprobs ?? [];
            if (logp.length !== response.length) throw new RangeError(`${FN}: ${at}: ${response.length} token ids but ${logp.length} log-probs`);
        } else if (o.retokenize) {
            prompt = o.retokenize.encodeChat(e.prompt);
            response = o.retokenize.encode(e.text);
            logp = response.map(() => NaN);
            retokenized = true;
        } else throw new Error(`${FN}: ${at}: the answer has no exact token ids (its backend gave text only${e.endpoint ? `: ${e.endpoint}` : ""}); ` +
            "use a server that returns ids (vLLM, SGLang, maporl serve), or pass retokenize: a tokenizer, accepting ids that may differ from the sampled ones");
        let adv: number[] | null = null;
        if (advantage) {
            const a = advantage(q, e);
            adv = typeof a === "number" ? response.map(() => a) : Array.isArray(a) ? [...a as number[]] : [];
            if (adv.length !== response.length || adv.some((x) => typeof x !== "number"))
                throw new RangeError(`${FN}: ${at}: advantages: expected a number or ${response.length} numbers (one per response token), got ${describe(a)}`);
        }
        rows.push({ meta: { episode: tr.id, question: tr.question, turn: e.turn, agent: e.agent, reward: r, promptLength: prompt.length,
            responseLength: response.length, finishReason: e.finishReason, model: e.model ?? null, endpoint: e.endpoint ?? null, retokenized, text: e.text },
        prompt, response, logp, adv });
    })));
    if (rows.length === 0) throw new RangeError(`${FN}: no answer to export (${skipped} skipped for a non-finite reward)`);
    const info: BatchInfo = { format: "maporl-batch", version: 1, rows: rows.length, padTokenId: pad, shards: [], hasAdvantages: advantage !== null, skipped };
    replaceDirDurable(dir, (tmp) => {
        const manifest: string[] = [];
        for (let s = 0; s * per < rows.length; s++) {
            const part = rows.slice(s * per, (s + 1) * per), n = part.length;
            const P = Math.max(1, ...part.map((r) => r.prompt.length)), R = Math.max(1, ...part.map((r) => r.response.length));
            const promptIds = new Int32Array(n * P).fill(pad), responseIds = new Int32Array(n * R).fill(pad);
            const attention = new Int32Array(n * (P + R)), responseMask = new Int32Array(n * R);
            const logp = new Float32Array(n * R), adv = new Float32Array(advantage ? n * R : 0), rew = new Float32Array(n);
            const agent = new Int32Array(n), turn = new Int32Array(n), row = new Int32Array(n);
            part.forEach((r, i) => {
                const off = P - r.prompt.length;  // prompts left-padded, responses right-padded (verl's layout)
                r.prompt.forEach((id, k) => { promptIds[i * P + off + k] = id; attention[i * (P + R) + off + k] = 1; });
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
            writeSafetensors(join(tmp, file), [
                { name: "prompt_ids", shape: [n, P], data: promptIds }, { name: "response_ids", shape: [n, R], data: responseIds },
                { name: "attention_mask", shape: [n, P + R], data: attention }, { name: "response_mask", shape: [n, R], data: responseMask },
                { name: "old_log_probs", shape: [n, R], data: logp }, { name: "rewards", shape: [n], data: rew },
                ...(advantage ? [{ name: "advantages", shape: [n, R], data: adv }] : []),
                { name: "agent", shape: [n], data: agent }, { name: "turn", shape: [n], data: turn }, { name: "row", shape: [n], data: row },
            ], { format: "pt", maporl: "batch", version: "1" });
            info.shards.push({ file, rows: n, promptLength: P, responseLength: R });
        }
        writeFileDurable(join(tmp, "manifest.jsonl"), manifest.join("\n") + "\n");
        writeFileDurable(join(tmp, "batch.json"), JSON.stringify(info, null, 2));
    });
    return info;
}

/** Reads a batch directory written by exportBatch: batch.json and every row (manifest line and unpadded tensors). */
export function readBatch(dir: string): { info: BatchInfo; rows: BatchRow[] } {
    const fn = "readBatch";
    let info: BatchInfo;
    try { info = JSON.parse(readFileSync(join(dir, "batch.json"), "utf8")) as BatchInfo; } catch (e) {
        throw new SyntaxError(`${fn}: ${join(dir, "batch.json")}: ${existsSync(join(dir, "batch.json")) ? "not JSON" : "missing"} (${(e as Error).message})`);
    }
    if (info?.format !== "maporl-batch" || info.version !== 1) throw new SyntaxError(`${fn}: ${dir}: not a maporl batch (version 1)`);
    const lines = readFileSync(join(dir, "manifest.jsonl"), "utf8").split("\n").filter((l) => l.length > 0);
    if (lines.length !== info.rows) throw new SyntaxError(`${fn}: ${dir}/manifest.jsonl: ${lines.length} rows, batch.json says ${info.rows}`);
    const rows = lines.map((l, i) => {
        try { return JSON.parse(l) as ManifestRow; } catch { throw new SyntaxError(`${fn}: ${dir}/manifest.jsonl line ${i + 1}: not JSON`); }
    });
    const shards = info.shards.map((s) => {
        const t = new Map(readSafetensors(join(dir, s.file)).tensors.map((x) => [x.name, x]));
        const need = (name: string, shape: number[]) => {
            const x = t.get(name);
            if (!x || x.shape.join() !== shape.join()) throw new SyntaxError(`${fn}: ${dir}/${s.file}: ${name} missing or not of shape [${shape}]`);
            return x.data;
        };
        const n = s.rows, P = s.promptLength, R = s.responseLength;
        return { P, R, prompt: need("prompt_ids", [n, P]), response: need("response_ids", [n, R]), mask: need("response_mask", [n, R]),
            attention: need("attention_mask", [n, P + R]), logp: need("old_log_probs", [n, R]), adv: info.hasAdvantages ? need("advantages", [n, R]) : null };
    });
    return {
        info, rows: rows.map((m) => {
            const s = shards[m.shard];
            if (!s || m.index < 0 || m.index >= info.shards[m.shard]!.rows) throw new SyntaxError(`${fn}: ${dir}/manifest.jsonl row ${m.row}: no shard ${m.shard} index ${m.index}`);
            const i = m.index, { P, R } = s;
            const promptIds = Array.from(s.prompt.subarray(i * P + P - m.promptLength, (i + 1) * P));
            const take = (a: Float32Array | Int32Array) => Array.from(a.subarray(i * R, i * R + m.responseLength));
            return { ...m, promptIds, responseIds: take(s.response), oldLogProbs: take(s.logp), ...(s.adv ? { advantages: take(s.adv) } : {}) };
        }),
    };
}
