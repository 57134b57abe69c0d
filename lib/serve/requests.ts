// requests.ts (serve): the pieces of maporl serve's requests and replies: JSON bodies read within a bound, errors in
// OpenAI's shape, sampling fields, n choices with their seeds, logprobs (OpenAI's and vLLM's token-id forms), usage.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { clientFault, HttpError } from "./serverModels.js";
import {
    type ChatMessage,
    type GenerateRequest,
    type Generation,
    MAX_TOP_LOGPROBS,
    type Policy,
    requestSeed,
    samplingOptions,
    type SamplingOptions,
} from "../policy/types.js";

export function send(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
}

export function fail(res: ServerResponse, status: number, message: string, type?: string): void {
    send(res, status, {
        error: {
            message,
            type: type ?? (status === 400 || status === 413 ? "invalid_request_error" : "server_error"),
            code: status,
        },
    });
}

/** Answers a route's failure (an HttpError with its status, a client's fault 400, else 500), unless a reply began. */
export function answerFailure(res: ServerResponse, e: unknown): void {
    if (res.headersSent) return;
    if (e instanceof HttpError) return fail(res, e.status, e.message, e.type);
    fail(res, clientFault(e) ? 400 : 500, e instanceof Error ? e.message : String(e));
}

/** Whether a request carries `Authorization: Bearer <apiKey>` (always, without a key), in constant time. */
export function bearerAuth(apiKey: string | undefined): (req: IncomingMessage) => boolean {
    const keyBuf = apiKey === undefined ? null : createHash("sha256").update(apiKey).digest();
    return (req: IncomingMessage) => {
        if (keyBuf === null) return true;
        const h = req.headers.authorization;
        const given = typeof h === "string" && h.startsWith("Bearer ") ? h.slice(7) : "";
        return timingSafeEqual(createHash("sha256").update(given).digest(), keyBuf); // (equal lengths: digests)
    };
}

/** An HTTP server answering with `handle` (which answers every failure itself; a reply that cannot be written at all
 * destroys the socket), once it listens on host:port; `stop` closes it and every connection. */
export async function listenHttp(
    handle: (req: IncomingMessage, res: ServerResponse) => Promise<unknown>,
    port: number,
    host: string,
): Promise<{ server: Server; address: AddressInfo; stop(): Promise<void> }> {
    const server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
    server.requestTimeout = 60_000; // (a request, body included, arrives within a minute: a stalled upload is cut)
    await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => resolve());
    });
    return {
        server,
        address: server.address() as AddressInfo,
        stop: () =>
            new Promise<void>((r) => {
                server.close(() => r());
                server.closeAllConnections?.();
            }),
    };
}

/** The generation requests a server answers at once: `take` counts one more, or answers 503 with Retry-After (naming
 * `what` and maxPending) and returns false; `release` ends one. Taken once the body has arrived (a slow upload holds
 * none). */
export function pendingSlots(maxPending: number, what: string) {
    let pending = 0;
    return {
        take(res: ServerResponse): boolean {
            if (pending >= maxPending) {
                res.setHeader("retry-after", "1");
                fail(
                    res,
                    503,
                    `${what} is busy: ${pending} requests in flight (maxPending ${maxPending}); retry later`,
                );
                return false;
            }
            pending++;
            return true;
        },
        release(): void {
            pending--;
        },
    };
}

class TooLarge extends Error {}

// The body as text. Over `limit` bytes the rest is read and dropped (so that the client, still sending, receives
// the 413 rather than a reset), up to 64 x limit, past which the connection is closed.
export function readBody(req: IncomingMessage, limit: number): Promise<string> {
    return new Promise((resolve, reject) => {
        let size = 0;
        const chunks: Buffer[] = [];
        const declared = Number(req.headers["content-length"]);
        if (Number.isFinite(declared) && declared > 64 * limit) {
            reject(
                new TooLarge(
                    `the request body is ${declared} bytes, over the ${limit} this server accepts (maxBodyBytes)`,
                ),
            );
            req.resume();
            return;
        }
        req.on("data", (c: Buffer) => {
            size += c.length;
            if (size > 64 * limit) req.destroy();
            else if (size <= limit) chunks.push(c);
        });
        req.on("end", () =>
            size > limit
                ? reject(
                      new TooLarge(
                          `the request body is ${size} bytes, over the ${limit} this server accepts (maxBodyBytes)`,
                      ),
                  )
                : resolve(Buffer.concat(chunks).toString("utf8")),
        );
        req.on("error", reject);
    });
}

