// modelLimits.test.ts: a model's configuration is checked as a whole before anything is allocated. Each field of an
// embedded GPT may be within its own bounds while their product is not (dModel 4096, contextLength 65536, 8 layers
// was killed by the kernel at 24 GB): the bytes it needs are computed first (checked against the engine's own
// parameter count) and a configuration past maxMemoryBytes is refused with the figure.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { llamaLayout, llamaWeightBytes, readHfConfig } from "../../lib/model/hf.js";
import { gptMemoryBytes } from "../../lib/model/options.js";
import { readSafetensors, readSafetensorsHeader } from "../../lib/model/safetensors.js";

describe("the embedded GPT's memory is checked before it is allocated", () => {
    it("gptMemoryBytes is 16 bytes per parameter the engine allocates (tied and untied heads, MLP ratios)", async () => {
        for (const c of [
            { contextLength: 16, layers: 1, heads: 1, dModel: 8 },
            { contextLength: 40, layers: 3, heads: 2, dModel: 12, mlpRatio: 2, tieEmbeddings: false },
        ]) {
            const p = await NativePolicy.create(c);
            try {
                expect(gptMemoryBytes(c, p.tokenizer.vocabSize)).toBe(16 * p.parameterCount);
            } finally {
                await p.dispose();
            }
        }
    });

    it("a configuration whose fields pass but whose product does not fit is refused at once, naming the figure", async () => {
        const t0 = performance.now(),
            rss0 = process.memoryUsage().rss;
        await expect(NativePolicy.create({ dModel: 4096, contextLength: 65536, layers: 8, heads: 32 })).rejects.toThrow(
            /needs 2[0-9]\.\d\d GiB for its parameters, gradients and AdamW moments .* more than maxMemoryBytes .* \(80% of this machine's memory\)/,
        );
        await expect(
            NativePolicy.create({ dModel: 64, contextLength: 64, layers: 2, heads: 2, maxMemoryBytes: 1e5 }),
        ).rejects.toThrow(/more than maxMemoryBytes 0\.00 GiB/);
        await expect(
            NativePolicy.create({ dModel: 64, contextLength: 64, layers: 2, heads: 2, maxMemoryBytes: Number.NaN }),
        ).rejects.toThrow(/maxMemoryBytes: expected a number > 0, got NaN/);
        expect(performance.now() - t0).toBeLessThan(1000);
        expect(process.memoryUsage().rss - rss0).toBeLessThan(64 << 20);
        const ok = await NativePolicy.create({
            dModel: 64,
            contextLength: 64,
            layers: 2,
            heads: 2,
            maxMemoryBytes: 1e9,
        });
        await ok.dispose();
    });
});

describe("the KV cache is sized, bounded and given back", () => {
    it("a generation past maxCacheBytes is refused before allocation; a large cache goes back after its batch", async () => {
        const p = await NativePolicy.create({ contextLength: 8192, layers: 4, heads: 4, dModel: 256, seed: 3 });
        try {
            expect(p.kvBytesPerToken).toBe(4 * 256 * 2 * 4);
            const ask = (n: number, maxTokens: number) =>
                Array.from({ length: n }, (_, i) => ({
                    prompt: "hi",
                    sampling: { temperature: 0, maxTokens },
                    seed: i,
                }));
            const want = await p.generate(ask(2, 6));
            p.maxCacheBytes = 64 << 20;
            await expect(p.generate(ask(32, 8100))).rejects.toThrow(
                /needs a KV cache of 2026\.3 MiB \(32 rows x 8105 positions\), more than maxCacheBytes 64\.0 MiB/,
            );
            expect(() => {
                p.maxCacheBytes = Number.NaN;
            }).toThrow(/maxCacheBytes: expected a number >= 1, got NaN/);
            p.maxCacheBytes = 2 ** 40;
            // (the prompt "hi" is 5 tokens in the chat format.) 16 rows that may reach 8,000 positions: a 1 GB cache, aborted
            // after the first token. It is not zero-filled (pages come as positions are written) and it goes back.
            const rss0 = process.memoryUsage().rss;
            const stop = new AbortController();
            await expect(
                p.generate(ask(16, 7990), { signal: stop.signal, onToken: () => stop.abort(new Error("enough")) }),
            ).rejects.toThrow(/enough/);
            expect(process.memoryUsage().rss - rss0).toBeLessThan(64 << 20);
            expect(p.kvCacheBytes).toBe(0);
            // A small batch's cache is kept for the next one.
            expect(await p.generate(ask(2, 6))).toEqual(want.map((g) => ({ ...g, latencyMs: expect.any(Number) })));
            expect(p.kvCacheBytes).toBe(2 * (5 + 6) * p.kvBytesPerToken);
        } finally {
            await p.dispose();
        }
    });
});

describe("a Hugging Face directory is checked against its config before the model is allocated", () => {
    const FIX = join(import.meta.dirname, "..", "fixtures", "hf");
    it("llamaLayout (the tensors a config implies, nothing allocated) is the engine's own list for every fixture", async () => {
        for (const f of ["llama", "llama-f16", "llama-linear-bias", "mistral", "qwen2", "qwen3-bf16-sharded"]) {
            const info = readHfConfig(
                join(FIX, f),
                JSON.parse(readFileSync(join(FIX, f, "config.json"), "utf8")) as Record<string, unknown>,
            );
            const h = native.llamaCreate({ ...info.engine, seed: null });
            try {
                const engine = native
                    .gptTensors(h)
                    .filter((t) => !t.name.startsWith("value_head."))
                    .map((t) => ({ name: t.name, shape: t.shape.filter((d) => d > 0) }));
                expect(llamaLayout(info.engine)).toEqual(engine);
                expect(llamaWeightBytes(info.engine)).toBe(4 * native.gptParamCount(h));
            } finally {
                native.gptFree(h);
            }
        }
    });

    it("a config far larger than its weights file fails on the first header, at once, with no allocation", async () => {
        const dir = mkdtempSync(join(tmpdir(), "maporl-big-"));
        try {
            cpSync(join(FIX, "llama"), dir, { recursive: true });
            const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
            writeFileSync(
                join(dir, "config.json"),
                JSON.stringify({
                    ...cfg,
                    hidden_size: 8192,
                    intermediate_size: 65536,
                    num_hidden_layers: 2,
                    num_attention_heads: 64,
                    num_key_value_heads: 64,
                }),
            );
            const t0 = performance.now(),
                rss0 = process.memoryUsage().rss;
            await expect(NativePolicy.load(dir, { tokenizer: null })).rejects.toThrow(
                /tensor model\.embed_tokens\.weight: shape \[\d+,\d+\], expected \[\d+,8192\] \(from config\.json\)/,
            );
            expect(performance.now() - t0).toBeLessThan(2000);
            expect(process.memoryUsage().rss - rss0).toBeLessThan(64 << 20);
            // Weights that match the config but pass the memory limit: refused with the figure, before allocation.
            await expect(
                NativePolicy.load(join(FIX, "llama"), { tokenizer: null, maxMemoryBytes: 1000 }),
            ).rejects.toThrow(
                /the model's weights take 0\.00 GiB \(\d+ layers, hidden \d+, intermediate \d+, vocab \d+, float32\), more than maxMemoryBytes 0\.00 GiB/,
            );
            await expect(
                NativePolicy.load(join(FIX, "llama"), { tokenizer: null, maxMemoryBytes: -1 }),
            ).rejects.toThrow(/maxMemoryBytes: expected a number > 0, got -1/);
        } finally {
            rmSync(dir, { recursive: true, force: true });
        }
    });
});

describe("safetensors byte ranges", () => {
    // A file of two F32 tensors whose data_offsets are given; `data` bytes after the header.
    const file = (offsets: [number, number][], data: number) => {
        const header = JSON.stringify({
            a: { dtype: "F32", shape: [2], data_offsets: offsets[0] },
            b: { dtype: "F32", shape: [2], data_offsets: offsets[1] },
        });
        const len = Buffer.alloc(8);
        len.writeBigUInt64LE(BigInt(header.length));
        const path = join(mkdtempSync(join(tmpdir(), "maporl-st-")), "x.safetensors");
        writeFileSync(path, Buffer.concat([len, Buffer.from(header), Buffer.alloc(data)]));
        return path;
    };
    it("overlapping, gapped or short-covering offsets are refused by both readers; contiguous ones are read", () => {
        const cases: [[number, number][], number, RegExp][] = [
            [
                [
                    [0, 8],
                    [4, 12],
                ],
                12,
                /b: data_offsets \[4, 12\] overlap the tensor before \(which ends at 8\)/,
            ],
            [
                [
                    [0, 8],
                    [0, 8],
                ],
                8,
                /overlap the tensor before/,
            ],
            [
                [
                    [0, 8],
                    [12, 20],
                ],
                20,
                /b: data_offsets \[12, 20\] leave a gap after byte 8/,
            ],
            [
                [
                    [0, 8],
                    [8, 16],
                ],
                20,
                /the tensors end at data byte 16, the data section has 20 bytes/,
            ],
        ];
        for (const [off, bytes, err] of cases) {
            const p = file(off, bytes);
            expect(() => readSafetensors(p)).toThrow(err);
            expect(() => readSafetensorsHeader(p)).toThrow(err);
        }
        const ok = file(
            [
                [8, 16],
                [0, 8],
            ],
            16,
        );
        expect(readSafetensors(ok).tensors.map((t) => t.name)).toEqual(["a", "b"]);
        expect(readSafetensorsHeader(ok).tensors).toHaveLength(2);
    });
});
