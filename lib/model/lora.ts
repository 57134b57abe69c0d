// lora.ts: LoRA adapters in PEFT's layout for NativePolicy: the options (rank, alpha, targets, dropout, rsLoRA,
// seed) checked and turned into the engine's config, and adapter directories written and read as PEFT's
// save_pretrained / from_pretrained do: adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// target_modules, lora_dropout, bias none, base_model_name_or_path, ...) and adapter_model.safetensors with PEFT's
// tensor names (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in], lora_B.weight [out, r]),
// which transformers, PEFT and vLLM (--enable-lora) load as they are. maporl adds value_head.safetensors (the
// adapter's value head), optimizer.safetensors (AdamW's moments, once trained) and maporl-adapter.json (name, step).
import { existsSync } from "node:fs";
import { join } from "node:path";

import { writeFileDurable } from "../durable.js";
import { native, type GptHandle, type NativeLoraConfig } from "../native.js";
import { describe, requireBoolean, requireInteger, requireNumber, requireOptions } from "../validate.js";
import { readJsonObject } from "./hf.js";
import { loadOptimizer, loadValueHead, tensorViews, writeOptimizer } from "./hfWeights.js";
import { readSafetensorsHeader, readTensorBytes, writeSafetensors } from "./safetensors.js";

/** The projections an adapter may target (PEFT's target_modules names for Llama-family models). */
export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

/** A LoRA adapter's settings (PEFT's LoraConfig names in camelCase). */
export interface LoraOptions {
    /** r. Defaults to 8 (PEFT's default). */
    rank?: number;
    /** lora_alpha; the scale is alpha / rank (alpha / sqrt(rank) with useRslora). Defaults to 2 * rank. */
    alpha?: number;
    /** target_modules. Defaults to every projection of the blocks: q/k/v/o and gate/up/down (PEFT's 'all-linear'). */
    targets?: readonly LoraTarget[];
    /** lora_dropout on the adapter's input, in trainStep's forward only. Defaults to 0. */
    dropout?: number;
    /** use_rslora. Defaults to false. */
    useRslora?: boolean;
    /** The seed of A's Kaiming-uniform initialisation. Defaults to a hash of the adapter's name. */
    seed?: number;
}

/** The engine's config and seed of `o` (every field checked, named in the error). */
export function resolveLora(fn: string, o: LoraOptions | undefined, name: string): NativeLoraConfig & { seed: number } {
    const x = requireOptions<LoraOptions>(fn, "lora", o ?? {}, [
        "rank",
        "alpha",
        "targets",
        "dropout",
        "useRslora",
        "seed",
    ]);
    const rank = requireInteger(fn, "lora.rank", x.rank ?? 8, 1, 4096);
    const alpha = requireNumber(fn, "lora.alpha", x.alpha, 2 * rank, Number.MIN_VALUE, Number.MAX_VALUE);
    const dropout = requireNumber(fn, "lora.dropout", x.dropout, 0, 0, 1);
    if (dropout === 1) throw new RangeError(`${fn}: lora.dropout: expected a number in [0, 1), got 1`);
    const targets = x.targets ?? LORA_TARGETS;
    if (
        !Array.isArray(targets) ||
        targets.length === 0 ||
        !targets.every((t) => LORA_TARGETS.includes(t as LoraTarget))
    )
        throw new RangeError(
            `${fn}: lora.targets: expected a non-empty array of ${LORA_TARGETS.join(", ")}, got ${describe(targets)}`,
        );
    const seed =
        x.seed === undefined ? fnv1a(name) : requireInteger(fn, "lora.seed", x.seed, 0, Number.MAX_SAFE_INTEGER);
    return {
        rank,
        alpha,
        dropout,
        targets: targetBits(targets as readonly LoraTarget[]),
        useRslora: requireBoolean(fn, "lora.useRslora", x.useRslora, false),
        seed,
    };
}

const targetBits = (t: readonly LoraTarget[]) => t.reduce((b, x) => b | (1 << LORA_TARGETS.indexOf(x)), 0);
export const targetNames = (bits: number): LoraTarget[] => LORA_TARGETS.filter((_, i) => bits & (1 << i));

// A 32-bit FNV-1a hash: distinct adapters get distinct initialisations by default, the same ones on every run.
export function fnv1a(s: string): number {
    let h = 0x811c9dc5;
    for (const c of Buffer.from(s, "utf8")) h = Math.imul(h ^ c, 0x01000193) >>> 0;
    return h;
}

