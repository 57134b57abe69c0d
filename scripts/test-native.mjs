#!/usr/bin/env node
// test-native.mjs: builds the core and the C++ tests with CMake (no Node addon) and runs every test binary.
// Prints each binary's OK / NOT OK lines and a total, and writes build-tests[-cuda]/summary.json
// ({ passed, failed }) for .ci/run. MAPORL_CUDA=1 builds the CUDA kernels too.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
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
// scripts/device-check.sh's test stage over fake test binaries in a directory whose path has dots: the binaries are
// chosen by file name (test_x.txt, a non-executable test_d and a directory are not tests), a binary that ends without
// its summary line fails the run, and so does a directory with no test binary (it once passed with none run).
function deviceCheckScript() {
    const base = mkdtempSync(join(tmpdir(), "maporl.dc."));
    const dir = join(base, "build.v1.2");
    const cases = [];
    const check = (name, ok, detail) => {
        cases.push(ok);
        console.log(`${ok ? "OK" : "NOT OK"} device_check_${name}${ok ? "" : `: ${detail}`}`);
    };
    try {
        mkdirSync(join(dir, "test_dir.d"), { recursive: true });
        mkdirSync(join(dir, "empty"));
        const fake = (name, body, mode = 0o755) => {
            writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`);
            chmodSync(join(dir, name), mode);
        };
        fake("test_a", 'echo "# test_a: 2 passed, 0 failed"');
        fake("test_b", 'echo "# test_b: 3 passed, 0 failed"');
        fake("test_c.txt", 'echo "# test_c: 1 passed, 0 failed"');
        fake("test_d", 'echo "# test_d: 1 passed, 0 failed"', 0o644);
        const sh = (...args) =>
            spawnSync("bash", [join(root, "scripts", "device-check.sh"), ...args], {
                encoding: "utf8",
                timeout: 60_000,
            });
        const list = sh("--list-tests", dir);
        const names = list.stdout
            .trim()
            .split("\n")
            .map((l) => l.slice(dir.length + 1));
        check(
            "lists_tests_by_file_name",
            list.status === 0 && names.join(",") === "test_a,test_b",
            `got ${JSON.stringify(names)}`,
        );
        let r = sh("--run-tests", dir);
        const last = (x) => x.stdout.trim().split("\n").pop();
        check(
            "runs_the_tests_of_a_dotted_path",
            r.status === 0 && /2 binaries, 5 passed, 0 failed/.test(r.stdout) && last(r) === "RESULT: PASS",
            `exit ${r.status}, ${last(r)}`,
        );
        r = sh("--run-tests", join(dir, "empty"));
        check(
            "fails_when_no_test_ran",
            r.status === 1 && /^RESULT: FAIL \(no test binary ran/.test(last(r)),
            `exit ${r.status}, ${last(r)}`,
        );
        fake("test_e", "exit 3");
        r = sh("--run-tests", dir);
        check(
            "fails_on_a_binary_without_summary",
            r.status === 1 && /RESULT: FAIL \(test_e: exit 3, no summary\)/.test(last(r)),
            `exit ${r.status}, ${last(r)}`,
        );
    } finally {
        rmSync(base, { recursive: true, force: true });
    }
    const ok = cases.filter(Boolean).length;
    console.log(`# device-check.sh: ${ok} passed, ${cases.length - ok} failed`);
    return { passed: ok, failed: cases.length - ok };
}
{
    const r = deviceCheckScript();
    passed += r.passed;
    failed += r.failed;
}
writeFileSync(join(buildDir, "summary.json"), JSON.stringify({ passed, failed }) + "\n");
console.log(
    `native tests${sanitize ? " (ASan + UBSan build)" : cuda ? " (CUDA build)" : ""}: ${passed} passed, ${failed} failed`,
);
process.exit(failed === 0 ? 0 : 1);
