// rng.ts: the seeded PRNG for tests (mulberry32, lib/random.ts); never Math.random, so failures reproduce.
import { mulberry32 } from "../../lib/random.js";

export const rng = mulberry32;

export function uniformArray(n: number, next: () => number, lo = -1, hi = 1): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * next();
    return a;
}

/**
 * Elementwise |a - b| <= atol + rtol * scale, NaN only where the reference is NaN; scale defaults to |b|
 * (pass the size of the summed terms where the result can cancel). Returns the first failure.
 */
export function firstMismatch(
    a: ArrayLike<number>,
    b: ArrayLike<number>,
    rtol: number,
    atol: number,
    scale?: ArrayLike<number>,
): string | null {
    if (a.length !== b.length) return `length ${a.length} vs ${b.length}`;
    for (let i = 0; i < a.length; i++) {
        const x = a[i],
            y = b[i];
        if (x === y) continue; // equal infinities included
        const tol = atol + rtol * (scale ? scale[i] : Math.abs(y));
        if (Number.isNaN(y) ? !Number.isNaN(x) : !(Math.abs(x - y) <= tol))
            return `index ${i}: got ${x}, expected ${y} (tolerance ${tol})`;
    }
    return null;
}
