// serveTrust.test.ts: `maporl serve`'s answers to clients that go away or send what a template refuses. A client that
// abandons a non-streamed request stops its generation (it no longer runs to max_tokens behind others); a chat
// template's raise_exception is a 400 (vLLM's answer), so clients do not retry it or eject a healthy server; a short
// request sent while a long one decodes is answered without waiting for it.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, describe, expect, it } from "vitest";

import { type GenerateRequest, type Generation, NativePolicy, type Policy, servePolicy } from "../../lib/index.js";
import { tinyHfModel } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-servetrust-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const post = (url: string, body: unknown) =>
    fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("maporl serve and its clients", () => {
    it("an abandoned non-streamed request stops generating; a short request beside a long one does not wait for it", async () => {
        const inner = await NativePolicy.create({
            contextLength: 4096,
            layers: 2,
            heads: 2,
            dModel: 64,
            seed: 4,
            name: "m",
        });
        const settled: { ok: boolean; ms: number; tokens: number }[] = [];
        // The served policy, watching when each generate call settles (the server sees the same tokenizer and config).
        const watched: Policy & { tokenizer: unknown; config: unknown } = {
            name: "m",
            tokenizer: inner.tokenizer,
            config: inner.config,
            generate: async (reqs: GenerateRequest[], o?: { signal?: AbortSignal }) => {
                const t0 = performance.now();
                try {
                    const g: Generation[] = await inner.generate(reqs, o ?? {});
                    settled.push({ ok: true, ms: performance.now() - t0, tokens: g[0].tokens!.length });
                    return g;
                } catch (e) {
                    settled.push({ ok: false, ms: performance.now() - t0, tokens: 0 });
                    throw e;
                }
            },
        };
        const srv = await servePolicy(watched, { port: 0 });
        try {
            const long = { model: "m", prompt: "hi", max_tokens: 3000, temperature: 0 };
            // Alone, the long request takes `full` ms; abandoned after 150 ms, its generation must stop soon after.
            const a0 = performance.now();
            await (await post(`${srv.baseUrl}/completions`, long)).json();
            const full = performance.now() - a0;
            expect(settled.at(-1)).toMatchObject({ ok: true, tokens: 3000 });
            await new Promise<void>((resolve) => {
                const r = request(`${srv.baseUrl}/completions`, {
                    method: "POST",
                    headers: { "content-type": "application/json" },
                });
                r.on("error", () => resolve());
                r.end(JSON.stringify(long));
                setTimeout(() => {
                    r.destroy();
                    resolve();
                }, 150);
            });
            await new Promise((r) => setTimeout(r, 300));
            expect(settled).toHaveLength(2);
            expect(settled[1].ok).toBe(false);
            expect(settled[1].ms).toBeLessThan(Math.max(600, full / 2));
            // A 2-token request sent while a long one decodes is answered in a fraction of the long one's time.
            const longRun = post(`${srv.baseUrl}/completions`, long).then((r) => r.json());
            await new Promise((r) => setTimeout(r, 50));
            const s0 = performance.now();
            const short = (await (
                await post(`${srv.baseUrl}/completions`, { model: "m", prompt: "yo", max_tokens: 2, temperature: 0 })
            ).json()) as { choices: unknown[] };
            const shortMs = performance.now() - s0;
            await longRun;
            expect(short.choices).toHaveLength(1);
            expect(shortMs).toBeLessThan(full / 4);
        } finally {
            await srv.close();
            await inner.dispose();
        }
    });

    it("a chat template's raise_exception is a 400 with its message", async () => {
        await tinyHfModel(join(work, "hf"));
        const p = await NativePolicy.load(join(work, "hf"), {
            contextLength: 1024,
            chatTemplate:
                "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ messages[0].content }}",
        });
        const srv = await servePolicy(p, { port: 0, model: "m", maxBodyBytes: 4 << 20 });
        try {
            const r = await post(`${srv.baseUrl}/chat/completions`, {
                model: "m",
                messages: [
                    { role: "system", content: "x" },
                    { role: "user", content: "hi" },
                ],
                max_tokens: 2,
            });
            expect([r.status, JSON.stringify(await r.json())]).toEqual([
                400,
                expect.stringMatching(/System role not supported/),
            ]);
            const ok = await post(`${srv.baseUrl}/chat/completions`, {
                model: "m",
                messages: [{ role: "user", content: "hi" }],
                max_tokens: 2,
            });
            expect(ok.status).toBe(200);
            // A prompt far past the context is refused before it is tokenized (tokenizing 1 MiB held the event loop ~1 s).
            const huge = "word ".repeat(200_000);
            const t0 = performance.now();
            const [chat, completion] = await Promise.all([
                post(`${srv.baseUrl}/chat/completions`, { model: "m", messages: [{ role: "user", content: huge }] }),
                post(`${srv.baseUrl}/completions`, { model: "m", prompt: huge }),
            ]);
            expect(performance.now() - t0).toBeLessThan(400);
            expect([chat.status, JSON.stringify(await chat.json())]).toEqual([
                400,
                expect.stringMatching(/the prompt is at least \d+ tokens, the context is 1024/),
            ]);
            expect([completion.status, JSON.stringify(await completion.json())]).toEqual([
                400,
                expect.stringMatching(/prompt: at least \d+ tokens, the context is 1024/),
            ]);
            const bomb = await NativePolicy.load(join(work, "hf"), {
                chatTemplate: "{% for i in range(1000000000) %}{% endfor %}x",
            });
            const srv2 = await servePolicy(bomb, { port: 0, model: "b" });
            try {
                const r2 = await post(`${srv2.baseUrl}/chat/completions`, {
                    model: "b",
                    messages: [{ role: "user", content: "hi" }],
                    max_tokens: 2,
                });
                expect(r2.status).toBe(400);
                expect(JSON.stringify(await r2.json())).toMatch(/range\(\) of 1000000000 numbers/);
                expect((await fetch(`${srv2.baseUrl.replace(/\/v1$/, "")}/health`)).status).toBe(200);
            } finally {
                await srv2.close();
                await bomb.dispose();
            }
        } finally {
            await srv.close();
            await p.dispose();
        }
    });

    it("runtime LoRA loading: paths only inside --lora-root, at most --max-loras, FIFOs refused at once; --api-key; the warning", async () => {
        const dir = join(work, "lora");
        await tinyHfModel(join(dir, "base"));
        const p = await NativePolicy.load(join(dir, "base"));
        const root = join(dir, "adapters");
        mkdirSync(root, { recursive: true });
        const a = await p.withAdapter("a", { rank: 2 });
        await a.saveAdapter(join(root, "a"));
        for (const k of ["b", "c"]) cpSync(join(root, "a"), join(root, k), { recursive: true });
        symlinkSync("/etc", join(root, "escape"));
        mkdirSync(join(root, "fifo"));
        execFileSync("mkfifo", [join(root, "fifo", "adapter_config.json")]);
        await expect(servePolicy(p, { port: 0, allowAdapterUpdates: true })).rejects.toThrow(
            /give loraRoot \(--lora-root DIR\).*or allowAnyLoraPath/,
        );
        const srv = await servePolicy(p, {
            port: 0,
            model: "m",
            allowAdapterUpdates: true,
            loraRoot: root,
            maxLoras: 2,
            apiKey: "sekret",
        });
        const root0 = srv.baseUrl.replace(/\/v1$/, "");
        const load = (name: string, path: string, key = "sekret") =>
            fetch(`${srv.baseUrl}/load_lora_adapter`, {
                method: "POST",
                headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
                body: JSON.stringify({ lora_name: name, lora_path: path }),
            });
        const text = async (r: Response) => `${r.status} ${await r.text()}`;
        try {
            expect((await fetch(`${root0}/health`)).status).toBe(200); // no key needed
            expect(await text(await fetch(`${srv.baseUrl}/models`))).toMatch(/^401 .*Bearer/);
            expect(await text(await load("x", join(root, "a"), "wrong"))).toMatch(/^401 /);
            for (const bad of ["/etc", join(root, ".."), join(root, "escape"), "/proc/self"])
                expect(await text(await load("x", bad))).toMatch(
                    /^400 .*lora_path: .* is outside the directory adapters are loaded from/,
                );
            const t0 = performance.now();
            expect(await text(await load("x", join(root, "fifo")))).toMatch(
                /^400 .*adapter_config\.json: a FIFO, expected a regular file/,
            );
            expect(performance.now() - t0).toBeLessThan(1000);
            expect((await fetch(`${root0}/health`)).status).toBe(200);
            expect(await text(await load("a", join(root, "a")))).toMatch(/^200 /);
            expect(await text(await load("b", join(root, "b")))).toMatch(/^200 /);
            expect(await text(await load("c", join(root, "c")))).toMatch(
                /^400 .*2 LoRA adapters are loaded, the most this server holds \(maxLoras 2/,
            );
        } finally {
            await srv.close();
            await a.dispose();
            await p.dispose();
        }
        // A FIFO as a model's weights: NativePolicy.load fails at once, naming it.
        const m = join(dir, "fifo-model");
        cpSync(join(dir, "base"), m, { recursive: true });
        rmSync(join(m, "model.safetensors"));
        execFileSync("mkfifo", [join(m, "model.safetensors")]);
        const t1 = performance.now();
        await expect(NativePolicy.load(m)).rejects.toThrow(/model\.safetensors: a FIFO, expected a regular file/);
        expect(performance.now() - t1).toBeLessThan(1000);
    });

    it("maporl serve on a non-loopback address without --api-key warns on stderr", () => {
        const cli = join(import.meta.dirname, "..", "..", "dist", "cli.js");
        const run = (extra: string[]) =>
            spawnSync(
                process.execPath,
                [cli, "serve", "--checkpoint", join(work, "nonexistent"), "--port", "0", ...extra],
                { encoding: "utf8" },
            );
        expect(run(["--host", "0.0.0.0"]).stderr).toMatch(
            /WARNING: listening on 0\.0\.0\.0 with no authentication.*--api-key/,
        );
        expect(run(["--host", "0.0.0.0", "--api-key", "k"]).stderr).not.toMatch(/WARNING/);
        expect(run([]).stderr).not.toMatch(/WARNING/);
    });
});
