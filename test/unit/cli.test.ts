// cli.test.ts: the `maporl` command line (lib/cli/program.ts) parsed with stub actions (no job runs), and the real
// dist/cli.js for help, version and exit codes.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { CommanderError } from "commander";
import { describe, expect, it } from "vitest";

import {
    buildProgram,
    type BenchArgs,
    type CrossPlayArgs,
    type EvalArgs,
    type GatewayArgs,
    type MakeModelArgs,
    type ServeArgs,
    type TrainArgs,
} from "../../lib/cli/program.js";

const root = join(import.meta.dirname, "..", "..");
const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;

async function parse(argv: string[]) {
    const calls: {
        train?: TrainArgs;
        bench?: BenchArgs;
        serve?: ServeArgs;
        gateway?: GatewayArgs;
        toy?: { seed: number };
        info?: true;
        eval?: EvalArgs;
        crossplay?: CrossPlayArgs;
        makeModel?: MakeModelArgs;
    } = {};
    let out = "",
        err = "";
    const program = buildProgram(
        {
            train: async (a) => {
                calls.train = a;
                return 0;
            },
            info: () => {
                calls.info = true;
                return 0;
            },
            bench: async (a) => {
                calls.bench = a;
                return 0;
            },
            serve: async (a) => {
                calls.serve = a;
                return 0;
            },
            gateway: async (a) => {
                calls.gateway = a;
                return 0;
            },
            toy: (a) => {
                calls.toy = a;
                return 7;
            },
            doctor: async () => 0,
            eval: async (a) => {
                calls.eval = a;
                return 0;
            },
            crossplay: async (a) => {
                calls.crossplay = a;
                return 0;
            },
            "make-model": async (a) => {
                calls.makeModel = a;
                return 0;
            },
        },
        {
            version,
            kernels: ["gae", "policyLoss", "llama"],
            writeOut: (s) => {
                out += s;
            },
            writeErr: (s) => {
                err += s;
            },
        },
    );
    let code: number | undefined, error: unknown;
    try {
        await program.parseAsync(argv, { from: "user" });
        code = program.exitCode;
    } catch (e) {
        if (e instanceof CommanderError) code = e.exitCode;
        else error = e;
    }
    return { calls, out, err, code, error };
}

