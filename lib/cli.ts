#!/usr/bin/env node
// cli.ts: the `maporl` command (declared in cliProgram.ts): train, info, bench, serve, doctor, toy.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { CommanderError } from "commander";

import { backend, setThreads } from "./backend.js";
import { BENCHMARKS, runBench } from "./bench/index.js";
import { buildProgram } from "./cliProgram.js";
import { doctor } from "./doctor.js";
import { readTextFile } from "./files.js";
import { NativePolicy } from "./model/nativePolicy.js";
import { servePolicy } from "./serve/server.js";
import { runTrain } from "./train/trainCli.js";
import { crossPlay, makeSuite, regressionGate, teamArg } from "./train/job/evalGate.js";
import { runToyCli } from "./train/toyCli.js";

function info(): number {
    const b = backend();
    console.log(`maporl ${b.version}`);
    console.log(`threads: ${b.threads}`);
    console.log(`simd:    ${b.simd}`);
    console.log(`cuda:    ${b.cuda.compiled ? "compiled" : "not compiled (rebuild with MAPORL_CUDA=1 for CUDA)"}`);
    if (b.cuda.compiled) {
        if (b.cuda.devices.length === 0) console.log("devices: none (no GPU or no driver visible)");
        for (const d of b.cuda.devices)
            console.log(
                `device ${d.index}: ${d.name}, compute ${d.computeCapability}, ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB, ${d.multiprocessors} SMs`,
            );
    }
    return 0;
}

const version = (
    JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8")) as {
        version: string;
    }
).version;

