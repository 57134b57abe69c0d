// hfModel.test.ts: the training job on a Hugging Face model directory (model.dir, `npx maporl train --model DIR`):
// a tiny llama-architecture model with a byte-level BPE tokenizer and a Qwen-style chat template, written as a
// Hugging Face directory; every agent and critic is a LoRA adapter on its one base. Each algorithm runs end to end
// (its adapters in PEFT's layout under models/, the memory in the summary; after a warm start they name the trained
// base written to models/; on a bf16 base too); a stopped run resumes with the same
// metrics and traces as an uninterrupted one; a directory that is not a model, or of an unsupported architecture,
// is an error before any run directory exists.
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { resolveConfig } from "../../lib/train/job/config.js";
import { trainJob } from "../../lib/train/job/job.js";
import { readMetrics } from "../helpers/runs.js";
import { tinyHfModel } from "../helpers/serve.js";

const TOK = join(import.meta.dirname, "..", "fixtures", "hf-tokenizer");
const work = mkdtempSync(join(tmpdir(), "maporl-train-hf-"));
const modelDir = join(work, "tiny-llama");
afterAll(() => rmSync(work, { recursive: true, force: true }));

beforeAll(() => tinyHfModel(modelDir, 3));

const small = (extra: Record<string, unknown> = {}) => ({
    model: { dir: modelDir, contextLength: 512 },
    lora: { rank: 2, alpha: 4 },
    iterations: 2,
    episodesPerIteration: 2,
    evalEpisodes: 3,
    evalEvery: 100,
    agents: 2,
    sampling: { temperature: 1, maxTokens: 6 },
    seed: 1,
    ...extra,
});

