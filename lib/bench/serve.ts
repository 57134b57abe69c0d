// serve.ts (bench): `maporl serve` under load, as a client sees it, on this machine (loopback, one server process with
// 2 model threads). The model is the embedded GPT 4 layers x 256 wide, context 8192, random weights. Rows:
//   - short requests (8 tokens) one after another: p50 / p95 latency, alone and while a 3,000-token request decodes
//     (started again whenever it ends);
//   - throughput: 16 concurrent 64-token requests, completion tokens per second;
//   - the server's resident memory idle, after one request of n = 32 choices that may reach 8,100 tokens (cancelled
//     by the client after 1 s), and 2 s after the client went away.
// MAPORL_BENCH_SERVE_CLI=path/to/cli.js runs the same load against another build's server (before / after figures).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { NativePolicy } from "../model/nativePolicy.js";
import { type ServeProcess, startServeProcess } from "../serve/serveProcess.js";
import { type BenchContext, type BenchRow } from "./types.js";

const post = (url: string, body: unknown, signal?: AbortSignal) =>
    fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        ...(signal ? { signal } : {}),
    });
const quantile = (xs: number[], q: number) =>
    [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const rssOf = (pid: number) =>
    Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;

export async function benchServe(ctx: BenchContext): Promise<BenchRow[]> {
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-serve-"));
    let srv: ServeProcess | null = null;
    try {
        const model = await NativePolicy.create({
            contextLength: 8192,
            layers: 4,
            heads: 4,
            dModel: 256,
            seed: 0,
            name: "gpt",
        });
        await model.save(join(dir, "ckpt"));
        await model.dispose();
        const cli = process.env.MAPORL_BENCH_SERVE_CLI;
        srv = await startServeProcess(join(dir, "ckpt"), ["--threads", String(ctx.threads)], ...(cli ? [cli] : []));
        const url = `${srv.baseUrl}/completions`,
            pid = srv.proc.pid!;
        const which = cli ? `maporl serve (${cli})` : "maporl serve";
        const short = async () => {
            const t = performance.now();
            const r = await post(url, { model: "gpt", prompt: "2+3=", max_tokens: 8, temperature: 0 });
            await r.json();
            return performance.now() - t;
        };
        for (let i = 0; i < 3; i++) await short(); // warm-up
        const N = 20,
            alone: number[] = [];
        for (let i = 0; i < N; i++) alone.push(await short());
        // The same while a 3,000-token request decodes (started again when it ends).
        let loading = true;
        const long = (async () => {
            while (loading)
                await (await post(url, { model: "gpt", prompt: "hi", max_tokens: 3000, temperature: 0 })).json();
        })();
        await new Promise((r) => setTimeout(r, 200));
        const loaded: number[] = [];
        for (let i = 0; i < N; i++) loaded.push(await short());
        loading = false;
        await long;
        const size = "GPT 4x256, context 8192, 8-token requests";
        const lat = (xs: number[]) =>
            `p50 ${quantile(xs, 0.5).toFixed(0)} ms, p95 ${quantile(xs, 0.95).toFixed(0)} ms over ${xs.length} requests`;
        const rows: BenchRow[] = [
            {
                kernel: "serve latency",
                size,
                impl: `${which}, idle`,
                medianMs: quantile(alone, 0.5),
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: null,
                note: lat(alone),
            },
            {
                kernel: "serve latency",
                size,
                impl: `${which}, beside a 3,000-token request`,
                medianMs: quantile(loaded, 0.5),
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: quantile(alone, 0.5),
                note: lat(loaded),
            },
        ];
        // Throughput: 16 concurrent 64-token requests.
        const t0 = performance.now();
        const outs = await Promise.all(
            Array.from({ length: 16 }, (_, i) =>
                post(url, { model: "gpt", prompt: `q${i}`, max_tokens: 64, temperature: 1, seed: i }).then(
                    (r) => r.json() as Promise<{ usage: { completion_tokens: number } }>,
                ),
            ),
        );
        const ms = performance.now() - t0,
            tokens = outs.reduce((a, o) => a + o.usage.completion_tokens, 0);
        rows.push({
            kernel: "serve throughput",
            size: "GPT 4x256, 16 concurrent 64-token requests",
            impl: which,
            medianMs: ms,
            peakExtraBytes: null,
            bytesMoved: 0,
            baselineMs: null,
            note: `${Math.round(tokens / (ms / 1e3))} completion tokens/s`,
        });
        // Memory: idle, after a request whose cache may reach 32 x 8,100 positions (cancelled after 1 s), then idle again.
        const idle0 = rssOf(pid);
        const stop = new AbortController();
        const big = post(
            url,
            { model: "gpt", prompt: "hi", max_tokens: 8100, n: 32, temperature: 0 },
            stop.signal,
        ).catch(() => undefined);
        await new Promise((r) => setTimeout(r, 1000));
        const during = rssOf(pid);
        stop.abort();
        await big;
        await new Promise((r) => setTimeout(r, 2000));
        const idle1 = rssOf(pid),
            mb = (x: number) => `${(x / 2 ** 20).toFixed(0)} MB`;
        rows.push({
            kernel: "serve memory",
            size: "n = 32, max_tokens 8100, cancelled after 1 s",
            impl: which,
            medianMs: null,
            peakExtraBytes: idle1 - idle0,
            bytesMoved: 0,
            baselineMs: null,
            note: `server RSS idle ${mb(idle0)}, during ${mb(during)}, idle after ${mb(idle1)}`,
        });
        return rows;
    } finally {
        await srv?.stop();
        rmSync(dir, { recursive: true, force: true });
    }
}
