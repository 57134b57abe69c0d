// codeReview.ts: the code-review workflow (coder -> reviewer -> coder ... until the reviewer approves or H turns):
// the shared artifact is the solution file; the coder writes it with write_solution; either role reads it and runs
// the task's tests on it with run_tests, which runs `node --test` on the current version in a fresh temporary
// directory, in a child process with a timeout (the process group is killed), a bare environment and, on Linux, no
// network (`unshare -rn`: a new user and network namespace whose only interface, loopback, is down). The team's
// reward is whether the final version passes the tests (run once more by the workflow, not by an agent); milestones
// pay a turn whose tool calls were all well-formed (+0.1) and the first passing run_tests of the episode (+0.2).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { Policy } from "../policy/types.js";
import { SharedArtifact } from "./artifact.js";
import type { Tool } from "./tools.js";
import { Workflow, type WorkflowSpec, type WorkflowState } from "./workflow.js";

/** A coding task: what to write, the tests (a node:test module importing `./solution.mjs`), and a starting file. */
export interface CodeTask {
    id: string;
    spec: string;
    tests: string;
    initial?: string;
}

export interface TestRun {
    passed: boolean;
    /** 'timeout' when it ran past the limit and was killed. */
    status: "passed" | "failed" | "timeout" | "error";
    output: string;
    ms: number;
    /** Whether the run had no network (unshare -rn). */
    isolated: boolean;
}

let unshareWorks: boolean | undefined;
/** Whether `unshare -rn` can make a network-less namespace here (checked once). */
export function networkIsolationAvailable(): boolean {
    if (unshareWorks === undefined) {
        const r =
            process.platform === "linux"
                ? spawnSync("unshare", ["-rn", "true"], { stdio: "ignore", timeout: 5000 })
                : null;
        unshareWorks = r !== null && r.status === 0;
    }
    return unshareWorks;
}

/**
 * Runs `tests` against `code` (as solution.mjs) with `node --test` in a child process: killed after `timeoutMs`, no
 * network where `unshare` allows it (`requireIsolation` makes its absence an error instead of a plain run).
 */
export async function runCodeTests(
    code: string,
    tests: string,
    o: { timeoutMs?: number; signal?: AbortSignal; requireIsolation?: boolean } = {},
): Promise<TestRun> {
    const t0 = performance.now(),
        timeoutMs = o.timeoutMs ?? 10_000;
    const isolated = networkIsolationAvailable();
    if (!isolated && o.requireIsolation)
        return {
            passed: false,
            status: "error",
            output: "no network isolation here (unshare -rn failed)",
            ms: 0,
            isolated,
        };
    const dir = mkdtempSync(join(tmpdir(), "maporl-tests-"));
    try {
        writeFileSync(join(dir, "solution.mjs"), code);
        writeFileSync(join(dir, "solution.test.mjs"), tests);
        const argv = [process.execPath, "--test", "--test-reporter=spec", "solution.test.mjs"];
        const [cmd, ...args] = isolated ? ["unshare", "-rn", ...argv] : argv;
        const child = spawn(cmd!, args, {
            cwd: dir,
            detached: true,
            stdio: ["ignore", "pipe", "pipe"],
            env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, NODE_OPTIONS: "" },
        });
        let out = "";
        const keep = (c: Buffer) => {
            out = (out + c.toString()).slice(-8000);
        };
        child.stdout.on("data", keep);
        child.stderr.on("data", keep);
        const kill = () => {
            try {
                process.kill(-child.pid!, "SIGKILL");
            } catch {
                /* gone */
            }
        };
        let timedOut = false;
        const timer = setTimeout(() => {
            timedOut = true;
            kill();
        }, timeoutMs);
        const onAbort = () => kill();
        o.signal?.addEventListener("abort", onAbort, { once: true });
        const code_ = await new Promise<number | null>((resolve) => {
            child.once("close", (c) => resolve(c));
            child.once("error", (e) => {
                out += String(e);
                resolve(null);
            });
        });
        clearTimeout(timer);
        o.signal?.removeEventListener("abort", onAbort);
        const ms = performance.now() - t0;
        if (timedOut)
            return {
                passed: false,
                status: "timeout",
                output: `killed after ${timeoutMs} ms\n${out.slice(-2000)}`,
                ms,
                isolated,
            };
        return {
            passed: code_ === 0,
            status: code_ === 0 ? "passed" : code_ === null ? "error" : "failed",
            output: out.slice(-3000),
            ms,
            isolated,
        };
    } finally {
        rmSync(dir, { recursive: true, force: true });
    }
}

