// ggufWrite.test.ts: the benchmark's GGUF writer (lib/bench/ggufWrite.ts), which gives llama.cpp and the native engine
// the same bits. Its float32 -> half conversion is the nearest half, ties to even (against a float64 search of the
// neighbours); its files parse with @huggingface/gguf (names, shapes fastest first, types, offsets inside the file),
// load in NativePolicy at each precision, and hold what was written: BF16 files the F32 file's weights to bf16
// rounding, Q8_0 blocks whose q * d is within half a step of them.
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { gguf } from "@huggingface/gguf";
import { afterAll, describe, expect, it } from "vitest";

import { SMALL_LLAMA, toHalf, writeRandomGguf } from "../../lib/bench/ggufWrite.js";
import { NativePolicy } from "../../lib/model/nativePolicy.js";

const work = mkdtempSync(join(tmpdir(), "maporl-gguf-write-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

// A half's value (float64), from its bits.
function halfValue(h: number): number {
    const s = h & 0x8000 ? -1 : 1,
        e = (h >> 10) & 0x1f,
        m = h & 0x3ff;
    return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
}

const shape = SMALL_LLAMA;

describe("the benchmark's GGUF writer", () => {
    it("toHalf: the nearest half, ties to even, subnormals included", () => {
        let seed = 5;
        const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
        const xs = [0, 1, -1, 0.5, 65504, 2 ** -24, 2 ** -25, 3 * 2 ** -25, 2 ** -14, 1 + 2 ** -11, 1 + 3 * 2 ** -11];
        for (let i = 0; i < 4000; i++) xs.push(Math.fround(rnd() * 2 ** Math.floor(rnd() * 30 - 14)));
        for (const x0 of xs) {
            const x = Math.fround(x0),
                h = toHalf(x),
                v = halfValue(h);
            // no other half is nearer; at a tie the even one
            for (const n of [h - 1, h + 1]) {
                if ((n & 0x7fff) > 0x7bff || n < 0 || (n ^ h) & 0x8000) continue;
                const w = halfValue(n);
                const dv = Math.abs(v - x),
                    dw = Math.abs(w - x);
                expect(dv <= dw, `${x}: ${v} vs ${w}`).toBe(true);
                if (dv === dw) expect(h & 1, `${x}: tie`).toBe(0);
            }
        }
    });

    it("files parse, load at each precision and hold the written values", async () => {
        const kinds = [
            ["f32", 0, "float32"],
            ["bf16", 30, "bfloat16"],
            ["q8_0", 8, "int8"],
        ] as const;
        const sizes: number[] = [];
        for (const [kind, type, dtype] of kinds) {
            const f = join(work, `m-${kind}.gguf`);
            writeRandomGguf(f, shape, kind, 3);
            const { metadata, tensorInfos, tensorDataOffset } = await gguf(f, { allowLocalFile: true });
            expect(metadata["general.architecture"]).toBe("llama");
            expect((metadata as Record<string, unknown>)["llama.block_count"]).toBe(2);
            expect(tensorInfos.length).toBe(1 + 2 * 9 + 1);
            const byName = new Map(tensorInfos.map((t) => [t.name, t]));
            expect(byName.get("token_embd.weight")!.shape).toEqual([64n, 320n]);
            expect(byName.get("blk.1.attn_k.weight")!.shape).toEqual([64n, 32n]);
            expect(byName.get("blk.0.ffn_down.weight")!.shape).toEqual([128n, 64n]);
            expect(Number(byName.get("blk.0.attn_q.weight")!.dtype)).toBe(type);
            expect(Number(byName.get("blk.0.attn_norm.weight")!.dtype)).toBe(0); // norms stay F32
            const last = tensorInfos.at(-1)!;
            expect(Number(tensorDataOffset) + Number(last.offset) + 4 * 64).toBeLessThanOrEqual(statSync(f).size);
            sizes.push(statSync(f).size);
            const p = await NativePolicy.load(f, { dtype, tokenizer: null });
            const [g] = await p.generate([{ promptTokenIds: [1, 2, 3], sampling: { temperature: 0, maxTokens: 4 } }]);
            expect(g.tokens!.length).toBe(4);
            await p.dispose();
        }
        // the matrices' bytes: bf16 half of f32, Q8_0 34 per 32 weights (the metadata and the norms are the same; every
        // tensor here is a multiple of 32 bytes, so no padding differs)
        const matrices = 64 * 320 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128);
        const rest = sizes[0] - 4 * matrices;
        expect(sizes[1] - rest).toBe(2 * matrices);
        expect(sizes[2] - rest).toBe((34 / 32) * matrices);
    });

    it("a Q8_0 file's blocks are the F32 file's weights within half a step; a BF16 file's their nearest bf16", async () => {
        const files = { f32: join(work, "v-f32.gguf"), q8_0: join(work, "v-q8.gguf"), bf16: join(work, "v-bf16.gguf") };
        for (const [kind, f] of Object.entries(files)) writeRandomGguf(f, shape, kind as "f32", 9);
        // one matrix's bytes from each file, through the parser's offsets
        const tensor = async (f: string, name: string, bytes: number) => {
            const { tensorInfos, tensorDataOffset } = await gguf(f, { allowLocalFile: true });
            const at = Number(tensorDataOffset) + Number(tensorInfos.find((t) => t.name === name)!.offset);
            return readFileSync(f).subarray(at, at + bytes);
        };
        const n = 64 * 128,
            name = "blk.1.ffn_up.weight";
        const x = new Float32Array(new Uint8Array(await tensor(files.f32, name, 4 * n)).buffer);
        const q = await tensor(files.q8_0, name, (34 / 32) * n),
            b = await tensor(files.bf16, name, 2 * n);
        expect(x.some((v) => v !== 0)).toBe(true);
        for (let blk = 0; blk < n / 32; blk++) {
            const d = halfValue(q.readUInt16LE(blk * 34));
            let amax = 0;
            for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[blk * 32 + i]));
            expect(Math.abs(d - amax / 127)).toBeLessThanOrEqual((amax / 127) * 2 ** -11); // the half of max|x| / 127
            for (let i = 0; i < 32; i++) {
                const w = x[blk * 32 + i];
                expect(Math.abs(q.readInt8(blk * 34 + 2 + i) * d - w)).toBeLessThanOrEqual(d / 2 + amax * 2 ** -10);
            }
        }
        for (let i = 0; i < n; i++) {
            const w = x[i],
                v = new Float32Array(new Uint32Array([b.readUInt16LE(2 * i) << 16]).buffer)[0];
            // within half a bf16 ulp of the weight (8 bits of mantissa)
            expect(Math.abs(v - w)).toBeLessThanOrEqual(2 ** (Math.floor(Math.log2(Math.abs(w))) - 8));
        }
    });
});
