// cliProgram.ts: the `maporl` command line, declared with commander (no dependencies of its own; every command gets
// its own --help, --flag=value and --flag value both work, an unknown command or option gets a "did you mean", and
// --version prints the package's version). The actions are passed in, so tests parse without running a job.
import { Command, InvalidArgumentError, Option } from "commander";

import { ALGOS, DEFAULT_CONFIG, DEVICES, SCHEDULES, TASKS } from "./train/job/config.js";
import { editDistance } from "./validate.js";

export interface TrainArgs {
    /** Config keys from the flags (dotted for nested ones), as strings: the config validates and converts them. */
    flags: Record<string, string>;
    config?: string;
    out?: string;
    resume?: string;
    /** With resume: config keys whose change since the run started is accepted. */
    allowConfigChange?: string[];
}
export interface BenchArgs {
    kernels: string[];
    threads?: number;
    reps?: number;
    pythonReps?: number;
    python: boolean;
    out?: string;
}
export interface ServeArgs {
    checkpoint: string;
    port: number;
    host: string;
    servedModelName?: string;
    loraModules: Record<string, string>;
    enableLora: boolean;
    threads?: number;
    loraRoot?: string;
    allowAnyLoraPath: boolean;
    maxLoras: number;
    apiKey?: string;
    maxCacheBytes?: number;
}

export interface EvalArgs {
    suite: string;
    makeSuite: boolean;
    fromRun?: string;
    items?: number;
    baseline?: string;
    candidate?: string;
    stage?: string;
    candidateStage?: string;
    replace: Record<number, string>;
    metric: string;
    threshold: number;
}
export interface CrossPlayArgs {
    suite: string;
    runs: string[];
    stage?: string;
    metric: string;
}

export interface CliActions {
    train(a: TrainArgs): Promise<number>;
    info(): Promise<number> | number;
    bench(a: BenchArgs): Promise<number>;
    serve(a: ServeArgs): Promise<number>;
    toy(a: { seed: number }): Promise<number> | number;
    doctor(a: { json: boolean }): Promise<number>;
    eval(a: EvalArgs): Promise<number>;
    crossplay(a: CrossPlayArgs): Promise<number>;
}

export interface CliOptions {
    version: string;
    /** The benchmark names (checked, with a suggestion for a misspelt one). */
    kernels: readonly string[];
    /** Where help and errors go (tests capture them); defaults to stdout / stderr. */
    writeOut?: (s: string) => void;
    writeErr?: (s: string) => void;
}

function integer(min: number, max: number) {
    return (v: string): number => {
        const n = Number(v);
        if (v.trim() === "" || !Number.isInteger(n) || n < min || n > max)
            throw new InvalidArgumentError(`expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}.`);
        return n;
    };
}
const collect = (v: string, prev: string[]) => [...prev, v];