type State = WorkflowState<CodeTask>;

/** The run_tests tool: the task's tests on the artifact's current version. */
export function runTestsTool(o: { timeoutMs?: number; requireIsolation?: boolean } = {}): Tool<Record<string, never>> {
    return {
        name: "run_tests",
        description: "Runs the task's tests on the current solution file; returns pass/fail and the test output.",
        parameters: { type: "object", properties: {}, additionalProperties: false },
        timeoutMs: (o.timeoutMs ?? 10_000) + 5_000, // the child's own limit comes first
        run: async (_args, ctx) => {
            const st = ctx.episode as State;
            const r = await runCodeTests(st.artifact!.content, st.item.tests, {
                timeoutMs: o.timeoutMs ?? 10_000,
                signal: ctx.signal,
                ...(o.requireIsolation ? { requireIsolation: true } : {}),
            });
            return `tests ${r.status} (version ${st.artifact!.version}, ${r.ms.toFixed(0)} ms${r.isolated ? ", no network" : ""})\n${r.output}`;
        },
    };
}

export interface CodeReviewOptions {
    coder: Policy;
    reviewer: Policy;
    /** H: agent turns at most. Defaults to 6. */
    horizon?: number;
    testTimeoutMs?: number;
    /** Make run_tests an error where the network cannot be cut off (default: run without isolation, and say so). */
    requireIsolation?: boolean;
    /** Extra tools (e.g. a documentation lookup). */
    tools?: Tool<never>[];
    loops?: WorkflowSpec<CodeTask>["loops"];
}

/** The code-review workflow's spec (see the file's head). */
export function codeReviewSpec(o: CodeReviewOptions): WorkflowSpec<CodeTask> {
    const lastOf = (st: State, role: string) => [...st.turns].reverse().find((t) => t.role === role);
    return {
        roles: [
            {
                name: "coder",
                policy: o.coder,
                instructions:
                    "You are the coder. Write the solution file with write_solution (the whole file, an ES module). " +
                    "You may read it and run the tests. When you are done, say so in one line.",
            },
            {
                name: "reviewer",
                policy: o.reviewer,
                instructions:
                    "You are the reviewer. Read the solution, run the tests, and reply APPROVE if it is " +
                    "correct; otherwise say exactly what to change.",
            },
        ],
        tools: [
            runTestsTool({
                ...(o.testTimeoutMs ? { timeoutMs: o.testTimeoutMs } : {}),
                ...(o.requireIsolation ? { requireIsolation: true } : {}),
            }),
            ...(o.tools ?? []),
        ],
        artifact: (task) => new SharedArtifact("solution", task.initial ?? ""),
        artifactWriters: ["coder"],
        start: "coder",
        observe: (role, st) => {
            const v = st.artifact!.version;
            if (role === "coder") {
                const review = lastOf(st, "reviewer");
                return review
                    ? `The reviewer says:\n${review.text}\n(solution at version ${v})`
                    : `Task: ${st.item.spec}\n(solution at version ${v})`;
            }
            return `The coder says:\n${lastOf(st, "coder")?.text ?? ""}\nThe solution is at version ${v}. Review it.`;
        },
        next: (st) => {
            const last = st.turns[st.turns.length - 1]!;
            if (last.role === "coder") return "reviewer";
            return /\bAPPROVE\b/.test(last.text) ? null : "coder";
        },
        reward: async (st) =>
            (await runCodeTests(st.artifact!.content, st.item.tests, { timeoutMs: o.testTimeoutMs ?? 10_000 })).passed
                ? 1
                : 0,
        milestones: (turn, st) => {
            let r =
                turn.toolResults.length > 0 &&
                turn.toolResults.every((x) => x.error !== "arguments" && x.error !== "unknown")
                    ? 0.1
                    : 0;
            const passedBefore = st.turns.some((t) =>
                t.toolResults.some((x) => x.name === "run_tests" && x.content.startsWith("tests passed")),
            );
            if (
                !passedBefore &&
                turn.toolResults.some((x) => x.name === "run_tests" && x.content.startsWith("tests passed"))
            )
                r += 0.2;
            return r;
        },
        horizon: o.horizon ?? 6,
        ...(o.loops ? { loops: o.loops } : {}),
    };
}

/** The code-review workflow, ready to run. */
export function codeReviewWorkflow(
    o: CodeReviewOptions,
    run: { tracer?: import("../debate/trace.js").Tracer; runId?: string; seed?: number } = {},
): Workflow<CodeTask> {
    return new Workflow(codeReviewSpec(o), run);
}
