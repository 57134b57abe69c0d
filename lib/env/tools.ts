// tools.ts: tools the agents of a workflow may call. A tool is an async function with a JSON Schema for its
// arguments, a timeout and an optional list of the roles allowed to call it. Calling one never throws into the
// episode: arguments that are not JSON or break the schema, an unknown or forbidden tool, a tool that throws, and one
// that runs past its timeout (its AbortSignal fires, so a subprocess tool kills its child) all become a tool result
// with `ok: false` and an error text, which goes back to the agent as the tool message and into the trace.
import AjvModule, { type ErrorObject, type ValidateFunction } from "ajv";

import { checkToolName, type ToolCall, type ToolSpec } from "../policy/types.js";

// ajv is CommonJS: under NodeNext its class is the default export's `default`.
interface AjvLike {
    compile(schema: object): ValidateFunction;
    errorsText(e: ErrorObject[] | null | undefined, o?: { dataVar?: string }): string;
}
const AjvClass = ((AjvModule as unknown as { default?: unknown }).default ?? AjvModule) as new (o: object) => AjvLike;
const ajv = new AjvClass({ allErrors: true, strict: false });

export interface ToolContext {
    /** Aborts when the call's timeout passes or the episode is aborted. */
    signal: AbortSignal;
    /** The role calling, and the episode's turn. */
    role: string;
    turn: number;
    /** The episode's state (the workflow's item, turns so far and shared artifact), for tools that act on it. */
    episode?: unknown;
}

export interface Tool<A = Record<string, unknown>> {
    name: string;
    description: string;
    /** JSON Schema of the arguments object (checked before `run`). Defaults to any object. */
    parameters?: Record<string, unknown>;
    /** Milliseconds before the call is abandoned as an error. Defaults to 10,000. */
    timeoutMs?: number;
    /** The roles that may call it; all when absent. */
    roles?: string[];
    run(args: A, ctx: ToolContext): Promise<string> | string;
}

/** One executed call, as the trace records it and the agent reads it (content is the tool message). */
export interface ToolResult {
    callId: string;
    name: string;
    /** The arguments as the model wrote them (JSON text). */
    arguments: string;
    ok: boolean;
    /** The tool's output, or the error text the agent reads. */
    content: string;
    /** Set when ok is false: 'arguments' (not JSON / schema), 'unknown', 'forbidden', 'threw', 'timeout'. */
    error?: "arguments" | "unknown" | "forbidden" | "threw" | "timeout";
    ms: number;
}

/** A tool as the model is told of it (OpenAI's tools[].function). */
export function toolSpec(t: Tool<never>): ToolSpec {
    return { name: t.name, description: t.description, parameters: t.parameters ?? { type: "object" } };
}

/** Checks a tool list: names of OpenAI's form and unique, a run function, a positive timeout, a compilable schema. */
export function checkTools(where: string, tools: unknown): Tool<never>[] {
    if (!Array.isArray(tools)) throw new TypeError(`${where}: tools: expected an array of tools, got ${typeof tools}`);
    const seen = new Set<string>();
    tools.forEach((t: Tool<never>, k) => {
        const at = `${where}: tools[${k}]`;
        checkToolName(at, t, seen);
        if (typeof t.run !== "function") throw new TypeError(`${at}.run: expected a function (args, ctx) => string`);
        if (typeof t.description !== "string") throw new TypeError(`${at}.description: expected a string`);
        if (t.timeoutMs !== undefined && !(Number.isFinite(t.timeoutMs) && t.timeoutMs > 0))
            throw new RangeError(`${at}.timeoutMs: expected a positive number, got ${String(t.timeoutMs)}`);
        if (t.roles !== undefined && (!Array.isArray(t.roles) || t.roles.some((r) => typeof r !== "string")))
            throw new TypeError(`${at}.roles: expected an array of role names`);
        try {
            validator(t);
        } catch (e) {
            throw new TypeError(`${at}.parameters: not a valid JSON Schema (${(e as Error).message})`);
        }
    });
    return tools as Tool<never>[];
}

