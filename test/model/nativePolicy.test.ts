// nativePolicy.test.ts: the embedded GPT end to end from TS: SFT learns to reverse 6-character strings (>= 95 %
// exact match, the curve printed), a golden 10-step AdamW loss sequence identical for 1 and 3 threads, seeded
// generation reproducible, checkpoints bit-exact and readable by a safetensors parser written here from the
// spec, clear errors on truncated or corrupted files, clone independence, dispose.
import { readFileSync, writeFileSync, existsSync, mkdtempSync, truncateSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, describe, expect, it } from "vitest";

import { CharTokenizer, NativePolicy, setSimd, setThreads } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { lcg } from "../../lib/random.js";

afterAll(() => {
    setSimd("best");
    setThreads(0);
});

const alphabet = "abcdefgh";
const tok = new CharTokenizer(alphabet);

// <bos> <|user|> w <|assistant|> reverse(w) <eos>: 16 tokens; positions 8.. (the answer) are trained.
function reversalBatch(B: number, next: () => number) {
    const T = 15;
    const tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T),
        mask = new Uint8Array(B * T);
    for (let b = 0; b < B; b++) {
        const w = Array.from({ length: 6 }, () => alphabet[Math.floor(next() * alphabet.length)]).join("");
        const ids = [
            ...tok.encodeChat([{ role: "user", content: w }]),
            ...tok.encode([...w].reverse().join("")),
            tok.eos,
        ];
        for (let t = 0; t < T; t++) {
            tokens[b * T + t] = ids[t]!;
            targets[b * T + t] = ids[t + 1]!;
            mask[b * T + t] = t >= 8 ? 1 : 0;
        }
    }
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}

