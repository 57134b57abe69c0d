#!/usr/bin/env node
// cli.ts: `maporl info` (the backend report), `maporl bench [kernel...]` (the benchmark harness) and
// `maporl serve --checkpoint dir` (an OpenAI-compatible server for a saved embedded policy).
import { backend, setThreads } from "./backend.js";
import { BENCHMARKS, runBench } from "./bench/index.js";
import { NativePolicy } from "./policy/nativePolicy.js";
import { servePolicy } from "./policy/server.js";
import { runTrain } from "./train/trainCli.js";
import { runToy } from "./train/toyCli.js";

const USAGE = `usage: maporl <command> [options]

commands:
  train                    co-train a team of embedded agents (the main job; about 6 minutes on 2 cores):
                           warm start, MAPoRL co-training, the independent control, a before/after table
      --task T             arith-debate (default) | split-sum | gsm8k (with --model; --data DIR: train.jsonl, test.jsonl)
      --model DIR          a Hugging Face model directory (llama, mistral, qwen2, qwen3): every agent and critic a
                           LoRA adapter on its one base (PEFT adapters under models/); --lora-rank N (16), --lora-alpha X (32)
      --algo A             maporl (default) | magrpo | collm-cc | collm-dc
      --agents N --turns N --iterations N --seed N --schedule joint|independent|alternating|turn-based
      --config FILE        a JSON config (keys as in the README; unknown keys are errors)
      --set key=value      any config key, dotted for nested ones (e.g. --set maporl.klCoef=0.01)
      --out DIR            the run directory (default runs/<time>)
      --resume DIR         continue a killed or interrupted run with identical results
      --device cpu|cuda|auto  where the models live (default cpu; cuda needs a GPU and a CUDA build)
  info                     print the native backend: version, threads, SIMD, CUDA build and devices
  bench [kernel...]        time the kernels against the PyTorch baselines in the same run
      --threads N          threads for both sides (default 2)
      --reps N             repetitions of our kernels (default 30); --python-reps N for the baselines (default 5)
      --no-python          skip the baselines
      --out DIR            where the JSON goes (default bench/results)
    kernels: ${Object.keys(BENCHMARKS).join(", ")}
  serve --checkpoint DIR   serve a saved policy, a Hugging Face model or a LoRA adapter (on the base it names) as
                           an OpenAI-compatible server in vLLM's dialect (chat and completions with logprobs and
                           token ids, /tokenize, /detokenize, /health, /v1/models)
      --port N             default 8000 (0: any free port);  --host H  default 127.0.0.1
      --served-model-name NAME   the base model's id (default: the model's name)
      --lora-modules NAME=DIR ...  PEFT adapters served as models of their own (Hugging Face base models)
      --enable-lora        accept POST /v1/load_lora_adapter and /v1/unload_lora_adapter (runtime LoRA updates)
      --threads N          CPU threads of the model (default: one per core; several servers on one machine share them)
  toy [--seed N]           MAPoRL's toy game: collaboration-rate curves at T = 10 and 20, and the agreement of
                           the learned behaviour with Observations 1 and 2 over a payoff grid
  help                     this text`;

function info(): void {
    const b = backend();
    console.log(`maporl ${b.version}`);
    console.log(`threads: ${b.threads}`);
    console.log(`simd:    ${b.simd}`);
    console.log(`cuda:    ${b.cuda.compiled ? "compiled" : "not compiled (rebuild with MAPORL_CUDA=1 for CUDA)"}`);
    if (b.cuda.compiled) {
        if (b.cuda.devices.length === 0) console.log("devices: none (no GPU or no driver visible)");
        for (const d of b.cuda.devices)
            console.log(`device ${d.index}: ${d.name}, compute ${d.computeCapability}, ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB, ${d.multiprocessors} SMs`);
    }
}

