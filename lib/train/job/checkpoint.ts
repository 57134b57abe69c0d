// checkpoint.ts: the run directory's checkpoint: every model of the current stage plus the job state, written to
// a temporary directory that replaces the previous checkpoint by rename; the previous one stays as checkpoint.old.
// state.json records the SHA-256 of every file of the checkpoint and of the logs' prefixes it covers, and a
// SHA-256 of itself; every file and directory is fsynced before the renames that publish it. On resume the
// newest checkpoint that verifies is used (checkpoint, else checkpoint.old, saying why); one that is damaged is
// never used, and when neither verifies the run stops with an error naming the damaged files. A kill at any
// moment leaves a checkpoint that verifies (the new one, or the previous one).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";

import { fsyncDir, fsyncFile, writeFileDurable } from "../../durable.js";
import { NativePolicy } from "../../model/nativePolicy.js";

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

function filesUnder(dir: string): string[] {
    return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
    );
}

function syncTree(dir: string): void {
    for (const e of readdirSync(dir, { withFileTypes: true }))
        if (e.isDirectory()) syncTree(join(dir, e.name));
        else fsyncFile(join(dir, e.name));
    fsyncDir(dir);
}

/** SHA-256 of the first `bytes` bytes of a file (a log's part that a checkpoint covers). */
export function prefixSha256(path: string, bytes: number): string {
    const buf = existsSync(path) ? readFileSync(path) : Buffer.alloc(0);
    return sha256(buf.subarray(0, bytes));
}

/**
 * Writes the checkpoint: each model's directory, then state.json = the state, `files` (the SHA-256 of every file
 * written, by path relative to the checkpoint) and `sha256` (of the rest of state.json).
 */
export async function writeCheckpoint(out: string, models: Record<string, NativePolicy>, state: object): Promise<void> {
    const dir = join(out, "checkpoint"),
        tmp = join(out, "checkpoint.tmp"),
        old = join(out, "checkpoint.old");
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    for (const [name, m] of Object.entries(models)) await m.save(join(tmp, name));
    const files: Record<string, string> = {};
    for (const f of filesUnder(tmp).sort()) files[relative(tmp, f)] = sha256(readFileSync(f));
    const body = { ...state, files };
    writeFileDurable(join(tmp, "state.json"), JSON.stringify({ ...body, sha256: sha256(JSON.stringify(body)) }));
    syncTree(tmp);
    if (existsSync(dir)) {
        rmSync(old, { recursive: true, force: true });
        renameSync(dir, old);
    }
    renameSync(tmp, dir);
    fsyncDir(out);
}

/** A checkpoint's state.json and files checked; returns the state, or why it cannot be used. */
function verify(dir: string): { state: Record<string, unknown> } | { why: string } {
    const file = join(dir, "state.json");
    if (!existsSync(file)) return { why: `${file}: missing` };
    let parsed: Record<string, unknown>;
    try {
        parsed = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error();
    } catch {
        return { why: `${file}: not valid JSON (truncated or damaged)` };
    }
    const { sha256: recorded, ...body } = parsed;
    if (recorded === undefined)
        return { why: `${file}: no sha256 of its own (every checkpoint is written with one: damaged or edited)` };
    if (typeof recorded !== "string" || sha256(JSON.stringify(body)) !== recorded)
        return { why: `${file}: its checksum does not match its contents (damaged)` };
    const files = body.files as Record<string, string> | undefined;
    if (!files || typeof files !== "object") return { why: `${file}: no file checksums` };
    for (const [name, want] of Object.entries(files)) {
        const path = join(dir, name);
        if (!existsSync(path)) return { why: `${path}: missing` };
        if (sha256(readFileSync(path)) !== want)
            return { why: `${path}: SHA-256 does not match the checkpoint's record (damaged or modified)` };
    }
    for (const f of filesUnder(dir))
        if (f !== file && !(relative(dir, f) in files))
            return { why: `${f}: not part of the checkpoint (added after it was written)` };
    return { state: body };
}

/**
 * The newest checkpoint that verifies: its directory, state, and the reasons newer ones were passed over (each
 * names the damaged file); null when the run has no checkpoint yet. Throws when checkpoints exist and none
 * verifies.
 */
export function readCheckpoint(out: string): { dir: string; state: Record<string, unknown>; skipped: string[] } | null {
    const skipped: string[] = [];
    let any = false;
    for (const name of ["checkpoint", "checkpoint.old"]) {
        const dir = join(out, name);
        if (!existsSync(dir) || !statSync(dir).isDirectory()) continue;
        any = true;
        const v = verify(dir);
        if ("state" in v) return { dir, state: v.state, skipped };
        skipped.push(v.why);
    }
    if (!any) return null;
    throw new Error(`train: --resume ${out}: no checkpoint verifies, refusing to resume (${skipped.join("; ")})`);
}

/** A model of a checkpoint: a saved model, or a LoRA adapter saved there, put back on `base` (whose memory it shares). */
export function loadModel(
    dir: string,
    name: string,
    device: "cpu" | "cuda" | "auto" = "cpu",
    base?: NativePolicy,
): Promise<NativePolicy> {
    if (base && base.family === "llama" && existsSync(join(dir, name, "adapter_config.json")))
        return base.loadAdapter(join(dir, name), { name });
    return NativePolicy.load(join(dir, name), { device });
}
