// serverModels.ts: the models `maporl serve` answers for: the base policy under its served name, plus LoRA adapters
// loaded at start or at run time (vLLM's runtime LoRA updating: POST /v1/load_lora_adapter, /v1/unload_lora_adapter).
// Each adapter is a model name of its own; a request names the one it wants in `model`. Replacing an adapter in place
// (load_inplace) loads the new weights under an internal name, switches the served name to them, and only then removes
// the old ones, after the calls already queued on them: a request is answered wholly by the old or wholly by the new.
import { realpath } from "node:fs/promises";
import { isAbsolute, relative } from "node:path";

import { TemplateError } from "./template.js";
import type { Policy } from "./types.js";

/** What a served policy with LoRA adapters offers (NativePolicy of a Hugging Face model does). */
interface AdapterHost extends Policy {
    loadAdapter(dir: string, options: { name?: string }): Promise<Policy & { dispose(): Promise<void> }>;
    deleteAdapter(name: string): Promise<void>;
    readonly family?: string;
}

/** A model card as /v1/models lists it (vLLM's fields). */
export interface ModelCard { id: string; object: "model"; created: number; owned_by: "maporl"; root: string; parent: string | null; max_model_len: number | null }

interface Served { policy: Policy; internal: string | null; path: string; created: number; dispose?: () => Promise<void> }

/** An error a route turns into an HTTP status. */
export class HttpError extends Error {
    constructor(readonly status: number, message: string, readonly type = status === 404 ? "NotFoundError" : status < 500 ? "invalid_request_error" : "server_error") {
        super(message);
    }
}

/** Errors that are the request's fault (a bad field, a prompt past the context or the cache, a chat template that
 * raised or passed a bound): answered 400, as vLLM does, so that clients do not retry them on a healthy server. */
export const clientFault = (e: unknown): boolean => e instanceof RangeError || e instanceof TypeError || e instanceof TemplateError;

export class ServedModels {
    private readonly models = new Map<string, Served>();
    private counter = 0;
    // Load / unload of one name run one after another (vLLM takes a lock per name).
    private readonly locks = new Map<string, Promise<unknown>>();

    constructor(readonly base: Policy, readonly baseName: string, private readonly maxModelLen: number | null,
        private readonly limits: { loraRoot: string | null; maxLoras: number } = { loraRoot: null, maxLoras: 8 }) {
        this.models.set(baseName, { policy: base, internal: null, path: baseName, created: Math.floor(Date.now() / 1000) });
    }

    /** The policy serving `model` (absent: the base); a 404 naming the served ones otherwise, as vLLM. */
    get(model: unknown): { name: string; policy: Policy } {
        if (model === undefined || model === null) return { name: this.baseName, policy: this.base };
        const m = typeof model === "string" ? this.models.get(model) : undefined;
        if (!m) throw new HttpError(404, `The model \`${String(model)}\` does not exist; this server serves ${[...this.models.keys()].map((k) => `\`${k}\``).join(", ")}`);
        return { name: model as string, policy: m.policy };
    }

    cards(): ModelCard[] {
        return [...this.models].map(([id, m]) => ({ id, object: "model", created: m.created, owned_by: "maporl", root: m.path,
            parent: m.internal === null ? null : this.baseName, max_model_len: this.maxModelLen }));
    }

    private host(): AdapterHost {
        const b = this.base as Partial<AdapterHost>;
        if (typeof b.loadAdapter !== "function" || typeof b.deleteAdapter !== "function" || (b.family !== undefined && b.family !== "llama"))
            throw new HttpError(400, `this server's model (${this.baseName}) takes no LoRA adapters (serve a Hugging Face llama / mistral / qwen2 / qwen3 model)`);
        return b as AdapterHost;
    }

    private locked<T>(name: string, fn: () => Promise<T>): Promise<T> {
        const run = (this.locks.get(name) ?? Promise.resolve()).then(fn, fn);
        this.locks.set(name, run.catch(() => undefined));
        return run;
    }

    /** Loads the PEFT adapter directory `path` as model `name` (vLLM's load_lora_adapter; `inplace` replaces one of that
     * name). Resolves with vLLM's success text. A client's path (fromClient) must lie in loraRoot once links are resolved. */
    load(name: unknown, path: unknown, inplace: boolean, fromClient = true): Promise<string> {
        if (typeof name !== "string" || name.length === 0 || typeof path !== "string" || path.length === 0)
            return Promise.reject(new HttpError(400, "Both 'lora_name' and 'lora_path' must be provided (non-empty strings)."));
        if (name === this.baseName) return Promise.reject(new HttpError(400, `lora_name: '${name}' is the base model's name`));
        return this.locked(name, async () => {
            const old = this.models.get(name);
            if (old && !inplace)
                throw new HttpError(400, `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`);
            const loaded = [...this.models.values()].filter((m) => m.internal !== null).length;
            if (!old && loaded >= this.limits.maxLoras)
                throw new HttpError(400, `${loaded} LoRA adapters are loaded, the most this server holds (maxLoras ${this.limits.maxLoras}; maporl serve --max-loras): unload one first`);
            if (this.limits.loraRoot !== null && fromClient) {
                let real: string;
                try { real = await realpath(path); } catch { throw new HttpError(400, `lora_path: ${path} does not exist`); }
                const rel = relative(this.limits.loraRoot, real);
                if (rel.startsWith("..") || isAbsolute(rel))
                    throw new HttpError(400, `lora_path: ${path} is outside the directory adapters are loaded from (${this.limits.loraRoot}; maporl serve --lora-root)`);
            }
            const host = this.host(), internal = `${name}#${++this.counter}`;
            let policy;
            try {
                policy = await host.loadAdapter(path, { name: internal });
            } catch (e) {
                throw new HttpError(400, `loading LoRA adapter '${name}' from ${path}: ${e instanceof Error ? e.message : String(e)}`);
            }
            this.models.set(name, { policy, internal, path, created: Math.floor(Date.now() / 1000), dispose: () => policy.dispose() });
            if (old) await this.drop(old);
            return `Success: LoRA adapter '${name}' added successfully.`;
        });
    }

    /** Removes adapter `name` (vLLM's unload_lora_adapter); its requests already queued are answered first. */
    unload(name: unknown): Promise<string> {
        if (typeof name !== "string" || name.length === 0) return Promise.reject(new HttpError(400, "'lora_name' needs to be provided to unload a LoRA adapter."));
        return this.locked(name, async () => {
            const m = this.models.get(name);
            if (!m || m.internal === null) throw new HttpError(404, `The lora adapter '${name}' cannot be found.`);
            this.models.delete(name);
            await this.drop(m);
            return `Success: LoRA adapter '${name}' removed successfully.`;
        });
    }

    private async drop(m: Served): Promise<void> {
        await this.host().deleteAdapter(m.internal!);
        await m.dispose?.();
    }

    /** Releases every adapter's policy (the base is the caller's). */
    async close(): Promise<void> {
        for (const m of this.models.values()) await m.dispose?.().catch(() => undefined);
    }
}
