// groupAdvantages.test.ts: every estimator and convention against the float64 reference, properties, broadcast,
// thread invariance, async, and error paths.
import { afterAll, describe, expect, it } from "vitest";

import {
    groupAdvantages,
    groupAdvantagesAsync,
    groupEstimators,
    MaporlError,
    setSimd,
    setThreads,
} from "../../lib/index.js";
import { groupReference, type GroupRefOptions } from "../reference/group.ref.js";
import { firstMismatch, rng } from "../helpers/rng.js";

afterAll(() => {
    setThreads(0);
    setSimd("best");
});

type Est = "grpo" | "drgrpo" | "rloo" | "reinforce++-baseline" | "magrpo";
const CONV = {
    verl: { unbiased: true, eps: 1e-6, singletonZero: false, nanExclude: false },
    trl: { unbiased: true, eps: 1e-4, singletonZero: true, nanExclude: true },
    openrlhf: { unbiased: true, eps: 1e-9, singletonZero: true, nanExclude: false },
} as const;

function refOptions(
    est: Est,
    conv: keyof typeof CONV,
    baseline: GroupRefOptions["baseline"] = "mean",
): GroupRefOptions {
    const c = CONV[conv];
    const b = est === "rloo" ? "rloo" : est === "magrpo" ? baseline : "mean";
    return {
        ...c,
        baseline: b,
        scaleByStd: est === "grpo",
        whiten: est !== "reinforce++-baseline" ? false : conv === "openrlhf" ? "openrlhf" : "verl",
    };
}

// Groups of mixed sizes (1, 2, 3, 8), ids shuffled and non-contiguous; optional NaN and constant groups.
function makeBatch(
    N: number,
    seed: number,
    opts: { nan?: boolean; constant?: boolean; sparse?: boolean; sorted?: boolean; uniform?: number } = {},
) {
    const next = rng(seed);
    const scores = new Float32Array(N),
        groups = new Int32Array(N);
    let i = 0,
        gid = 0;
    const sizes = [1, 2, 3, 8];
    while (i < N) {
        const size = Math.min(N - i, opts.uniform ?? sizes[Math.floor(next() * sizes.length)]);
        const constant = opts.constant && next() < 0.3;
        const c = Math.floor(next() * 5);
        const id = opts.sparse ? Math.floor((next() - 0.5) * 2e9) : gid * 3 - 7;
        for (let k = 0; k < size; k++, i++) {
            scores[i] = constant ? c : Math.round(next() * 100) / 10;
            if (opts.nan && next() < 0.15) scores[i] = NaN;
            groups[i] = id;
        }
        gid++;
    }
    if (opts.sorted) return { scores, groups }; // verl's layout: groups adjacent, ids ascending
    for (let k = N - 1; k > 0; k--) {
        // shuffle: groups are not contiguous
        const j = Math.floor(next() * (k + 1));
        [scores[k], scores[j]] = [scores[j], scores[k]];
        [groups[k], groups[j]] = [groups[j], groups[k]];
    }
    return { scores, groups };
}

// rtol relative to the terms that were subtracted: (|s| + |mean|) / (std + eps) is bounded by the batch here.
function check(got: Float32Array, want: Float64Array, ctx: string) {
    const scale = Math.max(1, ...Array.from(want, (x) => (Number.isFinite(x) ? Math.abs(x) : 0)));
    expect(firstMismatch(got, want, 1e-5, 1e-6 * scale), ctx).toBeNull();
}

