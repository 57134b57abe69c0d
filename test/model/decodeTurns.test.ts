// decodeTurns.test.ts: generation batches that arrive while another decodes start beside it with their own KV cache
// and take turns one step at a time. A short request no longer waits for a long one to finish (its latency is
// measured against the long request's), every generation is the one the request gives alone (embedded GPT and a
// Llama-architecture model with LoRA adapters on one base), and a training step queued meanwhile waits for every
// running batch and keeps new ones from joining.
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { type GenerateRequest, type Generation, NativePolicy } from "../../lib/index.js";

const strip = (gs: Generation[]) => gs.map(({ latencyMs: _l, ...g }) => g);
const ask = (n: number, maxTokens: number, seed = 0): GenerateRequest[] =>
    Array.from({ length: n }, (_, i) => ({ prompt: `q${i}`, sampling: { temperature: 1, maxTokens }, seed: seed + i }));

describe("generation batches take turns", () => {
    it("a short request beside a long one finishes long before it, with the tokens it gives alone", async () => {
        const p = await NativePolicy.create({ contextLength: 2048, layers: 2, heads: 2, dModel: 128, seed: 5 });
        try {
            const longReq = [{ prompt: "q0", sampling: { temperature: 0, maxTokens: 1500 } }],
                shortReq = ask(1, 4, 77);
            const wantLong = strip(await p.generate(longReq)),
                wantShort = strip(await p.generate(shortReq));
            const t0 = performance.now();
            const long = p.generate(longReq).then((g) => ({ g, ms: performance.now() - t0 }));
            await new Promise((r) => setTimeout(r, 20)); // the long batch is decoding
            const s0 = performance.now();
            const short = await p.generate(shortReq);
            const shortMs = performance.now() - s0;
            const l = await long;
            expect(strip(short)).toEqual(wantShort);
            expect(strip(l.g)).toEqual(wantLong);
            expect(l.g[0].tokens!.length).toBe(1500);
            expect(shortMs).toBeLessThan(l.ms / 4); // it waited for the long one before: shortMs > l.ms - 20
        } finally {
            await p.dispose();
        }
    });

    it("a training step queued during decoding waits for every running batch; batches after it run after it", async () => {
        const p = await NativePolicy.create({ contextLength: 256, layers: 1, heads: 1, dModel: 32, seed: 2 });
        try {
            const order: string[] = [];
            // each next call made once the previous one decodes (its first token), not after a fixed wait: on a fast
            // machine a 120-token batch could end within a few milliseconds
            const decoding = () => {
                let started!: () => void;
                const p = new Promise<void>((r) => (started = r));
                return { p, onToken: () => started() };
            };
            const aOn = decoding(),
                bOn = decoding();
            const a = p.generate(ask(2, 200), { onToken: aOn.onToken }).then(() => order.push("a"));
            await aOn.p;
            const b = p.generate(ask(1, 3, 9), { onToken: bOn.onToken }).then(() => order.push("b")); // joins a
            await bOn.p;
            const T = 4,
                tokens = new Int32Array(T).fill(65);
            const train = p
                .trainStep(
                    { tokens, targets: tokens, mask: new Float32Array(T).fill(1), shape: [1, T] },
                    { loss: "sft", lr: 1e-3 },
                )
                .then(() => order.push("train"));
            const c = p.generate(ask(1, 3, 9)).then(() => order.push("c")); // after the step: queued, not joined
            await Promise.all([a, b, train, c]);
            expect(order.indexOf("b")).toBeLessThan(order.indexOf("a"));
            expect(order.slice(order.indexOf("a"))).toEqual(["a", "train", "c"]);
        } finally {
            await p.dispose();
        }
    });

    it("LoRA adapters on one Llama base: batches of different adapters taking turns give what each gives alone", async () => {
        const base = await NativePolicy.load(join(import.meta.dirname, "..", "fixtures", "hf", "llama"), {
            contextLength: 64,
            tokenizer: null,
        });
        try {
            const x = await base.withAdapter("x", { rank: 4, seed: 1 }),
                y = await base.withAdapter("y", { rank: 4, seed: 2 });
            // (B starts at zero, as PEFT's: one step each so that the adapters differ from the base and each other)
            const T = 6,
                tokens = Int32Array.from({ length: T }, (_, i) => 10 + 7 * i);
            for (const [a, lr] of [
                [x, 0.05],
                [y, -0.05],
            ] as const)
                await a.trainStep(
                    { tokens, targets: tokens.map((t) => t + 1), mask: new Float32Array(T).fill(1), shape: [1, T] },
                    { loss: "sft", lr: Math.abs(lr) * (a === x ? 1 : 2) },
                );
            const ids = (n: number, maxTokens: number, seed: number): GenerateRequest[] =>
                Array.from({ length: n }, (_, i) => ({
                    promptTokenIds: [3 + i, 9, 17 + i],
                    sampling: { temperature: 1, maxTokens },
                    seed: seed + i,
                }));
            const rx = ids(2, 50, 1),
                ry = ids(1, 5, 40),
                rb = ids(1, 5, 50);
            const want = [strip(await x.generate(rx)), strip(await y.generate(ry)), strip(await base.generate(rb))];
            const gx = x.generate(rx);
            await new Promise((r) => setTimeout(r, 10));
            const [gy, gb] = await Promise.all([y.generate(ry), base.generate(rb)]);
            expect([strip(await gx), strip(gy), strip(gb)]).toEqual(want);
        } finally {
            await base.dispose();
        }
    });
});
