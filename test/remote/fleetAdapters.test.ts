// fleetAdapters.test.ts: LoRA adapters pushed to a fleet of `maporl serve --enable-lora` processes (vLLM's runtime
// LoRA updating: POST /v1/load_lora_adapter, /v1/unload_lora_adapter). After each training step's push, the agent's
// generations come from the new adapter: the served tokens and log-probs equal the trained adapter's own, change
// when it changes, and carry the version's name; the old version is unloaded. A server killed and restarted on its
// port gets the current adapter again (re-admitted with it loaded first, or, back before a health check noticed,
// loaded again once it is found without it); no answer is lost meanwhile. A bad push switches nothing.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { FleetPolicy, NativePolicy } from "../../lib/index.js";
import { AdapterVersions } from "../../lib/remote/fleetOptions.js";
import { startServe, tinyHfModel, type ServeProcess } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-fleet-lora-"));
const modelDir = join(work, "tiny-llama");
let base: NativePolicy;
let agent: NativePolicy;
const procs: ServeProcess[] = [];

beforeAll(async () => {
    await tinyHfModel(modelDir);
    base = await NativePolicy.load(modelDir);
    agent = await base.withAdapter("a0", { rank: 4, alpha: 8 });
    procs.push(...(await Promise.all([0, 1].map(() => startServe(modelDir, ["--enable-lora", "--lora-root", work])))));
});
afterAll(async () => {
    for (const p of procs) await p.stop("SIGKILL");
    await agent?.dispose();
    await base?.dispose();
    rmSync(work, { recursive: true, force: true });
});

// A few SFT steps move the adapter's B away from zero (a fresh adapter is the base).
async function train(p: NativePolicy, seed: number) {
    const B = 2,
        T = 16,
        tokens = new Int32Array(B * T),
        targets = new Int32Array(B * T);
    for (let i = 0; i < B * T; i++) {
        tokens[i] = (i * 37 + seed * 11 + 5) % 300;
        targets[i] = (i * 53 + seed * 7 + 3) % 300;
    }
    for (let s = 0; s < 3; s++)
        await p.trainStep({ tokens, targets, mask: new Uint8Array(B * T).fill(1), shape: [B, T] }, { lr: 3e-2 });
}

const reqs = Array.from({ length: 6 }, (_, i) => ({
    messages: [{ role: "user" as const, content: `Question ${i}: 2 + ${i}?` }],
    sampling: { temperature: 1, maxTokens: 6 },
    seed: 70 + i,
    routingKey: `episode-${i}/0`,
}));
const same = (x: { tokenIds?: number[]; logprobs?: number[] }[], y: { tokenIds?: number[]; logprobs?: number[] }[]) =>
    expect(x.map((g) => [g.tokenIds, g.logprobs])).toEqual(y.map((g) => [g.tokenIds, g.logprobs]));
// Polls `ok` (every 100 ms, up to 30 s) until it holds; returns its last answer.
async function eventually(ok: () => Promise<boolean>): Promise<boolean> {
    for (const end = Date.now() + 30_000; Date.now() < end; await new Promise((r) => setTimeout(r, 100)))
        if (await ok()) return true;
    return ok();
}
const served = async (p: ServeProcess) =>
    ((await (await fetch(`${p.baseUrl}/models`)).json()) as { data: { id: string; parent: string | null }[] }).data;