describe("groupAdvantages matches the float64 reference", () => {
    const ests: Est[] = ["grpo", "drgrpo", "rloo", "reinforce++-baseline", "magrpo"];
    for (const conv of ["verl", "trl", "openrlhf"] as const) {
        it(`every estimator, convention ${conv}, with NaN, constant, singleton and sparse groups`, () => {
            let seed = 10;
            for (const N of [1, 2, 3, 7, 31, 257, 4099]) {
                for (const flags of [
                    {},
                    { nan: true },
                    { constant: true },
                    { sparse: true },
                    { sorted: true },
                    { sorted: true, nan: true },
                    { sorted: true, uniform: 8 },
                    { sorted: true, uniform: 16, nan: true },
                    { sorted: true, uniform: 3, constant: true },
                ]) {
                    const b = makeBatch(N, seed++, flags);
                    for (const est of ests) {
                        const baselines =
                            est === "magrpo" ? (["mean", "max", "rloo", "none"] as const) : (["mean"] as const);
                        for (const baseline of baselines) {
                            const got = groupAdvantages(b, {
                                estimator: est,
                                convention: conv,
                                baseline: est === "magrpo" ? baseline : undefined,
                            });
                            const want = groupReference(b.scores, b.groups, refOptions(est, conv, baseline));
                            check(
                                got,
                                want,
                                `${est}/${baseline} ${conv} N=${N} ${JSON.stringify(flags)} seed=${seed - 1}`,
                            );
                        }
                    }
                }
            }
        });
    }

    it("explicit std / eps / singleton override the convention", () => {
        const b = makeBatch(300, 3, { nan: false });
        const got = groupAdvantages(b, { convention: "trl", std: "biased", eps: 0.01, singleton: "raw" });
        const want = groupReference(b.scores, b.groups, {
            ...refOptions("grpo", "trl"),
            unbiased: false,
            eps: 0.01,
            singletonZero: false,
        });
        check(got, want, "overrides");
    });

    it("N = 0 and N = 1", () => {
        expect(groupAdvantages({ scores: new Float32Array(0), groups: new Int32Array(0) }).length).toBe(0);
        const one = groupAdvantages({ scores: new Float32Array([3]), groups: new Int32Array([42]) });
        expect(one[0]).toBeCloseTo(3 / (1 + 1e-6), 6); // verl: singleton -> mean 0, std 1
        expect(
            groupAdvantages({ scores: new Float32Array([3]), groups: new Int32Array([42]) }, { convention: "trl" })[0],
        ).toBe(0);
    });
});

