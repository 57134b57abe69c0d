// serve.ts: `maporl serve`: a saved policy, a Hugging Face model or an adapter as an OpenAI-compatible server
// (lib/serve/server.ts); stops on SIGTERM / SIGINT.
import { existsSync } from "node:fs";
import { join } from "node:path";

import { type Command, Option } from "commander";

import { backend, setThreads } from "../../backend.js";
import { readTextFile } from "../../files.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import { servePolicy } from "../../serve/server.js";
import { integer } from "../parse.js";

export interface ServeArgs {
    checkpoint: string;
    port: number;
    host: string;
    servedModelName?: string;
    loraModules: Record<string, string>;
    enableLora: boolean;
    threads?: number;
    loraRoot?: string;
    allowAnyLoraPath: boolean;
    maxLoras: number;
    apiKey?: string;
    maxCacheBytes?: number;
    dtype?: "float32" | "bfloat16" | "int8";
}

/** Declares `maporl serve` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: ServeArgs) => Promise<void>): void {
    cmd.description(
        "serve a saved policy, a Hugging Face model or a LoRA adapter (on the base it names) as an OpenAI-compatible server in vLLM's dialect",
    )
        .requiredOption("--checkpoint <dir>", "the model, checkpoint or adapter directory")
        .option("--port <n>", "the port (0: any free port)", integer(0, 65535), 8000)
        .option("--host <host>", "the address to listen on", "127.0.0.1")
        .option("--served-model-name <name>", "the base model's id (default: the model's name)")
        .option(
            "--lora-modules <name=dir...>",
            "PEFT adapters served as models of their own (Hugging Face base models)",
        )
        .option(
            "--enable-lora",
            "accept POST /v1/load_lora_adapter and /v1/unload_lora_adapter (runtime LoRA updates)",
            false,
        )
        .option(
            "--lora-root <dir>",
            "with --enable-lora: the directory every runtime lora_path must lie in (links resolved)",
        )
        .option(
            "--allow-any-lora-path",
            "with --enable-lora: accept any lora_path the server can read (no --lora-root)",
            false,
        )
        .option("--max-loras <n>", "adapters loaded at once; one more is a 400", integer(0, 4096), 8)
        .option(
            "--api-key <key>",
            "require Authorization: Bearer <key> on every route but /health (also read from MAPORL_API_KEY)",
        )
        .option(
            "--max-cache-bytes <n>",
            "the KV cache one generation batch may take; a request that needs more is a 400 (default: 25% of memory)",
            integer(1, Number.MAX_SAFE_INTEGER),
        )
        .option("--threads <n>", "CPU threads of the model (default: one per core)", integer(1, 1024))
        .addOption(
            new Option(
                "--dtype <dtype>",
                "a Hugging Face base's matrices in memory: float32, bfloat16 or int8 (Q8_0 blocks; both frozen: adapters still load and train elsewhere)",
            ).choices(["float32", "bfloat16", "int8"]),
        )
        .action(async (o: Omit<ServeArgs, "loraModules"> & { loraModules?: string[] }) => {
            const loraModules: Record<string, string> = {};
            for (const m of o.loraModules ?? []) {
                const eq = m.indexOf("=");
                if (eq <= 0 || eq === m.length - 1)
                    throw new RangeError(`serve: --lora-modules: expected name=path, got ${JSON.stringify(m)}`);
                loraModules[m.slice(0, eq)] = m.slice(eq + 1);
            }
            const { loraModules: _, ...rest } = o;
            await act({ ...rest, loraModules });
        });
}

// MAPORL_EXIT_WITH_PARENT=<pid> (the servers a training job starts; "1": the process that started this one): stop
// when that process is gone (killed with SIGKILL, it could not stop its servers), watched from the start, so no
// server outlives its job, not even one still loading its model.
let onParentGone: () => void = () => process.exit(0);
function watchParent(): void {
    const v = process.env.MAPORL_EXIT_WITH_PARENT;
    if (v === undefined || v === "" || v === "0") return;
    const parent = /^\d+$/.test(v) && v !== "1" ? Number(v) : process.ppid;
    const timer = setInterval(() => {
        if (process.ppid === parent) return;
        clearInterval(timer);
        onParentGone();
    }, 1000);
    timer.unref();
}

/** `maporl serve`: the exit code. */
export async function run(a: ServeArgs): Promise<number> {
    watchParent();
    if (a.threads) setThreads(a.threads);
    const apiKey = a.apiKey ?? process.env.MAPORL_API_KEY;
    const loopback = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(a.host);
    if (!loopback && !apiKey)
        console.error(
            `maporl: WARNING: listening on ${a.host} with no authentication: anyone who reaches this address can use the model` +
                `${a.enableLora ? " and load adapters" : ""}; give --api-key (or MAPORL_API_KEY), or listen on 127.0.0.1`,
        );
    if (a.enableLora && a.loraRoot === undefined && !a.allowAnyLoraPath)
        // (before the model loads: refused at once)
        throw new RangeError(
            "serve: --enable-lora loads adapter directories named by clients: give --lora-root DIR, the directory they must lie in, " +
                "or --allow-any-lora-path",
        );
    const policy = await NativePolicy.load(a.checkpoint, a.dtype ? { dtype: a.dtype } : {});
    if (a.maxCacheBytes !== undefined) policy.maxCacheBytes = a.maxCacheBytes;
    const s = await servePolicy(policy, {
        port: a.port,
        host: a.host,
        adapters: a.loraModules,
        allowAdapterUpdates: a.enableLora,
        version: backend().version,
        ...(a.servedModelName ? { model: a.servedModelName } : {}),
        ...(a.loraRoot !== undefined ? { loraRoot: a.loraRoot } : {}),
        allowAnyLoraPath: a.allowAnyLoraPath,
        maxLoras: a.maxLoras,
        ...(apiKey ? { apiKey } : {}),
    }).catch(async (e: unknown) => {
        await policy.dispose();
        throw e;
    });
    console.log(
        `maporl: serving ${a.servedModelName ?? policy.name} (${policy.parameterCount} parameters) at ${s.baseUrl}/chat/completions`,
    );
    const protocol = join(a.checkpoint, "maporl-task.json");
    if (existsSync(protocol)) {
        // a model trained by `maporl train` on a compact task speaks only that task's protocol
        // (A regular file read up to its bound: the server already listens, and a FIFO here would block it for ever.)
        type Protocol = { task: string; example: string; answer: string; debate: string };
        let t: Protocol | null = null;
        try {
            t = JSON.parse(readTextFile(protocol, "maporl-task.json")) as Protocol;
        } catch (e) {
            console.error(`maporl: ${protocol} not read (${(e as Error).message}); serving without its protocol note`);
        }
        if (t)
            console.log(
                `maporl: this model was trained on ${t.task}'s compact protocol and answers only it: send user messages like ` +
                    `${JSON.stringify(t.example)} (the question, then every agent's previous answer) and read "${t.answer}". ` +
                    `A debate that speaks it: ${t.debate} (docs/models.md, "Serving a trained checkpoint")`,
            );
    }
    // SIGTERM / SIGINT: stop accepting, answer nothing more, exit (a supervisor's kill leaves no orphan).
    await new Promise<void>((resolve) => {
        const stop = () => {
            void s
                .close()
                .then(() => policy.dispose())
                .finally(resolve);
        };
        process.once("SIGTERM", stop);
        process.once("SIGINT", stop);
        onParentGone = stop;
    });
    return 0;
}