describe("maporl command line", () => {
    it("train: only the flags given reach the config, in either --flag=value or --flag value form; --set repeats", async () => {
        const r = await parse([
            "train",
            "--iterations=5",
            "--algo",
            "magrpo",
            "--set",
            "maporl.klCoef=0.01",
            "--set=magrpo.generations=2",
            "--out",
            "runs/x",
        ]);
        expect(r.code).toBe(0);
        expect(r.calls.train).toEqual({
            flags: { iterations: "5", algo: "magrpo", "maporl.klCoef": "0.01", "magrpo.generations": "2" },
            out: "runs/x",
        });
        // defaults (task, algo, schedule, device) are not sent: a config file's values stand
        expect((await parse(["train", "--config", "my.json"])).calls.train).toEqual({ flags: {}, config: "my.json" });
        const hf = await parse([
            "train",
            "--model",
            "m",
            "--lora-rank",
            "8",
            "--data",
            "d",
            "--device",
            "auto",
            "--task",
            "gsm8k",
        ]);
        expect(hf.calls.train!.flags).toEqual({
            "model.dir": "m",
            "lora.rank": "8",
            "taskOptions.data": "d",
            device: "auto",
            task: "gsm8k",
        });
    });

    it("train --gateway: the program after --, the agents' names, its flags; the job's flags refused by name", async () => {
        const r = await parse([
            "train",
            "--gateway",
            "--model",
            "m",
            "--agents",
            "researcher, solver",
            "--items",
            "i.jsonl",
            "--iterations",
            "3",
            "--groups",
            "2",
            "--lr",
            "0.01",
            "--reward",
            "number",
            "--",
            "node",
            "agent.mjs",
            "--fast",
        ]);
        expect(r.error).toBeUndefined();
        expect(r.calls.train).toEqual({
            flags: {},
            gateway: {
                program: ["node", "agent.mjs", "--fast"],
                model: "m",
                agents: ["researcher", "solver"],
                items: "i.jsonl",
                evalRuns: 1,
                iterations: 3,
                groups: 2,
                lr: 0.01,
                concurrency: 8,
                reward: "number",
                credit: "magrpo",
                loraRank: 16,
                loraAlpha: 32,
                seed: 0,
                programTimeout: 600000,
            },
        });
        const bad = async (argv: string[]) => String((await parse(["train", ...argv])).error);
        const g = ["--gateway", "--model", "m", "--agents", "a", "--items", "i"];
        expect(await bad([...g, "--task", "gsm8k", "--", "x"])).toMatch(/--task is for the built-in tasks' job/);
        expect(await bad([...g, "--set", "seed=1", "--", "x"])).toMatch(/--set is for the built-in tasks' job/);
        expect(await bad(g)).toMatch(/expected the agent program after --/);
        expect(await bad([...g, "--agents", "a,a", "--", "x"])).toMatch(/--agents: expected the agents' names/);
        expect(await bad(["--gateway", "--model", "m", "--agents", "a", "--", "x"])).toMatch(/--items FILE/);
        expect(await bad(["--items", "i"])).toMatch(/--items goes with --gateway/);
        expect(await bad([...g, "--allow-config-change", "seed", "--", "x"])).toMatch(/--allow-config-change is for/);
        expect(await bad([...g, "--iterations", "0x10", "--", "x"])).toMatch(/--iterations: expected an integer/);
        expect(await bad([...g, "--seed", "", "--", "x"])).toMatch(/--seed: expected an integer >= 0/);
        expect(await bad([...g, "--agents", "a b", "--", "x"])).toMatch(
            /--agents: expected the agents' names \(1 to 64/,
        );
        expect(await bad(["--", "node", "x"])).toMatch(/a program is taken with --gateway only/);
        expect((await parse(["train", ...g, "--lr", "-1", "--", "x"])).err).toMatch(
            /'--lr <x>' argument '-1' is invalid. expected a positive number/,
        );
    });

    it("bad flags: a suggestion for a misspelt option or command, the allowed choices, and nothing run", async () => {
        let r = await parse(["train", "--itrations", "5"]);
        expect(r.code).toBe(1);
        expect(r.err).toMatch(/unknown option '--itrations'\n\(Did you mean --iterations\?\)/);
        expect(r.calls.train).toBeUndefined();
        r = await parse(["trian"]);
        expect(r.err).toMatch(/unknown command 'trian'\n\(Did you mean train\?\)/);
        r = await parse(["train", "--algo=foo"]);
        expect(r.err).toMatch(/argument 'foo' is invalid. Allowed choices are maporl, magrpo, collm-cc, collm-dc/);
        r = await parse(["train", "--set", "novalue"]);
        expect(String(r.error)).toMatch(/--set: expected key=value, got "novalue"/);
        r = await parse(["train", "--resume", "a", "--out", "b"]);
        expect(String(r.error)).toMatch(/give one of them/);
        r = await parse(["bench", "gea"]);
        expect(String(r.error)).toMatch(/unknown benchmark 'gea' \(did you mean gae\?\)/);
        r = await parse(["serve"]);
        expect(r.err).toMatch(/required option '--checkpoint <dir>' not specified/);
        r = await parse(["serve", "--checkpoint", "c", "--port", "70000"]);
        expect(r.err).toMatch(/'--port <n>' argument '70000' is invalid. expected an integer in \[0, 65535\]/);
        expect(r.calls.serve).toBeUndefined();
    });

    it("toy --seed 0 is taken (0 is the default); bench and serve options parsed", async () => {
        const t = await parse(["toy", "--seed", "0"]);
        expect(t.calls.toy).toEqual({ seed: 0 });
        expect(t.code).toBe(7); // the action's exit code
        expect((await parse(["toy", "--seed", "-1"])).err).toMatch(/'--seed <n>' argument '-1' is invalid/);
        expect((await parse(["bench", "gae", "llama", "--threads=4", "--no-python"])).calls.bench).toEqual({
            kernels: ["gae", "llama"],
            threads: 4,
            python: false,
        });
        const s = await parse([
            "serve",
            "--checkpoint",
            "c",
            "--port",
            "0",
            "--lora-modules",
            "a=/x",
            "b=/y=z",
            "--enable-lora",
            "--lora-root",
            "/a",
            "--max-loras",
            "3",
            "--api-key",
            "k",
        ]);
        expect(s.calls.serve).toEqual({
            checkpoint: "c",
            port: 0,
            host: "127.0.0.1",
            loraModules: { a: "/x", b: "/y=z" },
            enableLora: true,
            loraRoot: "/a",
            allowAnyLoraPath: false,
            maxLoras: 3,
            apiKey: "k",
        });
        expect(String((await parse(["serve", "--checkpoint", "c", "--lora-modules", "a"])).error)).toMatch(
            /--lora-modules: expected name=path, got "a"/,
        );
    });

    it("gateway: agents, adapters and the upstream parsed and checked", async () => {
        const g = await parse([
            "gateway",
            "--agents",
            "researcher, solver",
            "--model",
            "m",
            "--adapters",
            "solver=/a",
            "--port",
            "0",
            "--episode-timeout",
            "5000",
            "--call-timeout",
            "2000",
            "--record",
            "r.jsonl",
        ]);
        expect(g.calls.gateway).toEqual({
            agents: ["researcher", "solver"],
            model: "m",
            adapters: { solver: "/a" },
            port: 0,
            host: "127.0.0.1",
            maxEpisodes: 256,
            maxCallsPerEpisode: 256,
            episodeTimeout: 5000,
            callTimeout: 2000,
            requireEpisode: false,
            record: "r.jsonl",
        });
        const bad = async (argv: string[]) => String((await parse(["gateway", ...argv])).error);
        expect(await bad(["--agents", "a"])).toMatch(/either --model DIR .* or --upstream URL/);
        expect(await bad(["--agents", "a", "--model", "m", "--upstream", "http://x/v1"])).toMatch(/either --model/);
        expect(await bad(["--agents", "a", "--model", "m", "--adapters", "b=/x"])).toMatch(
            /b is not one of --agents \(a\)/,
        );
        expect(await bad(["--agents", "a", "--model", "m", "--adapters", "a"])).toMatch(/expected name=dir, got "a"/);
        expect(await bad(["--agents", " , ", "--model", "m"])).toMatch(/--agents: expected one or more names/);
        expect((await parse(["gateway", "--model", "m"])).err).toMatch(/required option '--agents <names>'/);
    });

    it("eval and crossplay: options parsed, replacements and thresholds checked", async () => {
        const e = await parse([
            "eval",
            "--suite",
            "s",
            "--baseline",
            "r",
            "--replace",
            "0=r/checkpoint/base",
            "--threshold=0.05",
            "--metric",
            "majority@2",
        ]);
        expect(e.calls.eval).toEqual({
            suite: "s",
            makeSuite: false,
            baseline: "r",
            replace: { 0: "r/checkpoint/base" },
            metric: "majority@2",
            threshold: 0.05,
        });
        expect(String((await parse(["eval", "--suite", "s", "--baseline", "r", "--replace", "x"])).error)).toMatch(
            /--replace: expected i=dir, got "x"/,
        );
        expect(String((await parse(["eval", "--suite", "s"])).error)).toMatch(/--baseline RUN is required/);
        expect(String((await parse(["eval", "--suite", "s", "--make-suite"])).error)).toMatch(
            /--make-suite needs --from-run/,
        );
        expect((await parse(["eval", "--suite", "s", "--baseline", "r", "--threshold", "-1"])).err).toMatch(
            /expected a number >= 0/,
        );
        const c = await parse(["crossplay", "--suite", "s", "a", "b"]);
        expect(c.calls.crossplay).toEqual({ runs: ["a", "b"], suite: "s", metric: "majority@last" });
        expect(String((await parse(["crossplay", "--suite", "s", "a"])).error)).toMatch(
            /two or more run directories, got 1/,
        );
    });

    it("make-model: the directory, shape, dtype and seed; a bad shape names the choices", async () => {
        const c = await parse(["make-model", "out/m", "--shape", "smollm2-135m", "--dtype", "bfloat16", "--seed", "3"]);
        expect(c.calls.makeModel).toEqual({ dir: "out/m", shape: "smollm2-135m", dtype: "bfloat16", seed: 3 });
        expect((await parse(["make-model", "m"])).calls.makeModel).toEqual({
            dir: "m",
            shape: "tiny",
            dtype: "float32",
            seed: 0,
        });
        const bad = await parse(["make-model", "m", "--shape", "gpt5"]);
        expect(bad.calls.makeModel).toBeUndefined();
        expect(bad.err).toMatch(/Allowed choices are tiny, smollm2-135m, qwen2.5-0.5b/);
    });

    it("help and version: every command has its own help, exit code 0", async () => {
        for (const cmd of ["train", "toy", "bench", "serve", "info", "doctor", "eval", "crossplay"]) {
            const r = await parse([cmd, "--help"]);
            expect(r.code, cmd).toBe(0);
            expect(r.out).toContain(`Usage: maporl ${cmd}`);
        }
        expect((await parse(["train", "--help"])).out).toMatch(/--task <task>.*split-sum/s);
        const v = await parse(["--version"]);
        expect(v.out.trim()).toBe(version);
        expect(v.code).toBe(0);
    });

    it("the installed command: --version, train --help, an unknown option (real process)", () => {
        const cli = join(root, "dist", "cli.js");
        const run = (...a: string[]) => spawnSync(process.execPath, [cli, ...a], { encoding: "utf8", timeout: 60_000 });
        expect(run("--version")).toMatchObject({ status: 0, stdout: `${version}\n` });
        const help = run("train", "--help");
        expect(help.status).toBe(0);
        expect(help.stdout).toContain("--resume <dir>");
        const bad = run("train", "--itrations", "5");
        expect(bad.status).toBe(1);
        expect(bad.stderr).toContain("Did you mean --iterations?");
        const resume = run("train", "--resume", join(root, "no-such-run"));
        expect(resume.status).toBe(1);
        expect(resume.stderr).toMatch(/no config.json there/);
        expect(resume.stdout).not.toMatch(/run directory/);
        // An unknown command is an error with or without --help (commander alone printed the top-level help, exit 0).
        for (const argv of [["gatway"], ["gatway", "--help"], ["trian", "-h"]]) {
            const r = run(...argv);
            expect(r.status, argv.join(" ")).toBe(1);
            expect(r.stderr).toContain(`unknown command '${argv[0]}'`);
            expect(r.stdout).toBe("");
        }
        expect(run("trian", "--help").stderr).toContain("Did you mean train?");
        expect(run("help", "train")).toMatchObject({ status: 0 });
    });
});