describe("groupAdvantages properties", () => {
    it("GRPO: each group sums to ~0 with unit std; a constant group gives 0", () => {
        const b = makeBatch(2000, 21, { constant: true });
        const a = groupAdvantages(b);
        const by = new Map<number, number[]>();
        b.groups.forEach((g, i) => by.set(g, [...(by.get(g) ?? []), i]));
        for (const idx of by.values()) {
            if (idx.length < 2) continue;
            const vals = idx.map((i) => a[i]);
            const sum = vals.reduce((x, y) => x + y, 0);
            expect(Math.abs(sum)).toBeLessThan(1e-4);
            const sc = idx.map((i) => b.scores[i]);
            if (sc.every((x) => x === sc[0])) {
                expect(vals.every((x) => x === 0)).toBe(true);
                continue;
            }
            const m = sum / vals.length;
            const sd = Math.sqrt(vals.reduce((x, v) => x + (v - m) ** 2, 0) / (vals.length - 1));
            expect(sd).toBeCloseTo(1, 3);
        }
    });

    it("adding a constant to a group changes nothing; negating the scores negates the advantages", () => {
        const b = makeBatch(500, 22);
        for (const est of ["grpo", "drgrpo", "rloo"] as const) {
            const base = groupAdvantages(b, { estimator: est });
            const shifted = { scores: b.scores.map((s, i) => s + (b.groups[i] % 7) * 3.5), groups: b.groups };
            const singles = new Set<number>();
            const count = new Map<number, number>();
            b.groups.forEach((g) => count.set(g, (count.get(g) ?? 0) + 1));
            b.groups.forEach((g, i) => {
                if (count.get(g) === 1) singles.add(i);
            });
            const s2 = groupAdvantages(shifted, { estimator: est });
            const neg = groupAdvantages({ scores: b.scores.map((s) => -s), groups: b.groups }, { estimator: est });
            for (let i = 0; i < base.length; i++) {
                expect(neg[i]).toBeCloseTo(-base[i], 4);
                if (!singles.has(i)) expect(s2[i]).toBeCloseTo(base[i], 3);
            }
        }
    });

    it("does not depend on the thread count, nor on contiguous vs sparse ids", () => {
        const b = makeBatch(50_000, 23, { nan: true });
        const runs = [1, 2, 5].map((t) => {
            setThreads(t);
            return groupAdvantages(b, { estimator: "reinforce++-baseline", convention: "trl" });
        });
        setThreads(0);
        expect(Buffer.from(runs[1].buffer).equals(Buffer.from(runs[0].buffer))).toBe(true);
        expect(Buffer.from(runs[2].buffer).equals(Buffer.from(runs[0].buffer))).toBe(true);
        // The same grouping with ids spread over int32 (sort path) gives the same numbers.
        const remap = new Map<number, number>();
        const sparse = b.groups.map((g) => {
            if (!remap.has(g)) remap.set(g, (remap.size * 2_654_435_761) | 0);
            return remap.get(g)!;
        });
        const viaSort = groupAdvantages(
            { scores: b.scores, groups: sparse },
            { estimator: "reinforce++-baseline", convention: "trl" },
        );
        expect(Buffer.from(viaSort.buffer).equals(Buffer.from(runs[0].buffer))).toBe(true);
    });

    it("adjacent, ascending groups (the fast path) agree with the same groups shuffled (the table path)", () => {
        const b = makeBatch(20_000, 27, { sorted: true, nan: true });
        const next = rng(5);
        const shuffled = { scores: new Float32Array(b.scores.length), groups: new Int32Array(b.scores.length) };
        // Interleave the groups at random, keeping each group's members in their original order.
        const byGroup = new Map<number, number[]>();
        b.groups.forEach((g, i) => byGroup.set(g, [...(byGroup.get(g) ?? []), i]));
        const queues = [...byGroup.values()];
        const placed: number[] = [];
        while (queues.some((q) => q.length)) {
            const live = queues.filter((q) => q.length);
            placed.push(live[Math.floor(next() * live.length)].shift()!);
        }
        placed.forEach((src, dst) => {
            shuffled.scores[dst] = b.scores[src]!;
            shuffled.groups[dst] = b.groups[src]!;
        });
        for (const opts of [
            { estimator: "grpo" },
            { estimator: "rloo", convention: "trl" },
            { estimator: "magrpo", baseline: "max" },
        ] as const) {
            const fast = groupAdvantages(b, opts),
                general = groupAdvantages(shuffled, opts);
            const moved = new Float32Array(fast.length);
            placed.forEach((src, dst) => {
                moved[dst] = fast[src]!;
            });
            expect(firstMismatch(moved, general, 1e-6, 1e-6), JSON.stringify(opts)).toBeNull();
        }
    });

    it("groups of one size stored in order (the AVX-512 / AVX2 gather paths) give the same bits as the scalar path", () => {
        const levels = (["avx2", "avx512"] as const).filter((l) => {
            try {
                setSimd(l);
                return true;
            } catch {
                return false;
            } finally {
                setSimd("best");
            }
        });
        for (const [N, G] of [
            [16 * 8 * 5, 8],
            [4096 * 3, 16],
            [17 * 7, 7],
            [5, 1],
            [48, 48],
        ] as [number, number][]) {
            const b = makeBatch(N, 31 + G, { sorted: true, uniform: G, nan: true });
            for (const opts of [
                {},
                { convention: "trl" },
                { estimator: "rloo" },
                { estimator: "reinforce++-baseline" },
            ] as const) {
                setSimd("scalar");
                const plain = groupAdvantages(b, opts);
                for (const level of levels) {
                    setSimd(level);
                    const fast = groupAdvantages(b, opts);
                    expect(
                        Buffer.from(fast.buffer).equals(Buffer.from(plain.buffer)),
                        `${level} N=${N} G=${G} ${JSON.stringify(opts)}`,
                    ).toBe(true);
                }
                setSimd("best");
            }
        }
    });

    it("broadcast expands to [N, T] under the mask; reinforce++-baseline then whitens over tokens as verl", () => {
        const N = 40,
            T = 17;
        const b = makeBatch(N, 24);
        const next = rng(99);
        const mask = new Uint8Array(N * T);
        for (let n = 0; n < N; n++) {
            const len = Math.floor(next() * (T + 1));
            for (let t = 0; t < len; t++) mask[n * T + t] = 1;
        }
        const tokens = groupAdvantages(b, { broadcast: { mask, shape: [N, T] } });
        const rows = groupAdvantages(b);
        for (let n = 0; n < N; n++)
            for (let t = 0; t < T; t++) expect(tokens[n * T + t]).toBe(mask[n * T + t] ? rows[n] : 0);
        const rpp = groupAdvantages(b, {
            estimator: "reinforce++-baseline",
            broadcast: { mask: new Float32Array(mask), shape: [N, T] },
        });
        // verl: tile (s - mean_g) over tokens, masked_whiten over all valid tokens, times the mask.
        const centered = groupReference(b.scores, b.groups, { ...refOptions("drgrpo", "verl") });
        const flat: number[] = [];
        for (let i = 0; i < N * T; i++) if (mask[i]) flat.push(centered[Math.floor(i / T)]);
        const mean = flat.reduce((x, y) => x + y, 0) / (flat.length + 1e-8);
        const variance =
            ((flat.reduce((x, v) => x + (v - mean) ** 2, 0) / (flat.length + 1e-8)) * flat.length) / (flat.length - 1);
        for (let i = 0; i < N * T; i++) {
            const want = mask[i] ? (centered[Math.floor(i / T)] - mean) / Math.sqrt(variance + 1e-8) : 0;
            expect(rpp[i]).toBeCloseTo(want, 4);
        }
    });

    it("writes into `out` when given (also the [N, T] broadcast), refusing overlaps", () => {
        const b = makeBatch(50, 28);
        const out = new Float32Array(50);
        expect(groupAdvantages(b, { out })).toBe(out);
        expect([...out]).toEqual([...groupAdvantages(b)]);
        const mask = new Uint8Array(50 * 3).fill(1);
        const tokens = new Float32Array(150);
        expect(groupAdvantages(b, { out: tokens, broadcast: { mask, shape: [50, 3] } })).toBe(tokens);
        expect(tokens[3]).toBe(out[1]);
        expect(() => groupAdvantages(b, { out: new Float32Array(49) })).toThrow(RangeError);
        expect(() => groupAdvantages(b, { out: b.scores })).toThrow(
            /out: expected memory that does not overlap scores/,
        );
    });

    it("async equals sync", async () => {
        const b = makeBatch(10_000, 25, { nan: true });
        const sync = groupAdvantages(b, { convention: "trl" });
        const asy = await groupAdvantagesAsync(b, { convention: "trl" });
        expect(Buffer.from(asy.buffer).equals(Buffer.from(sync.buffer))).toBe(true);
    });

    it("custom estimators can be registered and used by name", () => {
        if (!groupEstimators.has("test-centered"))
            groupEstimators.register({
                name: "test-centered",
                params: () => ({ baseline: 0, scaleByStd: false, whiten: false }),
            });
        const b = makeBatch(100, 26);
        expect([...groupAdvantages(b, { estimator: "test-centered" })]).toEqual([
            ...groupAdvantages(b, { estimator: "drgrpo" }),
        ]);
        expect(() =>
            groupEstimators.register({
                name: "grpo",
                params: () => ({ baseline: 1, scaleByStd: false, whiten: false }),
            }),
        ).toThrow(/already registered/);
    });
});

