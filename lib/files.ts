// files.ts: reading files that come from outside (model and adapter directories, checkpoints, batches). Only regular
// files are opened: a path is opened non-blocking and checked with fstat on the open handle, so a FIFO, a device or a
// directory is an error naming the path at once (a FIFO named adapter_config.json blocked the whole server, one named
// model.safetensors blocked NativePolicy.load for ever), and a file is read only up to a bound.
import { createHash } from "node:crypto";
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";

/** JSON, templates, tokenizers: read at most this many bytes. */
export const MAX_TEXT_FILE_BYTES = 256 << 20;

/** Opens `path` for reading if it is a regular file (following links); the descriptor, or an error naming the path
 * (`what` says what it should be). */
export function openRegular(path: string, what = "a file"): number {
    let fd: number;
    try {
        fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        throw new Error(
            `${path}: ${code === "ENOENT" ? "missing" : `cannot be opened (${code ?? (e as Error).message})`} (${what})`,
        );
    }
    const st = fstatSync(fd);
    if (!st.isFile()) {
        closeSync(fd);
        const kind = st.isFIFO()
            ? "a FIFO"
            : st.isDirectory()
              ? "a directory"
              : st.isSocket()
                ? "a socket"
                : st.isCharacterDevice() || st.isBlockDevice()
                  ? "a device"
                  : "not a regular file";
        throw new Error(`${path}: ${kind}, expected a regular file (${what})`);
    }
    return fd;
}

/** The bytes of regular file `path`, refused past `maxBytes` (its size checked before reading). */
export function readRegularFile(path: string, maxBytes: number, what = "a file"): Buffer {
    const fd = openRegular(path, what);
    try {
        const size = fstatSync(fd).size;
        if (size > maxBytes) throw new RangeError(`${path}: ${size} bytes, more than the ${maxBytes} read for ${what}`);
        const buf = Buffer.allocUnsafe(size);
        let done = 0;
        while (done < size) {
            const n = readSync(fd, buf, done, size - done, done);
            if (n === 0) break;
            done += n;
        }
        return done === size ? buf : buf.subarray(0, done);
    } finally {
        closeSync(fd);
    }
}

/** The UTF-8 text of regular file `path`, at most MAX_TEXT_FILE_BYTES (or `maxBytes`). */
export function readTextFile(path: string, what = "a text file", maxBytes = MAX_TEXT_FILE_BYTES): string {
    return readRegularFile(path, maxBytes, what).toString("utf8");
}

/** SHA-256 (hex) of regular file `path`, read in 16 MiB chunks (a model's weights are never held whole). */
export function sha256File(path: string): string {
    const fd = openRegular(path);
    try {
        const h = createHash("sha256"),
            buf = Buffer.allocUnsafe(16 << 20);
        for (let at = 0; ;) {
            const n = readSync(fd, buf, 0, buf.length, at);
            if (n === 0) break;
            h.update(buf.subarray(0, n));
            at += n;
        }
        return h.digest("hex");
    } finally {
        closeSync(fd);
    }
}
