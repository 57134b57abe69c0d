#!/usr/bin/env node
// check-layout.mjs: the layout rules a test can hold (docs/layout.md), run by `npm run lint` and .ci/run:
//   - no import circle among lib/'s modules, type-only imports included (madge);
//   - no lib file over 500 lines;
//   - one file per CLI command: every command the program declares has lib/cli/commands/<name>.ts, and every file
//     there is a command.
// Prints what breaks a rule and exits 1, else one line and exits 0.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

import madge from "madge";

const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const lib = join(root, "lib");
const MAX_LINES = 500;
const problems = [];

const graph = await madge(lib, {
    fileExtensions: ["ts"],
    tsConfig: join(root, "tsconfig.json"),
    detectiveOptions: { ts: { skipTypeImports: false }, es6: { skipTypeImports: false } },
});
for (const circle of graph.circular()) problems.push(`import circle: ${circle.join(" -> ")} -> ${circle[0]}`);

const files = [];
const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true }))
        if (e.isDirectory()) walk(join(dir, e.name));
        else if (e.name.endsWith(".ts")) files.push(join(dir, e.name));
};
walk(lib);
for (const f of files) {
    const n = readFileSync(f, "utf8").split("\n").length - 1;
    if (n > MAX_LINES) problems.push(`${relative(root, f)}: ${n} lines (at most ${MAX_LINES})`);
}

const program = readFileSync(join(lib, "cli", "program.ts"), "utf8");
const declared = JSON.parse(
    (/export const COMMANDS = (\[[^\]]*\])/.exec(program)?.[1] ?? "[]").replace(/,\s*\]$/, "]"),
);
const commandFiles = readdirSync(join(lib, "cli", "commands")).map((f) => f.replace(/\.ts$/, ""));
if (declared.length === 0) problems.push("lib/cli/program.ts: COMMANDS not found");
for (const c of declared) if (!commandFiles.includes(c)) problems.push(`command '${c}': no lib/cli/commands/${c}.ts`);
for (const f of commandFiles)
    if (!declared.includes(f)) problems.push(`lib/cli/commands/${f}.ts: not a command in COMMANDS`);

if (problems.length) {
    for (const p of problems) console.error(`check-layout: ${p}`);
    process.exit(1);
}
console.log(
    `check-layout: ${files.length} lib files, none over ${MAX_LINES} lines; no import circle; ${declared.length} commands, one file each`,
);
