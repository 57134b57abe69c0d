// The scale-out loop through the gateway: the agent is served by `maporl serve --enable-lora` (a fleet of one), the
// gateway records an unchanged openai-SDK program in front of it, trainGatewayIteration trains the adapter in process
// and its push hook saves it and pushes it to the fleet after every step. The next iteration's episodes are answered by
// the pushed version (its versioned name recorded on every sample), and the server's ids and log-probs are those of the
// trained adapter in process.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { FleetPolicy, NativePolicy } from "../../lib/index.js";
import type { GatewayEpisode } from "../../lib/gateway/episodes.js";
import { startGateway } from "../../lib/gateway/gateway.js";
import { trainGatewayIteration } from "../../lib/gateway/train.js";
import { startServe, tinyHfModel, type ServeProcess } from "../helpers/serve.js";

let work: string, srv: ServeProcess;
beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gwfleet-"));
    await tinyHfModel(join(work, "m"), 5);
    srv = await startServe(join(work, "m"), ["--served-model-name", "base", "--enable-lora", "--lora-root", work]);
});
afterAll(async () => {
    await srv.stop();
    rmSync(work, { recursive: true, force: true });
});

describe("gateway in front of a fleet, adapters pushed after every step", () => {
    it("each iteration's episodes are answered by the last pushed version, whose ids and log-probs are the trained adapter's", async () => {
        const base = await NativePolicy.load(join(work, "m"));
        const solver = await base.withAdapter("solver", { rank: 4, alpha: 8, seed: 3 });
        const fleet = new FleetPolicy({ endpoints: [srv.baseUrl], model: "base" });
        let pushes = 0;
        const push = async (agent: string, model: NativePolicy) => {
            const dir = join(work, `${agent}-v${++pushes}`);
            await model.saveAdapter(dir);
            await fleet.pushAdapter(agent, dir);
        };
        await push("solver", solver);
        const gw = await startGateway({ agents: { solver: fleet.adapter("solver") }, port: 0 });
        const checked: string[] = [];
        // During an iteration (before its step) the in-process adapter is the pushed version: replay there.
        const replay = async (ep: GatewayEpisode) => {
            const c = ep.calls[0],
                s = c.samples[0];
            expect(s.model).toBe(fleet.adapterVersion("solver")!.served);
            const [g] = await solver.generate([{ messages: c.messages, sampling: c.sampling, seed: Number(s.seed) }]);
            expect([s.promptTokenIds, s.tokenIds]).toEqual([g.promptTokenIds, g.tokenIds]);
            expect(s.logprobs.map((x) => x.toFixed(3))).toEqual(g.logprobs!.map((x) => x.toFixed(3)));
            checked.push(s.model!);
        };
        try {
            for (let it = 0; it < 3; it++) {
                const r = await trainGatewayIteration(["2 + 3?", "7 - 1?"], {
                    gateway: gw,
                    models: { solver },
                    program: async ({ item, baseUrl }) => {
                        const client = new OpenAI({ baseURL: baseUrl, apiKey: "unused", maxRetries: 0 });
                        const r = await client.chat.completions.create({
                            model: "solver",
                            messages: [{ role: "user", content: item }],
                            max_tokens: 6,
                            temperature: 1,
                        });
                        return r.choices[0].message.content ?? "";
                    },
                    reward: async (_item, answer, ep) => {
                        await replay(ep);
                        return String(answer).length;
                    },
                    groups: 3,
                    lr: 5e-2,
                    push,
                });
                expect(r.failed).toEqual([]);
            }
            expect(new Set(checked).size).toBe(3); // three versions answered, one per iteration
            expect(pushes).toBe(4);
        } finally {
            await gw.close();
            fleet.close();
            await base.dispose();
        }
    }, 90_000);
});
