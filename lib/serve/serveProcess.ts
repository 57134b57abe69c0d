// serveProcess.ts: `maporl serve` (and `maporl gateway`) as a child process on a free port (--port 0): resolves with its base URL once it
// listens (it prints "serving ... at <url>/chat/completions"), rejects naming its output when it exits first or does not
// listen within 30 s. The fleet benchmark and the tests start their servers with it.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface ServeProcess {
    baseUrl: string;
    proc: ChildProcess;
    /** Everything it printed so far. */
    output(): string;
    /** Sends `signal` (default SIGTERM) unless it has exited; resolves with its exit code. */
    stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const CLI = fileURLToPath(new URL("../cli.js", import.meta.url));

/** Starts `maporl serve --checkpoint dir --port 0 ...args`, with `cli` the command's script (default: this package's). */
export function startServeProcess(
    dir: string,
    args: string[] = [],
    cli = CLI,
    env?: Record<string, string>,
): Promise<ServeProcess> {
    return startListening(
        ["serve", "--checkpoint", dir, "--port", "0", ...args],
        /at (http:\/\/\S+\/v1)\/chat\/completions/,
        cli,
        env,
    );
}

/** Starts `maporl gateway --port 0 ...args` (it prints "gateway for ... at <url>/v1 (...)"). */
export function startGatewayProcess(args: string[], cli = CLI): Promise<ServeProcess> {
    return startListening(["gateway", "--port", "0", ...args], /gateway for .* at (http:\/\/\S+\/v1) /, cli);
}

// Starts `maporl ...argv` and resolves once its output matches `ready` (group 1: the base URL).
function startListening(
    argv: string[],
    ready: RegExp,
    cli: string,
    env?: Record<string, string>,
): Promise<ServeProcess> {
    const what = `maporl ${argv[0]}`;
    const proc = spawn(process.execPath, [cli, ...argv], {
        stdio: ["ignore", "pipe", "pipe"],
        ...(env ? { env: { ...process.env, ...env } } : {}),
    });
    let out = "";
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    const stop = async (signal: NodeJS.Signals = "SIGTERM") => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
        return exited;
    };
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
            proc.kill("SIGKILL");
            reject(new Error(`${what} did not start in 30 s: ${out}`));
        }, 30_000);
        proc.stdout.on("data", (c: Buffer) => {
            out += c.toString();
            const m = ready.exec(out);
            if (m) {
                clearTimeout(timer);
                resolve({ baseUrl: m[1]!, proc, output: () => out, stop });
            }
        });
        proc.stderr.on("data", (c: Buffer) => {
            out += c.toString();
        });
        proc.once("exit", (code) => {
            clearTimeout(timer);
            reject(new Error(`${what} exited (${code}) before listening: ${out}`));
        });
    });
}
