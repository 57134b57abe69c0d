// serveHardening.test.ts: what a client or a model directory cannot make `maporl serve` do. A runtime lora_path is
// taken from --lora-root (a relative one too), one outside it is refused the same whether it exists or not (no probing
// of the file system), an adapter file that links outside the root is refused, and two loads at once cannot both take
// the last of --max-loras. A FIFO among a model's tokenizer files fails save() at once instead of blocking it; one as
// maporl-task.json leaves a started server answering. --enable-lora without a root is refused before the model loads.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy, servePolicy } from "../../lib/index.js";
import { startServe, tinyCheckpoint, tinyHfModel } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-servehardening-"));
const root = join(work, "adapters"),
    outside = join(work, "outside");
let base: NativePolicy;

beforeAll(async () => {
    await tinyHfModel(join(work, "base"));
    base = await NativePolicy.load(join(work, "base"));
    mkdirSync(root);
    mkdirSync(outside);
    const a = await base.withAdapter("a", { rank: 2 });
    await a.saveAdapter(join(root, "a"));
    await a.dispose();
    for (const k of ["..v2", "p", "q"]) cpSync(join(root, "a"), join(root, k), { recursive: true });
    // An adapter whose weights file links to a copy outside the root.
    cpSync(join(root, "a"), join(root, "linked"), { recursive: true });
    cpSync(join(root, "a", "adapter_model.safetensors"), join(outside, "weights.safetensors"));
    rmSync(join(root, "linked", "adapter_model.safetensors"));
    symlinkSync(join(outside, "weights.safetensors"), join(root, "linked", "adapter_model.safetensors"));
});
afterAll(async () => {
    await base?.dispose();
    rmSync(work, { recursive: true, force: true });
});

const text = async (r: Response) => `${r.status} ${await r.text()}`;

describe("maporl serve against hostile paths and files", () => {
    it("lora_path: relative to the root, '..name' inside it, no existence probe outside, no file linking out, --max-loras under concurrency", async () => {
        const srv = await servePolicy(base, {
            port: 0,
            model: "m",
            allowAdapterUpdates: true,
            loraRoot: root,
            maxLoras: 3,
        });
        const load = (name: string, path: string) =>
            fetch(`${srv.baseUrl}/load_lora_adapter`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({ lora_name: name, lora_path: path }),
            });
        try {
            expect(await text(await load("a", "a"))).toMatch(/^200 /); // relative: from the root
            expect(await text(await load("v2", join(root, "..v2")))).toMatch(/^200 /); // a name beginning with ".." is inside
            // Outside the root: the same answer whether the path exists or not.
            const exists = await text(await load("x", "/etc")),
                missing = await text(await load("x", "/no/such/dir-maporl"));
            expect(exists).toMatch(/^400 .*lora_path: \/etc is outside the directory adapters are loaded from/);
            expect(missing).toMatch(
                /^400 .*lora_path: \/no\/such\/dir-maporl is outside the directory adapters are loaded from/,
            );
            expect(await text(await load("x", "../outside"))).toMatch(/^400 .*lora_path: \.\.\/outside is outside/);
            // Inside the root, a file of the adapter linking out of it.
            expect(await text(await load("x", join(root, "linked")))).toMatch(
                /^400 .*lora_path: .*linked\/adapter_model\.safetensors links outside the directory adapters are loaded from/,
            );
            // One slot left (maxLoras 3): of two loads at once, one is refused.
            const both = await Promise.all([load("p", "p"), load("q", "q")]);
            const answers = await Promise.all(both.map(text));
            expect(answers.map((t) => t.slice(0, 3)).sort()).toEqual(["200", "400"]);
            expect(answers.find((t) => t.startsWith("400"))).toMatch(/the most this server holds \(maxLoras 3/);
            const models = (
                (await (await fetch(`${srv.baseUrl}/models`)).json()) as { data: { id: string }[] }
            ).data.map((d) => d.id);
            expect(models).toHaveLength(4);
        } finally {
            await srv.close();
        }
    });

    it("a FIFO among the tokenizer files fails save() at once, naming it", async () => {
        const dir = join(work, "fifo-tok");
        cpSync(join(work, "base"), dir, { recursive: true });
        const p = await NativePolicy.load(dir);
        const fifo = join(dir, "vocab.json");
        execFileSync("mkfifo", [fifo]);
        // A writer that opens the FIFO after 3 s, so that a save which waits on it ends (and this test fails) rather than hangs.
        const writer = spawn("sh", ["-c", `sleep 3; : > '${fifo}'`], { stdio: "ignore" });
        try {
            const t0 = performance.now();
            await expect(p.save(join(work, "fifo-tok-saved"))).rejects.toThrow(
                /vocab\.json: a FIFO, expected a regular file/,
            );
            expect(performance.now() - t0).toBeLessThan(1000);
        } finally {
            writer.kill("SIGKILL");
            await p.dispose();
        }
    });

    it("maporl serve: a FIFO as maporl-task.json leaves the server answering; --enable-lora without a root is refused before loading", async () => {
        const dir = join(work, "ckpt");
        await (await tinyCheckpoint(dir, 64, 1)).dispose();
        execFileSync("mkfifo", [join(dir, "maporl-task.json")]);
        const s = await startServe(dir);
        try {
            const health = await fetch(`${s.baseUrl.replace(/\/v1$/, "")}/health`, {
                signal: AbortSignal.timeout(3000),
            });
            expect(health.status).toBe(200);
            await new Promise((r) => setTimeout(r, 100));
            expect(s.output()).toMatch(/maporl-task\.json not read \(.*a FIFO, expected a regular file/);
        } finally {
            await s.stop("SIGKILL");
        }
        const cli = join(import.meta.dirname, "..", "..", "dist", "cli.js");
        const r = spawnSync(
            process.execPath,
            [cli, "serve", "--checkpoint", join(work, "nonexistent"), "--port", "0", "--enable-lora"],
            { encoding: "utf8" },
        );
        expect(r.status).toBe(1);
        expect(r.stderr).toMatch(
            /--enable-lora loads adapter directories named by clients: give --lora-root DIR.*or --allow-any-lora-path/,
        );
        expect(r.stderr).not.toMatch(/nonexistent/); // (refused before NativePolicy.load)
    });
});
