// random.ts: the small seeded generators the package uses where it needs reproducible data (benchmark inputs,
// task generators, tests); never Math.random.

/** A linear congruential generator (Numerical Recipes constants): uniform in [0, 1). */
export function lcg(seed: number): () => number {
    let s = seed >>> 0;
    return () => (s = (s * 1664525 + 1013904223) >>> 0) / 4294967296;
}

/** mulberry32: a better-mixed 32-bit generator, uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}