export async function jsonBody(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
    let body: unknown;
    try {
        body = JSON.parse(await readBody(req, limit));
    } catch (e) {
        throw e instanceof TooLarge ? new HttpError(413, e.message) : new HttpError(400, "the body is not JSON");
    }
    if (body === null || typeof body !== "object" || Array.isArray(body))
        throw new HttpError(400, "the body: expected a JSON object");
    return body as Record<string, unknown>;
}

export const MAX_CHOICES = 64;

// The tokenizer of a policy that has one (NativePolicy's), else null.
export type Tk = {
    encode(t: string): number[];
    decode(ids: number[]): string;
    encodeChat(m: readonly ChatMessage[]): number[];
    vocabSize?: number;
    isStop?(id: number): boolean;
    maxTokenChars?: number;
};
export const tokenizerOf = (p: Policy): Tk | null => {
    const t = (p as { tokenizer?: Partial<Tk> }).tokenizer;
    return t && typeof t.encode === "function" && typeof t.decode === "function" && typeof t.encodeChat === "function"
        ? (t as Tk)
        : null;
};

export const flag = (body: Record<string, unknown>, k: string): boolean => {
    const v = body[k];
    if (v === undefined || v === null) return false;
    if (typeof v !== "boolean") throw new HttpError(400, `${k}: expected a boolean, got ${typeof v}`);
    return v;
};

const CHAT_FIELDS = [
    ["temperature", "temperature"],
    ["top_p", "topP"],
    ["top_k", "topK"],
    ["max_tokens", "maxTokens"],
    ["max_completion_tokens", "maxTokens"],
    ["seed", "seed"],
] as const;

// The sampling fields of a body (JSON numbers only: no "0.7" strings), its seed and n, each range checked here (a 400
// naming the field) so that a request refused as the client's fault never reaches the policy.
// (`fields`: the wire names and what they set; the Responses API's differ, and it has no n or stop)
export function samplingOf(
    body: Record<string, unknown>,
    fields: readonly (readonly [string, string])[] = CHAT_FIELDS,
    chat = true,
): {
    sampling: SamplingOptions;
    seed: number | undefined;
    n: number;
} {
    const n = body.n === undefined || body.n === null || !chat ? 1 : body.n;
    if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > MAX_CHOICES)
        throw new HttpError(400, `n: expected an integer in [1, ${MAX_CHOICES}], got ${JSON.stringify(n)}`);
    const s: Record<string, unknown> = {},
        wire: Record<string, string> = {};
    for (const [k, name] of fields) {
        const v = body[k];
        if (v === undefined || v === null) continue;
        if (typeof v !== "number") throw new HttpError(400, `${k}: expected a number, got ${typeof v}`);
        s[name] = v;
        wire[name] = k;
    }
    const seed = s.seed as number | undefined;
    delete s.seed;
    if (chat && body.stop !== undefined && body.stop !== null) s.stop = body.stop;
    // (the checks generate makes, answered with the request's own field names)
    const rename = (e: unknown) =>
        new HttpError(
            400,
            (e as Error).message
                .replace(/^[^:]*: /, "")
                .replace(/^(?:sampling|requests\[0\]\.seed)\.?(\w*)/, (_, f: string) => wire[f || "seed"] ?? f),
        );
    try {
        samplingOptions("maporl serve", "sampling", s);
        if (seed !== undefined) requestSeed("maporl serve", { seed, prompt: "" }, 0);
    } catch (e) {
        throw rename(e);
    }
    return { sampling: s, seed, n };
}

/** A seed for a request that gives none: a safe integer (52 bits, so that base + choice stays safe and survives JSON
 * to a remote server), drawn afresh, so that identical unseeded requests give independent samples (as vLLM). */
