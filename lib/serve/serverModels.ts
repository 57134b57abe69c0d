// serverModels.ts: the models `maporl serve` answers for: the base policy under its served name, plus LoRA adapters
// loaded at start or at run time (vLLM's runtime LoRA updating: POST /v1/load_lora_adapter, /v1/unload_lora_adapter).
// Each adapter is a model name of its own; a request names the one it wants in `model`. Replacing an adapter in place
// (load_inplace) loads the new weights under an internal name, switches the served name to them, and only then removes
// the old ones, after the calls already queued on them: a request is answered wholly by the old or wholly by the new.
import { realpath } from "node:fs/promises";
import { isAbsolute, join, relative, resolve, sep } from "node:path";

import { TemplateError } from "../model/template.js";
import type { Policy } from "../policy/types.js";

/** What a served policy with LoRA adapters offers (NativePolicy of a Hugging Face model does). */
interface AdapterHost extends Policy {
    loadAdapter(dir: string, options: { name?: string }): Promise<Policy & { dispose(): Promise<void> }>;
    deleteAdapter(name: string): Promise<void>;
    readonly family?: string;
}

/** A model card as /v1/models lists it (vLLM's fields). */
export interface ModelCard {
    id: string;
    object: "model";
    created: number;
    owned_by: "maporl";
    root: string;
    parent: string | null;
    max_model_len: number | null;
}

// The files a PEFT adapter directory is read from (lora.ts): each must lie in the LoRA root too once links are resolved.
const ADAPTER_FILES = [
    "adapter_config.json",
    "adapter_model.safetensors",
    "value_head.safetensors",
    "optimizer.safetensors",
    "maporl-adapter.json",
];

