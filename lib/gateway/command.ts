// command.ts (gateway): an agent program that is a command (any language): each episode runs it once, with the
// episode's base URL in its environment, so a program that reads OPENAI_BASE_URL (the openai SDKs for Node and Python
// do) is pointed at the gateway without a change. Its standard output (trimmed) is the episode's output; a non-zero
// exit, a signal or the time limit fails the episode with the end of its standard error.
//   OPENAI_BASE_URL, MAPORL_BASE_URL   the episode's base URL (…/episodes/<id>/v1)
//   OPENAI_API_KEY                     the gateway's key where given, else kept, else "maporl" (clients require one)
//   MAPORL_EPISODE                     the episode id
//   MAPORL_REWARD_URL                  POST { reward, agents?, milestones? } here to reward the episode (with
//                                      Authorization: Bearer $OPENAI_API_KEY where the gateway has a key)
//   MAPORL_ITEM                        the item, as JSON
import { spawn } from "node:child_process";

import type { GatewayRun } from "./train.js";

export interface CommandProgramOptions {
    /** The executable and its arguments (no shell). */
    command: string;
    args?: string[];
    cwd?: string;
    /** Added to the environment (after the variables above, so it may override them). */
    env?: Record<string, string>;
    /** The gateway's key, passed as OPENAI_API_KEY. */
    apiKey?: string;
    /** One run's time limit; past it the process is killed and the episode fails. Defaults to 600,000 ms. */
    timeoutMs?: number;
    /** Standard output kept (the rest is dropped and the episode fails). Defaults to 1 MiB. */
    maxOutputBytes?: number;
}

/** A program for trainGatewayIteration that runs `o.command` once per episode. */
export function commandProgram<I>(o: CommandProgramOptions): (run: GatewayRun<I>) => Promise<string> {
    if (typeof o?.command !== "string" || o.command === "")
        throw new TypeError("commandProgram: command: expected an executable's name or path");
    const timeoutMs = o.timeoutMs ?? 600_000,
        limit = o.maxOutputBytes ?? 1 << 20;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1)
        throw new RangeError(`commandProgram: timeoutMs: expected an integer >= 1, got ${String(o.timeoutMs)}`);
    if (!Number.isSafeInteger(limit) || limit < 1)
        throw new RangeError(
            `commandProgram: maxOutputBytes: expected an integer >= 1, got ${String(o.maxOutputBytes)}`,
        );
    return (run) =>
        new Promise<string>((resolve, reject) => {
            const env: Record<string, string | undefined> = {
                ...process.env,
                OPENAI_BASE_URL: run.baseUrl,
                MAPORL_BASE_URL: run.baseUrl,
                OPENAI_API_KEY: o.apiKey ?? process.env.OPENAI_API_KEY ?? "maporl",
                MAPORL_EPISODE: run.episode,
                MAPORL_REWARD_URL: `${run.baseUrl.replace(/\/v1$/, "")}/reward`,
                MAPORL_ITEM: JSON.stringify(run.item) ?? "null",
                ...o.env,
            };
            const child = spawn(o.command, o.args ?? [], {
                env,
                stdio: ["ignore", "pipe", "pipe"],
                ...(o.cwd ? { cwd: o.cwd } : {}),
            });
            const out: Buffer[] = [];
            let size = 0,
                err = "",
                why: string | null = null;
            const kill = (reason: string) => {
                why ??= reason;
                child.kill("SIGKILL");
            };
            const timer = setTimeout(() => kill(`ran past ${timeoutMs} ms (timeoutMs)`), timeoutMs);
            const onAbort = () => kill("aborted");
            run.signal.addEventListener("abort", onAbort, { once: true });
            child.stdout.on("data", (c: Buffer) => {
                size += c.length;
                if (size > limit) kill(`wrote over ${limit} bytes to standard output (maxOutputBytes)`);
                else out.push(c);
            });
            child.stderr.on("data", (c: Buffer) => {
                err = (err + c.toString()).slice(-2000);
            });
            child.once("error", (e) => {
                why ??= `could not start ${o.command}: ${e.message}`;
            });
            child.once("close", (code, signal) => {
                clearTimeout(timer);
                run.signal.removeEventListener("abort", onAbort);
                const tail = err.trim() ? `: ${err.trim().split("\n").slice(-5).join(" | ")}` : "";
                if (why !== null) reject(new Error(`${o.command} ${why}${tail}`));
                else if (code !== 0) reject(new Error(`${o.command} exited with ${signal ?? `code ${code}`}${tail}`));
                else resolve(Buffer.concat(out).toString("utf8").trim());
            });
        });
}
