// generate.ts: NativePolicy.generate: requests checked and tokenized, the KV cache they need bounded, and the call
// joined to the open batch, started beside a running one (decodeTurns.ts), or queued (nativeDecode.ts decodes).
import { fewestTokens } from "../policy/tokenizer.js";
import { nativeChat, withToolCalls } from "../policy/toolText.js";
import {
    type GenerateRequest,
    type Generation,
    requestMessages,
    requestSampling,
    requestSeed,
    type TokenCallback,
} from "../policy/types.js";
import { describe } from "../validate.js";
import { CACHE_KEEP_BYTES, type EngineView } from "./core.js";
import type { DecodeLease } from "./decodeTurns.js";
import { type DecodeCall, decodeCalls } from "./nativeDecode.js";
import { TemplateError } from "./template.js";

/**
 * Batched generation with the KV cache: every request decodes in one batch whatever its prompt length (the Llama
 * family prefills every prompt through the GEMM, then each row decodes its own position; the GPT family reads a
 * prompt while longer ones are still being read), so the tokens are the same as decoding each request alone (in
 * batches of up to 8 rows). onProgress(done, total) counts finished requests.
 */
/** Options of NativePolicy.generate: an abort signal, finished requests as they finish, tokens as they are drawn. */
export interface GenerateOptions {
    signal?: AbortSignal;
    onProgress?: (done: number, total: number) => void;
    onToken?: TokenCallback;
}

export async function generate(
    self: EngineView,
    requests: GenerateRequest[],
    options: GenerateOptions = {},
): Promise<Generation[]> {
    if (!Array.isArray(requests)) throw new TypeError(`${self.name}: requests: expected an array`);
    const prompts = requests.map((r, i) => promptOf(self, r, i));
    const sampling = requests.map((r, i) => requestSampling(self.name, r, i));
    const seeds = requests.map((r, i) => requestSeed(self.name, r, i));
    prompts.forEach((p, i) => {
        if (p.length === 0)
            throw new RangeError(
                `${self.name}: requests[${i}]: the prompt encodes to no tokens (nothing to condition the first token on)`,
            );
        if (p.length >= self.config.contextLength)
            throw new RangeError(
                `${self.name}: requests[${i}]: the prompt is ${p.length} tokens, the context is ${self.config.contextLength}`,
            );
    });
    for (const k of ["onProgress", "onToken"] as const)
        if (options[k] !== undefined && typeof options[k] !== "function")
            throw new TypeError(`${self.name}: ${k}: expected a function, got ${describe(options[k])}`);
    if (requests.length === 0) return [];
    self.h();
    // The KV cache this call needs alone (its rows x the positions its longest row can reach, as decodeCalls sizes
    // it), checked against maxCacheBytes before anything is allocated.
    const rows = prompts.length,
        len = Math.max(
            ...prompts.map(
                (p, i) =>
                    p.length +
                    Math.max(1, Math.min(sampling[i]!.maxTokens ?? 64, self.config.contextLength - p.length)),
            ),
        );
    if (rows * len * self.kvBytesPerToken > self.core.maxCacheBytes) {
        const mib = (x: number) => `${(x / 2 ** 20).toFixed(1)} MiB`;
        throw new RangeError(
            `${self.name}: this generation needs a KV cache of ${mib(rows * len * self.kvBytesPerToken)} (${rows} rows x ${len} positions), ` +
                `more than maxCacheBytes ${mib(self.core.maxCacheBytes)}: fewer rows, fewer max tokens, or a larger maxCacheBytes (maporl serve --max-cache-bytes)`,
        );
    }
    // Calls made before the batch starts (on this policy, or on other adapters of its base) join it: one decode
    // step serves every adapter, as vLLM's multi-LoRA batching does.
    const withTools = requests.map((r) => r.tools !== undefined && r.tools.length > 0);
    const done = (gs: Generation[]) => gs.map((g, i) => (withTools[i] ? withToolCalls(g, `call-${seeds[i]}-${i}`) : g));
    return new Promise<Generation[]>((resolveAll, reject) => {
        const resolve = (gs: Generation[]) => resolveAll(done(gs));
        const call: DecodeCall = {
            name: self.name,
            prompts,
            sampling,
            seeds,
            adapter: self.family === "llama" ? self.adapterId : null,
            ...(options.signal ? { signal: options.signal } : {}),
            ...(options.onProgress ? { onProgress: options.onProgress } : {}),
            ...(options.onToken ? { onToken: options.onToken } : {}),
            resolve,
            reject,
        };
        const core = self.core,
            open = core.openBatch,
            per = self.kvBytesPerToken;
        if (open && (core.openRows + rows) * Math.max(core.openLen, len) * per <= core.maxCacheBytes) {
            open.push(call);
            core.openRows += rows;
            core.openLen = Math.max(core.openLen, len);
            return;
        }
        const batch = [call];
        core.openBatch = batch;
        core.openRows = rows;
        core.openLen = len;
        // The batch decodes on its own KV cache; a large one goes back when it ends (a server holds none sized for
        // its largest request while idle), a small one is kept for the next batch.
        let big = true;
        const close = () => {
            const bytes = core.openBatch === batch ? core.openRows * core.openLen * per : Infinity;
            if (core.openBatch === batch) core.openBatch = null;
            big = bytes > CACHE_KEEP_BYTES;
        };
        const run = async (lease: DecodeLease, joined: boolean) => {
            try {
                // A batch joining running ones stays open until its first turn (a step of the others), so that
                // requests arriving meanwhile decode with it as one batch rather than each beside the rest.
                if (joined) await lease.run(() => undefined);
                close();
                await decodeCalls(
                    self.h(),
                    self.tokenizer,
                    self.V,
                    self.config.contextLength,
                    batch,
                    self.family === "llama",
                    lease,
                );
            } catch (e) {
                for (const c of batch) c.reject(e);
            }
        };
        const prepare = () => self.select();
        if (core.turns.canJoin()) {
            // Decoding is under way: this batch starts beside it and they take turns, so that it does not wait for
            // the longest request.
            void core.turns.join(
                (lease) => run(lease, true),
                prepare,
                () => big,
            );
            return;
        }
        self.enqueue(() =>
            core.turns.session(
                (lease) => run(lease, false),
                prepare,
                () => big,
            ),
        ).catch((e: unknown) => {
            for (const c of batch) c.reject(e);
        });
    });
}