describe("train on a Hugging Face model (model.dir)", () => {
    for (const algo of ["maporl", "magrpo", "collm-cc", "collm-dc"] as const) {
        it(`${algo}: runs with LoRA adapters on one base and writes PEFT adapters`, async () => {
            const out = join(work, `run-${algo}`);
            const s = await trainJob({
                out,
                config: small({
                    algo,
                    controls: algo === "maporl",
                    ...(algo === "magrpo" ? { magrpo: { generations: 2 } } : {}),
                }),
            });
            expect(s.config.sft.steps).toBe(0); // the warm start is off for real models unless asked
            expect(s.rows.map((r) => r.name)).toEqual([
                "untrained team",
                `team co-trained by ${algo}`,
                ...(algo === "maporl" ? ["independent control"] : []),
            ]);
            expect(s.memory!.peakRssBytes).toBeGreaterThan(0);
            const names = Object.keys(s.memory!.adapters);
            expect(names.some((n) => n.includes("actor-0"))).toBe(true);
            if (algo !== "magrpo") expect(names.some((n) => n.includes("critic"))).toBe(true);
            for (const n of Object.values(s.memory!.adapters)) expect(n).toBeLessThan(s.memory!.baseParameters);
            const models = readdirSync(join(out, "models"));
            expect(models.length).toBeGreaterThan(0);
            for (const m of models) {
                const cfg = JSON.parse(readFileSync(join(out, "models", m, "adapter_config.json"), "utf8")) as Record<
                    string,
                    unknown
                >;
                expect(cfg).toMatchObject({
                    peft_type: "LORA",
                    r: 2,
                    lora_alpha: 4,
                    base_model_name_or_path: modelDir,
                });
            }
            // The checkpoint holds adapters only: the untrained base is read again from model.dir.
            expect(existsSync(join(out, "checkpoint", "base"))).toBe(false);
            // An adapter of the run loads on the base outside the job.
            const agent = await NativePolicy.load(
                join(
                    out,
                    "models",
                    models.find((m) => m.includes("actor-0"))!,
                ),
                { base: modelDir },
            );
            const [g] = await agent.generate([
                { messages: [{ role: "user", content: "1+2=" }], sampling: { temperature: 0, maxTokens: 4 } },
            ]);
            expect(typeof g.text).toBe("string");
            await agent.dispose();
        }, 300_000);
    }

    it("a stopped run resumes with the metrics and traces of an uninterrupted one", async () => {
        const straight = join(work, "straight"),
            stopped = join(work, "stopped");
        const config = small({ iterations: 3, controls: false });
        const a = await trainJob({ out: straight, config });
        const ctl = new AbortController();
        await expect(
            trainJob({
                out: stopped,
                config,
                signal: ctl.signal,
                onProgress: (p) => {
                    if (p.stage === "maporl" && p.phase === "train" && p.step === 1) ctl.abort(new Error("stop"));
                },
            }),
        ).rejects.toThrow();
        expect(existsSync(join(stopped, "summary.json"))).toBe(false);
        const b = await trainJob({ out: stopped, resume: true });
        expect(readMetrics(stopped).metrics).toBe(readMetrics(straight).metrics);
        expect(readMetrics(stopped).timed).toEqual(["sft", "maporl"]);
        expect(readFileSync(join(stopped, "traces.jsonl"), "utf8")).toBe(
            readFileSync(join(straight, "traces.jsonl"), "utf8"),
        );
        expect(b.rows).toEqual(a.rows);
    }, 300_000);

    it("a resume whose base weights changed in place is refused, naming the file, unless accepted", async () => {
        const dir = join(work, "tiny-llama-2"),
            stopped = join(work, "stopped-2");
        cpSync(modelDir, dir, { recursive: true });
        const ctl = new AbortController();
        await expect(
            trainJob({
                out: stopped,
                config: small({ model: { dir, contextLength: 512 }, iterations: 3, controls: false }),
                signal: ctl.signal,
                onProgress: (p) => {
                    if (p.stage === "maporl" && p.phase === "train" && p.step === 1) ctl.abort(new Error("stop"));
                },
            }),
        ).rejects.toThrow();
        const w = join(dir, "model.safetensors"),
            bytes = readFileSync(w);
        bytes[bytes.length - 3] ^= 0x40; // one weight byte
        writeFileSync(w, bytes);
        await expect(trainJob({ out: stopped, resume: true })).rejects.toThrow(
            /the base model in .*tiny-llama-2 changed since the run started \(model\.safetensors modified\)/,
        );
        // Accepted on purpose: logged, and recorded, so the next resume does not ask again (stopped once more).
        const lines: string[] = [],
            ctl2 = new AbortController();
        await expect(
            trainJob({
                out: stopped,
                resume: true,
                allowConfigChange: ["model.dir"],
                log: (l) => lines.push(l),
                signal: ctl2.signal,
                onProgress: (p) => {
                    if (p.stage === "maporl" && p.phase === "train" && p.step === 2) ctl2.abort(new Error("stop"));
                },
            }),
        ).rejects.toThrow();
        expect(lines.join("\n")).toMatch(
            /base model change accepted \(--allow-config-change model\.dir\): model\.safetensors modified/,
        );
        expect(existsSync(join(stopped, "summary.json"))).toBe(false);
        await trainJob({ out: stopped, resume: true });
        expect(existsSync(join(stopped, "summary.json"))).toBe(true);
    }, 300_000);

    it("a warm-started base is written to models/base, and the run's adapters name it as their base", async () => {
        const out = join(work, "run-warm");
        await trainJob({ out, config: small({ sft: { steps: 2, batchSize: 2 }, controls: false }) });
        const base = join(out, "models", "base");
        expect(existsSync(join(base, "config.json"))).toBe(true);
        const actor = join(
            out,
            "models",
            readdirSync(join(out, "models")).find((m) => m.includes("actor-0"))!,
        );
        expect(JSON.parse(readFileSync(join(actor, "adapter_config.json"), "utf8")).base_model_name_or_path).toBe(base);
        // Loaded by itself, the adapter finds the trained base: the log-probs of an explicit { base: models/base },
        // not those of the untrained model directory.
        const seqs = {
            tokens: Int32Array.from({ length: 12 }, (_, i) => (i * 17 + 3) % 300),
            shape: [1, 12] as [number, number],
        };
        const lp = async (p: Promise<NativePolicy>) => {
            const q = await p;
            try {
                return await q.logprobs(seqs);
            } finally {
                await q.dispose();
            }
        };
        const own = await lp(NativePolicy.load(actor));
        expect(own).toEqual(await lp(NativePolicy.load(actor, { base })));
        expect(own).not.toEqual(await lp(NativePolicy.load(actor, { base: modelDir })));
    }, 300_000);

    it("model.dtype 'bfloat16' (--dtype): the agents' adapters train on a frozen bf16 base; misuse is named", async () => {
        const out = join(work, "run-bf16");
        const s = await trainJob({
            out,
            config: small({ model: { dir: modelDir, contextLength: 512, dtype: "bfloat16" }, controls: false }),
        });
        expect(s.config.model.dtype).toBe("bfloat16");
        expect(s.rows.map((r) => r.name)).toEqual(["untrained team", "team co-trained by maporl"]);
        const actor = readdirSync(join(out, "models")).find((m) => m.includes("actor-0"))!;
        expect(JSON.parse(readFileSync(join(out, "models", actor, "adapter_config.json"), "utf8"))).toMatchObject({
            peft_type: "LORA",
            base_model_name_or_path: modelDir,
        });
        expect(() => resolveConfig({ model: { dir: modelDir, dtype: "bfloat16" }, sft: { steps: 10 } })).toThrow(
            /model\.dtype: 'bfloat16' keeps the base frozen, and the warm start/,
        );
        expect(() => resolveConfig({ model: { dtype: "bfloat16" } })).toThrow(
            /model\.dtype: 'bfloat16' is for a Hugging Face base/,
        );
        expect(() => resolveConfig({ model: { dir: modelDir, dtype: "float16" } })).toThrow(
            /model\.dtype: expected one of 'float32', 'bfloat16', 'int8', got "float16"/,
        );
    }, 300_000);

    it("gsm8k: MAPoRL's math prompts through the chat template, the test split held out", async () => {
        const out = join(work, "run-gsm8k");
        const s = await trainJob({
            out,
            config: small({
                task: "gsm8k",
                model: { dir: modelDir, contextLength: 1024 },
                iterations: 1,
                controls: false,
                sampling: { temperature: 1, maxTokens: 8 },
            }),
        });
        expect(s.config.sampling.maxTokens).toBe(8);
        expect(s.evals.untrained.episodes).toBe(3); // the first questions of test.jsonl
        const trace = JSON.parse(readFileSync(join(out, "traces.jsonl"), "utf8").split("\n")[0]) as {
            question: string;
            reference: string;
        };
        expect(trace.question.length).toBeGreaterThan(40); // a GSM8K word problem from the train split
        expect(Number.isFinite(Number(trace.reference))).toBe(true);
        expect(() => resolveConfig({ task: "gsm8k" })).toThrow(/needs a real model/);
        // the context: gsm8k's 2048, or the model's own positions where it has fewer (this one has 1024)
        const d = resolveConfig({ task: "gsm8k", model: { dir: modelDir } });
        expect([d.model.contextLength, d.sampling.maxTokens, d.sft.steps]).toEqual([1024, 320, 0]);
        const roomy = join(modelDir, "..", "roomy");
        cpSync(modelDir, roomy, { recursive: true });
        const cfg = JSON.parse(readFileSync(join(roomy, "config.json"), "utf8")) as Record<string, unknown>;
        writeFileSync(join(roomy, "config.json"), JSON.stringify({ ...cfg, max_position_embeddings: 4096 }));
        expect(resolveConfig({ task: "gsm8k", model: { dir: roomy } }).model.contextLength).toBe(2048);
        expect(resolveConfig({ model: { dir: roomy } }).model.contextLength).toBe(512);
        expect(() => resolveConfig({ task: "gsm8k", model: { dir: modelDir }, taskOptions: { data: work } })).toThrow(
            /taskOptions\.data: .*train\.jsonl missing/,
        );
    }, 300_000);

    it("a directory that is not a model, or an unsupported architecture, fails before a run directory is made", async () => {
        const notModel = join(work, "not-a-model");
        cpSync(join(TOK), notModel, { recursive: true });
        const out1 = join(work, "never1");
        await expect(trainJob({ out: out1, config: small({ model: { dir: notModel } }) })).rejects.toThrow(
            /model\.dir: .*not a Hugging Face model directory/,
        );
        expect(existsSync(out1)).toBe(false);
        const gpt2 = join(work, "gpt2");
        cpSync(modelDir, gpt2, { recursive: true });
        const c = JSON.parse(readFileSync(join(gpt2, "config.json"), "utf8")) as Record<string, unknown>;
        writeFileSync(join(gpt2, "config.json"), JSON.stringify({ ...c, model_type: "gpt2" }));
        const out2 = join(work, "never2");
        await expect(trainJob({ out: out2, config: small({ model: { dir: gpt2 } }) })).rejects.toThrow(
            /model\.dir: .*model_type: expected one of llama, mistral, qwen2, qwen3/,
        );
        expect(existsSync(out2)).toBe(false);
        expect(() => resolveConfig({ model: { dir: join(work, "missing") } })).toThrow(/model\.dir/);
        expect(() => resolveConfig({ lora: { rank: 0 } })).toThrow(/lora\.rank/);
    });
});