const program = buildProgram(
    {
        train: runTrain,
        info,
        bench: async (a) => {
            await runBench({
                kernels: a.kernels,
                python: a.python,
                ...(a.threads ? { threads: a.threads } : {}),
                ...(a.reps ? { reps: a.reps } : {}),
                ...(a.pythonReps ? { pythonReps: a.pythonReps } : {}),
                ...(a.out ? { outDir: a.out } : {}),
            });
            return 0;
        },
        serve: async (a) => {
            if (a.threads) setThreads(a.threads);
            const apiKey = a.apiKey ?? process.env.MAPORL_API_KEY;
            const loopback = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(a.host);
            if (!loopback && !apiKey)
                console.error(
                    `maporl: WARNING: listening on ${a.host} with no authentication: anyone who reaches this address can use the model` +
                        `${a.enableLora ? " and load adapters" : ""}; give --api-key (or MAPORL_API_KEY), or listen on 127.0.0.1`,
                );
            if (a.enableLora && a.loraRoot === undefined && !a.allowAnyLoraPath)
                // (before the model loads: refused at once)
                throw new RangeError(
                    "serve: --enable-lora loads adapter directories named by clients: give --lora-root DIR, the directory they must lie in, " +
                        "or --allow-any-lora-path",
                );
            const policy = await NativePolicy.load(a.checkpoint);
            if (a.maxCacheBytes !== undefined) policy.maxCacheBytes = a.maxCacheBytes;
            const s = await servePolicy(policy, {
                port: a.port,
                host: a.host,
                adapters: a.loraModules,
                allowAdapterUpdates: a.enableLora,
                version: backend().version,
                ...(a.servedModelName ? { model: a.servedModelName } : {}),
                ...(a.loraRoot !== undefined ? { loraRoot: a.loraRoot } : {}),
                allowAnyLoraPath: a.allowAnyLoraPath,
                maxLoras: a.maxLoras,
                ...(apiKey ? { apiKey } : {}),
            }).catch(async (e: unknown) => {
                await policy.dispose();
                throw e;
            });
            console.log(
                `maporl: serving ${a.servedModelName ?? policy.name} (${policy.parameterCount} parameters) at ${s.baseUrl}/chat/completions`,
            );
            const protocol = join(a.checkpoint, "maporl-task.json");
            if (existsSync(protocol)) {
                // a model trained by `maporl train` on a compact task speaks only that task's protocol
                // (A regular file read up to its bound: the server already listens, and a FIFO here would block it for ever.)
                type Protocol = { task: string; example: string; answer: string; debate: string };
                let t: Protocol | null = null;
                try {
                    t = JSON.parse(readTextFile(protocol, "maporl-task.json")) as Protocol;
                } catch (e) {
                    console.error(
                        `maporl: ${protocol} not read (${(e as Error).message}); serving without its protocol note`,
                    );
                }
                if (t)
                    console.log(
                        `maporl: this model was trained on ${t.task}'s compact protocol and answers only it: send user messages like ` +
                            `${JSON.stringify(t.example)} (the question, then every agent's previous answer) and read "${t.answer}". ` +
                            `A debate that speaks it: ${t.debate} (docs/models.md, "Serving a trained checkpoint")`,
                    );
            }
            // SIGTERM / SIGINT: stop accepting, answer nothing more, exit (a supervisor's kill leaves no orphan).
            await new Promise<void>((resolve) => {
                const stop = () => {
                    void s
                        .close()
                        .then(() => policy.dispose())
                        .finally(resolve);
                };
                process.once("SIGTERM", stop);
                process.once("SIGINT", stop);
            });
            return 0;
        },
        toy: (a) => {
            runToyCli(a);
            return 0;
        },
        eval: async (a) => {
            if (a.makeSuite) {
                const cfg = JSON.parse(readFileSync(join(a.fromRun!, "config.json"), "utf8")) as Record<
                    string,
                    unknown
                >;
                const s = makeSuite(a.suite, { config: cfg, ...(a.items ? { items: a.items } : {}) });
                console.log(
                    `maporl eval: wrote ${s.items.length} scenarios of ${s.resolved.task} to ${a.suite} (suite.json, scenarios.jsonl)`,
                );
                return 0;
            }
            const g = await regressionGate({
                suite: a.suite,
                metric: a.metric,
                threshold: a.threshold,
                baseline: { run: a.baseline!, ...(a.stage ? { stage: a.stage } : {}) },
                candidate: {
                    run: a.candidate ?? a.baseline!,
                    ...((a.candidateStage ?? a.stage) ? { stage: (a.candidateStage ?? a.stage)! } : {}),
                    replace: a.replace,
                },
            });
            console.log(`maporl eval: ${g.message}`);
            return g.pass ? 0 : 1;
        },
        crossplay: async (a) => {
            const r = await crossPlay({
                suite: a.suite,
                metric: a.metric,
                teams: a.runs.map((run) => teamArg(run, a.stage)),
            });
            console.log(
                `cross-play (${a.metric}): row = agent 0's run, column = its partners' run; chemistry = a team's self-play minus its column's mean (its agent 0 swapped for another run's)`,
            );
            r.labels.forEach((l, i) => console.log(`  [${i}] ${l}`));
            console.log(`       ${r.labels.map((_, j) => `[${j}]`.padStart(7)).join("")}`);
            r.matrix.forEach((row, i) => console.log(`  [${i}]  ${row.map((x) => x.toFixed(3).padStart(7)).join("")}`));
            console.log(
                `  chemistry ${r.chemistry.map((c) => ((c >= 0 ? "+" : "") + c.toFixed(3)).padStart(7)).join("")}`,
            );
            return 0;
        },
        doctor: async (a) => {
            const r = await doctor(a.json ? {} : { log: (l) => console.log(l) });
            if (a.json) console.log(JSON.stringify(r, null, 2));
            return r.failed === 0 ? 0 : 1;
        },
    },
    { version, kernels: Object.keys(BENCHMARKS) },
);

program.parseAsync(process.argv.slice(2), { from: "user" }).then(
    () => {
        process.exitCode = program.exitCode ?? 0;
    },
    (e: unknown) => {
        if (e instanceof CommanderError)
            process.exitCode = e.exitCode; // commander printed it (or the help / version)
        else {
            console.error(e instanceof Error ? e.message : String(e));
            process.exitCode = 1;
        }
    },
);