describe("NativePolicy", () => {
    it("learns to reverse 6-character strings by SFT (>= 95 % exact match)", async () => {
        setThreads(2);
        const p = await NativePolicy.create({
            contextLength: 16,
            layers: 2,
            heads: 4,
            dModel: 64,
            seed: 1,
            tokenizer: tok,
        });
        const next = lcg(1),
            t0 = Date.now();
        let acc = 0;
        const curve: string[] = [];
        for (let s = 0; s <= 1000 && acc < 0.95; s++) {
            const r = await p.trainStep(reversalBatch(64, next), { lr: 2e-3 });
            if (s % 100 === 0) {
                const words = Array.from({ length: 200 }, () =>
                    Array.from({ length: 6 }, () => alphabet[Math.floor(next() * 8)]).join(""),
                );
                const out = await p.generate(
                    words.map((w) => ({
                        messages: [{ role: "user", content: w }],
                        sampling: { temperature: 0, maxTokens: 7 },
                    })),
                );
                acc =
                    out.filter((o, i) => o.text === [...words[i]].reverse().join("") && o.finishReason === "stop")
                        .length / words.length;
                curve.push(
                    `step ${s}: loss ${r.loss.toFixed(4)}, exact match ${(100 * acc).toFixed(1)} %, ${((Date.now() - t0) / 1000).toFixed(1)} s`,
                );
            }
        }
        console.log("SFT reversal curve:\n  " + curve.join("\n  "));
        expect(acc).toBeGreaterThanOrEqual(0.95);
        expect(Date.now() - t0).toBeLessThan(120_000);
        await p.dispose();
    }, 180_000);

    it("trains 10 AdamW steps to the golden loss sequence, the same for 1 and 3 threads", async () => {
        setSimd("scalar"); // no FMA / vector reassociation: the fixture holds on any x86-64
        const runs: number[][] = [];
        for (const threads of [1, 3]) {
            setThreads(threads);
            const p = await NativePolicy.create({
                contextLength: 16,
                layers: 2,
                heads: 2,
                dModel: 16,
                seed: 42,
                tokenizer: tok,
            });
            const batch = reversalBatch(8, lcg(7));
            const losses: number[] = [];
            for (let s = 0; s < 10; s++) losses.push((await p.trainStep(batch, { lr: 1e-2, weightDecay: 0.01 })).loss);
            runs.push(losses);
            await p.dispose();
        }
        setSimd("best");
        expect(runs[1]).toEqual(runs[0]);
        const file = new URL("./golden/train10.json", import.meta.url);
        if (process.env.MAPORL_UPDATE_GOLDEN === "1" || !existsSync(file))
            writeFileSync(file, JSON.stringify(runs[0]) + "\n");
        expect(runs[0]).toEqual(JSON.parse(readFileSync(file, "utf8")));
        expect(runs[0][9]).toBeLessThan(runs[0][0]);
    });

    it("reproduces seeded generation; checkpoints round-trip bit-exactly and follow the safetensors spec", async () => {
        const p = await NativePolicy.create({ contextLength: 24, layers: 1, heads: 2, dModel: 16, seed: 3 });
        const req = (seed: number) => ({ prompt: "abc", sampling: { temperature: 1, maxTokens: 10 }, seed });
        const [a] = await p.generate([req(5)]);
        const [b] = await p.generate([req(5)]);
        const [c] = await p.generate([req(6)]);
        expect(b.text).toBe(a.text);
        expect(b.logprobs).toEqual(a.logprobs);
        expect(c.tokens).not.toEqual(a.tokens);
        const [none] = await p.generate([{ prompt: "abc", sampling: { maxTokens: 0 } }]);
        expect(none).toMatchObject({ text: "", tokens: [], finishReason: "length" });
        await p.trainStep({
            tokens: Int32Array.from({ length: 10 }, (_, i) => 10 + i),
            targets: Int32Array.from({ length: 10 }, (_, i) => 11 + i),
            mask: new Uint8Array(10).fill(1),
            shape: [1, 10],
        });
        const dir = join(mkdtempSync(join(tmpdir(), "maporl-ckpt-")), "ckpt");
        await p.save(dir);
        await p.save(dir); // replaces the old directory
        const q = await NativePolicy.load(dir);
        const probe = { tokens: Int32Array.from({ length: 12 }, (_, i) => 20 + i), shape: [1, 12] as [number, number] };
        expect(Array.from(await q.logprobs(probe))).toEqual(Array.from(await p.logprobs(probe)));
        expect((await q.generate([req(9)]))[0].text).toBe((await p.generate([req(9)]))[0].text);
        // A reader written here from the spec: u64 LE header size, JSON header, little-endian F32 data.
        const buf = readFileSync(join(dir, "model.safetensors"));
        const n = Number(buf.readBigUInt64LE(0));
        const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<
            string,
            { dtype: string; shape: number[]; data_offsets: [number, number] }
        >;
        const wte = header.wte;
        expect(wte.dtype).toBe("F32");
        expect(wte.shape).toEqual([p.tokenizer.vocabSize, 16]);
        const first = buf.readFloatLE(8 + n + wte.data_offsets[0]);
        expect(Number.isFinite(first)).toBe(true);
        expect(Object.keys(header).filter((k) => k !== "__metadata__").length).toBe(2 + 12 + 2 + 2);
        // Truncated and corrupted files are clear errors.
        truncateSync(join(dir, "model.safetensors"), statSync(join(dir, "model.safetensors")).size - 10);
        await expect(NativePolicy.load(dir)).rejects.toThrow(/model.safetensors: .*(truncated|do not match)/);
        writeFileSync(join(dir, "model.safetensors"), Buffer.from([200, 0, 0, 0, 0, 0, 0, 0, 123, 34]));
        await expect(NativePolicy.load(dir)).rejects.toThrow(/header length 200 does not fit/);
        // Every file's fault names the file (a bad field too), and a half-read directory leaves nothing behind.
        const good = {
            config: readFileSync(join(dir, "config.json"), "utf8"),
            tokenizer: readFileSync(join(dir, "tokenizer.json"), "utf8"),
        };
        writeFileSync(join(dir, "tokenizer.json"), good.tokenizer.slice(0, 30));
        await expect(NativePolicy.load(dir)).rejects.toThrow(/tokenizer\.json: not JSON \(corrupted\?\)/);
        writeFileSync(join(dir, "tokenizer.json"), "[1, 2]");
        await expect(NativePolicy.load(dir)).rejects.toThrow(/tokenizer\.json: expected a JSON object/);
        writeFileSync(join(dir, "tokenizer.json"), good.tokenizer);
        writeFileSync(join(dir, "config.json"), good.config.replace(/"layers":\s*\d+/, '"layers": "two"'));
        await expect(NativePolicy.load(dir)).rejects.toThrow(/config\.json: NativePolicy: layers: expected an integer/);
        writeFileSync(join(dir, "config.json"), good.config.replace(/"name":\s*"[^"]*"/, '"name": 7'));
        await expect(NativePolicy.load(dir)).rejects.toThrow(
            /config\.json: NativePolicy: name: expected a string, got 7/,
        );
        writeFileSync(join(dir, "config.json"), "{ not json");
        await expect(NativePolicy.load(dir)).rejects.toThrow(/config.json: not JSON/);
        await expect(NativePolicy.load(join(dir, "nope"))).rejects.toThrow(/missing \(not a checkpoint directory\?\)/);
        await p.dispose();
        await q.dispose();
    });

    it("decodes prompts of different lengths in one batch exactly as each alone", async () => {
        const p = await NativePolicy.create({
            contextLength: 40,
            layers: 2,
            heads: 2,
            dModel: 32,
            seed: 4,
            tokenizer: tok,
        });
        // Lengths 1..9 characters, sampled (temperature 1, top-k, top-p) and greedy, different maxTokens, one maxTokens 0.
        const reqs = ["a", "bcd", "hgfedcba", "ab", "cdefgha", "", "eeeeeeeee"].map((w, i) => ({
            prompt: w,
            seed: 100 + i,
            sampling:
                i % 2 ? { temperature: 0, maxTokens: 12 } : { temperature: 1, topK: 5, topP: 0.9, maxTokens: 6 + i },
        }));
        reqs.push({ prompt: "abc", seed: 1, sampling: { temperature: 1, topK: 0, topP: 1, maxTokens: 0 } });
        const progress: number[] = [];
        const together = await p.generate(reqs, {
            onProgress: (d, t) => {
                expect(t).toBe(reqs.length);
                progress.push(d);
            },
        });
        expect(progress).toEqual(
            Array.from({ length: progress.length }, (_, i) => i + 1 + (reqs.length - progress.length)),
        );
        for (let i = 0; i < reqs.length; i++) {
            const [alone] = await p.generate([reqs[i]]);
            expect(together[i].tokens).toEqual(alone.tokens);
            expect(together[i].logprobs).toEqual(alone.logprobs);
            expect(together[i].finishReason).toBe(alone.finishReason);
            expect(together[i].usage).toEqual(alone.usage);
        }
        expect(together.at(-1)!.tokens).toEqual([]);
        expect(new Set(together.map((g) => g.usage.promptTokens)).size).toBeGreaterThan(5);
        await p.dispose();
    });

    it("clones independently and refuses use after dispose", async () => {
        const p = await NativePolicy.create({ contextLength: 16, layers: 1, heads: 1, dModel: 8, seed: 4 });
        const ref = await p.clone("ref");
        const probe = { tokens: Int32Array.from({ length: 8 }, (_, i) => 12 + i), shape: [1, 8] as [number, number] };
        const before = Array.from(await ref.logprobs(probe));
        expect(Array.from(await p.logprobs(probe))).toEqual(before);
        await p.trainStep(
            { ...probe, targets: Int32Array.from({ length: 8 }, (_, i) => 13 + i), mask: new Uint8Array(8).fill(1) },
            { lr: 1e-2 },
        );
        expect(Array.from(await ref.logprobs(probe))).toEqual(before);
        expect(Array.from(await p.logprobs(probe))).not.toEqual(before);
        await p.dispose();
        await expect(p.logprobs(probe)).rejects.toThrow(/disposed/);
        await expect(NativePolicy.create({ contextLength: 16, layers: 1, heads: 3, dModel: 8 })).rejects.toThrow(
            /config.heads/,
        );
        await ref.dispose();
    });

    it("stops at stop strings: the text ends before the earliest one, the tokens keep every sampled one", async () => {
        const p = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 16, seed: 9 });
        try {
            const req = { prompt: "ab", sampling: { temperature: 0, maxTokens: 40 } };
            const [full] = await p.generate([req]);
            const text = full.text;
            expect(text.length).toBeGreaterThan(6);
            // A stop string taken from inside the greedy text, and one that never occurs: the earliest match wins.
            const stop = text.slice(3, 5),
                at = text.indexOf(stop);
            const [g] = await p.generate([{ ...req, sampling: { ...req.sampling, stop: ["\u0001never", stop] } }]);
            expect(g.finishReason).toBe("stop");
            expect(g.text).toBe(text.slice(0, at));
            const n = at + stop.length; // one token per character here
            expect(g.tokens).toEqual(full.tokens!.slice(0, n));
            expect(g.logprobs).toEqual(full.logprobs!.slice(0, n));
            const [single] = await p.generate([{ ...req, sampling: { ...req.sampling, stop } }]); // a string, as OpenAI allows
            expect(single.text).toBe(g.text);
            // In a batch, the row with the stop ends early and the other decodes as alone.
            const [a, b] = await p.generate([{ ...req, sampling: { ...req.sampling, stop } }, req]);
            expect(a.text).toBe(g.text);
            expect(b.text).toBe(text);
        } finally {
            await p.dispose();
        }
    });

    it("names the field of a bad request, batch or option before any work", async () => {
        const p = await NativePolicy.create({ contextLength: 16, layers: 1, heads: 1, dModel: 8, seed: 4 });
        try {
            expect(() => new CharTokenizer(3 as never)).toThrow(
                /CharTokenizer: alphabet: expected a string or an array of characters, got 3/,
            );
            const gen = (r: object) => p.generate([{ prompt: "a", ...r }] as never);
            await expect(gen({ sampling: { temperature: -1 } })).rejects.toThrow(
                /requests\[0\]\.sampling\.temperature: expected a number in \[0, /,
            );
            await expect(gen({ sampling: { topK: "x" } })).rejects.toThrow(TypeError);
            await expect(gen({ sampling: { topP: 2 } })).rejects.toThrow(
                /sampling\.topP: expected a number in \[0, 1\], got 2/,
            );
            await expect(gen({ sampling: { maxTokens: 1.5 } })).rejects.toThrow(
                /sampling\.maxTokens: expected an integer/,
            );
            await expect(gen({ sampling: { stop: [""] } })).rejects.toThrow(
                /sampling\.stop: expected a non-empty string/,
            );
            await expect(gen({ sampling: { temprature: 1 } })).rejects.toThrow(
                /unknown option "temprature". Did you mean "temperature"\?/,
            );
            await expect(gen({ sampling: "hot" })).rejects.toThrow(/requests\[0\]\.sampling: expected an object/);
            await expect(gen({ seed: 2 ** 64 })).rejects.toThrow(
                /requests\[0\]\.seed: expected an integer in \[-2\^63, 2\^64\), got 18446744073709552000/,
            );
            await expect(gen({ seed: 1.5 })).rejects.toThrow(RangeError);
            await expect(gen({ seed: "7" })).rejects.toThrow(TypeError);
            // A negative seed is its int64 bits: -1 and 2^64 - 1 draw the same tokens.
            expect((await gen({ seed: -1, sampling: { maxTokens: 8 } }))[0].tokens).toEqual(
                (await gen({ seed: 2n ** 64n - 1n, sampling: { maxTokens: 8 } }))[0].tokens,
            );
            const batch = {
                tokens: new Int32Array(8).fill(5),
                targets: new Int32Array(8).fill(6),
                mask: new Uint8Array(8).fill(1),
                shape: [2, 4] as [number, number],
            };
            await expect(p.logprobs({ tokens: batch.tokens } as never)).rejects.toThrow(
                /logprobs: shape: expected \[B, T\]/,
            );
            await expect(p.values({ ...batch, shape: [2, -4] })).rejects.toThrow(
                /shape\[1\] \(T\): expected a non-negative integer/,
            );
            await expect(p.logprobs({ ...batch, tokens: new Float32Array(8) as never })).rejects.toThrow(
                /tokens: expected Int32Array of 8 elements, got Float32Array/,
            );
            const before = Array.from(await p.logprobs(batch));
            for (const [opts, re] of [
                [{ lr: NaN }, /lr: expected a number/],
                [{ beta2: 1 }, /beta2: expected a number in \[0, 1\), got 1/],
                [{ eps: 0 }, /eps: expected a number/],
                [{ weightDecay: -0.1 }, /weightDecay/],
                [{ accumulate: 1 }, /accumulate: expected a boolean/],
                [{ valueClip: -1 }, /valueClip/],
                [{ loss: "ppo" }, /loss: expected 'sft', 'value' or policy-loss options, got "ppo"/],
                [{ signal: {} }, /signal: expected an AbortSignal/],
                [{ learningRate: 1e-3 }, /unknown option "learningRate"/],
            ] as const)
                await expect(p.trainStep(batch, opts as never)).rejects.toThrow(re);
            expect(Array.from(await p.logprobs(batch))).toEqual(before); // nothing was trained
        } finally {
            await p.dispose();
        }
    });

    it("the native layer rejects wrong lengths instead of reading past a buffer", () => {
        const h = native.gptCreate({
            ...{ vocab: 10, context: 8, layers: 1, heads: 1, dModel: 4, mlpRatio: 4, tieEmbeddings: true },
            seed: 1,
        });
        expect(() => native.gptDecode(h, { tokens: new Int32Array(3), pos: 0, logits: null, values: null })).toThrow(
            /gptCacheReset first/,
        );
        native.gptCacheReset(h, { batch: 2, maxLen: 4 });
        expect(() => native.gptDecode(h, { tokens: new Int32Array(1), pos: 0, logits: null, values: null })).toThrow(
            /tokens: expected 2 elements/,
        );
        expect(() => native.gptDecode(h, { tokens: new Int32Array(2), pos: 4, logits: null, values: null })).toThrow(
            /pos: expected an integer in \[0, 3\]/,
        );
        expect(() =>
            native.gptDecode(h, { tokens: new Int32Array(2), pos: 0, logits: new Float32Array(3), values: null }),
        ).toThrow(/logits: expected 20 elements, got 3/);
        expect(() => native.gptBackward(h, { dlogits: new Float32Array(5), dvalues: null })).toThrow(/no forward/);
        expect(() =>
            native.gptForward(h, { tokens: new Int32Array(6), B: 2, T: 3, logits: new Float32Array(59), values: null }),
        ).toThrow(/logits: expected 60 elements, got 59/);
        native.gptForward(h, { tokens: new Int32Array(6), B: 2, T: 3, logits: null, values: null });
        expect(() => native.gptBackward(h, { dlogits: new Float32Array(5), dvalues: null })).toThrow(
            /dlogits: expected 60 elements, got 5/,
        );
        expect(() =>
            native.gptForward(h, { tokens: Int32Array.of(0, 10), B: 1, T: 2, logits: null, values: null }),
        ).toThrow(/tokens: expected ids in \[0, 10\)/);
        native.gptFree(h);
        expect(() => native.gptParamCount(h)).toThrow(/freed/);
    });

    it("prefill and per-row decoding: the Llama family's, with bad lengths and positions named", async () => {
        const g = native.gptCreate({
            ...{ vocab: 10, context: 8, layers: 1, heads: 1, dModel: 4, mlpRatio: 4, tieEmbeddings: true },
            seed: 1,
        });
        native.gptCacheReset(g, { batch: 1, maxLen: 4 });
        await expect(
            native.gptPrefillAsync(g, { tokens: Int32Array.of(1), lens: Int32Array.of(1), P: 1 }),
        ).rejects.toThrow(/prefill: the model is of the GPT family/);
        native.gptFree(g);
        const h = native.llamaCreate({
            ...{
                vocab: 10,
                context: 8,
                layers: 1,
                dModel: 8,
                heads: 2,
                kvHeads: 1,
                headDim: 4,
                intermediate: 8,
                rmsEps: 1e-6,
                ropeTheta: 10000,
                ropeScaling: 0,
                ropeFactor: 1,
                ropeLowFreqFactor: 1,
                ropeHighFreqFactor: 4,
                ropeOriginalMaxPosition: 8,
                qkvBias: false,
                oBias: false,
                qkNorm: false,
                tieEmbeddings: true,
            },
            seed: 1,
        });
        expect(() => native.gptPrefillAsync(h, { tokens: Int32Array.of(1), lens: Int32Array.of(1), P: 1 })).toThrow(
            /gptCacheReset first/,
        );
        native.gptCacheReset(h, { batch: 2, maxLen: 4 });
        expect(() => native.gptPrefillAsync(h, { tokens: new Int32Array(3), lens: Int32Array.of(1, 1), P: 2 })).toThrow(
            /tokens: expected 4 elements, got 3/,
        );
        await expect(
            native.gptPrefillAsync(h, { tokens: new Int32Array(4), lens: Int32Array.of(1, 3), P: 2 }),
        ).rejects.toThrow(/prefill: lens: expected 0..2 at row 1, got 3/);
        await expect(
            native.gptPrefillAsync(h, { tokens: Int32Array.of(0, 0, 10, 0), lens: Int32Array.of(1, 1), P: 2 }),
        ).rejects.toThrow(/expected ids in \[0, 10\), got 10 at row 1 position 0/);
        await native.gptPrefillAsync(h, { tokens: Int32Array.of(1, 2, 3, 4), lens: Int32Array.of(2, 1), P: 2 });
        await expect(
            native.gptDecodeRowsAsync(h, {
                tokens: Int32Array.of(1, 2),
                pos: Int32Array.of(2, 4),
                logits: null,
                values: null,
            }),
        ).rejects.toThrow(/pos: expected 0..3, got 4 at row 1/);
        expect(() =>
            native.gptDecodeRowsAsync(h, {
                tokens: Int32Array.of(1, 2),
                pos: Int32Array.of(2),
                logits: null,
                values: null,
            }),
        ).toThrow(/pos: expected 2 elements, got 1/);
        const logits = new Float32Array(20);
        await native.gptDecodeRowsAsync(h, {
            tokens: Int32Array.of(1, 2),
            pos: Int32Array.of(2, 1),
            logits,
            values: null,
        });
        expect(logits.every(Number.isFinite)).toBe(true);
        native.gptFree(h);
    });
});
