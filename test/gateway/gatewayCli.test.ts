// `maporl gateway` as a process: an in-process model with two agents (one from a saved adapter), calls recorded by
// episode, a rewarded episode and an open one (failed as the gateway stops) both written to --record.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import type { GatewayEpisode } from "../../lib/gateway/episodes.js";
import { startGatewayProcess } from "../../lib/serve/serveProcess.js";
import { startServe, tinyHfModel } from "../helpers/serve.js";

const CLI = join(import.meta.dirname, "..", "..", "dist", "cli.js");
let work: string;
beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gwcli-"));
    await tinyHfModel(join(work, "m"), 5);
    const base = await NativePolicy.load(join(work, "m"));
    await (await base.withAdapter("solver", { rank: 4, seed: 9 })).saveAdapter(join(work, "solver"));
    await base.dispose();
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("maporl gateway", () => {
    it("records episodes of an in-process model's agents and writes each closed one to --record", async () => {
        const record = join(work, "out", "episodes.jsonl");
        const g = await startGatewayProcess(
            [
                "--model",
                join(work, "m"),
                "--agents",
                "researcher,solver",
                "--adapters",
                `solver=${join(work, "solver")}`,
                "--record",
                record,
                "--trace",
                join(work, "trace"),
                "--threads",
                "1",
                "--api-key",
                "k",
            ],
            CLI,
        );
        try {
            const root = g.baseUrl.replace(/\/v1$/, "");
            const c = (ep: string) => new OpenAI({ baseURL: `${root}/episodes/${ep}/v1`, apiKey: "k", maxRetries: 0 });
            const q = [{ role: "user" as const, content: "2 + 3?" }];
            await c("one").chat.completions.create({ model: "researcher", messages: q, max_tokens: 4 });
            await c("one").chat.completions.create({ model: "solver", messages: q, max_tokens: 4 });
            await c("two").chat.completions.create({ model: "solver", messages: q, max_tokens: 4 });
            const r = await fetch(`${root}/episodes/one/reward`, {
                method: "POST",
                headers: { authorization: "Bearer k" },
                body: JSON.stringify({ reward: 0.5 }),
            });
            expect(r.status).toBe(200);
            expect((await fetch(`${root}/episodes/one`, { headers: { authorization: "Bearer k" } })).status).toBe(404); // written, taken
        } finally {
            expect(await g.stop()).toBe(0);
        }
        const eps = readFileSync(record, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as GatewayEpisode);
        expect(eps.map((e) => [e.id, e.status, e.reward, e.calls.map((x) => x.agent)])).toEqual([
            ["one", "rewarded", 0.5, ["researcher", "solver"]],
            ["two", "failed", null, ["solver"]],
        ]);
        expect(eps[1].reason).toBe("the gateway closed");
        expect(eps[0].calls.every((x) => x.samples[0].tokenIdsExact && x.samples[0].tokenIds.length > 0)).toBe(true);
    }, 60_000);

    it("in front of maporl serve (--upstream): the recorded ids are the server's, equal to the in-process replay", async () => {
        const srv = await startServe(join(work, "m"), ["--served-model-name", "base"]);
        const g = await startGatewayProcess(
            [
                "--upstream",
                srv.baseUrl,
                "--upstream-model",
                "base",
                "--agents",
                "solver",
                "--record",
                join(work, "up.jsonl"),
            ],
            CLI,
        );
        const local = await NativePolicy.load(join(work, "m"));
        try {
            const root = g.baseUrl.replace(/\/v1$/, "");
            const c = new OpenAI({ baseURL: `${root}/episodes/up/v1`, apiKey: "none", maxRetries: 0 });
            const q = [{ role: "user" as const, content: "2 + 3?" }];
            const r = await c.chat.completions.create({ model: "solver", messages: q, max_tokens: 6, temperature: 1 });
            const ep = (await (await fetch(`${root}/episodes/up`)).json()) as GatewayEpisode;
            const s = ep.calls[0].samples[0];
            expect(s.text).toBe(r.choices[0].message.content);
            expect(s.tokenIdsExact).toBe(true);
            expect(s.endpoint).toBe(srv.baseUrl);
            const [again] = await local.generate([
                { messages: q, sampling: { temperature: 1, maxTokens: 6 }, seed: Number(s.seed) },
            ]);
            expect([s.promptTokenIds, s.tokenIds]).toEqual([again.promptTokenIds, again.tokenIds]);
            expect(s.logprobs.map((x) => x.toFixed(4))).toEqual(again.logprobs!.map((x) => x.toFixed(4)));
        } finally {
            await local.dispose();
            expect(await g.stop()).toBe(0);
            await srv.stop();
        }
    }, 60_000);
});
