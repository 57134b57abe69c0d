// nativeDecode.ts: NativePolicy's batched KV-cache generation. One batch holds the rows of several generate calls
// (of one policy, or of several LoRA adapters on one base: each row decodes through its own adapter, the base
// projections running once for the batch). Every row decodes in the same batch whatever its prompt length. The
// Llama family prefills: every prompt position but the last goes through the GEMM at once (gptPrefill), then each
// row decodes its own position per step (gptDecodeRows), starting from its last prompt token. The GPT family reads
// its prompts one position per step (a row reads its prompt while longer prompts are still being read, and samples
// from the step after its last prompt token). Either way the tokens are the same as decoding each request alone
// (for batches of up to 8 rows: above that a decode step runs the GEMM instead of dot products, other roundings).
// A call whose signal aborts, or whose row's logits are not finite, fails alone: the other calls' rows go on.
import { MaporlError } from "../errors.js";
import { native, type GptHandle } from "../native.js";
import { sample } from "../rl/sampling.js";
import type { DecodeLease } from "./decodeTurns.js";
import type { PolicyTokenizer } from "../policy/tokenizer.js";
import type { Generation, requestSampling, TokenCallback } from "../policy/types.js";

/** One generate call's part of a batch. */
export interface DecodeCall {
    name: string;
    prompts: number[][];
    sampling: ReturnType<typeof requestSampling>[];
    seeds: bigint[];
    /** The LoRA adapter id of every row (-1: the base), or null for a model without adapters. */
    adapter: number | null;
    signal?: AbortSignal;
    onProgress?: (done: number, total: number) => void;
    onToken?: TokenCallback;
    resolve: (g: Generation[]) => void;
    reject: (e: unknown) => void;
}

