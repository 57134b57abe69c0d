#!/usr/bin/env node
// format-cpp.mjs: clang-format (the clang-format npm package's pinned binary, .clang-format's style) over the C++ and
// CUDA sources git tracks and the new ones it does not ignore (a file not yet added is formatted before its first
// commit). `--check` reports the files that differ and exits 1 (npm run lint); without it, formats
// them in place (npm run format).
import { execFileSync, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const bin = join(dirname(require.resolve("clang-format/package.json")), "bin", "linux_x64", "clang-format");
const check = process.argv.includes("--check");
const files = execFileSync(
    "git",
    ["ls-files", "--cached", "--others", "--exclude-standard", "*.cpp", "*.h", "*.cu", "*.cuh", "*.inc"],
    {
        cwd: root,
        encoding: "utf8",
    },
)
    .split("\n")
    .filter((f) => f && !f.startsWith("node_modules/"));
const bad = [];
for (const f of files) {
    // (.inc and .cuh are C++ / CUDA fragments: formatted as C++)
    const args = ["--style=file", `--assume-filename=${f.replace(/\.(inc|cuh|cu)$/, ".cpp")}`];
    const r = spawnSync(
        bin,
        check ? [...args, "--dry-run", "--Werror", join(root, f)] : [...args, "-i", join(root, f)],
        {
            cwd: root,
            encoding: "utf8",
        },
    );
    if (r.status !== 0) bad.push(f);
}
if (check && bad.length) {
    console.error(
        `format-cpp: ${bad.length} of ${files.length} files differ from .clang-format's style (npm run format):`,
    );
    for (const f of bad.slice(0, 20)) console.error(`  ${f}`);
    process.exit(1);
}
if (!check && bad.length) {
    console.error(`format-cpp: clang-format failed on ${bad.join(", ")}`);
    process.exit(1);
}
console.log(`format-cpp: ${files.length} C++ / CUDA files ${check ? "in .clang-format's style" : "formatted"}`);
