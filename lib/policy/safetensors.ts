// safetensors.ts: reading and writing the safetensors format (8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw little-endian data),
// F32 only. Files are written atomically: a temporary file in the same directory, fsync, then rename. Reading
// checks every offset against the file, so a truncated or corrupted file is an error that says what is wrong.
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";

export interface TensorEntry {
    name: string;
    shape: number[];
    data: Float32Array;
}

/** Writes `tensors` (F32) and string metadata to `path` atomically. */
export function writeSafetensors(path: string, tensors: TensorEntry[], metadata: Record<string, string> = {}): void {
    const header: Record<string, unknown> = { __metadata__: metadata };
    let offset = 0;
    for (const t of tensors) {
        const n = t.shape.reduce((a, b) => a * b, 1);
        if (n !== t.data.length) throw new RangeError(`writeSafetensors: ${t.name}: shape [${t.shape}] holds ${n} values, got ${t.data.length}`);
        header[t.name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + 4 * n] };
        offset += 4 * n;
    }
    let json = JSON.stringify(header);
    json += " ".repeat((8 - (json.length % 8)) % 8);  // align the data to 8 bytes, as the reference writer does
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

/** Reads an F32 safetensors file: its tensors (in file order) and metadata. */
export function readSafetensors(path: string): { tensors: TensorEntry[]; metadata: Record<string, string> } {
    const buf = readFileSync(path);
    const bad = (what: string) => new SyntaxError(`readSafetensors: ${path}: ${what}`);
    if (buf.length < 8) throw bad(`expected at least 8 bytes, got ${buf.length} (truncated?)`);
    const n = Number(buf.readBigUInt64LE(0));
    if (!(n > 0 && 8 + n <= buf.length)) throw bad(`header length ${n} does not fit in ${buf.length} bytes (truncated or corrupted)`);
    let header: Record<string, { dtype?: unknown; shape?: unknown; data_offsets?: unknown }>;
    try {
        header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
    } catch {
        throw bad("the header is not JSON (corrupted)");
    }
    const data = buf.subarray(8 + n);
    const tensors: TensorEntry[] = [];
    let metadata: Record<string, string> = {};
    for (const [name, v] of Object.entries(header)) {
        if (name === "__metadata__") { metadata = (v ?? {}) as Record<string, string>; continue; }
        if (v?.dtype !== "F32") throw bad(`${name}: dtype ${JSON.stringify(v?.dtype)}, only F32 is supported`);
        const shape = v.shape, off = v.data_offsets;
        if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) throw bad(`${name}: bad shape`);
        if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isInteger(d))) throw bad(`${name}: bad data_offsets`);
        const [b, e] = off as [number, number];
        const count = (shape as number[]).reduce((x, y) => x * y, 1);
        if (b < 0 || e > data.length || e - b !== 4 * count) throw bad(`${name}: data_offsets [${b}, ${e}] do not match shape [${shape}] within ${data.length} data bytes (truncated?)`);
        const out = new Float32Array(count);
        Buffer.from(out.buffer).set(data.subarray(b, e));
        tensors.push({ name, shape: shape as number[], data: out });
    }
    return { tensors, metadata };
}