export const drawSeed = (): number => Number(randomBytes(8).readBigUInt64LE() >> 12n);

// n choices in one batch: choice i draws with seed + i (modulo 2^64), so choice 0 is what a single request with that
// seed gives; without a seed, one drawn base seed + i.
export const seedOf = (seed: number, i: number): number | bigint =>
    i === 0 ? seed : BigInt.asUintN(64, BigInt(seed) + BigInt(i)); // (seed: an integer, checked by samplingOf)

export const choiceRequests = (
    base: Omit<GenerateRequest, "seed">,
    seed: number | undefined,
    n: number,
): GenerateRequest[] => {
    const s0 = seed ?? drawSeed();
    return Array.from({ length: n }, (_, i) => ({ ...base, seed: seedOf(s0, i) }));
};

export async function generateN(
    policy: Policy,
    base: Omit<GenerateRequest, "seed">,
    seed: number | undefined,
    n: number,
    signal: AbortSignal,
): Promise<Generation[]> {
    try {
        return await policy.generate(choiceRequests(base, seed, n), { signal });
    } catch (e) {
        if (e instanceof HttpError) throw e; // (a status the policy chose: the gateway's episode limits)
        throw new HttpError(clientFault(e) ? 400 : 500, e instanceof Error ? e.message : String(e));
    }
}

// A choice's logprobs for these sampled tokens (a whole answer's tokenIds, the stop token included, as vLLM; or one
// streamed token): chat's logprobs.content or completions' parallel lists, a token's piece its text or, with
// return_tokens_as_token_ids, "token_id:N".
// With tops (sampling.topLogprobs k > 0): each token's k alternatives, completions' {piece: logprob} dicts, chat's
// [{token, logprob, bytes}] lists (vLLM's shapes).
export function logprobsField(
    ids: readonly (number | string)[],
    lps: readonly number[] | undefined,
    tk: Tk | null,
    asIds: boolean,
    completions: boolean,
    tops?: readonly { id: number; logprob: number }[][],
) {
    const piece = (t: number | string) =>
        typeof t === "number" ? (asIds ? `token_id:${t}` : tk ? tk.decode([t]) : String(t)) : String(t);
    const pieces = ids.map(piece);
    return completions
        ? {
              tokens: pieces,
              token_logprobs: pieces.map((_, i) => lps?.[i] ?? 0),
              top_logprobs: tops
                  ? pieces.map((_, i) => Object.fromEntries((tops[i] ?? []).map((x) => [piece(x.id), x.logprob])))
                  : null,
              text_offset: [],
          }
        : {
              content: pieces.map((token, i) => ({
                  token,
                  logprob: lps?.[i] ?? 0,
                  bytes: [...Buffer.from(token, "utf8")],
                  top_logprobs: (tops?.[i] ?? []).map((x) => {
                      const p = piece(x.id);
                      return { token: p, logprob: x.logprob, bytes: [...Buffer.from(p, "utf8")] };
                  }),
              })),
          };
}

// The alternatives a request asks for: completions' logprobs (an integer k, or a boolean: k 0), chat's top_logprobs
// (with logprobs: true); 0 to MAX_TOP_LOGPROBS, else a 400 naming the field.
export function topLogprobsOf(body: Record<string, unknown>, completions: boolean): number {
    const k = completions ? body.logprobs : body.top_logprobs,
        name = completions ? "logprobs" : "top_logprobs";
    if (k === undefined || k === null || typeof k === "boolean") return 0;
    if (typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > MAX_TOP_LOGPROBS)
        throw new HttpError(400, `${name}: expected an integer in [0, ${MAX_TOP_LOGPROBS}], got ${JSON.stringify(k)}`);
    if (!completions && k > 0 && body.logprobs !== true) throw new HttpError(400, "top_logprobs: needs logprobs: true");
    return k;
}

export const usageOf = (gens: Generation[]) => {
    const completion = gens.reduce((a, g) => a + g.usage.completionTokens, 0),
        prompt = gens[0]!.usage.promptTokens;
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
};

/** Starts serving `policy`; resolves once listening. */
