// durable.ts: files that survive a crash or power loss once written: the data fsynced before the call returns, and
// the directory fsynced where a new name (a rename, a new file) must survive too.
import { closeSync, fsyncSync, openSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";

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