function intFlag(args: string[], i: number, name: string): number {
    const v = Number(args[i + 1]);
    if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name}: expected a positive integer, got ${JSON.stringify(args[i + 1])}`);
    return v;
}

async function main(argv: string[]): Promise<number> {
    const [cmd, ...args] = argv;
    if (cmd === undefined || cmd === "help" || cmd === "--help" || cmd === "-h") {
        console.log(USAGE);
        return cmd === undefined ? 1 : 0;
    }
    if (cmd === "info") {
        info();
        return 0;
    }
    if (cmd === "bench") {
        const kernels: string[] = [];
        const opts: Parameters<typeof runBench>[0] = {};
        for (let i = 0; i < args.length; i++) {
            const a = args[i]!;
            if (a === "--threads") opts.threads = intFlag(args, i++, a);
            else if (a === "--reps") opts.reps = intFlag(args, i++, a);
            else if (a === "--python-reps") opts.pythonReps = intFlag(args, i++, a);
            else if (a === "--no-python") opts.python = false;
            else if (a === "--out") opts.outDir = args[++i];
            else if (a.startsWith("-")) throw new RangeError(`bench: unknown option ${a}\n\n${USAGE}`);
            else kernels.push(a);
        }
        opts.kernels = kernels;
        await runBench(opts);
        return 0;
    }
    if (cmd === "train") return runTrain(args, USAGE);
    if (cmd === "toy") {
        let seed = 0;
        for (let i = 0; i < args.length; i++) {
            if (args[i] === "--seed") seed = intFlag(args, i++, "--seed");
            else throw new RangeError(`toy: unknown option ${args[i]}\n\n${USAGE}`);
        }
        runToy({ seed });
        return 0;
    }
    if (cmd === "serve") {
        let checkpoint: string | undefined, port = 8000, host = "127.0.0.1", servedName: string | undefined, enableLora = false;
        const adapters: Record<string, string> = {};
        for (let i = 0; i < args.length; i++) {
            const a = args[i]!;
            if (a === "--checkpoint") checkpoint = args[++i];
            else if (a === "--port") {
                port = Number(args[++i]);
                if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`--port: expected an integer in [0, 65535] (0: any free port), got ${JSON.stringify(args[i])}`);
            } else if (a === "--host") host = args[++i] ?? host;
            else if (a === "--served-model-name") servedName = args[++i];
            else if (a === "--enable-lora") enableLora = true;
            else if (a === "--threads") setThreads(intFlag(args, i++, a));
            else if (a === "--lora-modules") {
                while (i + 1 < args.length && !args[i + 1]!.startsWith("--")) {
                    const m = /^([^=]+)=(.+)$/.exec(args[++i]!);
                    if (!m) throw new RangeError(`--lora-modules: expected name=path, got ${JSON.stringify(args[i])}`);
                    adapters[m[1]!] = m[2]!;
                }
            } else throw new RangeError(`serve: unknown option ${a}\n\n${USAGE}`);
        }
        if (!checkpoint) throw new RangeError(`serve: --checkpoint DIR is required\n\n${USAGE}`);
        const policy = await NativePolicy.load(checkpoint);
        const s = await servePolicy(policy, { port, host, adapters, allowAdapterUpdates: enableLora, version: backend().version,
            ...(servedName ? { model: servedName } : {}) });
        console.log(`maporl: serving ${servedName ?? policy.name} (${policy.parameterCount} parameters) at ${s.baseUrl}/chat/completions`);
        // SIGTERM / SIGINT: stop accepting, answer nothing more, exit (a supervisor's kill leaves no orphan).
        await new Promise<void>((resolve) => {
            const stop = () => { void s.close().then(() => policy.dispose()).finally(resolve); };
            process.once("SIGTERM", stop);
            process.once("SIGINT", stop);
        });
        return 0;
    }
    console.error(`maporl: unknown command "${cmd}"\n\n${USAGE}`);
    return 1;
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code; }, (e: unknown) => {
    console.error(e instanceof Error ? e.message : String(e));
    process.exitCode = 1;
});