const validators = new WeakMap<object, (x: unknown) => string | null>();
function validator(t: Tool<never>): (x: unknown) => string | null {
    const schema = t.parameters ?? { type: "object" };
    let v = validators.get(schema);
    if (!v) {
        const f = ajv.compile(schema);
        v = (x: unknown) => (f(x) ? null : ajv.errorsText(f.errors, { dataVar: "arguments" }));
        validators.set(schema, v);
    }
    return v;
}

/** Runs one call. Never throws (but rethrows the episode's own abort). */
export async function runToolCall(
    tools: readonly Tool<never>[],
    call: ToolCall,
    ctx: { role: string; turn: number; signal?: AbortSignal; episode?: unknown },
): Promise<ToolResult> {
    const t0 = performance.now();
    const done = (ok: boolean, content: string, error?: ToolResult["error"]): ToolResult => ({
        callId: call.id,
        name: call.name,
        arguments: call.arguments,
        ok,
        content,
        ...(error ? { error } : {}),
        ms: performance.now() - t0,
    });
    const tool = tools.find((t) => t.name === call.name);
    if (!tool)
        return done(
            false,
            `error: no tool named '${call.name}' (available: ${tools.map((t) => t.name).join(", ") || "none"})`,
            "unknown",
        );
    if (tool.roles && !tool.roles.includes(ctx.role))
        return done(
            false,
            `error: the ${ctx.role} may not call '${tool.name}' (only ${tool.roles.join(", ")})`,
            "forbidden",
        );
    let args: unknown;
    try {
        args = JSON.parse(call.arguments || "{}");
    } catch (e) {
        return done(
            false,
            `error: the arguments of '${tool.name}' are not JSON (${(e as Error).message})`,
            "arguments",
        );
    }
    const invalid = validator(tool)(args);
    if (invalid !== null) return done(false, `error: invalid arguments for '${tool.name}': ${invalid}`, "arguments");
    const timeoutMs = tool.timeoutMs ?? 10_000;
    const ac = new AbortController();
    const onAbort = () => ac.abort(ctx.signal!.reason);
    ctx.signal?.addEventListener("abort", onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    try {
        const timeout = new Promise<"timeout">((resolve) => {
            timer = setTimeout(() => resolve("timeout"), timeoutMs);
        });
        const run = Promise.resolve().then(() =>
            tool.run(args as never, {
                signal: ac.signal,
                role: ctx.role,
                turn: ctx.turn,
                ...(ctx.episode !== undefined ? { episode: ctx.episode } : {}),
            }),
        );
        const r = await Promise.race([run, timeout]);
        if (r === "timeout") {
            ac.abort(new Error(`timeout after ${timeoutMs} ms`));
            run.catch(() => undefined); // whatever it does later is dropped
            return done(false, `error: '${tool.name}' did not finish within ${timeoutMs} ms`, "timeout");
        }
        return done(true, typeof r === "string" ? r : JSON.stringify(r));
    } catch (e) {
        if (ctx.signal?.aborted) throw ctx.signal.reason;
        return done(false, `error: '${tool.name}' failed: ${e instanceof Error ? e.message : String(e)}`, "threw");
    } finally {
        clearTimeout(timer);
        ctx.signal?.removeEventListener("abort", onAbort);
    }
}

/** A call's identity for loop detection: the tool and its arguments with keys sorted (whitespace and order ignored). */
export function callKey(call: { name: string; arguments: string }): string {
    const canon = (x: unknown): unknown =>
        Array.isArray(x)
            ? x.map(canon)
            : x && typeof x === "object"
              ? Object.fromEntries(
                    Object.keys(x)
                        .sort()
                        .map((k) => [k, canon((x as Record<string, unknown>)[k])]),
                )
              : x;
    try {
        return `${call.name}(${JSON.stringify(canon(JSON.parse(call.arguments || "{}")))})`;
    } catch {
        return `${call.name}(${call.arguments})`;
    }
}