/** The `maporl` program: parse with `parseAsync(argv, { from: 'user' })`; the action's exit code is `program.exitCode`. */
export function buildProgram(actions: CliActions, options: CliOptions): Command & { exitCode?: number } {
    const program = new Command("maporl") as Command & { exitCode?: number };
    const out = options.writeOut ?? ((s: string) => process.stdout.write(s)),
        err = options.writeErr ?? ((s: string) => process.stderr.write(s));
    const done = (code: number) => {
        program.exitCode = code;
    };
    program
        .description("Multi-agent post-co-training of collaborating LLM agents with reinforcement learning.")
        .version(options.version, "-v, --version", "print the package's version")
        .showSuggestionAfterError(true)
        .showHelpAfterError("(add --help for the options)")
        .configureOutput({ writeOut: out, writeErr: err })
        .exitOverride();
    const command = (name: string) =>
        program
            .command(name)
            .showHelpAfterError("(add --help for the options)")
            .exitOverride()
            .configureOutput({ writeOut: out, writeErr: err });

    command("train")
        .description(
            "co-train a team of agents (the main job: warm start, co-training, the independent control, a before/after table; about 3 minutes on 2 cores)",
        )
        .addOption(new Option("--task <task>", "the task").choices(TASKS).default(DEFAULT_CONFIG.task))
        .addOption(new Option("--algo <algo>", "the algorithm").choices(ALGOS).default(DEFAULT_CONFIG.algo))
        .option("--agents <n>", "agents in the team (2-8; default 3)")
        .option("--turns <n>", "discussion turns (1-8; default 3)")
        .option("--iterations <n>", "co-training iterations (default 120)")
        .option("--seed <n>", "the seed of everything (default 0)")
        .addOption(
            new Option("--schedule <schedule>", "which agents train when")
                .choices(SCHEDULES)
                .default(DEFAULT_CONFIG.schedule),
        )
        .option(
            "--model <dir>",
            "a Hugging Face model directory (llama, mistral, qwen2, qwen3): every agent and critic a LoRA adapter on its one base",
        )
        .option("--lora-rank <n>", "the adapters' rank (with --model; default 16)")
        .option("--lora-alpha <x>", "the adapters' alpha (with --model; default 32)")
        .addOption(
            new Option(
                "--dtype <dtype>",
                "the base's matrices in memory (with --model): float32, or bfloat16 (frozen, half the memory)",
            ).choices(["float32", "bfloat16"]),
        )
        .option("--data <dir>", "gsm8k: a directory with train.jsonl and test.jsonl (default the shipped copy)")
        .addOption(
            new Option("--device <device>", "where the models live (cuda needs a GPU and a CUDA build)")
                .choices(DEVICES)
                .default(DEFAULT_CONFIG.device),
        )
        .option("--config <file>", "a JSON config (keys as in the README; unknown keys are errors)")
        .option(
            "--set <key=value>",
            "any config key, dotted for nested ones (e.g. --set maporl.klCoef=0.01); repeatable",
            collect,
            [],
        )
        .option("--out <dir>", "the run directory (default runs/<time>)")
        .option(
            "--resume <dir>",
            "continue a killed or interrupted run, with identical results (a changed config.json or base model is refused)",
        )
        .option(
            "--allow-config-change <keys>",
            "with --resume: config keys (comma-separated, dotted) whose change since the run started is accepted and logged; model.dir accepts changed base weights",
        )
        .action(async (o: Record<string, unknown>, cmd: Command) => {
            const flags: Record<string, string> = {};
            // Only what was given on the command line (a default must not override the config file).
            const given = (k: string) => cmd.getOptionValueSource(k) === "cli";
            const map: Record<string, string> = {
                task: "task",
                algo: "algo",
                agents: "agents",
                turns: "turns",
                iterations: "iterations",
                seed: "seed",
                schedule: "schedule",
                model: "model.dir",
                loraRank: "lora.rank",
                loraAlpha: "lora.alpha",
                dtype: "model.dtype",
                data: "taskOptions.data",
                device: "device",
            };
            for (const [k, key] of Object.entries(map)) if (given(k)) flags[key] = String(o[k]);
            for (const kv of o.set as string[]) {
                const eq = kv.indexOf("=");
                if (eq <= 0) throw new RangeError(`train: --set: expected key=value, got ${JSON.stringify(kv)}`);
                flags[kv.slice(0, eq)] = kv.slice(eq + 1);
            }
            if (o.resume !== undefined && o.out !== undefined)
                throw new RangeError("train: --resume DIR continues DIR; --out names a new run: give one of them");
            done(
                await actions.train({
                    flags,
                    ...(o.config ? { config: o.config as string } : {}),
                    ...(o.out ? { out: o.out as string } : {}),
                    ...(o.resume ? { resume: o.resume as string } : {}),
                    ...(o.allowConfigChange
                        ? {
                              allowConfigChange: String(o.allowConfigChange)
                                  .split(",")
                                  .map((k) => k.trim())
                                  .filter((k) => k),
                          }
                        : {}),
                }),
            );
        });

    command("info")
        .description("print the native backend: version, threads, SIMD, CUDA build and devices")
        .action(async () => done(await actions.info()));

    command("bench")
        .description("time the kernels against the PyTorch baselines in the same run")
        .argument("[kernels...]", `which (default all): ${options.kernels.join(", ")}`)
        .option("--threads <n>", "threads for both sides (default 2)", integer(1, 1024))
        .option("--reps <n>", "repetitions of our kernels (default 30)", integer(1, 1e6))
        .option("--python-reps <n>", "repetitions of the baselines (default 5)", integer(1, 1e6))
        .option("--no-python", "skip the baselines")
        .option("--out <dir>", "where the JSON goes (default bench/results)")
        .action(
            async (
                kernels: string[],
                o: { threads?: number; reps?: number; pythonReps?: number; python: boolean; out?: string },
            ) => {
                for (const k of kernels)
                    if (!options.kernels.includes(k)) {
                        const best = [...options.kernels].sort((a, b) => editDistance(k, a) - editDistance(k, b))[0];
                        throw new RangeError(
                            `bench: unknown benchmark '${k}'${best && editDistance(k, best) <= 3 ? ` (did you mean ${best}?)` : ""}; known: ${options.kernels.join(", ")}`,
                        );
                    }
                done(await actions.bench({ kernels, ...o }));
            },
        );

    command("serve")
        .description(
            "serve a saved policy, a Hugging Face model or a LoRA adapter (on the base it names) as an OpenAI-compatible server in vLLM's dialect",
        )
        .requiredOption("--checkpoint <dir>", "the model, checkpoint or adapter directory")
        .option("--port <n>", "the port (0: any free port)", integer(0, 65535), 8000)
        .option("--host <host>", "the address to listen on", "127.0.0.1")
        .option("--served-model-name <name>", "the base model's id (default: the model's name)")
        .option(
            "--lora-modules <name=dir...>",
            "PEFT adapters served as models of their own (Hugging Face base models)",
        )
        .option(
            "--enable-lora",
            "accept POST /v1/load_lora_adapter and /v1/unload_lora_adapter (runtime LoRA updates)",
            false,
        )
        .option(
            "--lora-root <dir>",
            "with --enable-lora: the directory every runtime lora_path must lie in (links resolved)",
        )
        .option(
            "--allow-any-lora-path",
            "with --enable-lora: accept any lora_path the server can read (no --lora-root)",
            false,
        )
        .option("--max-loras <n>", "adapters loaded at once; one more is a 400", integer(0, 4096), 8)
        .option(
            "--api-key <key>",
            "require Authorization: Bearer <key> on every route but /health (also read from MAPORL_API_KEY)",
        )
        .option(
            "--max-cache-bytes <n>",
            "the KV cache one generation batch may take; a request that needs more is a 400 (default: 25% of memory)",
            integer(1, Number.MAX_SAFE_INTEGER),
        )
        .option("--threads <n>", "CPU threads of the model (default: one per core)", integer(1, 1024))
        .action(async (o: Omit<ServeArgs, "loraModules"> & { loraModules?: string[] }) => {
            const loraModules: Record<string, string> = {};
            for (const m of o.loraModules ?? []) {
                const eq = m.indexOf("=");
                if (eq <= 0 || eq === m.length - 1)
                    throw new RangeError(`serve: --lora-modules: expected name=path, got ${JSON.stringify(m)}`);
                loraModules[m.slice(0, eq)] = m.slice(eq + 1);
            }
            const { loraModules: _, ...rest } = o;
            done(await actions.serve({ ...rest, loraModules }));
        });

    command("eval")
        .description(
            "a regression gate: a fixed scenario suite on a baseline team and a candidate team; exits 1 when the metric falls more than the threshold",
        )
        .requiredOption("--suite <dir>", "the scenario suite (suite.json + scenarios.jsonl)")
        .option(
            "--make-suite",
            "write the suite instead: --from-run RUN's task, --items N of its held-out items",
            false,
        )
        .option("--from-run <dir>", "with --make-suite: the run whose config the suite takes")
        .option("--items <n>", "with --make-suite: scenarios (default 100)", integer(1, 1e6))
        .option("--baseline <run>", "the baseline team's run directory")
        .option("--candidate <run>", "the candidate team's run directory (default: the baseline's)")
        .option(
            "--stage <stage>",
            "which stage's models form the baseline team (default: the run's algorithm; 'independent' for the control)",
        )
        .option("--candidate-stage <stage>", "the candidate's stage (default: --stage)")
        .option(
            "--replace <i=dir...>",
            "in the candidate team, agent i played by the model in dir (e.g. 0=RUN/checkpoint/base, the untrained base)",
        )
        .option("--metric <m>", "majority@last, majority@N (turn N), solo or gain", "majority@last")
        .option(
            "--threshold <x>",
            "the largest drop that still passes",
            (v: string) => {
                const x = Number(v);
                if (!(x >= 0)) throw new InvalidArgumentError("expected a number >= 0");
                return x;
            },
            0.02,
        )
        .action(
            async (o: {
                suite: string;
                makeSuite: boolean;
                fromRun?: string;
                items?: number;
                baseline?: string;
                candidate?: string;
                stage?: string;
                candidateStage?: string;
                replace?: string[];
                metric: string;
                threshold: number;
            }) => {
                const replace: Record<number, string> = {};
                for (const r of o.replace ?? []) {
                    const m = /^(\d+)=(.+)$/.exec(r);
                    if (!m) throw new RangeError(`eval: --replace: expected i=dir, got ${JSON.stringify(r)}`);
                    replace[Number(m[1])] = m[2]!;
                }
                if (o.makeSuite && !o.fromRun)
                    throw new RangeError(
                        "eval: --make-suite needs --from-run RUN (the run whose task the suite holds)",
                    );
                if (!o.makeSuite && !o.baseline)
                    throw new RangeError("eval: --baseline RUN is required (or --make-suite to write a suite)");
                const { replace: _, ...rest } = o;
                done(await actions.eval({ ...rest, replace }));
            },
        );

    command("crossplay")
        .description(
            "cross-play: agent 0 of each run's team with the partners of every other; the drop from self-play is the chemistry figure",
        )
        .requiredOption("--suite <dir>", "the scenario suite")
        .argument(
            "<runs...>",
            "run directories (two or more); RUN@STAGE takes that stage's team (RUN@base: the untrained base, RUN@independent: the control)",
        )
        .option("--stage <stage>", "which stage's models (default: each run's algorithm)")
        .option("--metric <m>", "majority@last, majority@N, solo or gain", "majority@last")
        .action(async (runs: string[], o: { suite: string; stage?: string; metric: string }) => {
            if (runs.length < 2)
                throw new RangeError(`crossplay: expected two or more run directories, got ${runs.length}`);
            done(await actions.crossplay({ runs, ...o }));
        });

    command("doctor")
        .description(
            "check this installation: the backend, every kernel at every SIMD level against float64, and on a visible GPU every kernel and the model on CUDA against the CPU",
        )
        .option("--json", "print the report as JSON", false)
        .action(async (o: { json: boolean }) => done(await actions.doctor(o)));

    command("toy")
        .description(
            "MAPoRL's toy game: collaboration-rate curves at T = 10 and 20, and the learned behaviour against Observations 1 and 2 over a payoff grid",
        )
        .option("--seed <n>", "the seed", integer(0, 2 ** 31 - 1), 0)
        .action(async (o: { seed: number }) => done(await actions.toy(o)));
    return program;
}
