// durable.ts: files that survive a crash or power loss once written: the data fsynced before the call returns, and
// the directory fsynced where a new name (a rename, a new file) must survive too.
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";

/** Writes `data` to `path` and fsyncs it (then its directory, when `syncDir`). */
export function writeFileDurable(path: string, data: string | Uint8Array, syncDir = false): void {
    const fd = openSync(path, "w");
    try {
        writeSync(fd, typeof data === "string" ? Buffer.from(data, "utf8") : data);
        fsyncSync(fd);
    } finally {
        closeSync(fd);
    }
    if (syncDir) fsyncDir(dirname(path));
}

/** Writes `path` through a temporary file in the same directory, fsynced, renamed over it, the directory fsynced:
 * a reader sees the old contents or the new, never a part. */
export function replaceFileDurable(path: string, data: string | Uint8Array): void {
    const tmp = `${path}.tmp-${process.pid}`;
    writeFileDurable(tmp, data);
    renameSync(tmp, path);
    fsyncDir(dirname(path));
}

/** Writes a directory through `fill` into a temporary one that then replaces `dir` by rename, the parent fsynced: a
 * crash never leaves a half-written one (a failed `fill` leaves `dir` as it was). */
export function replaceDirDurable(dir: string, fill: (tmp: string) => void): void {
    const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
    mkdirSync(tmp, { recursive: true });
    try {
        fill(tmp);
        fsyncDir(tmp);
    } catch (e) {
        rmSync(tmp, { recursive: true, force: true });
        throw e;
    }
    const old = `${dir}.old-${process.pid}-${Date.now()}`;
    if (existsSync(dir)) renameSync(dir, old);
    renameSync(tmp, dir);
    fsyncDir(join(dir, ".."));
    rmSync(old, { recursive: true, force: true });
}

/** fsyncs a directory (its entries: renames and new files in it survive a power loss). */
export function fsyncDir(dir: string): void {
    const fd = openSync(dir, "r");
    try {
        fsyncSync(fd);
    } finally {
        closeSync(fd);
    }
}

/** fsyncs a file already written (e.g. a log appended to), if it exists. */
export function fsyncFile(path: string): void {
    let fd: number;
    try {
        fd = openSync(path, "r");
    } catch {
        return;
    }
    try {
        fsyncSync(fd);
    } finally {
        closeSync(fd);
    }
}
