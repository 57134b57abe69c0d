// checkpoint.ts: the run directory's checkpoint: every model of the current stage plus the job state, written to
// a temporary directory that replaces the previous checkpoint by rename. A kill at any moment leaves either the
// new checkpoint, or the previous one (as checkpoint, or as checkpoint.old when the kill fell between the two
// renames), which readCheckpoint finds.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { NativePolicy } from "../policy/nativePolicy.js";

export async function writeCheckpoint(out: string, models: Record<string, NativePolicy>, state: unknown): Promise<void> {
    const dir = join(out, "checkpoint"), tmp = join(out, "checkpoint.tmp"), old = join(out, "checkpoint.old");
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    for (const [name, m] of Object.entries(models)) await m.save(join(tmp, name));
    writeFileSync(join(tmp, "state.json"), JSON.stringify(state));
    rmSync(old, { recursive: true, force: true });
    if (existsSync(dir)) renameSync(dir, old);
    renameSync(tmp, dir);
    rmSync(old, { recursive: true, force: true });
}

/** The newest complete checkpoint: its directory and state, or null. */
export function readCheckpoint(out: string): { dir: string; state: Record<string, unknown> } | null {
    for (const name of ["checkpoint", "checkpoint.old"]) {
        const dir = join(out, name);
        if (!existsSync(join(dir, "state.json"))) continue;
        try {
            return { dir, state: JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as Record<string, unknown> };
        } catch {
            continue;
        }
    }
    return null;
}

export function loadModel(dir: string, name: string, device: "cpu" | "cuda" | "auto" = "cpu"): Promise<NativePolicy> {
    return NativePolicy.load(join(dir, name), { device });
}
