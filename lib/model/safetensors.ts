// safetensors.ts: reading and writing the safetensors format (8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw little-endian data),
// F32 and I32 (readSafetensorsHeader reads the header of any dtype). Files are written atomically: a temporary file in the same directory, fsync, then rename. Reading
// checks every offset against the file, so a truncated or corrupted file is an error that says what is wrong.
import { closeSync, fstatSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from "node:fs";

import { openRegular, readRegularFile } from "../files.js";

export interface TensorEntry {
    name: string;
    shape: number[];
    /** F32 or I32. */
    data: Float32Array | Int32Array;
}

/** Writes `tensors` (F32 from a Float32Array, I32 from an Int32Array) and string metadata to `path` atomically. */
export function writeSafetensors(path: string, tensors: TensorEntry[], metadata: Record<string, string> = {}): void {
    const header: Record<string, unknown> = { __metadata__: metadata };
    let offset = 0;
    for (const t of tensors) {
        const n = t.shape.reduce((a, b) => a * b, 1);
        if (n !== t.data.length)
            throw new RangeError(
                `writeSafetensors: ${t.name}: shape [${t.shape}] holds ${n} values, got ${t.data.length}`,
            );
        if (!(t.data instanceof Float32Array) && !(t.data instanceof Int32Array))
            throw new TypeError(`writeSafetensors: ${t.name}: expected a Float32Array or an Int32Array`);
        header[t.name] = {
            dtype: t.data instanceof Int32Array ? "I32" : "F32",
            shape: t.shape,
            data_offsets: [offset, offset + 4 * n],
        };
        offset += 4 * n;
    }
    let json = JSON.stringify(header);
    json += " ".repeat((8 - (json.length % 8)) % 8); // align the data to 8 bytes, as the reference writer does
    const head = Buffer.alloc(8);
    head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    const tmp = `${path}.tmp-${process.pid}-${Date.now()}`;
    const fd = openSync(tmp, "w");
    try {
        writeSync(fd, head);
        writeSync(fd, Buffer.from(json, "utf8"));
        for (const t of tensors) writeSync(fd, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
        fsyncSync(fd);
    } catch (e) {
        closeSync(fd);
        rmSync(tmp, { force: true });
        throw e;
    }
    closeSync(fd);
    renameSync(tmp, path);
}

/** Checks that the tensors' byte ranges [begin, end) within a data section of `bytes` bytes are contiguous, do not
 * overlap and cover it exactly, as the safetensors format requires (overlapping ranges made two tensors share bytes). */
function checkRanges(
    ranges: { name: string; begin: number; end: number }[],
    bytes: number,
    bad: (what: string) => Error,
): void {
    const sorted = [...ranges].sort((x, y) => x.begin - y.begin || x.end - y.end);
    let at = 0;
    for (const r of sorted) {
        if (r.begin !== at)
            throw bad(
                r.begin < at
                    ? `${r.name}: data_offsets [${r.begin}, ${r.end}] overlap the tensor before (which ends at ${at})`
                    : `${r.name}: data_offsets [${r.begin}, ${r.end}] leave a gap after byte ${at} (tensors must be contiguous)`,
            );
        at = r.end;
    }
    if (at !== bytes)
        throw bad(
            `the tensors end at data byte ${at}, the data section has ${bytes} bytes (truncated, or bytes after the tensors)`,
        );
}

/** Reads an F32 / I32 safetensors file: its tensors (in file order) and metadata. */
export function readSafetensors(path: string): { tensors: TensorEntry[]; metadata: Record<string, string> } {
    const buf = readRegularFile(path, Number.MAX_SAFE_INTEGER, "a safetensors file");
    const bad = (what: string) => new SyntaxError(`readSafetensors: ${path}: ${what}`);
    if (buf.length < 8) throw bad(`expected at least 8 bytes, got ${buf.length} (truncated?)`);
    const n = Number(buf.readBigUInt64LE(0));
    if (!(n > 0 && 8 + n <= buf.length))
        throw bad(`header length ${n} does not fit in ${buf.length} bytes (truncated or corrupted)`);
    let header: Record<string, { dtype?: unknown; shape?: unknown; data_offsets?: unknown }>;
    try {
        header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
    } catch {
        throw bad("the header is not JSON (corrupted)");
    }
    const data = buf.subarray(8 + n);
    const tensors: TensorEntry[] = [],
        ranges: { name: string; begin: number; end: number }[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(header)) {
        if (name === "__metadata__") {
            metadata = (v ?? {}) as Record<string, string>;
            continue;
        }
        if (v?.dtype !== "F32" && v?.dtype !== "I32")
            throw bad(`${name}: dtype ${JSON.stringify(v?.dtype)}, only F32 and I32 are supported`);
        const shape = v.shape,
            off = v.data_offsets;
        if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0))
            throw bad(`${name}: bad shape`);
        if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isInteger(d)))
            throw bad(`${name}: bad data_offsets`);
        const [b, e] = off as [number, number];
        const count = (shape as number[]).reduce((x, y) => x * y, 1);
        if (b < 0 || e > data.length || e - b !== 4 * count)
            throw bad(
                `${name}: data_offsets [${b}, ${e}] do not match shape [${shape}] within ${data.length} data bytes (truncated?)`,
            );
        const out = v.dtype === "I32" ? new Int32Array(count) : new Float32Array(count);
        Buffer.from(out.buffer).set(data.subarray(b, e));
        tensors.push({ name, shape: shape as number[], data: out });
        ranges.push({ name, begin: b, end: e });
    }
    checkRanges(ranges, data.length, bad);
    return { tensors, metadata };
}

