// driver.mjs: the fuzz driver that test/fuzz/fuzz.test.ts runs in a child process (one per SIMD level, with a
// timeout). Randomized calls at the public API (dist/index.js): every kernel and its async twin with shapes from
// empty to small, arrays of the wrong type or length, values from NaN / +-Inf / +-FLT_MAX / subnormals / -0 to
// ordinary ones, and options in and out of range; a NativePolicy (generate, logprobs, values, trainStep); the
// debate layer over in-process policies that fail, and over a loopback server that answers 500s, malformed
// replies and resets. A call may throw (TypeError, RangeError, MaporlError, DebateError: bad input must), but
// must never crash or hang the process, throw a non-Error, or return arrays of the wrong length. Before each call
// its reproducer is written (synchronously) to the file given, so the parent can print the call that crashed.
// Usage: node driver.mjs <seed> <kernel calls> <repro file>; prints one JSON line of counts.
import { closeSync, openSync, writeSync } from "node:fs";
import { createServer } from "node:http";

import * as m from "../../dist/index.js";

const [seed, count, reproFile] = [
    Number(process.argv[2] ?? 1),
    Number(process.argv[3] ?? 10000),
    process.argv[4] ?? "/dev/null",
];
const fd = openSync(reproFile, "w");
let state = seed >>> 0 || 1;
const rnd = () => {
    // mulberry32
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const int = (n) => Math.floor(rnd() * n);
const pick = (xs) => xs[int(xs.length)];
const FLT_MAX = 3.4028234663852886e38;
const specials = [
    0,
    -0,
    1,
    -1,
    0.5,
    1e-45,
    -1e-45,
    1.2e-38,
    3e38,
    -3e38,
    FLT_MAX,
    -FLT_MAX,
    1e30,
    -1e30,
    NaN,
    Infinity,
    -Infinity,
    1e-7,
    88.7,
    -87.3,
];
const value = () => (rnd() < 0.25 ? pick(specials) : (rnd() - 0.5) * 20);
const f32 = (n) =>
    rnd() < 0.03
        ? pick([null, undefined, [1, 2], new Float64Array(n), "x"])
        : Float32Array.from({ length: Math.max(0, n + (rnd() < 0.03 ? pick([-1, 1]) : 0)) }, value);
const i32 = (n, hi) =>
    Int32Array.from({ length: Math.max(0, n + (rnd() < 0.03 ? pick([-1, 1]) : 0)) }, () =>
        rnd() < 0.05 ? pick([-1, hi, 2 ** 31 - 1, -(2 ** 31)]) : int(Math.max(1, hi)),
    );
const mask = (n) =>
    rnd() < 0.5
        ? Uint8Array.from({ length: n }, () => (rnd() < 0.03 ? pick([2, 255]) : int(2)))
        : Float32Array.from({ length: n }, () => (rnd() < 0.03 ? pick([0.5, NaN, -1]) : int(2)));
const shape2 = (a, b) => (rnd() < 0.03 ? pick([[-1, b], [a, 1.5], [a], ["a", b], [2 ** 40, b], null]) : [a, b]);
const opt = (good, bad) => (rnd() < 0.04 ? pick(bad) : rnd() < 0.5 ? undefined : pick(good));
const num = () => (rnd() < 0.1 ? pick(specials) : rnd());

const encode = (x) =>
    JSON.stringify(x, (_k, v) =>
        typeof v === "number" && !Number.isFinite(v)
            ? `${v}`
            : Object.is(v, -0)
              ? "-0"
              : ArrayBuffer.isView(v)
                ? { [v.constructor.name]: Array.from(v) }
                : typeof v === "bigint"
                  ? `${v}n`
                  : v,
    );
const counts = { calls: 0, ok: 0, threw: 0 };
const KNOWN = new Set([
    "TypeError",
    "RangeError",
    "MaporlError",
    "DebateError",
    "JointRolloutError",
    "SyntaxError",
    "Error",
]);

async function call(name, fn, args, check) {
    writeSync(fd, `${encode({ call: name, args })}\n`);
    counts.calls++;
    try {
        const r = await fn(...args);
        if (check && !check(r)) throw new Error(`fuzz: ${name} returned a result of the wrong shape: ${encode(args)}`);
        counts.ok++;
    } catch (e) {
        if (!(e instanceof Error) || !KNOWN.has(e.name) || typeof e.message !== "string" || !e.message) {
            console.error(
                `fuzz: ${name} threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)} for ${encode(args)}`,
            );
            process.exit(3);
        }
        if (e.message.startsWith("fuzz:")) {
            console.error(e.message);
            process.exit(4);
        }
        counts.threw++;
    }
}
const len = (x, n) => x instanceof Float32Array && x.length === n;

// Each entry: [name, () => [fn, args, check]].
const kernels = [
    () => {
        const B = int(5),
            T = int(9);
        return [
            "gae",
            m.gae,
            [
                { rewards: f32(B * T), values: f32(B * T), mask: mask(B * T), shape: shape2(B, T) },
                {
                    gamma: opt([1, 0.99, 0], [NaN, 2, -1, "1"]),
                    lambda: opt([0.95, 1, 0], [NaN, 1.5]),
                    whiten: opt([true, false], [1, "yes"]),
                },
            ],
            (r) => len(r.advantages, B * T),
        ];
    },
    () => {
        const N = int(12);
        return [
            "groupAdvantages",
            m.groupAdvantages,
            [
                { scores: f32(N), groups: i32(N, 4) },
                {
                    estimator: opt(["grpo", "rloo", "dr-grpo", "reinforce++-baseline", "magrpo"], ["nope", 3]),
                    eps: opt([1e-6, 0], [NaN, -1]),
                    baseline: opt(["mean", "max", "rloo", "none"], ["median"]),
                },
            ],
            (r) => len(r, N),
        ];
    },
    () => {
        const B = int(5),
            T = int(9);
        return [
            "reinforceReturns",
            m.reinforceReturns,
            [{ rewards: f32(B * T), mask: mask(B * T), shape: shape2(B, T) }, { gamma: opt([1, 0.9], [NaN, 7]) }],
        ];
    },
    () => {
        const B = int(4),
            T = int(8);
        return [
            "policyLoss",
            m.policyLoss,
            [
                {
                    logp: f32(B * T),
                    oldLogp: f32(B * T),
                    advantages: f32(B * T),
                    mask: mask(B * T),
                    ...(rnd() < 0.5 ? { refLogp: f32(B * T) } : {}),
                    shape: shape2(B, T),
                },
                {
                    type: opt(["ppo", "gspo", "cispo", "reinforce"], ["dpo", 1]),
                    clip: opt([0.2, 0], [NaN, -1, 2]),
                    aggregation: opt(
                        ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"],
                        ["sum"],
                    ),
                    kl:
                        rnd() < 0.3
                            ? { coef: num(), estimator: pick(["k1", "k2", "k3", "low-var-kl", "abs", "x"]) }
                            : undefined,
                    dualClip: opt([0, 3], [0.5, NaN]),
                },
            ],
        ];
    },
    () => {
        const B = int(4),
            T = int(8);
        return [
            "rolloutCorrection",
            m.rolloutCorrection,
            [
                { oldLogp: f32(B * T), rolloutLogp: f32(B * T), mask: mask(B * T), shape: shape2(B, T) },
                {
                    preset: opt(["tis", "mis", "icepop", "seq-tis", "geo-mis"], ["tls", 1]),
                    rolloutIs: opt(["token", "sequence", "geometric", null], ["seq", 2]),
                    rolloutIsMode: opt(["truncate", "mask"], ["clip"]),
                    rolloutIsThreshold: opt([2, 5, 1e-3], [0, NaN, -1, Infinity]),
                    rolloutIsThresholdLower: opt([0, 0.5], [NaN, 10]),
                    rolloutIsBatchNormalize: opt([true, false], [1]),
                    ...(rnd() < 0.3
                        ? {
                              rolloutRs: pick(["token_k1", "seq_mean_k3,token_k2", ["seq_max_k2"], "bad_k1", ""]),
                              rolloutRsThreshold: pick([2, "0.5_2", "0.5_2,0.1", [0.1], NaN, "x", "2_0.5"]),
                          }
                        : {}),
                },
            ],
            (r) => r.mask instanceof Float32Array && r.mask.length === B * T,
        ];
    },
    () => {
        const B = int(4),
            T = int(8);
        return [
            "valueLoss",
            m.valueLoss,
            [
                {
                    values: f32(B * T),
                    oldValues: f32(B * T),
                    returns: f32(B * T),
                    mask: mask(B * T),
                    shape: shape2(B, T),
                },
                {
                    clip: opt([0.2, 0, Infinity], [NaN, "x"]),
                    aggregation: opt(["token-mean", "seq-mean-token-sum"], ["max", 9]),
                },
            ],
        ];
    },
    () => {
        const N = int(6),
            V = 1 + int(40);
        return [
            "logprobs",
            m.logprobs,
            [
                { logits: f32(N * V), targets: i32(N, V), shape: shape2(N, V) },
                {
                    temperature: opt([1, 0.7, 2, 1e-30, 3e38], [0, -1, NaN, Infinity]),
                    entropy: opt([true, false], [1]),
                },
            ],
        ];
    },
    () => {
        const B = int(3),
            T = 1 + int(4),
            V = 1 + int(30),
            N = B * T;
        return [
            "fusedPolicyLoss",
            m.fusedPolicyLoss,
            [
                {
                    logits: f32(N * V),
                    targets: i32(N, V),
                    oldLogp: f32(N),
                    advantages: f32(N),
                    mask: mask(N),
                    shape: shape2(N, V),
                },
                {
                    temperature: opt([1, 0.5], [0, NaN]),
                    loss: { type: pick(["ppo", "reinforce", "gspo"]) },
                    rows: rnd() < 0.9 ? [B, T] : [B + 1, T],
                },
            ],
        ];
    },
    () => {
        const B = int(4),
            V = 1 + int(60);
        return [
            "sample",
            m.sample,
            [
                { logits: f32(B * V), shape: shape2(B, V) },
                {
                    temperature:
                        rnd() < 0.7
                            ? pick([0, 1e-45, 1e-38, 1e-30, 1e-6, 0.7, 1, 2, 1e30, 3e38])
                            : pick([
                                  -1,
                                  NaN,
                                  Infinity,
                                  "1",
                                  Float32Array.from({ length: B }, () => pick([0, 1e-45, 0.7, 3e38])),
                              ]),
                    topK: opt([0, 1, 3, V, V + 5], [-2, 1.5, NaN]),
                    topP: opt([1, 0.9, 0.01, 0, 1e-7], [1.5, -0.1, NaN]),
                    minP: opt([0, 0.1, 1], [2, NaN]),
                    seed: opt([0, 7, 2 ** 53 - 1, 12345678901234567890n], [-1.5, NaN, "s"]),
                    position: opt([0, 5], [1.5]),
                    rawLogprobs: opt([true, false], ["no"]),
                    filterOrder: opt(["top-k-first", "joint"], ["other"]),
                },
            ],
            (r) => r.tokens.length === B,
        ];
    },
    () => {
        const B = int(4),
            V = 1 + int(60);
        return [
            "logprobsOfTokens",
            m.logprobsOfTokens,
            [
                { logits: f32(B * V), tokens: i32(B, V), shape: shape2(B, V) },
                {
                    temperature: pick([0, 1e-45, 0.7, 3e38, -1, NaN]),
                    topK: opt([0, 2], [-3]),
                    topP: opt([0.5, 1], [2]),
                },
            ],
        ];
    },
    () => {
        const B = 1 + int(4),
            L = int(6);
        return [
            "tdAdvantages",
            m.tdAdvantages,
            [
                { rewards: f32(B * L), values: f32(B * L), lengths: i32(B, L + 1), shape: shape2(B, L) },
                { gamma: opt([1, 0.9], [NaN, -2]), normalize: opt([true, false], [2]) },
            ],
        ];
    },
    () => {
        const N = int(10);
        return [
            "treeReturns",
            m.treeReturns,
            [
                {
                    parent: Int32Array.from({ length: N }, (_, i) =>
                        rnd() < 0.1 ? pick([i, i + 1, -5, N]) : i === 0 ? -1 : int(i + 1) - 1,
                    ),
                    rewards: f32(N),
                },
                { gamma: opt([0.9, 1], [NaN, 3]), baseline: opt(["mean", "max", "rloo", "none"], ["x"]) },
            ],
        ];
    },
    () => {
        const Q = int(3),
            T = 1 + int(3),
            A = 1 + int(3);
        return [
            "influenceRewards",
            m.influenceRewards,
            [{ scores: f32(Q * T * A), shape: [Q, T, A] }, { discount: opt([0.3, 0, 1], [NaN, 2]) }],
        ];
    },
];

async function fuzzKernels(n) {
    for (let i = 0; i < n; i++) {
        const [name, fn, args, check] = pick(kernels)();
        const asyncFn = m[`${name}Async`];
        if (asyncFn && rnd() < 0.2) await call(`${name}Async`, asyncFn, args, check);
        else await call(name, fn, args, check);
    }
}

async function fuzzPolicy(n) {
    const p = await m.NativePolicy.create({ contextLength: 24, layers: 1, heads: 2, dModel: 16, seed });
    const V = p.tokenizer.vocabSize;
    for (let i = 0; i < n; i++) {
        const k = int(4);
        if (k === 0)
            await call(
                "NativePolicy.generate",
                (r) => p.generate(r),
                [
                    Array.from({ length: 1 + int(3) }, () => ({
                        prompt: rnd() < 0.05 ? "x".repeat(30 + int(2000)) : pick(["hi", "1+1", "", "∑é😀"]),
                        sampling: {
                            temperature: pick([0, 1e-45, 1e-38, 0.7, 1, 3e38, ...(rnd() < 0.05 ? [-1, NaN] : [])]),
                            topK: opt([0, 1, 5], [-5]),
                            topP: opt([0.9, 1], [3]),
                            maxTokens: int(6),
                            ...(rnd() < 0.2 ? { stop: pick(["a", ["b", "c"], "", 3]) } : {}),
                        },
                        seed: opt([1, 2 ** 63, -5], [1.5, "x"]),
                    })),
                ],
                (g) => Array.isArray(g),
            );
        else if (k === 1) {
            const B = 1 + int(3),
                T = 1 + int(24);
            await call("NativePolicy.logprobs", (b) => p.logprobs(b), [{ tokens: i32(B * T, V), shape: shape2(B, T) }]);
        } else if (k === 2) {
            const B = 1 + int(3),
                T = 1 + int(24);
            await call("NativePolicy.values", (b) => p.values(b), [{ tokens: i32(B * T, V), shape: shape2(B, T) }]);
        } else {
            const B = 1 + int(3),
                T = 2 + int(20);
            await call("NativePolicy.trainStep", (b, o) => p.trainStep(b, o), [
                {
                    tokens: i32(B * T, V),
                    targets: i32(B * T, V),
                    mask: mask(B * T),
                    shape: shape2(B, T),
                    ...(rnd() < 0.5 ? { advantages: f32(B), oldLogp: f32(B * T) } : {}),
                },
                {
                    lr: opt([1e-3, 0], [NaN, -1]),
                    loss:
                        rnd() < 0.5
                            ? undefined
                            : pick([{ type: "ppo" }, { type: "reinforce" }, "value", { type: "nope" }]),
                    maxGradNorm: opt([1, 0], [NaN]),
                },
            ]);
        }
    }
    await p.dispose();
}

// Policies that fail in every way a backend can, in process.
function flaky(name) {
    return {
        name,
        async generate(reqs) {
            const r = rnd();
            if (r < 0.1) throw new Error(`${name}: HTTP 500 after retries`);
            if (r < 0.13)
                return reqs.slice(1).map(() => ({
                    text: "short",
                    finishReason: "stop",
                    usage: { promptTokens: 1, completionTokens: 1 },
                    latencyMs: 0,
                }));
            if (r < 0.15) return reqs.map(() => ({ nope: true }));
            if (r < 0.16) throw "a string";
            return reqs.map(() => ({
                text: `answer ${int(5)}`,
                finishReason: "stop",
                usage: { promptTokens: 1, completionTokens: 2 },
                latencyMs: 0,
            }));
        },
    };
}

async function fuzzDebates(n, base) {
    const items = Array.from({ length: 5 }, (_, i) => ({
        id: `q${i}`,
        question: `What is ${i} + ${i}?`,
        reference: 2 * i,
    }));
    for (let i = 0; i < n; i++) {
        const http = base && rnd() < 0.3;
        const agents = http
            ? [0, 1, 2].map(
                  (k) =>
                      new m.OpenAICompatiblePolicy({
                          baseUrl: base,
                          model: `a${k}`,
                          retries: int(2),
                          backoffMs: 1,
                          timeoutMs: 500,
                          totalTimeoutMs: 1500,
                      }),
              )
            : [flaky("f0"), flaky("f1"), flaky("f2")];
        const onError = opt(["skip", "retry", "fail-fast"], ["ignore"]);
        await call(
            "Debate.runBatch",
            async (o) => {
                const out = await new m.Debate({ agents, turns: 1 + int(3), ...o }).runBatch(items);
                if (out.length !== items.length)
                    throw new Error(`fuzz: runBatch returned ${out.length} transcripts for ${items.length}`);
                return out;
            },
            [{ onError, retries: int(3), verifier: m.gsm8kVerifier() }],
        );
        if (rnd() < 0.3)
            await call(
                "JointRollout.runBatch",
                async (o) => {
                    const out = await new m.JointRollout({
                        agents: agents.slice(0, 2),
                        generations: 1 + int(2),
                        turns: 1 + int(2),
                        prompt: (q) => `What is ${q}?`,
                        transition: ({ completions }) => completions.map((c) => `then ${c}`),
                        reward: () => rnd(),
                        ...o,
                    }).runBatch([1, 2, 3]);
                    if (out.length !== 3) throw new Error(`fuzz: JointRollout returned ${out.length} trees for 3`);
                    return out;
                },
                [{ onError }],
            );
    }
}

// A loopback server that answers 500s, malformed replies, resets and good answers at random.
async function flakyServer() {
    const server = createServer((req, res) => {
        req.resume();
        req.on("end", () => {
            const r = rnd();
            if (r < 0.1) {
                res.writeHead(500);
                res.end("boom");
            } else if (r < 0.15) {
                res.writeHead(200, { "content-type": "application/json" });
                res.end('{"choices":[{}]}');
            } else if (r < 0.18) res.socket?.destroy();
            else if (r < 0.2) {
                res.writeHead(503, { "retry-after": "0" });
                res.end();
            } else {
                res.writeHead(200, { "content-type": "application/json" });
                res.end(
                    JSON.stringify({ choices: [{ finish_reason: "stop", message: { content: `it is ${int(9)}` } }] }),
                );
            }
        });
    });
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    return { server, base: `http://127.0.0.1:${server.address().port}/v1` };
}

const t0 = performance.now();
await fuzzKernels(count);
await fuzzPolicy(Math.max(50, Math.floor(count / 40)));
const { server, base } = await flakyServer();
await fuzzDebates(Math.max(20, Math.floor(count / 100)), base);
server.closeAllConnections();
server.close();
closeSync(fd);
console.log(
    JSON.stringify({ ...counts, simd: m.backend().simd, seconds: +((performance.now() - t0) / 1000).toFixed(1) }),
);
