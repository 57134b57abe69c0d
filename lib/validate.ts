// validate.ts: argument checks shared by every public function. Messages name the function and the
// parameter, say what was expected and what was given: `gae: rewards: expected Float32Array of 12
// elements, got Float64Array`. Wrong type -> TypeError; wrong length, range or unknown value -> RangeError.

/** Names what a value is, for messages. */
export function describe(x: unknown): string {
    if (x === null) return "null";
    if (x === undefined) return "undefined";
    if (typeof x === "number") return Number.isNaN(x) ? "NaN" : String(x);
    if (typeof x === "string") return JSON.stringify(x.length > 40 ? x.slice(0, 40) + "…" : x);
    if (ArrayBuffer.isView(x))
        return `${x.constructor.name} of ${(x as unknown as { length?: number }).length ?? x.byteLength} elements`;
    if (Array.isArray(x)) return `Array of ${x.length} elements`;
    if (typeof x === "object") return x.constructor?.name && x.constructor !== Object ? x.constructor.name : "object";
    return typeof x;
}

function isDetached(buf: ArrayBufferLike): boolean {
    if (buf.byteLength !== 0 || (typeof SharedArrayBuffer !== "undefined" && buf instanceof SharedArrayBuffer))
        return false;
    try {
        new Uint8Array(buf as ArrayBuffer);
        return false;
    } catch {
        return true;
    }
}

type TypedArrayCtor = Float32ArrayConstructor | Uint8ArrayConstructor | Uint16ArrayConstructor | Int32ArrayConstructor;
type TypedArrayOf<C> = C extends Float32ArrayConstructor
    ? Float32Array
    : C extends Uint8ArrayConstructor
      ? Uint8Array
      : C extends Uint16ArrayConstructor
        ? Uint16Array
        : C extends Int32ArrayConstructor
          ? Int32Array
          : never;

/**
 * Checks that `x` is a TypedArray of one of `ctors`, on an attached, fixed-length buffer, with exactly
 * `length` elements. Returns it typed.
 */
export function requireArray<C extends TypedArrayCtor>(
    fn: string,
    name: string,
    x: unknown,
    ctors: readonly C[],
    length: number,
): TypedArrayOf<C> {
    const expected = `${ctors.map((c) => c.name).join(" or ")} of ${length} elements`;
    const match = ctors.some((c) => x instanceof c);
    if (!match) throw new TypeError(`${fn}: ${name}: expected ${expected}, got ${describe(x)}`);
    const view = x as ArrayBufferView & { length: number };
    const buf = view.buffer as ArrayBufferLike & { resizable?: boolean; growable?: boolean };
    if (isDetached(buf)) throw new TypeError(`${fn}: ${name}: expected ${expected}, got a detached buffer`);
    if (buf.resizable === true || buf.growable === true)
        throw new TypeError(
            `${fn}: ${name}: expected a fixed-length buffer, got a resizable one ` +
                "(a resize during native work would move the memory)",
        );
    if (view.length !== length)
        throw new RangeError(`${fn}: ${name}: expected ${expected}, got ${view.length} elements`);
    return x as TypedArrayOf<C>;
}

/** A 2-D shape of non-negative safe integers whose product is a safe array length. */
export function requireShape2(fn: string, shape: unknown, names: readonly [string, string]): [number, number] {
    const expected = `[${names[0]}, ${names[1]}] with non-negative integers`;
    if (!Array.isArray(shape)) throw new TypeError(`${fn}: shape: expected ${expected}, got ${describe(shape)}`);
    if (shape.length !== 2) throw new RangeError(`${fn}: shape: expected ${expected}, got ${shape.length} dimensions`);
    for (let i = 0; i < 2; i++) {
        const d = shape[i];
        if (typeof d !== "number")
            throw new TypeError(`${fn}: shape[${i}] (${names[i]}): expected an integer, got ${describe(d)}`);
        if (!Number.isSafeInteger(d) || d < 0)
            throw new RangeError(
                `${fn}: shape[${i}] (${names[i]}): expected a non-negative integer, got ${describe(d)}`,
            );
    }
    const n = shape[0] * shape[1];
    if (n > 2 ** 32) throw new RangeError(`${fn}: shape: expected at most 2^32 elements, got ${n}`);
    return [shape[0], shape[1]];
}

