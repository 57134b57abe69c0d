// device.test.ts: NativePolicy's device option and trainStep's progress / abort, from TS. Without a GPU (this CI):
// asking for CUDA is a MaporlError MAPORL_ERR_NO_DEVICE that names CUDA, create/load/to never leave a half-made or
// moved model behind, 'auto' falls back to the CPU. With a GPU visible, the same policy trained on CUDA and on the
// CPU from one seed give the same losses (to float rounding). trainStep reports its phases and an abort before the
// backward leaves the model and its gradients untouched.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { backend, CharTokenizer, MaporlError, NativePolicy } from "../../lib/index.js";

const tok = new CharTokenizer("abcdefgh");
const small = { contextLength: 12, layers: 1, heads: 2, dModel: 16, seed: 3, tokenizer: tok };

function batch(B: number, T: number, seed: number) {
    const tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T),
        mask = new Uint8Array(B * T).fill(1);
    let x = seed;
    for (let i = 0; i < B * T; i++) {
        x = (x * 1103515245 + 12345) % 2147483648;
        tokens[i] = 3 + (x % 8);
        targets[i] = 3 + ((x >> 8) % 8);
    }
    return { tokens, targets, mask, shape: [B, T] as [number, number] };
}

const gpus = backend().cuda.devices.length;

describe("NativePolicy devices", () => {
    it("starts on the CPU, and 'auto' resolves to a visible GPU or the CPU", async () => {
        const p = await NativePolicy.create(small);
        expect(p.device).toBe("cpu");
        const a = await NativePolicy.create({ ...small, device: "auto" });
        expect(a.device).toBe(gpus > 0 ? "cuda" : "cpu");
        await p.dispose();
        await a.dispose();
    });

    it("rejects a bad device value naming the parameter", async () => {
        await expect(NativePolicy.create({ ...small, device: "gpu" as never })).rejects.toThrow(/device/);
        const p = await NativePolicy.create(small);
        await expect(p.to("tpu" as never)).rejects.toThrow(/device/);
        await p.dispose();
    });

    // One of the next two runs, by the machine: the first where no GPU is visible (CI), the second where one is.
    if (gpus === 0)
        it("without a GPU, 'cuda' is MAPORL_ERR_NO_DEVICE and nothing is left half-moved", async () => {
            const err = await NativePolicy.create({ ...small, device: "cuda" }).catch((e: unknown) => e);
            expect(err).toBeInstanceOf(MaporlError);
            expect((err as MaporlError).code).toBe("MAPORL_ERR_NO_DEVICE");
            expect((err as Error).message).toMatch(/cuda/i);
            // to('cuda') fails and the model stays where it was, usable and unchanged.
            const p = await NativePolicy.create(small);
            const b = batch(2, 10, 1);
            const before = await p.logprobs(b);
            await expect(p.to("cuda")).rejects.toMatchObject({ code: "MAPORL_ERR_NO_DEVICE" });
            expect(p.device).toBe("cpu");
            expect(await p.logprobs(b)).toEqual(before);
            // load(dir, { device: 'cuda' }) rejects too; the checkpoint is fine on the CPU.
            const dir = join(mkdtempSync(join(tmpdir(), "maporl-dev-")), "ckpt");
            await p.save(dir);
            await expect(NativePolicy.load(dir, { device: "cuda" })).rejects.toMatchObject({
                code: "MAPORL_ERR_NO_DEVICE",
            });
            const q = await NativePolicy.load(dir, { device: "cpu" });
            expect(await q.logprobs(b)).toEqual(before);
            await p.dispose();
            await q.dispose();
        });

    if (gpus > 0)
        it("on a GPU, training on CUDA follows the CPU run to float rounding", async () => {
            const cpu = await NativePolicy.create(small),
                gpu = await NativePolicy.create({ ...small, device: "cuda" });
            expect(gpu.device).toBe("cuda");
            for (let s = 0; s < 5; s++) {
                const b = batch(4, 12, s + 1);
                const a = await cpu.trainStep(b, { lr: 1e-3 }),
                    c = await gpu.trainStep(b, { lr: 1e-3 });
                expect(Math.abs(a.loss - c.loss)).toBeLessThan(1e-4 * Math.abs(a.loss));
            }
            const clone = await gpu.clone();
            expect(clone.device).toBe("cuda");
            await gpu.to("cpu");
            expect(gpu.device).toBe("cpu");
            await Promise.all([cpu.dispose(), gpu.dispose(), clone.dispose()]);
        });
});

describe("trainStep progress and abort", () => {
    it("reports its phases: forward, loss, backward, step (no step when accumulating)", async () => {
        const p = await NativePolicy.create(small);
        const seen: string[] = [];
        await p.trainStep(batch(2, 10, 1), { onProgress: (d, t) => seen.push(`${d}/${t}`) });
        expect(seen).toEqual(["1/4", "2/4", "3/4", "4/4"]);
        seen.length = 0;
        await p.trainStep(batch(2, 10, 1), { accumulate: true, onProgress: (d, t) => seen.push(`${d}/${t}`) });
        expect(seen).toEqual(["1/3", "2/3", "3/3"]);
        await expect(p.trainStep(batch(2, 10, 1), { onProgress: 5 as never })).rejects.toThrow(/onProgress/);
        await p.dispose();
    });

    it("an abort after the forward leaves weights and gradients untouched", async () => {
        const a = await NativePolicy.create(small),
            b = await NativePolicy.create(small);
        const x = batch(3, 10, 7),
            y = batch(3, 10, 8);
        // a: one accumulated micro-batch, then an aborted call, then a step; b: the same without the aborted call.
        await a.trainStep(x, { accumulate: true });
        await b.trainStep(x, { accumulate: true });
        const ctl = new AbortController();
        await expect(
            a.trainStep(y, {
                signal: ctl.signal,
                onProgress: (d) => {
                    if (d === 1) ctl.abort();
                },
            }),
        ).rejects.toThrow();
        const ra = await a.trainStep(x),
            rb = await b.trainStep(x);
        expect(ra.gradNorm).toBe(rb.gradNorm);
        expect(await a.logprobs(y)).toEqual(await b.logprobs(y));
        await a.dispose();
        await b.dispose();
    });
});