describe("adapters pushed to a fleet", () => {
    it("after each push the agent's generations are the new adapter's; the old version is unloaded", async () => {
        // (not sticky: the spread checks below need requests on both servers, and the 6 routing keys all hash to one
        // of two servers in 1 run of 32; the fleet then routes by load, which spreads them)
        const fleet = new FleetPolicy({
            endpoints: procs.map((p) => p.baseUrl),
            model: "llama-1x32",
            healthCheckIntervalMs: 200,
            probeIntervalMs: 100,
            sticky: false,
        });
        try {
            const a0 = fleet.adapter("a0");
            await expect(a0.generate([reqs[0]])).rejects.toThrow(/adapter 'a0' has not been pushed/);
            // A training step, its adapter pushed as version `step`: the served generations are the trained adapter's own.
            const step = async (k: number) => {
                await train(agent, k);
                await agent.saveAdapter(join(work, `a0-step${k}`));
                const v = (await fleet.pushAdapter("a0", join(work, `a0-step${k}`))).version;
                expect(v.version).toBe(k);
                const gens = await a0.generate(reqs);
                same(gens, await agent.generate(reqs));
                return { v, gens };
            };
            const { v: v1, gens: first } = await step(1);
            expect(first.every((g) => g.model === v1.served && g.tokenIdsExact)).toBe(true);
            // Both servers hold it. (Not asserted through which endpoints answered: on a loaded machine a health probe
            // that takes over 2 s ejects a server for a while and the fleet routes around it, re-loading the current
            // version there when it is re-admitted; CI once saw all six answers come from one server.)
            expect(
                await eventually(async () =>
                    (await Promise.all(procs.map(served))).every((d) => d.some((m) => m.id === v1.served)),
                ),
            ).toBe(true);
            const plain = await base.generate(reqs);
            expect(first.map((g) => g.logprobs)).not.toEqual(plain.map((g) => g.logprobs)); // not the base
            same(await fleet.generate(reqs), plain); // the base stays the base

            const { v: v2, gens: second } = await step(2);
            expect(second.map((g) => g.logprobs)).not.toEqual(first.map((g) => g.logprobs));
            expect(second.every((g) => g.model === v2.served)).toBe(true);
            for (
                let k = 0;
                k < 50 && (await Promise.all(procs.map(served))).some((d) => d.some((m) => m.id === v1.served));
                k++
            )
                await new Promise((r) => setTimeout(r, 40));
            for (const p of procs) expect((await served(p)).map((m) => m.id)).toEqual(["llama-1x32", v2.served]);

            // A server killed and restarted on its port gets the current version again: ejected and re-admitted with it
            // loaded first, or, when it came back between two health checks, found without it and loaded again.
            const port = new URL(procs[1].baseUrl).port;
            await procs[1].stop("SIGKILL");
            procs[1] = await startServe(modelDir, ["--enable-lora", "--lora-root", work, "--port", port]);
            const back = async () =>
                (await served(procs[1])).some((m) => m.id === v2.served) &&
                fleet
                    .stats()
                    .find((s) => s.url === procs[1].baseUrl)!
                    .adapters.includes(v2.served);
            for (let k = 0; k < 200 && !(await back()); k++) await new Promise((r) => setTimeout(r, 50));
            const st = fleet.stats().find((s) => s.url === procs[1].baseUrl)!;
            expect(st).toMatchObject({ healthy: true, adapters: [v2.served] });
            expect(st.ejections + st.adapterReloads).toBeGreaterThanOrEqual(1); // more where a slow probe ejected it again
            // Both servers answer again, with the current version. (A batch may still land on one server: a health
            // probe slowed past its deadline on a loaded machine ejects a server for a while; so the batch is retried.)
            const endpoints = new Set<string>();
            for (let k = 0; k < 20 && endpoints.size < 2; k++) {
                const third = await a0.generate(reqs);
                same(third, second);
                for (const g of third) endpoints.add(g.endpoint!);
                if (endpoints.size < 2) await new Promise((r) => setTimeout(r, 100));
            }
            expect([...endpoints].sort()).toEqual(procs.map((p) => p.baseUrl).sort());

            // A push that no server can load switches nothing.
            await expect(fleet.pushAdapter("a0", join(work, "missing"))).rejects.toThrow(
                /a0 v3 could not be loaded on any endpoint: .*missing/,
            );
            expect(fleet.adapterVersion("a0")!.served).toBe(v2.served);
            same(await a0.generate(reqs), second);
        } finally {
            fleet.close();
        }
    });

    it("maporl serve replaces an adapter in place only when asked, and names what it cannot load", async () => {
        const root = procs[0].baseUrl.replace(/\/v1$/, "");
        const post = (path: string, body: unknown) =>
            fetch(`${root}${path}`, { method: "POST", body: JSON.stringify(body) });
        expect(
            (await post("/v1/load_lora_adapter", { lora_name: "x", lora_path: join(work, "a0-step1") })).status,
        ).toBe(200);
        const again = await post("/v1/load_lora_adapter", { lora_name: "x", lora_path: join(work, "a0-step2") });
        expect(again.status).toBe(400);
        expect(((await again.json()) as { error: { message: string } }).error.message).toMatch(
            /already been loaded.*load_inplace/,
        );
        const chat = async () =>
            (
                (await (
                    await post("/v1/chat/completions", {
                        model: "x",
                        messages: reqs[0].messages,
                        max_tokens: 4,
                        seed: 3,
                        logprobs: true,
                        return_token_ids: true,
                    })
                ).json()) as { choices: { token_ids: number[] }[] }
            ).choices[0].token_ids;
        const before = await chat();
        expect(
            (
                await post("/v1/load_lora_adapter", {
                    lora_name: "x",
                    lora_path: join(work, "a0-step2"),
                    load_inplace: true,
                })
            ).status,
        ).toBe(200);
        const req = { messages: reqs[0].messages, sampling: { maxTokens: 4 }, seed: 3 };
        const step1 = await base.loadAdapter(join(work, "a0-step1"), { name: "step1" });
        const [was] = await step1.generate([req]),
            [want] = await agent.generate([req]);
        await step1.dispose();
        expect(before).toEqual(was.tokenIds);
        expect(await chat()).toEqual(want.tokenIds);
        expect(was.logprobs).not.toEqual(want.logprobs);
        expect((await post("/v1/unload_lora_adapter", { lora_name: "x" })).status).toBe(200);
        expect((await post("/v1/unload_lora_adapter", { lora_name: "x" })).status).toBe(404);
        const bad = await post("/v1/load_lora_adapter", { lora_name: "y", lora_path: join(work, "nope") });
        expect(bad.status).toBe(400);
        expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(
            /loading LoRA adapter 'y' from .*nope|lora_path: .*nope does not exist/,
        );
        expect((await served(procs[0])).map((m) => m.id)).not.toContain("y");
    });

    it("a server that comes back without its adapters before any health check: the missing model is loaded there again, no answer is lost", async () => {
        // Health checks off: only a request's 404 ("no such model") can reveal the restart.
        const fleet = new FleetPolicy({
            endpoints: procs.map((p) => p.baseUrl),
            model: "llama-1x32",
            healthCheckIntervalMs: 0,
            probeIntervalMs: 100,
            sticky: false, // (as above: both servers must get requests)
        });
        try {
            const v = (await fleet.pushAdapter("b0", join(work, "a0-step2"))).version;
            const a = fleet.adapter("b0"),
                first = await a.generate(reqs);
            expect(new Set(first.map((g) => g.endpoint)).size).toBe(2);
            const port = new URL(procs[0].baseUrl).port;
            await procs[0].stop("SIGKILL");
            procs[0] = await startServe(modelDir, ["--enable-lora", "--lora-root", work, "--port", port]);
            expect((await served(procs[0])).map((m) => m.id)).not.toContain(v.served);
            const again = await a.generate(reqs); // the rows routed to the restarted server get 404, then go to the other
            same(again, first);
            expect(again.every((g) => g.model === v.served)).toBe(true);
            for (let k = 0; k < 100 && !(await served(procs[0])).some((m) => m.id === v.served); k++)
                await new Promise((r) => setTimeout(r, 50));
            expect((await served(procs[0])).map((m) => m.id)).toContain(v.served);
            const st = fleet.stats().find((s) => s.url === procs[0].baseUrl)!;
            expect(st).toMatchObject({ healthy: true, ejections: 0, adapterReloads: 1, adapters: [v.served] });
            expect(new Set((await a.generate(reqs)).map((g) => g.endpoint)).size).toBe(2); // both serve it again
        } finally {
            fleet.close();
        }
    });
});

describe("adapter versions requests still need", () => {
    it("a retired version stays needed (reloaded by an endpoint that lost its adapters) while requests ask for it", () => {
        const unloaded: string[] = [];
        const v = new AdapterVersions((s) => unloaded.push(s));
        const v1 = { name: "a", version: 1, served: "a-v1-x", dir: "/d/1" },
            v2 = { name: "a", version: 2, served: "a-v2-y", dir: "/d/2" };
        v.dirs.set(v1.served, v1.dir);
        v.current.set("a", v1);
        v.begin(v1.served); // a request waits for an endpoint with v1
        v.dirs.set(v2.served, v2.dir);
        v.current.set("a", v2);
        v.retire(v1.served);
        expect(v.live()).toEqual([
            { served: v2.served, dir: v2.dir },
            { served: v1.served, dir: v1.dir },
        ]);
        expect(unloaded).toEqual([]);
        v.release(v1.served); // answered: v1 is unloaded and no longer needed
        expect(unloaded).toEqual([v1.served]);
        expect(v.live()).toEqual([{ served: v2.served, dir: v2.dir }]);
    });
});