/** maporl's state beside an adapter directory. */
export interface AdapterState {
    format: "maporl-lora";
    version: 1;
    name: string;
    step: number;
    /** A's and the dropout masks' seed. */ seed: number;
}

/**
 * Writes the selected adapter of `h` into the empty directory `dir`: adapter_config.json, adapter_model.safetensors
 * (float32), value_head.safetensors, maporl-adapter.json and, once trained, optimizer.safetensors.
 */
export function writeAdapterDir(
    dir: string,
    h: GptHandle,
    id: number,
    baseModel: string | null,
    state: AdapterState,
): void {
    const c = native.loraInfo(h, id);
    const params = new Float32Array(native.gptParamCount(h));
    native.gptGet(h, { which: 0, out: params });
    const { weights, valueHead } = tensorViews(h, params);
    writeSafetensors(join(dir, "adapter_model.safetensors"), weights, { format: "pt" });
    writeSafetensors(join(dir, "value_head.safetensors"), valueHead, { format: "pt" });
    const config = {
        peft_type: "LORA",
        task_type: "CAUSAL_LM",
        base_model_name_or_path: baseModel,
        r: c.rank,
        lora_alpha: c.alpha,
        target_modules: targetNames(c.targets),
        lora_dropout: c.dropout,
        bias: "none",
        use_rslora: c.useRslora,
        use_dora: false,
        fan_in_fan_out: false,
        modules_to_save: null,
        init_lora_weights: true,
        layers_to_transform: null,
        layers_pattern: null,
        rank_pattern: {},
        alpha_pattern: {},
        inference_mode: true,
        revision: null,
    };
    writeFileDurable(join(dir, "adapter_config.json"), JSON.stringify(config, null, 2));
    if (state.step > 0) writeOptimizer(join(dir, "optimizer.safetensors"), h);
    writeFileDurable(join(dir, "maporl-adapter.json"), JSON.stringify(state, null, 2));
}

/** Whether `dir` holds a PEFT adapter (adapter_config.json). */
export function isAdapterDir(dir: string): boolean {
    return existsSync(join(dir, "adapter_config.json"));
}

/** maporl-adapter.json of `dir` (null for an adapter saved elsewhere). */
export function readAdapterState(fn: string, dir: string): AdapterState | null {
    const statePath = join(dir, "maporl-adapter.json");
    if (!existsSync(statePath)) return null;
    const st = readJsonObject(statePath, "maporl's adapter state") as unknown as AdapterState;
    if (
        st.format !== "maporl-lora" ||
        st.version !== 1 ||
        !Number.isInteger(st.step) ||
        st.step < 0 ||
        !Number.isSafeInteger(st.seed) ||
        st.seed < 0 ||
        typeof st.name !== "string"
    )
        throw new SyntaxError(`${fn}: ${statePath}: expected {format: 'maporl-lora', version: 1, name, step, seed}`);
    return st;
}