// A request's prompt ids: promptTokenIds as given, else its messages in the model's chat format.
function promptOf(self: EngineView, r: GenerateRequest, i: number): number[] {
    const ids = (r as { promptTokenIds?: unknown } | null)?.promptTokenIds;
    if (ids === undefined) {
        const messages = nativeChat(requestMessages(self.name, r, i), r.tools);
        // A prompt far past the context is refused before it is tokenized (a 1 MiB prompt held the event loop ~1 s).
        const least = fewestTokens(
            self.tokenizer,
            messages.reduce((a, m) => a + m.content.length, 0),
        );
        if (least >= self.config.contextLength)
            throw new RangeError(
                `${self.name}: requests[${i}]: the prompt is at least ${least} tokens, the context is ${self.config.contextLength}`,
            );
        try {
            return self.tokenizer.encodeChat(messages);
        } catch (e) {
            const kind =
                e instanceof TypeError
                    ? TypeError
                    : e instanceof RangeError
                      ? RangeError
                      : e instanceof TemplateError
                        ? TemplateError
                        : Error;
            throw new kind(`${self.name}: requests[${i}]: ${(e as Error).message}`);
        }
    }
    if (!Array.isArray(ids) || ids.length === 0 || !ids.every((x) => Number.isInteger(x) && x >= 0 && x < self.V))
        throw new TypeError(
            `${self.name}: requests[${i}].promptTokenIds: expected a non-empty array of token ids in [0, ${self.V}), got ${describe(ids)}`,
        );
    return [...(ids as number[])];
}
