#!/usr/bin/env node
// cli.ts: the `maporl` command (lib/cli/program.ts; one file per command in lib/cli/commands/).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { CommanderError } from "commander";

import { BENCHMARKS } from "./bench/index.js";
import { ACTIONS, buildProgram } from "./cli/program.js";

const version = (
    JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "package.json"), "utf8")) as {
        version: string;
    }
).version;

const program = buildProgram(ACTIONS, { version, kernels: Object.keys(BENCHMARKS) });

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
