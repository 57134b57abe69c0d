// resume.ts: what a resume compares before it continues a run: the config the run started with and the base
// model's files (docs/training.md, "Resuming").
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

import { sha256File } from "../../files.js";
import type { NativePolicy } from "../../model/nativePolicy.js";
import { releaseSnapshot, snapshotName, type Snapshot } from "../trainers/pipeline.js";
import type { StageModels } from "../trainers/stage.js";
import { loadModel } from "./checkpoint.js";
import type { TrainConfig } from "./config.js";
import type { JobState } from "./types.js";
/** SHA-256 of every regular file directly in model directory `dir` (weights, config, tokenizer), by name. */
export function digestModelDir(dir: string): Record<string, string> {
    const out: Record<string, string> = {};
    for (const f of readdirSync(dir).sort()) if (statSync(join(dir, f)).isFile()) out[f] = sha256File(join(dir, f));
    return out;
}

/** The dotted keys whose values differ between two configs (JSON values compared). */
export function configChanges(a: unknown, b: unknown, prefix = ""): string[] {
    if (
        a !== null &&
        b !== null &&
        typeof a === "object" &&
        typeof b === "object" &&
        !Array.isArray(a) &&
        !Array.isArray(b)
    ) {
        const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
        return keys.flatMap((k) =>
            configChanges(
                (a as Record<string, unknown>)[k],
                (b as Record<string, unknown>)[k],
                prefix ? `${prefix}.${k}` : k,
            ),
        );
    }
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}

/** A resumed run's config and base model against what the run started with: an error naming every change that
 * `allowed` (config keys, or a key's prefix) does not accept; the accepted changes are logged. Returns the base
 * model's digests now (model.dir), for the checkpoints to come. */
export function checkResumeInputs(
    out: string,
    state: JobState,
    cfg: TrainConfig,
    allowed: readonly string[],
    log: (l: string) => void,
): Record<string, string> | undefined {
    const get = (c: unknown, k: string) =>
        k.split(".").reduce<unknown>((x, p) => (x as Record<string, unknown> | undefined)?.[p], c);
    for (const k of allowed)
        if (get(cfg, k) === undefined && get(state.config, k) === undefined)
            throw new RangeError(`train: --allow-config-change ${k}: not a config key`);
    const digests = () => (cfg.model.dir !== "" ? digestModelDir(cfg.model.dir) : undefined);
    if (state.config === undefined) {
        log(
            `train: --resume ${out}: this checkpoint records no config (written by an older version): config.json and model.dir are not compared`,
        );
        return digests();
    }
    const changes = configChanges(state.config, cfg);
    const show = (k: string) => `${k} ${JSON.stringify(get(state.config, k))} -> ${JSON.stringify(get(cfg, k))}`;
    const ok = (k: string) => allowed.some((a) => k === a || k.startsWith(`${a}.`));
    const refused = changes.filter((k) => !ok(k));
    if (refused.length > 0)
        throw new Error(
            `train: --resume ${out}: config.json changed since the run started (${refused.map(show).join(", ")}); a resumed run continues the run it ` +
                `was, so this is refused. To accept a change on purpose: --allow-config-change ${refused.join(",")}`,
        );
    for (const k of changes) log(`train: --resume ${out}: config change accepted (--allow-config-change): ${show(k)}`);
    const now = digests();
    if (state.modelFiles !== undefined && now !== undefined) {
        const was = state.modelFiles;
        const diff = [...new Set([...Object.keys(was), ...Object.keys(now)])]
            .sort()
            .filter((f) => was[f] !== now[f])
            .map((f) => `${f} ${now[f] === undefined ? "removed" : was[f] === undefined ? "added" : "modified"}`);
        if (diff.length > 0 && !ok("model.dir"))
            throw new Error(
                `train: --resume ${out}: the base model in ${cfg.model.dir} changed since the run started (${diff.join(", ")}); refusing to resume ` +
                    "(--allow-config-change model.dir accepts it)",
            );
        if (diff.length > 0)
            log(
                `train: --resume ${out}: base model change accepted (--allow-config-change model.dir): ${diff.join(", ")}`,
            );
    }
    return now;
}

/**
 * A resumed asynchronous stage's pipeline (JobState.pipeline): where it started and the snapshots of the versions
 * its rollouts in flight were launched at, loaded from checkpoint `dir` (each agent model's by its name in
 * `m.named`). Undefined when the checkpoint records none, or when asyncRollout.maxStaleness changed since (accepted
 * with --allow-config-change): the pipeline then starts again at `step`. Throws, naming the field, on a record that
 * cannot be this run's.
 */
export async function restorePipeline(
    state: JobState,
    cfg: TrainConfig,
    dir: string,
    m: StageModels,
    base: NativePolicy,
    step: number,
    log: (l: string) => void,
): Promise<{ start: number; snapshots: Map<number, Snapshot> } | undefined> {
    const p = state.pipeline;
    const d = cfg.asyncRollout.maxStaleness;
    if (p === undefined || p === null) return undefined;
    const int = (x: unknown, lo: number, hi: number) =>
        Number.isSafeInteger(x) && (x as number) >= lo && (x as number) <= hi;
    const bad = (field: string, want: string, got: unknown) =>
        new Error(
            `train: --resume: ${join(dir, "state.json")}: pipeline${field ? `.${field}` : ""}: expected ${want}, got ${JSON.stringify(got)}`,
        );
    if (typeof p !== "object") throw bad("", "an object", p);
    if (!int(p.start, 0, step)) throw bad("start", `an integer in [0, ${step}]`, p.start);
    if (!int(p.maxStaleness, 1, 8)) throw bad("maxStaleness", "an integer in [1, 8]", p.maxStaleness);
    if (
        !Array.isArray(p.versions) ||
        p.versions.length > p.maxStaleness ||
        !p.versions.every((v) => int(v, p.start, step - 1)) ||
        new Set(p.versions).size !== p.versions.length
    )
        throw bad("versions", `at most ${p.maxStaleness} distinct integers in [${p.start}, ${step - 1}]`, p.versions);
    if (p.maxStaleness !== d) {
        log(
            `train: asyncRollout.maxStaleness is ${d}, the checkpoint's pipeline ran at ${p.maxStaleness}: its rollouts start again at iteration ${step + 1}`,
        );
        return undefined;
    }
    // the versions the rollouts of step .. step + d - 1 are launched at (iterations may have changed since, accepted
    // with --allow-config-change: a version the checkpoint does not hold starts the pipeline again)
    const start = p.start;
    const needed = new Set<number>();
    for (let j = step; j < Math.min(cfg.iterations, step + d); j++) needed.add(Math.max(start, j - d));
    const missing = [...needed].filter((v) => v < step && !p.versions.includes(v));
    if (missing.length) {
        log(
            `train: the checkpoint holds no snapshot of version(s) ${missing.join(", ")} (iterations changed since it was written): the rollouts start again at iteration ${step + 1}`,
        );
        return undefined;
    }
    const nameOf = new Map(Object.entries(m.named).map(([k, v]) => [v, k]));
    const snapshots = new Map<number, Snapshot>();
    try {
        for (const v of p.versions) {
            const snap: Snapshot = new Map();
            snapshots.set(v, snap);
            for (const a of new Set(m.agents))
                snap.set(a, await loadModel(dir, snapshotName(v, nameOf.get(a) ?? "?"), cfg.device, base));
        }
    } catch (e) {
        for (const snap of snapshots.values()) await releaseSnapshot(snap); // (those loaded so far)
        throw e;
    }
    return { start, snapshots };
}
