// program.ts: the `maporl` command line, declared with commander: every command gets its own --help, --flag=value
// and --flag value both work, an unknown command or option gets a "did you mean" (with or without --help), and
// --version prints the package's version. Each command's declaration and action live in commands/<name>.ts; the
// actions are passed in, so tests parse without running a job.
import { Command, type ParseOptions } from "commander";

import { editDistance } from "../validate.js";

import * as bench from "./commands/bench.js";
import * as crossplay from "./commands/crossplay.js";
import * as doctor from "./commands/doctor.js";
import * as evalCommand from "./commands/eval.js";
import * as gateway from "./commands/gateway.js";
import * as info from "./commands/info.js";
import * as makeModel from "./commands/make-model.js";
import * as serve from "./commands/serve.js";
import * as toy from "./commands/toy.js";
import * as train from "./commands/train.js";

export type { TrainArgs } from "./commands/train.js";
export type { BenchArgs } from "./commands/bench.js";
export type { ServeArgs } from "./commands/serve.js";
export type { GatewayArgs } from "./commands/gateway.js";
export type { EvalArgs } from "./commands/eval.js";
export type { CrossPlayArgs } from "./commands/crossplay.js";
export type { MakeModelArgs } from "./commands/make-model.js";

/** What each command does with its parsed arguments: an exit code. */
export interface CliActions {
    train(a: train.TrainArgs): Promise<number>;
    info(): Promise<number> | number;
    bench(a: bench.BenchArgs): Promise<number>;
    serve(a: serve.ServeArgs): Promise<number>;
    gateway(a: gateway.GatewayArgs): Promise<number>;
    toy(a: { seed: number }): Promise<number> | number;
    doctor(a: doctor.DoctorArgs): Promise<number>;
    eval(a: evalCommand.EvalArgs): Promise<number>;
    crossplay(a: crossplay.CrossPlayArgs): Promise<number>;
    "make-model"(a: makeModel.MakeModelArgs): Promise<number>;
}

/** The actions of the installed command. */
export const ACTIONS: CliActions = {
    train: train.run,
    info: info.run,
    bench: bench.run,
    serve: serve.run,
    gateway: gateway.run,
    toy: toy.run,
    doctor: doctor.run,
    eval: evalCommand.run,
    crossplay: crossplay.run,
    "make-model": makeModel.run,
};

/** The command names, in the order of the help. */
export const COMMANDS = [
    "train",
    "info",
    "bench",
    "serve",
    "gateway",
    "eval",
    "crossplay",
    "make-model",
    "doctor",
    "toy",
] as const;

export interface CliOptions {
    version: string;
    /** The benchmark names (checked, with a suggestion for a misspelt one). */
    kernels: readonly string[];
    /** Where help and errors go (tests capture them); defaults to stdout / stderr. */
    writeOut?: (s: string) => void;
    writeErr?: (s: string) => void;
}

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
    const command = (name: (typeof COMMANDS)[number]) =>
        program
            .command(name)
            .showHelpAfterError("(add --help for the options)")
            .exitOverride()
            .configureOutput({ writeOut: out, writeErr: err });
    train.declare(command("train"), async (a) => done(await actions.train(a)));
    info.declare(command("info"), async () => done(await actions.info()));
    bench.declare(command("bench"), async (a) => done(await actions.bench(a)), options.kernels);
    serve.declare(command("serve"), async (a) => done(await actions.serve(a)));
    gateway.declare(command("gateway"), async (a) => done(await actions.gateway(a)));
    evalCommand.declare(command("eval"), async (a) => done(await actions.eval(a)));
    crossplay.declare(command("crossplay"), async (a) => done(await actions.crossplay(a)));
    doctor.declare(command("doctor"), async (a) => done(await actions.doctor(a)));
    toy.declare(command("toy"), async (a) => done(await actions.toy(a)));
    makeModel.declare(command("make-model"), async (a) => done(await actions["make-model"](a)));
    // commander shows the top-level help for `maporl nosuch --help` and exits 0; an unknown command is an error
    // with or without --help (the same message and exit code as without). Checked on user arguments (from: "user").
    const parseAsync = program.parseAsync.bind(program);
    program.parseAsync = async (argv?: readonly string[], parseOptions?: ParseOptions) => {
        const first = parseOptions?.from === "user" ? (argv ?? []).find((a) => !a.startsWith("-")) : undefined;
        const known: readonly string[] = [...COMMANDS, "help"];
        if (first !== undefined && !known.includes(first)) {
            const best = [...COMMANDS].sort((a, b) => editDistance(first, a) - editDistance(first, b))[0]!;
            program.error(
                `error: unknown command '${first}'${editDistance(first, best) <= 2 ? `\n(Did you mean ${best}?)` : ""}`,
                { code: "commander.unknownCommand", exitCode: 1 },
            );
        }
        return parseAsync(argv, parseOptions);
    };
    return program;
}
