#!/usr/bin/env node
// test-native.mjs: builds the core and the C++ tests with CMake (no Node addon) and runs every test binary.
// Prints each binary's OK / NOT OK lines and a total, and writes build-tests[-cuda]/summary.json
// ({ passed, failed }) for .ci/run. MAPORL_CUDA=1 builds the CUDA kernels too.
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const on = (v) => ["1", "true", "on", "yes"].includes(String(v ?? "").toLowerCase());
const cuda = on(process.env.MAPORL_CUDA);
// MAPORL_SANITIZE=1: the CPU core and tests under ASan + UBSan, in their own folder (a report aborts the binary).
const sanitize = on(process.env.MAPORL_SANITIZE);
const buildDir = join(root, sanitize ? "build-tests-asan" : cuda ? "build-tests-cuda" : "build-tests");
mkdirSync(buildDir, { recursive: true });

function run(cmd, args, opts = {}) {
    const r = spawnSync(cmd, args, { stdio: "inherit", ...opts });
    if (r.error) throw r.error;
    return r.status ?? 1;
}

const generator = spawnSync("ninja", ["--version"]).status === 0 ? ["-G", "Ninja"] : [];
if (
    run(
        "cmake",
        [
            "-S",
            root,
            "-B",
            buildDir,
            ...generator,
            "-DCMAKE_BUILD_TYPE=Release",
            `-DMAPORL_CUDA=${cuda && !sanitize ? "ON" : "OFF"}`,
            `-DMAPORL_SANITIZE=${sanitize ? "ON" : "OFF"}`,
        ],
        { stdio: ["ignore", "ignore", "inherit"] },
    ) !== 0
)
    process.exit(1);
if (run("cmake", ["--build", buildDir, "--parallel"], { stdio: ["ignore", "ignore", "inherit"] }) !== 0)
    process.exit(1);

let passed = 0,
    failed = 0;
const tests = readdirSync(buildDir).filter((f) => f.startsWith("test_") && !f.includes("."));
for (const t of tests.sort()) {
    // A hang fails the binary (killed after 10 minutes) instead of wedging the suite.
    const r = spawnSync(join(buildDir, t), [], { encoding: "utf8", timeout: 600_000, killSignal: "SIGKILL" });
    process.stdout.write(r.stdout ?? "");
    process.stderr.write(r.stderr ?? "");
    const m = /# \S+: (\d+) passed, (\d+) failed/.exec(r.stdout ?? "");
    if (m) {
        passed += Number(m[1]);
        failed += Number(m[2]);
    }
    if (!m || r.status !== 0) {
        if (!m) failed += 1; // crashed before its summary: count the binary as one failure
        console.error(
            `${t}: exit ${r.status ?? r.signal}${r.error?.code === "ETIMEDOUT" ? " (timed out after 600 s: a hang)" : ""}`,
        );
    }
}
writeFileSync(join(buildDir, "summary.json"), JSON.stringify({ passed, failed }) + "\n");
console.log(
    `native tests${sanitize ? " (ASan + UBSan build)" : cuda ? " (CUDA build)" : ""}: ${passed} passed, ${failed} failed`,
);
process.exit(failed === 0 ? 0 : 1);