// Where the earliest stop string starts in `text`, looking only at matches that end past `before` (the text
// already searched); -1 if none.
function firstStop(text: string, stop: readonly string[], before: number): number {
    let at = -1;
    for (const x of stop) {
        const i = text.indexOf(x, Math.max(0, before - x.length + 1));
        if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    return at;
}

/** Decodes every call's rows in one batch, then settles each call (resolve with its generations, or reject). */
export async function decodeCalls(
    h: GptHandle,
    tokenizer: PolicyTokenizer,
    V: number,
    ctx: number,
    calls: DecodeCall[],
    prefill = false,
    lease: DecodeLease = { run: async (fn) => fn() },
): Promise<void> {
    const owner: number[] = [],
        prompts: number[][] = [],
        reqs: DecodeCall["sampling"] = [],
        seeds: bigint[] = [],
        local: number[] = [];
    calls.forEach((c, k) =>
        c.prompts.forEach((p, i) => {
            owner.push(k);
            prompts.push(p);
            reqs.push(c.sampling[i]!);
            seeds.push(c.seeds[i]!);
            local.push(i);
        }),
    );
    const B = prompts.length,
        t0 = performance.now();
    const failed: (unknown | null)[] = calls.map(() => null),
        doneOf = calls.map(() => 0);
    const lens = prompts.map((p) => p.length);
    // A row generates at most min(maxTokens, context - prompt) tokens (at least the prompt's next-token slot).
    const limit = reqs.map((r, b) => Math.min(r.maxTokens ?? 64, ctx - lens[b]!));
    const total = Math.max(...lens.map((l, b) => l + Math.max(1, limit[b]!)));
    await lease.run(() => {
        native.gptCacheReset(h, { batch: B, maxLen: total });
        if (calls.some((c) => c.adapter !== null))
            native.loraCacheRows(
                h,
                owner.map((k) => calls[k]!.adapter ?? -1),
            );
    });
    const logits = new Float32Array(B * V),
        cur = new Int32Array(B);
    const temperature = Float32Array.from(reqs, (r) => r.temperature ?? 1);
    const topK = Int32Array.from(reqs, (r) => Math.max(0, r.topK ?? 0)); // vLLM's -1 = off = our 0
    const topP = Float32Array.from(reqs, (r) => r.topP ?? 1);
    const seed = BigUint64Array.from(seeds);
    const toks: number[][] = reqs.map(() => []),
        lps: number[][] = reqs.map(() => []),
        stopId: number[] = reqs.map(() => -1);
    const tops: ({ id: number; logprob: number }[][] | null)[] = reqs.map((r) =>
        (r.topLogprobs ?? 0) > 0 ? [] : null,
    );
    // Stop strings: the text so far per row, and where the first stop string begins once one has appeared.
    const texts = reqs.map(() => ""),
        cut: number[] = reqs.map(() => -1);
    const finished: string[] = limit.map((l) => (l > 0 ? "" : "length")); // maxTokens 0: nothing to generate
    let done = finished.filter((f) => f).length;
    finished.forEach((f, b) => {
        if (f) doneOf[owner[b]!]!++;
    }); // (counted, not reported: as decoding each call alone)
    const finish = (b: number, why: string) => {
        finished[b] = why;
        done++;
        const k = owner[b]!;
        if (failed[k] === null) calls[k]!.onProgress?.(++doneOf[k]!, calls[k]!.prompts.length);
    };
    const fail = (k: number, e: unknown) => {
        failed[k] = e;
        for (let b = 0; b < B; b++)
            if (owner[b] === k && !finished[b]) {
                finished[b] = "failed";
                done++;
            }
    };
    // Row b's position at a step: the step itself (GPT), or from its last prompt token on after the prefill
    // (Llama; a finished row stays inside the cache, its results unused).
    const at = new Int32Array(B),
        lastStep = prefill ? Math.max(...limit.map((l) => Math.max(1, l))) : total;
    if (prefill && done < B) {
        const P = Math.max(...lens) - 1,
            head = new Int32Array(B * Math.max(P, 0));
        prompts.forEach((p, b) => head.set(p.slice(0, p.length - 1), b * P));
        if (P > 0)
            await lease.run(() =>
                native.gptPrefillAsync(h, { tokens: head, lens: Int32Array.from(lens, (l) => l - 1), P }),
            );
    }
    for (let step = 0; step < lastStep && done < B; step++) {
        calls.forEach((c, k) => {
            if (failed[k] === null && c.signal?.aborted) fail(k, c.signal.reason);
        });
        if (done >= B) break;
        for (let b = 0; b < B; b++) {
            at[b] = prefill ? Math.min(lens[b]! - 1 + step, total - 1) : step;
            cur[b] = at[b]! < lens[b]! ? prompts[b]![at[b]!]! : finished[b] ? tokenizer.pad : toks[b]!.at(-1)!;
        }
        // While every live row is still reading its prompt, only the cache is needed: no LM head.
        const sampling = lens.some((l, b) => !finished[b] && at[b]! >= l - 1);
        if (prefill)
            await lease.run(() => native.gptDecodeRowsAsync(h, { tokens: cur, pos: at, logits, values: null }));
        else
            await lease.run(() =>
                native.gptDecodeAsync(h, { tokens: cur, pos: step, logits: sampling ? logits : null, values: null }),
            );
        if (!sampling) continue;
        // The token at position at[b] + 1 (the sampler's counter, as when each request decodes alone).
        const s = sample(
            { logits, shape: [B, V] },
            {
                temperature,
                topK,
                topP,
                seed,
                position: BigInt64Array.from(at, (p) => BigInt(p + 1)),
                rawLogprobs: false,
                device: "cpu",
            },
        );
        // A row the sampler rejects (its logits hold NaN or +Inf: non-finite weights or activations) fails its call,
        // naming the requests; its token, -1, is never fed on.
        const invalid = new Map<number, number[]>();
        for (let b = 0; b < B; b++)
            if (!finished[b] && at[b]! >= lens[b]! - 1 && !s.valid[b])
                invalid.set(owner[b]!, [...(invalid.get(owner[b]!) ?? []), b]);
        for (const [k, rows] of invalid)
            fail(
                k,
                new MaporlError(
                    `${calls[k]!.name}.generate: requests[${rows.map((b) => local[b]).join(", ")}]: the logits for completion token ${at[rows[0]!]! + 2 - lens[rows[0]!]!} ` +
                        `hold NaN or +Inf (the model's weights or activations are not finite), so no token can be sampled`,
                    "MAPORL_ERR_INTERNAL",
                ),
            );
        for (let b = 0; b < B; b++) {
            if (finished[b] || at[b]! < lens[b]! - 1) continue;
            const t = s.tokens[b]!,
                k = owner[b]!;
            if (tops[b]) tops[b]!.push(topRaw(logits.subarray(b * V, (b + 1) * V), reqs[b]!.topLogprobs!));
            if (calls[k]!.onToken) {
                // (a callback that throws fails its own call, not the batch)
                try {
                    calls[k]!.onToken(local[b]!, t, s.logprobs[b]!, tops[b]?.at(-1));
                } catch (e) {
                    fail(k, e);
                    continue;
                }
            }
            if (tokenizer.isStop(t)) {
                // recorded in tokenIds and logprobs (what was sampled), not in tokens or the text
                stopId[b] = t;
                lps[b]!.push(s.logprobs[b]!);
                finish(b, "stop");
                continue;
            }
            toks[b]!.push(t);
            lps[b]!.push(s.logprobs[b]!);
            const stop = reqs[b]!.stop;
            if (stop) {
                const before = texts[b]!.length;
                texts[b] = tokenizer.decode(toks[b]!); // whole: a byte-level token may complete a character
                cut[b] = firstStop(texts[b]!, stop, before);
            }
            if (cut[b]! >= 0) finish(b, "stop");
            else if (toks[b]!.length >= limit[b]!) finish(b, "length");
        }
    }
    const ms = performance.now() - t0;
    const gens = reqs.map((_, b): Generation => ({
        text: cut[b]! >= 0 ? texts[b]!.slice(0, cut[b]) : tokenizer.decode(toks[b]!),
        tokens: toks[b]!,
        logprobs: lps[b]!,
        tokenIds: stopId[b]! >= 0 ? [...toks[b]!, stopId[b]!] : [...toks[b]!],
        promptTokenIds: [...prompts[b]!],
        tokenIdsExact: true,
        finishReason: finished[b] || "length",
        usage: { promptTokens: lens[b]!, completionTokens: toks[b]!.length },
        latencyMs: ms,
        ...(tops[b] ? { topLogprobs: tops[b] } : {}),
    }));
    calls.forEach((c, k) => {
        if (failed[k] !== null) c.reject(failed[k]);
        else c.resolve(gens.filter((_, b) => owner[b] === k));
    });
}

/** The k most likely tokens of one row of raw logits and their log-probs under its softmax (in double), most likely
 * first (ties: the lower id first). */
export function topRaw(z: Float32Array, k: number): { id: number; logprob: number }[] {
    let m = -Infinity;
    for (let i = 0; i < z.length; i++) if (z[i]! > m) m = z[i]!;
    let sum = 0;
    for (let i = 0; i < z.length; i++) sum += Math.exp(z[i]! - m);
    const lse = m + Math.log(sum);
    const best: number[] = []; // ids, sorted by logit descending
    for (let i = 0; i < z.length; i++) {
        if (best.length === k && !(z[i]! > z[best[k - 1]!]!)) continue;
        let j = Math.min(best.length, k - 1);
        if (best.length < k) best.push(i);
        while (j > 0 && z[best[j - 1]!]! < z[i]!) {
            best[j] = best[j - 1]!;
            j--;
        }
        best[j] = i;
    }
    return best.map((id) => ({ id, logprob: z[id]! - lse }));
}
