// adapters.ts: a NativePolicy's LoRA adapters on its base: new, cloned, loaded from a PEFT directory, merged and
// deleted; each returns the policy of the adapter (a view of the shared model).
import { native } from "../native.js";
import { describe, requireOptions } from "../validate.js";
import { type EngineView, loraOptionsOf } from "./core.js";
import {
    fnv1a,
    loadAdapterTensors,
    type LoraOptions,
    readAdapterConfig,
    readAdapterState,
    resolveLora,
} from "./lora.js";

/**
 * The policy of LoRA adapter `name` on this policy's base, sharing its memory (a few MB per adapter; switching is
 * free): the existing adapter of that name, or a new one with `lora` (default: this policy's adapter's settings,
 * else LoraOptions' defaults). Only the adapter trains (its A, B and value head; the base is frozen). null: the
 * base alone, as the reference model for KL (no copy). generate calls on several adapters of one base made
 * together run as one batch.
 */
export async function withAdapter<P>(self: EngineView<P>, name: string | null, lora?: LoraOptions): Promise<P> {
    const fn = `${self.name}.withAdapter`;
    if (self.family !== "llama")
        throw new Error(`${fn}: LoRA adapters need a Hugging Face (Llama-family) model; this is the embedded GPT`);
    if (name !== null && (typeof name !== "string" || name.length === 0))
        throw new TypeError(`${fn}: name: expected a non-empty string or null, got ${describe(name)}`);
    if (name === null && lora !== undefined) throw new RangeError(`${fn}: lora: not for the base (name null)`);
    return self.serial(async () => {
        if (name === null) return self.view(null, -1);
        const h = self.h();
        let id = self.core.adapters.get(name);
        if (id !== undefined && lora !== undefined)
            throw new RangeError(`${fn}: lora: adapter '${name}' exists (the options are for a new one)`);
        if (id === undefined) {
            const c = resolveLora(
                fn,
                lora ?? (self.adapterId >= 0 ? loraOptionsOf(native.loraInfo(h, self.adapterId)) : undefined),
                name,
            );
            id = native.loraAdd(h, { ...c, seed: c.seed });
            self.core.adapters.set(name, id);
        }
        return self.view(name, id);
    });
}

// clone() of an adapter's policy: a new adapter `name` on the same base with a copy of this one's parameters.
export async function cloneAdapter<P>(self: EngineView<P>, name: string): Promise<P> {
    return self.serial(async () => {
        const h = self.h();
        if (self.core.adapters.has(name)) throw new RangeError(`${self.name}.clone: name: adapter '${name}' exists`);
        const p = new Float32Array(self.parameterCount);
        native.gptGet(h, { which: 0, out: p });
        const c = native.loraInfo(h, self.adapterId);
        const id = native.loraAdd(h, { ...c, seed: fnv1a(name) });
        native.loraSelect(h, id);
        native.gptSet(h, { which: 0, input: p });
        self.core.adapters.set(name, id);
        return self.view(name, id);
    });
}

/** Loads a PEFT adapter directory (adapter_config.json, adapter_model.safetensors in F32 / BF16 / F16; maporl's
 * value head, optimizer state and step when saved by maporl) as a new adapter on this policy's base. Its name:
 * options.name, else the one maporl saved, else 'default'. A bad directory adds nothing. */
export async function loadAdapter<P>(self: EngineView<P>, dir: string, options: { name?: string } = {}): Promise<P> {
    const fn = `${self.name}.loadAdapter`;
    if (self.family !== "llama")
        throw new Error(`${fn}: LoRA adapters need a Hugging Face (Llama-family) model; this is the embedded GPT`);
    const o = requireOptions<{ name?: string }>(fn, "options", options, ["name"]);
    if (o.name !== undefined && (typeof o.name !== "string" || o.name.length === 0))
        throw new TypeError(`${fn}: name: expected a non-empty string, got ${describe(o.name)}`);
    const c = readAdapterConfig(fn, dir),
        state = readAdapterState(fn, dir);
    const name = o.name ?? state?.name ?? "default";
    return self.serial(async () => {
        if (self.core.adapters.has(name))
            throw new RangeError(`${fn}: adapter '${name}' exists on this base (pass options.name)`);
        // The saved seed keeps the dropout masks of a resumed run; a PEFT adapter from elsewhere gets its name's.
        const h = self.h(),
            id = native.loraAdd(h, { ...c, seed: state?.seed ?? fnv1a(name) });
        try {
            native.loraSelect(h, id);
            loadAdapterTensors(fn, dir, h, state);
            self.core.adapters.set(name, id);
            return self.view(name, id);
        } catch (e) {
            native.loraRemove(h, id);
            throw e;
        }
    });
}

/** PEFT's merge_and_unload for this adapter: W += (alpha / r) B A in the shared base (every policy on it sees the
 * merged weights), the adapter removed; this policy then runs the merged base, and save() writes a plain model. */
export async function mergeAdapter(self: EngineView): Promise<void> {
    if (self.adapterName === null) throw new Error(`${self.name}.mergeAdapter: this policy runs no adapter`);
    return self.serial(async () => {
        native.loraMerge(self.h(), self.adapterId);
        self.core.adapters.delete(self.adapterName!);
        self.adapterName = null;
        self.adapterId = -1;
    });
}

/** Removes adapter `name` from the base (its policies then fail their calls). */
export async function deleteAdapter(self: EngineView, name: string): Promise<void> {
    return self.serial(async () => {
        const id = self.core.adapters.get(name);
        if (id === undefined)
            throw new RangeError(
                `${self.name}.deleteAdapter: name: no adapter '${String(name)}' (adapters: ${self.adapters.join(", ") || "none"})`,
            );
        native.loraRemove(self.h(), id);
        self.core.adapters.delete(name);
    });
}
