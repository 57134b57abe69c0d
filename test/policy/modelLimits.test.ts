// modelLimits.test.ts: a model's configuration is checked as a whole before anything is allocated. Each field of an
// embedded GPT may be within its own bounds while their product is not (dModel 4096, contextLength 65536, 8 layers
// was killed by the kernel at 24 GB): the bytes it needs are computed first (checked against the engine's own
// parameter count) and a configuration past maxMemoryBytes is refused with the figure.
import { describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { gptMemoryBytes } from "../../lib/policy/nativePolicy.js";

describe("the embedded GPT's memory is checked before it is allocated", () => {
    it("gptMemoryBytes is 16 bytes per parameter the engine allocates (tied and untied heads, MLP ratios)", async () => {
        for (const c of [{ contextLength: 16, layers: 1, heads: 1, dModel: 8 }, { contextLength: 40, layers: 3, heads: 2, dModel: 12, mlpRatio: 2, tieEmbeddings: false }]) {
            const p = await NativePolicy.create(c);
            try {
                expect(gptMemoryBytes(c, p.tokenizer.vocabSize)).toBe(16 * p.parameterCount);
            } finally { await p.dispose(); }
        }
    });

    it("a configuration whose fields pass but whose product does not fit is refused at once, naming the figure", async () => {
        const t0 = performance.now(), rss0 = process.memoryUsage().rss;
        await expect(NativePolicy.create({ dModel: 4096, contextLength: 65536, layers: 8, heads: 32 }))
            .rejects.toThrow(/needs 2[0-9]\.\d\d GiB for its parameters, gradients and AdamW moments .* more than maxMemoryBytes .* \(80% of this machine's memory\)/);
        await expect(NativePolicy.create({ dModel: 64, contextLength: 64, layers: 2, heads: 2, maxMemoryBytes: 1e5 })).rejects.toThrow(/more than maxMemoryBytes 0\.00 GiB/);
        await expect(NativePolicy.create({ dModel: 64, contextLength: 64, layers: 2, heads: 2, maxMemoryBytes: Number.NaN })).rejects.toThrow(/maxMemoryBytes: expected a number > 0, got NaN/);
        expect(performance.now() - t0).toBeLessThan(1000);
        expect(process.memoryUsage().rss - rss0).toBeLessThan(64 << 20);
        const ok = await NativePolicy.create({ dModel: 64, contextLength: 64, layers: 2, heads: 2, maxMemoryBytes: 1e9 });
        await ok.dispose();
    });
});

describe("the KV cache is sized, bounded and given back", () => {
    it("a generation past maxCacheBytes is refused before allocation; a large cache goes back after its batch", async () => {
        const p = await NativePolicy.create({ contextLength: 8192, layers: 4, heads: 4, dModel: 256, seed: 3 });
        try {
            expect(p.kvBytesPerToken).toBe(4 * 256 * 2 * 4);
            const ask = (n: number, maxTokens: number) => Array.from({ length: n }, (_, i) => ({ prompt: "hi", sampling: { temperature: 0, maxTokens }, seed: i }));
            const want = await p.generate(ask(2, 6));
            p.maxCacheBytes = 64 << 20;
            await expect(p.generate(ask(32, 8100))).rejects.toThrow(/needs a KV cache of 2026\.3 MiB \(32 rows x 8105 positions\), more than maxCacheBytes 64\.0 MiB/);
            expect(() => { p.maxCacheBytes = Number.NaN; }).toThrow(/maxCacheBytes: expected a number >= 1, got NaN/);
            p.maxCacheBytes = 2 ** 40;
            // (the prompt "hi" is 5 tokens in the chat format.) 16 rows that may reach 8,000 positions: a 1 GB cache, aborted after the first token. Its memory goes back.
            const rss0 = process.memoryUsage().rss;
            const stop = new AbortController();
            await expect(p.generate(ask(16, 7990), { signal: stop.signal, onToken: () => stop.abort(new Error("enough")) })).rejects.toThrow(/enough/);
            expect(process.memoryUsage().rss - rss0).toBeLessThan(256 << 20);
            expect(await p.generate(ask(2, 6))).toEqual(want.map((g) => ({ ...g, latencyMs: expect.any(Number) })));
        } finally { await p.dispose(); }
    });
});