/** A tensor's entry in a safetensors header: dtype, shape and its byte range in the file (absolute offsets). */
export interface TensorHeader {
    name: string;
    dtype: string;
    shape: number[];
    begin: number;
    end: number;
}

const DTYPE_BYTES: Record<string, number> = {
    F64: 8,
    F32: 4,
    F16: 2,
    BF16: 2,
    I64: 8,
    I32: 4,
    I16: 2,
    I8: 1,
    U8: 1,
    BOOL: 1,
    F8_E4M3: 1,
    F8_E5M2: 1,
    U16: 2,
    U32: 4,
    U64: 8,
};

/**
 * The header of a safetensors file of any dtype, read without reading the data: every tensor's byte range is
 * checked against the dtype, the shape and the file's size, so a truncated or corrupted file is an error naming
 * the tensor. Read a tensor's bytes with readTensorBytes (one tensor in memory at a time).
 */
export function readSafetensorsHeader(path: string): {
    tensors: TensorHeader[];
    metadata: Record<string, string>;
    size: number;
} {
    const bad = (what: string) => new SyntaxError(`${path}: ${what}`);
    const fd = openRegular(path, "a safetensors file");
    try {
        const size = fstatSync(fd).size;
        if (size < 8) throw bad(`expected at least 8 bytes, got ${size} (truncated?)`);
        const head = Buffer.alloc(8);
        readSync(fd, head, 0, 8, 0);
        const n = Number(head.readBigUInt64LE(0));
        if (!(n > 1 && n <= 100 * 1024 * 1024 && 8 + n <= size))
            throw bad(`header length ${n} does not fit in ${size} bytes (truncated or corrupted)`);
        const hb = Buffer.alloc(n);
        readSync(fd, hb, 0, n, 8);
        let header: Record<string, { dtype?: unknown; shape?: unknown; data_offsets?: unknown }>;
        try {
            header = JSON.parse(hb.toString("utf8"));
        } catch {
            throw bad("the header is not JSON (corrupted)");
        }
        if (header === null || typeof header !== "object" || Array.isArray(header))
            throw bad("the header is not a JSON object");
        const tensors: TensorHeader[] = [];
        let metadata: Record<string, string> = {};
        for (const [name, v] of Object.entries(header)) {
            if (name === "__metadata__") {
                metadata = (v ?? {}) as Record<string, string>;
                continue;
            }
            const dtype = v?.dtype,
                shape = v?.shape,
                off = v?.data_offsets;
            if (typeof dtype !== "string" || !(dtype in DTYPE_BYTES))
                throw bad(`${name}: unknown dtype ${JSON.stringify(dtype)}`);
            if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0))
                throw bad(`${name}: bad shape ${JSON.stringify(shape)}`);
            if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isInteger(d) && d >= 0))
                throw bad(`${name}: bad data_offsets`);
            const count = (shape as number[]).reduce((x, y) => x * y, 1);
            const [b, e] = off as [number, number];
            if (e - b !== count * DTYPE_BYTES[dtype]!)
                throw bad(`${name}: data_offsets [${b}, ${e}] do not hold shape [${shape}] of ${dtype}`);
            if (8 + n + e > size)
                throw bad(`${name}: data ends at byte ${8 + n + e}, the file has ${size} (truncated?)`);
            tensors.push({ name, dtype, shape: shape as number[], begin: 8 + n + b, end: 8 + n + e });
        }
        checkRanges(
            tensors.map((t) => ({ name: t.name, begin: t.begin - 8 - n, end: t.end - 8 - n })),
            size - 8 - n,
            bad,
        );
        return { tensors, metadata, size };
    } finally {
        closeSync(fd);
    }
}

/** The raw bytes of one tensor of `path` (a header entry from readSafetensorsHeader). */
export function readTensorBytes(path: string, t: TensorHeader): Uint8Array {
    const out = Buffer.allocUnsafe(t.end - t.begin);
    const fd = openRegular(path, "a safetensors file");
    try {
        let done = 0;
        while (done < out.length) {
            const r = readSync(fd, out, done, out.length - done, t.begin + done);
            if (r === 0)
                throw new SyntaxError(
                    `${path}: ${t.name}: the file ended at byte ${t.begin + done} (truncated while reading?)`,
                );
            done += r;
        }
    } finally {
        closeSync(fd);
    }
    return out;
}
