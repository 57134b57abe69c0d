// gateway.ts (bench): what the gateway adds per request, as a client sees it on loopback. The upstream is `maporl
// serve` (a child process, the embedded GPT 1 layer x 64 wide, so that the model's own time is small and the overhead
// shows); the gateway runs in this process in front of it (a FleetPolicy over the one server: it asks for token ids
// and log-probs, and records each call in its episode). Sequential 8-token chat completions, interleaved in rounds:
// directly to the server (plain, and with the fields the gateway asks for), and through the gateway (recorded).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { startGateway } from "../gateway/gateway.js";
import { NativePolicy } from "../model/nativePolicy.js";
import { FleetPolicy } from "../remote/fleet.js";
import { type ServeProcess, startServeProcess } from "../serve/serveProcess.js";
import type { BenchContext, BenchRow } from "./types.js";

const quantile = (xs: number[], q: number) =>
    [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

export async function benchGateway(ctx: BenchContext): Promise<BenchRow[]> {
    const dir = mkdtempSync(join(tmpdir(), "maporl-bench-gateway-"));
    let srv: ServeProcess | null = null;
    try {
        const model = await NativePolicy.create({
            contextLength: 256,
            layers: 1,
            heads: 2,
            dModel: 64,
            seed: 0,
            name: "gpt",
        });
        await model.save(join(dir, "ckpt"));
        await model.dispose();
        srv = await startServeProcess(join(dir, "ckpt"), ["--threads", String(ctx.threads)]);
        const fleet = new FleetPolicy({ endpoints: [srv.baseUrl], model: "gpt" });
        const gw = await startGateway({ agents: { solver: fleet.policy("gpt") }, port: 0, maxClosedEpisodes: 1 << 20 });
        try {
            const messages = [{ role: "user", content: "2 + 3 = ?" }];
            const call = async (url: string, body: Record<string, unknown>, headers: Record<string, string> = {}) => {
                const t = performance.now();
                const r = await fetch(`${url}/chat/completions`, {
                    method: "POST",
                    headers: { "content-type": "application/json", ...headers },
                    body: JSON.stringify({ messages, max_tokens: 8, temperature: 0, ...body }),
                });
                if (!r.ok) throw new Error(`bench gateway: ${r.status} ${await r.text()}`);
                await r.json();
                return performance.now() - t;
            };
            const ways: [string, () => Promise<number>][] = [
                ["maporl serve directly", () => call(srv!.baseUrl, { model: "gpt" })],
                [
                    "maporl serve directly, with logprobs and token ids",
                    () => call(srv!.baseUrl, { model: "gpt", logprobs: true, return_token_ids: true }),
                ],
                [
                    "through the gateway (recorded)",
                    () => call(gw.baseUrl, { model: "solver" }, { "x-maporl-episode": "bench" }),
                ],
            ];
            for (const [, f] of ways) for (let i = 0; i < 5; i++) await f(); // warm-up
            const times = ways.map(() => [] as number[]);
            const rounds = Math.max(40, ctx.reps * 4);
            for (let r = 0; r < rounds; r++) for (const [k, [, f]] of ways.entries()) times[k]!.push(await f());
            const direct = quantile(times[0]!, 0.5);
            return ways.map(([impl], k) => ({
                kernel: "gateway overhead",
                size: `GPT 1x64, 8-token chat completions, ${rounds} sequential requests each`,
                impl,
                medianMs: quantile(times[k]!, 0.5),
                peakExtraBytes: null,
                bytesMoved: 0,
                baselineMs: k === 0 ? null : direct,
                note: `p50 ${quantile(times[k]!, 0.5).toFixed(2)} ms, p95 ${quantile(times[k]!, 0.95).toFixed(2)} ms${
                    k === 0
                        ? ""
                        : `; p50 +${(quantile(times[k]!, 0.5) - direct).toFixed(2)} ms over the plain direct call`
                }`,
            }));
        } finally {
            await gw.close();
            fleet.close();
        }
    } finally {
        await srv?.stop();
        rmSync(dir, { recursive: true, force: true });
    }
}