/** A finite number in [min, max]; `undefined` gives `fallback`. */
export function requireNumber(
    fn: string,
    name: string,
    x: unknown,
    fallback: number,
    min: number,
    max: number,
): number {
    if (x === undefined) return fallback;
    if (typeof x !== "number")
        throw new TypeError(`${fn}: ${name}: expected a number in [${min}, ${max}], got ${describe(x)}`);
    if (!(x >= min && x <= max))
        throw new RangeError(`${fn}: ${name}: expected a number in [${min}, ${max}], got ${describe(x)}`);
    return x;
}

export function requireInteger(fn: string, name: string, x: unknown, min: number, max: number): number {
    if (typeof x !== "number")
        throw new TypeError(`${fn}: ${name}: expected an integer in [${min}, ${max}], got ${describe(x)}`);
    if (!Number.isInteger(x) || x < min || x > max)
        throw new RangeError(`${fn}: ${name}: expected an integer in [${min}, ${max}], got ${describe(x)}`);
    return x;
}

export function requireBoolean(fn: string, name: string, x: unknown, fallback: boolean): boolean {
    if (x === undefined) return fallback;
    if (typeof x !== "boolean") throw new TypeError(`${fn}: ${name}: expected a boolean, got ${describe(x)}`);
    return x;
}

/** One of `choices`; `undefined` gives `fallback`. */
export function requireChoice<T extends string>(
    fn: string,
    name: string,
    x: unknown,
    choices: readonly T[],
    fallback: T,
): T {
    if (x === undefined) return fallback;
    const list = choices.map((c) => JSON.stringify(c)).join(", ");
    if (typeof x !== "string") throw new TypeError(`${fn}: ${name}: expected one of ${list}, got ${describe(x)}`);
    if (!(choices as readonly string[]).includes(x))
        throw new RangeError(`${fn}: ${name}: expected one of ${list}, got ${describe(x)}`);
    return x as T;
}

/** Levenshtein distance, case-insensitive: how the 'did you mean' hints pick the closest known name. */
export function editDistance(a: string, b: string): number {
    const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
    for (let j = 1; j <= b.length; j++) d[0]![j] = j;
    for (let i = 1; i <= a.length; i++)
        for (let j = 1; j <= b.length; j++)
            d[i]![j] = Math.min(
                d[i - 1]![j]! + 1,
                d[i]![j - 1]! + 1,
                d[i - 1]![j - 1]! + (a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1),
            );
    return d[a.length]![b.length]!;
}

/**
 * Checks that `x` is undefined or a plain object whose keys are all in `known`; a misspelled key is an
 * error that suggests the closest known one. Returns the object (or `{}`).
 */
export function requireOptions<O extends object>(
    fn: string,
    name: string,
    x: unknown,
    known: readonly string[],
): Partial<O> {
    if (x === undefined) return {};
    if (x === null || typeof x !== "object" || Array.isArray(x) || ArrayBuffer.isView(x))
        throw new TypeError(`${fn}: ${name}: expected an object, got ${describe(x)}`);
    for (const key of Object.keys(x)) {
        if (known.includes(key)) continue;
        const best = known.map((k) => [k, editDistance(key, k)] as const).sort((p, q) => p[1] - q[1])[0];
        const hint = best && best[1] <= Math.max(2, Math.floor(key.length / 3)) ? ` Did you mean "${best[0]}"?` : "";
        throw new RangeError(`${fn}: ${name}: unknown option "${key}".${hint} Known options: ${known.join(", ")}`);
    }
    return x;
}

/**
 * Checks that each output view shares no byte with any other named view (outputs are written while inputs
 * are still being read). Entries with the same name are the same parameter and are not compared.
 */
export function requireDisjoint(
    fn: string,
    outputs: Record<string, ArrayBufferView>,
    others: Record<string, ArrayBufferView>,
): void {
    for (const [on, o] of Object.entries(outputs)) {
        for (const [xn, x] of Object.entries(others)) {
            if (on === xn || o.buffer !== x.buffer || o.byteLength === 0 || x.byteLength === 0) continue;
            if (o.byteOffset < x.byteOffset + x.byteLength && x.byteOffset < o.byteOffset + o.byteLength)
                throw new RangeError(
                    `${fn}: ${on}: expected memory that does not overlap ${xn}, got an overlapping view`,
                );
        }
    }
}