/** adapter_config.json of `dir` as the engine's config; every setting this version cannot run is an error naming it. */
export function readAdapterConfig(fn: string, dir: string): NativeLoraConfig {
    const path = join(dir, "adapter_config.json");
    const raw = readJsonObject(path, "a PEFT adapter directory needs adapter_config.json");
    const bad = (key: string, expected: string): never => {
        throw new RangeError(`${fn}: ${path}: ${key}: expected ${expected}, got ${describe(raw[key])}`);
    };
    if (raw.peft_type !== "LORA") bad("peft_type", "'LORA'");
    if (raw.task_type !== undefined && raw.task_type !== null && raw.task_type !== "CAUSAL_LM")
        bad("task_type", "'CAUSAL_LM'");
    const r = raw.r;
    if (!Number.isInteger(r) || (r as number) < 1 || (r as number) > 4096) bad("r", "an integer in [1, 4096]");
    const alpha = raw.lora_alpha ?? 8;
    if (typeof alpha !== "number" || !Number.isFinite(alpha) || alpha <= 0) bad("lora_alpha", "a finite number > 0");
    const dropout = raw.lora_dropout ?? 0;
    if (typeof dropout !== "number" || !(dropout >= 0 && dropout < 1)) bad("lora_dropout", "a number in [0, 1)");
    if ((raw.bias ?? "none") !== "none") bad("bias", "'none' (trained biases are not supported)");
    if (raw.use_dora === true) bad("use_dora", "false (DoRA is not supported)");
    if (raw.fan_in_fan_out === true) bad("fan_in_fan_out", "false (Conv1D layouts are GPT-2's)");
    for (const k of ["modules_to_save", "layers_to_transform", "layers_pattern", "layer_replication"])
        if (raw[k] !== undefined && raw[k] !== null && !(Array.isArray(raw[k]) && (raw[k] as unknown[]).length === 0))
            bad(k, "null (not supported)");
    for (const k of ["rank_pattern", "alpha_pattern"])
        if (raw[k] !== undefined && raw[k] !== null && Object.keys(raw[k]).length > 0)
            bad(k, "{} (per-module ranks are not supported)");
    const rs = raw.use_rslora ?? false;
    if (typeof rs !== "boolean") bad("use_rslora", "a boolean");
    // A list of module names (or dotted paths ending in one), 'all-linear', or one name.
    const tm = raw.target_modules;
    let names: string[];
    if (tm === "all-linear") names = [...LORA_TARGETS];
    else if (typeof tm === "string") names = [tm];
    else if (Array.isArray(tm) && tm.every((x) => typeof x === "string")) names = tm.map((x) => x.split(".").at(-1)!);
    else return bad("target_modules", `a list of ${LORA_TARGETS.join(", ")} or 'all-linear'`);
    const unknown = names.filter((x) => !LORA_TARGETS.includes(x as LoraTarget));
    if (unknown.length > 0 || names.length === 0)
        bad(
            "target_modules",
            `names among ${LORA_TARGETS.join(", ")} or 'all-linear' (${unknown.length ? `${unknown.join(", ")} not supported` : "empty"})`,
        );
    return {
        rank: r as number,
        alpha: alpha as number,
        dropout: dropout as number,
        targets: targetBits(names as LoraTarget[]),
        useRslora: rs as boolean,
    };
}

/**
 * Writes the tensors of the adapter directory `dir` into the selected adapter of `h` (created from its config):
 * adapter_model.safetensors (F32, BF16 or F16; every tensor present, no other), value_head.safetensors when there,
 * and maporl's optimizer state and step when `state` (maporl-adapter.json) is given.
 */
export function loadAdapterTensors(fn: string, dir: string, h: GptHandle, state: AdapterState | null): void {
    const file = join(dir, "adapter_model.safetensors");
    if (!existsSync(file))
        throw new Error(
            `${fn}: ${file}: missing (adapter_model.bin, PyTorch's pickle format, is not read: save with safe_serialization)`,
        );
    const header = readSafetensorsHeader(file);
    const ours = native.gptTensors(h);
    const index = new Map(ours.map((t, k) => [t.name, k]));
    // PEFT saves without the adapter's name; some exporters keep ".default" before ".weight".
    const byName = new Map(
        header.tensors.map((t) => [t.name.replace(/\.lora_([AB])\.default\.weight$/, ".lora_$1.weight"), t]),
    );
    for (const [name, t] of byName) {
        const k = index.get(name);
        if (k === undefined || name.startsWith("value_head."))
            throw new RangeError(
                `${fn}: ${file}: tensor ${t.name}: not a tensor of this adapter on this model (a different base, or layers / modules this version does not adapt)`,
            );
        const want = ours[k]!.shape.filter((d) => d > 0);
        if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i]))
            throw new RangeError(
                `${fn}: ${file}: tensor ${t.name}: shape [${t.shape.join(", ")}], expected [${want.join(", ")}] (r or the base's dimensions differ)`,
            );
        const dtype = ({ F32: 0, BF16: 1, F16: 2 } as const)[t.dtype as "F32" | "BF16" | "F16"];
        if (dtype === undefined)
            throw new RangeError(`${fn}: ${file}: tensor ${t.name}: dtype ${t.dtype}, expected F32, BF16 or F16`);
        native.gptSetTensor(h, { index: k, dtype, data: readTensorBytes(file, t) });
    }
    const missing = ours.filter((t) => !t.name.startsWith("value_head.") && !byName.has(t.name));
    if (missing.length > 0)
        throw new RangeError(
            `${fn}: ${file}: tensor ${missing[0]!.name} missing (${missing.length} of ${ours.length - 2})`,
        );
    const head = join(dir, "value_head.safetensors");
    if (existsSync(head)) loadValueHead(fn, head, h);
    if (!state) return;
    const st = state;
    const opt = join(dir, "optimizer.safetensors");
    if (st.step > 0) {
        if (!existsSync(opt)) throw new Error(`${fn}: ${opt}: missing (maporl-adapter.json says step ${st.step})`);
        loadOptimizer(fn, opt, h);
    }
    native.gptSetStep(h, st.step);
}