// Whether the absolute path `p` is `root` or lies below it (a name such as "..v2" below it does).
const inside = (root: string, p: string): boolean => {
    const rel = relative(root, p);
    return rel === "" || (rel !== ".." && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
};

interface Served {
    policy: Policy;
    internal: string | null;
    path: string;
    created: number;
    dispose?: () => Promise<void>;
}

/** An error a route turns into an HTTP status. */
export class HttpError extends Error {
    constructor(
        readonly status: number,
        message: string,
        readonly type = status === 404 ? "NotFoundError" : status < 500 ? "invalid_request_error" : "server_error",
    ) {
        super(message);
    }
}

/** Errors that are the request's fault (a bad field, a prompt past the context or the cache, a chat template that
 * raised or passed a bound): answered 400, as vLLM does, so that clients do not retry them on a healthy server. */
export const clientFault = (e: unknown): boolean =>
    e instanceof RangeError || e instanceof TypeError || e instanceof TemplateError;

export class ServedModels {
    private readonly models = new Map<string, Served>();
    private counter = 0;
    // Load / unload of one name run one after another (vLLM takes a lock per name).
    private readonly locks = new Map<string, Promise<unknown>>();
    // Loads under way that will take a slot of maxLoras (counted before they finish: two at once cannot both pass).
    private loading = 0;

    constructor(
        readonly base: Policy,
        readonly baseName: string,
        private readonly maxModelLen: number | null,
        private readonly limits: { loraRoot: string | null; maxLoras: number; loraRootAsGiven?: string } = {
            loraRoot: null,
            maxLoras: 8,
        },
    ) {
        this.models.set(baseName, {
            policy: base,
            internal: null,
            path: baseName,
            created: Math.floor(Date.now() / 1000),
        });
    }

    /** The policy serving `model` (absent: the base); a 404 naming the served ones otherwise, as vLLM. */
    get(model: unknown): { name: string; policy: Policy } {
        if (model === undefined || model === null) return { name: this.baseName, policy: this.base };
        const m = typeof model === "string" ? this.models.get(model) : undefined;
        if (!m)
            throw new HttpError(
                404,
                `The model \`${String(model)}\` does not exist; this server serves ${[...this.models.keys()].map((k) => `\`${k}\``).join(", ")}`,
            );
        return { name: model as string, policy: m.policy };
    }

    cards(): ModelCard[] {
        return [...this.models].map(([id, m]) => ({
            id,
            object: "model",
            created: m.created,
            owned_by: "maporl",
            root: m.path,
            parent: m.internal === null ? null : this.baseName,
            max_model_len: this.maxModelLen,
        }));
    }

    private host(): AdapterHost {
        const b = this.base as Partial<AdapterHost>;
        if (
            typeof b.loadAdapter !== "function" ||
            typeof b.deleteAdapter !== "function" ||
            (b.family !== undefined && b.family !== "llama")
        )
            throw new HttpError(
                400,
                `this server's model (${this.baseName}) takes no LoRA adapters (serve a Hugging Face llama / mistral / qwen2 / qwen3 model)`,
            );
        return b as AdapterHost;
    }

    private locked<T>(name: string, fn: () => Promise<T>): Promise<T> {
        const run = (this.locks.get(name) ?? Promise.resolve()).then(fn, fn);
        this.locks.set(
            name,
            run.catch(() => undefined),
        );
        return run;
    }

    /** Loads the PEFT adapter directory `path` as model `name` (vLLM's load_lora_adapter; `inplace` replaces one of that
     * name). Resolves with vLLM's success text. A client's path (fromClient) must lie in loraRoot once links are resolved. */
    load(name: unknown, path: unknown, inplace: boolean, fromClient = true): Promise<string> {
        if (typeof name !== "string" || name.length === 0 || typeof path !== "string" || path.length === 0)
            return Promise.reject(
                new HttpError(400, "Both 'lora_name' and 'lora_path' must be provided (non-empty strings)."),
            );
        if (name === this.baseName)
            return Promise.reject(new HttpError(400, `lora_name: '${name}' is the base model's name`));
        return this.locked(name, async () => {
            const old = this.models.get(name);
            if (old && !inplace)
                throw new HttpError(
                    400,
                    `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
                );
            const dir =
                this.limits.loraRoot !== null && fromClient ? await this.inRoot(path, this.limits.loraRoot) : path;
            const loaded = [...this.models.values()].filter((m) => m.internal !== null).length;
            if (!old && loaded + this.loading >= this.limits.maxLoras)
                throw new HttpError(
                    400,
                    `${loaded} LoRA adapters are loaded${this.loading ? ` and ${this.loading} loading` : ""}, the most this server holds ` +
                        `(maxLoras ${this.limits.maxLoras}; maporl serve --max-loras): unload one first`,
                );
            const host = this.host(),
                internal = `${name}#${++this.counter}`;
            let policy;
            if (!old) this.loading++;
            try {
                policy = await host.loadAdapter(dir, { name: internal });
            } catch (e) {
                throw new HttpError(
                    400,
                    `loading LoRA adapter '${name}' from ${path}: ${e instanceof Error ? e.message : String(e)}`,
                );
            } finally {
                if (!old) this.loading--;
            }
            this.models.set(name, {
                policy,
                internal,
                path,
                created: Math.floor(Date.now() / 1000),
                dispose: () => policy.dispose(),
            });
            if (old) await this.drop(old);
            return `Success: LoRA adapter '${name}' added successfully.`;
        });
    }

    // The directory a client's lora_path names (a relative one is taken from the root), links resolved, when it and the
    // adapter files in it lie in `root`; a 400 naming the path and the root otherwise. A path outside the root as written
    // is refused before the file system is asked, so that a client cannot learn what exists there.
    private async inRoot(path: string, root: string): Promise<string> {
        const outside = (p: string, how = "is") =>
            new HttpError(
                400,
                `lora_path: ${p} ${how} outside the directory adapters are loaded from (${root}; maporl serve --lora-root)`,
            );
        const abs = resolve(root, path),
            given = this.limits.loraRootAsGiven;
        if (!inside(root, abs) && !(given !== undefined && inside(given, abs))) throw outside(path);
        let real: string;
        try {
            real = await realpath(abs);
        } catch {
            throw new HttpError(400, `lora_path: ${path} does not exist`);
        }
        if (!inside(root, real)) throw outside(path);
        for (const f of ADAPTER_FILES) {
            let r: string;
            try {
                r = await realpath(join(real, f));
            } catch {
                continue;
            } // (absent: the loader names what is missing)
            if (!inside(root, r)) throw outside(join(path, f), "links");
        }
        return real;
    }

    /** Removes adapter `name` (vLLM's unload_lora_adapter); its requests already queued are answered first. */
    unload(name: unknown): Promise<string> {
        if (typeof name !== "string" || name.length === 0)
            return Promise.reject(new HttpError(400, "'lora_name' needs to be provided to unload a LoRA adapter."));
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
