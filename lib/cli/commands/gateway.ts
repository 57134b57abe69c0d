// gateway.ts: `maporl gateway`: an OpenAI-compatible gateway that records every agent's calls (lib/gateway/), in
// front of a model in process (--model: each agent a LoRA adapter on it, fresh or loaded from --adapters) or of
// OpenAI-compatible servers (--upstream: vLLM, SGLang, maporl serve; each agent the served model of its name, or
// --upstream-model for all). Closed episodes are appended to --record as JSON lines (then the gateway keeps them no
// longer); without --record they stay readable at GET /episodes/<id> until DELETE /episodes/<id>. Stops on SIGTERM /
// SIGINT (open episodes fail: 'the gateway closed', and are written too).
import { appendFileSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";

import type { Command } from "commander";

import { setThreads } from "../../backend.js";
import { JsonlTracer } from "../../debate/trace.js";
import { startGateway } from "../../gateway/gateway.js";
import { NativePolicy } from "../../model/nativePolicy.js";
import type { Policy } from "../../policy/types.js";
import { FleetPolicy } from "../../remote/fleet.js";
import { integer } from "../parse.js";

export interface GatewayArgs {
    agents: string[];
    model?: string;
    adapters: Record<string, string>;
    upstream?: string[];
    upstreamModel?: string;
    upstreamApiKey?: string;
    port: number;
    host: string;
    apiKey?: string;
    maxEpisodes: number;
    maxCallsPerEpisode: number;
    episodeTimeout: number;
    callTimeout: number;
    requireEpisode: boolean;
    record?: string;
    trace?: string;
    threads?: number;
}

/** Declares `maporl gateway` on `cmd`; `act` receives the parsed arguments. */
export function declare(cmd: Command, act: (a: GatewayArgs) => Promise<void>): void {
    cmd.description(
        "an OpenAI-compatible gateway that records every agent's exact tokens from unchanged agent programs (docs/gateway.md)",
    )
        .requiredOption("--agents <names>", "the agents, comma-separated (each a model name clients may send)")
        .option("--model <dir>", "a Hugging Face model in process; each agent a LoRA adapter on it")
        .option(
            "--adapters <name=dir...>",
            "with --model: an agent's PEFT adapter (else a fresh one, equal to the base)",
        )
        .option("--upstream <url...>", "OpenAI-compatible servers (base URLs ending /v1) instead of --model")
        .option("--upstream-model <name>", "with --upstream: the served model every agent uses (default: its own name)")
        .option("--upstream-api-key <key>", "with --upstream: the servers' key (or MAPORL_UPSTREAM_API_KEY)")
        .option("--port <n>", "the port (0: any free port)", integer(0, 65535), 8010)
        .option("--host <host>", "the address to listen on", "127.0.0.1")
        .option("--api-key <key>", "require Authorization: Bearer <key> on every route but /health (or MAPORL_API_KEY)")
        .option("--max-episodes <n>", "episodes open at once", integer(1, 1 << 20), 256)
        .option("--max-calls-per-episode <n>", "calls one episode may make", integer(1, 1 << 20), 256)
        .option(
            "--episode-timeout <ms>",
            "an idle, unrewarded episode fails after this long",
            integer(1, 2 ** 31 - 1),
            600000,
        )
        .option(
            "--call-timeout <ms>",
            "a recorded call the upstream has not answered in this long fails (504)",
            integer(1, 2 ** 31 - 1),
            600000,
        )
        .option("--require-episode", "refuse calls that name no episode (else answered, not recorded)", false)
        .option("--record <file>", "append every closed episode to this JSON-lines file")
        .option("--trace <dir>", "write a span per recorded call to DIR/trace.jsonl")
        .option("--threads <n>", "CPU threads of the model (default: one per core)", integer(1, 1024))
        .action(async (o: Omit<GatewayArgs, "agents" | "adapters"> & { agents: string; adapters?: string[] }) => {
            const agents = o.agents
                .split(",")
                .map((s) => s.trim())
                .filter((s) => s !== "");
            if (agents.length === 0)
                throw new RangeError("gateway: --agents: expected one or more names, comma-separated");
            const adapters: Record<string, string> = {};
            for (const m of o.adapters ?? []) {
                const eq = m.indexOf("=");
                if (eq <= 0 || eq === m.length - 1)
                    throw new RangeError(`gateway: --adapters: expected name=dir, got ${JSON.stringify(m)}`);
                const name = m.slice(0, eq);
                if (!agents.includes(name))
                    throw new RangeError(`gateway: --adapters: ${name} is not one of --agents (${agents.join(", ")})`);
                adapters[name] = m.slice(eq + 1);
            }
            if ((o.model === undefined) === (o.upstream === undefined))
                throw new RangeError("gateway: give either --model DIR (in process) or --upstream URL... (servers)");
            if (o.upstream && Object.keys(adapters).length)
                throw new RangeError(
                    "gateway: --adapters is for --model; with --upstream the servers hold the adapters",
                );
            await act({ ...o, agents, adapters });
        });
}

/** `maporl gateway`: the exit code. */
export async function run(a: GatewayArgs): Promise<number> {
    if (a.threads) setThreads(a.threads);
    const apiKey = a.apiKey ?? process.env.MAPORL_API_KEY;
    if (!/^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(a.host) && !apiKey)
        console.error(
            `maporl: WARNING: listening on ${a.host} with no authentication: anyone who reaches this address can use the agents; ` +
                "give --api-key (or MAPORL_API_KEY), or listen on 127.0.0.1",
        );
    let base: NativePolicy | null = null,
        fleet: FleetPolicy | null = null;
    const agents: Record<string, Policy> = {};
    try {
        if (a.model !== undefined) {
            base = await NativePolicy.load(a.model);
            for (const name of a.agents)
                agents[name] =
                    a.adapters[name] !== undefined
                        ? await base.loadAdapter(a.adapters[name], { name })
                        : await base.withAdapter(name);
        } else {
            const key = a.upstreamApiKey ?? process.env.MAPORL_UPSTREAM_API_KEY;
            fleet = new FleetPolicy({
                endpoints: a.upstream!,
                model: a.upstreamModel ?? a.agents[0]!,
                ...(key ? { apiKey: key } : {}),
            });
            for (const name of a.agents) agents[name] = fleet.policy(a.upstreamModel ?? name);
        }
    } catch (e) {
        fleet?.close();
        await base?.dispose();
        throw e;
    }
    if (a.record !== undefined) mkdirSync(dirname(a.record), { recursive: true });
    const tracer = a.trace !== undefined ? new JsonlTracer(a.trace) : null;
    const gw = await startGateway({
        agents,
        port: a.port,
        host: a.host,
        ...(apiKey ? { apiKey } : {}),
        maxEpisodes: a.maxEpisodes,
        maxCallsPerEpisode: a.maxCallsPerEpisode,
        episodeTimeoutMs: a.episodeTimeout,
        callTimeoutMs: a.callTimeout,
        requireEpisode: a.requireEpisode,
        ...(tracer ? { tracer } : {}),
        ...(a.record !== undefined
            ? {
                  onEpisodeClosed: (ep) => {
                      appendFileSync(a.record!, `${JSON.stringify(ep)}\n`);
                      gw.episodes.take(ep.id);
                  },
              }
            : {}),
    }).catch(async (e: unknown) => {
        fleet?.close();
        await base?.dispose();
        throw e;
    });
    console.log(
        `maporl: gateway for ${a.agents.join(", ")} at ${gw.baseUrl} (an episode's base URL: ${gw.baseUrl.replace(/\/v1$/, "/episodes/<id>/v1")})`,
    );
    await new Promise<void>((resolve) => {
        const stop = () => {
            void gw
                .close()
                .then(async () => {
                    tracer?.close();
                    fleet?.close();
                    await base?.dispose();
                })
                .finally(resolve);
        };
        process.once("SIGTERM", stop);
        process.once("SIGINT", stop);
    });
    return 0;
}