describe("groupAdvantages errors", () => {
    const ok = () => ({ scores: new Float32Array([1, 2, 3]), groups: new Int32Array([0, 0, 1]) });
    it("bad arguments name the parameter", () => {
        expect(() => groupAdvantages({ scores: new Float64Array(3) as never, groups: new Int32Array(3) })).toThrow(
            TypeError,
        );
        expect(() => groupAdvantages({ scores: new Float32Array(3), groups: new Uint32Array(3) as never })).toThrow(
            /groups: expected Int32Array/,
        );
        expect(() => groupAdvantages({ scores: new Float32Array(3), groups: new Int32Array(2) })).toThrow(RangeError);
        expect(() => groupAdvantages(ok(), { estimator: "nope" })).toThrow(
            /Unknown group advantage estimator "nope". Registered: grpo, drgrpo/,
        );
        expect(() => groupAdvantages(ok(), { convention: "vllm" as never })).toThrow(RangeError);
        expect(() => groupAdvantages(ok(), { eps: -1 })).toThrow(/eps: expected a number in \[0, 1\]/);
        expect(() => groupAdvantages(ok(), { estimator: "magrpo", baseline: "min" as never })).toThrow(/baseline/);
        expect(() => groupAdvantages(ok(), { singelton: "zero" } as never)).toThrow(/Did you mean "singleton"/);
        expect(() => groupAdvantages(ok(), { broadcast: { mask: new Uint8Array(6), shape: [2, 3] } })).toThrow(
            /broadcast.shape\[0\]: expected 3/,
        );
        expect(() =>
            groupAdvantages(ok(), { weights: new Float32Array([1, -1, 1]), estimator: "reinforce++-baseline" }),
        ).toThrow(MaporlError);
        const bad = new Uint8Array(6).fill(1);
        bad[4] = 7;
        expect(() => groupAdvantages(ok(), { broadcast: { mask: bad, shape: [3, 2] } })).toThrow(
            /mask: expected 0 or 1 at every position, got 7 at index 4/,
        );
    });
});
