// groupAdvantages.ts: group-relative advantages from outcome scores, on the native kernel, with the
// conventions of verl (default), TRL and OpenRLHF selectable. Formulas: docs/conventions.md
// (verl compute_grpo_outcome_advantage / rloo / reinforce_plus_plus_baseline, TRL nanstd, OpenRLHF group_norm)
// and docs/algorithms.md B.3 (MAGRPO's mean / max / rloo / none baselines).
import { withSignal } from "../abort.js";
import { outputFloat32 } from "../alloc.js";
import { type Device, resolveDevice } from "../backend.js";
import { native, type NativeGroupCall } from "../native.js";
import {
    requireArray,
    requireChoice,
    requireDisjoint,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";
import { createRegistry } from "./registry.js";
import { type MultiObjectiveAggregation, type ScaleRewards, trlAdvantages } from "./trlAdvantages.js";

export type { MultiObjectiveAggregation, ScaleRewards } from "./trlAdvantages.js";

export interface GroupBatch {
    /** One outcome score per response, [N]. NaN marks an unscorable response (see `convention`). */
    scores: Float32Array;
    /** Group id per response (e.g. the prompt index), [N]; any order, groups need not be contiguous. */
    groups: Int32Array;
    /** With several reward functions (convention 'trl'): scores is [N, F], row-major. Defaults to [N, 1]. */
    shape?: readonly [number, number];
}

export type GroupConvention = "verl" | "trl" | "openrlhf";
export type MagrpoBaseline = "mean" | "max" | "rloo" | "none";

export interface GroupAdvantageOptions {
    /** `'grpo'`, `'drgrpo'`, `'rloo'`, `'reinforce++-baseline'`, `'magrpo'` or a registered name. Defaults to `'grpo'`. */
    estimator?: "grpo" | "drgrpo" | "rloo" | "reinforce++-baseline" | "magrpo" | (string & {});
    /** MAGRPO's baseline: `'mean'` (R − mean), `'max'` (R − max), `'rloo'` (R − mean of others), `'none'` (R). Defaults to `'mean'`. */
    baseline?: MagrpoBaseline;
    /**
     * Sets `std`, `eps`, `singleton` and the NaN policy as each system does. `'verl'`: unbiased std, eps 1e-6,
     * a singleton keeps its raw score, NaN propagates. `'trl'`: unbiased std, eps 1e-4, singleton 0, NaN scores
     * are left out of the group statistics and get 0. `'openrlhf'`: unbiased std, eps 1e-9, singleton 0, NaN
     * propagates, and 'reinforce++-baseline' whitens with the biased variance and 1 / sqrt(max(var, 1e-8)) (verl:
     * unbiased, 1 / sqrt(var + 1e-8)). Defaults to `'verl'`.
     */
    convention?: GroupConvention;
    /** `'unbiased'` (n − 1) or `'biased'` (n). Defaults to the convention's. */
    std?: "unbiased" | "biased";
    /** Added to the group std, in [0, 1]. Defaults to the convention's. */
    eps?: number;
    /** What a one-member group gets: `'raw'` (its score, as verl: mean 0, std 1) or `'zero'`. Defaults to the convention's. */
    singleton?: "raw" | "zero";
    /**
     * Per-response whitening weights for `'reinforce++-baseline'`, e.g. token counts, which reproduces verl's
     * token-level masked_whiten. With `broadcast` the mask's row sums are used. Defaults to 1 each.
     */
    weights?: Float32Array;
    /** Expand the advantages to a token tensor [N, T] (A[n] where mask = 1, else 0). */
    broadcast?: { mask: Uint8Array | Float32Array; shape: readonly [number, number] };
    /** Convention 'trl', estimator 'grpo': TRL's scale_rewards. `'group'` divides by the group's std, `'batch'` by the
     * whole batch's (the mean stays per group), `'none'` not at all. Defaults to `'group'`. */
    scaleRewards?: ScaleRewards;
    /** Convention 'trl', several reward functions (`shape` [N, F]): TRL's multi_objective_aggregation. Defaults to
     * `'sum_then_normalize'`. */
    multiObjectiveAggregation?: MultiObjectiveAggregation;
    /** Convention 'trl': TRL's reward_weights, one per reward function [F]. Defaults to 1 each. */
    rewardWeights?: Float32Array;
    /** Defaults to `'auto'` (CUDA only for N of at least 2^22). TRL's batch scaling and multi-objective paths run in TS
     * on the CPU. */
    device?: Device;
    /**
     * A buffer to write the result into ([N], or [N, T] with `broadcast`; not overlapping the inputs) instead of
     * allocating one. Defaults to a new buffer.
     */
    out?: Float32Array;
}

export interface GroupAdvantageAsyncOptions extends GroupAdvantageOptions {
    signal?: AbortSignal;
}

/** The native parameters an estimator resolves to. */
export interface GroupKernelParams {
    baseline: 0 | 1 | 2 | 3;
    scaleByStd: boolean;
    whiten: boolean;
}

export interface GroupEstimator {
    readonly name: string;
    /** Resolves the options into the kernel's parameters. */
    params(options: GroupAdvantageOptions): GroupKernelParams;
}

export const groupEstimators = createRegistry<GroupEstimator>("group advantage estimator");

const BASELINES: Record<MagrpoBaseline, 0 | 1 | 2 | 3> = { mean: 0, rloo: 1, max: 2, none: 3 };

groupEstimators.register({ name: "grpo", params: () => ({ baseline: 0, scaleByStd: true, whiten: false }) });
groupEstimators.register({ name: "drgrpo", params: () => ({ baseline: 0, scaleByStd: false, whiten: false }) });
groupEstimators.register({ name: "rloo", params: () => ({ baseline: 1, scaleByStd: false, whiten: false }) });
groupEstimators.register({
    name: "reinforce++-baseline",
    params: () => ({ baseline: 0, scaleByStd: false, whiten: true }),
});
groupEstimators.register({
    name: "magrpo",
    params: (o) => ({
        baseline:
            BASELINES[
                requireChoice("groupAdvantages", "baseline", o.baseline, ["mean", "max", "rloo", "none"], "mean")
            ],
        scaleByStd: false,
        whiten: false,
    }),
});

const CONVENTIONS: Record<
    GroupConvention,
    { std: "unbiased" | "biased"; eps: number; singleton: "raw" | "zero"; nanExclude: boolean }
> = {
    verl: { std: "unbiased", eps: 1e-6, singleton: "raw", nanExclude: false },
    trl: { std: "unbiased", eps: 1e-4, singleton: "zero", nanExclude: true },
    openrlhf: { std: "unbiased", eps: 1e-9, singleton: "zero", nanExclude: false },
};

const OPTION_KEYS = [
    "estimator",
    "baseline",
    "convention",
    "std",
    "eps",
    "singleton",
    "weights",
    "broadcast",
    "device",
    "out",
    "scaleRewards",
    "multiObjectiveAggregation",
    "rewardWeights",
];
const AUTO_CUDA = 1 << 22;

interface Call {
    args: NativeGroupCall;
    /** TRL's batch scaling or several reward functions: computed in TS instead of the kernel. */
    trl?: () => void;
    out: Float32Array;
    broadcast?: { mask: Uint8Array | Float32Array; N: number; T: number; device: 0 | 1; tokens: Float32Array };
}

function prepare(fn: string, batch: GroupBatch, options: unknown, extra: string[]): Call {
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${fn}: batch: expected an object with scores and groups, got ${typeof batch}`);
    const o = requireOptions<GroupAdvantageOptions>(fn, "options", options, [...OPTION_KEYS, ...extra]);
    const F = batch.shape === undefined ? 1 : requireShape2(fn, batch.shape, ["N", "F"])[1];
    const N =
        batch.shape !== undefined
            ? batch.shape[0]
            : Array.isArray(batch.scores) || ArrayBuffer.isView(batch.scores)
              ? (batch.scores as { length: number }).length
              : -1;
    const scores = requireArray(fn, "scores", batch.scores, [Float32Array], Math.max(N, 0) * F);
    const groups = requireArray(fn, "groups", batch.groups, [Int32Array], N);
    const estimator = groupEstimators.get(o.estimator ?? "grpo");
    const k = estimator.params(o);
    const conv = CONVENTIONS[requireChoice(fn, "convention", o.convention, ["verl", "trl", "openrlhf"], "verl")];
    const std = requireChoice(fn, "std", o.std, ["unbiased", "biased"], conv.std);
    const eps = requireNumber(fn, "eps", o.eps, conv.eps, 0, 1);
    const singleton = requireChoice(fn, "singleton", o.singleton, ["raw", "zero"], conv.singleton);
    const device = resolveDevice(fn, o.device, N, AUTO_CUDA) === "cuda" ? 1 : 0;
    let weights: Float32Array | null =
        o.weights === undefined ? null : requireArray(fn, "weights", o.weights, [Float32Array], N);
    let broadcast: Call["broadcast"];
    if (o.broadcast !== undefined) {
        const b = requireOptions<NonNullable<GroupAdvantageOptions["broadcast"]>>(fn, "broadcast", o.broadcast, [
            "mask",
            "shape",
        ]);
        const [bn, T] = requireShape2(fn, b.shape, ["N", "T"]);
        if (bn !== N) throw new RangeError(`${fn}: broadcast.shape[0]: expected ${N} (one row per score), got ${bn}`);
        const mask = requireArray(fn, "broadcast.mask", b.mask, [Uint8Array, Float32Array], N * T);
        const tokens =
            o.out === undefined ? outputFloat32(N * T) : requireArray(fn, "out", o.out, [Float32Array], N * T);
        requireDisjoint(
            fn,
            { out: tokens },
            { scores, groups, "broadcast.mask": mask, ...(o.weights ? { weights: o.weights } : {}) },
        );
        broadcast = { mask, N, T, device, tokens };
        if (k.whiten && weights === null) {
            // verl whitens over tokens: weight each response by its token count
            weights = new Float32Array(N);
            for (let n = 0; n < N; n++) {
                let c = 0;
                for (let t = 0; t < T; t++) c += mask[n * T + t] === 1 ? 1 : 0;
                weights[n] = c;
            }
        }
    }
    const out =
        broadcast !== undefined || o.out === undefined
            ? outputFloat32(N)
            : requireArray(fn, "out", o.out, [Float32Array], N);
    // TRL's options (convention 'trl', GRPO): the kernel serves one reward function scaled per group or not at all;
    // batch scaling and several functions run in trlAdvantages.ts.
    const isTrl = o.convention === "trl";
    for (const key of ["scaleRewards", "multiObjectiveAggregation", "rewardWeights"] as const)
        if (o[key] !== undefined && !isTrl)
            throw new RangeError(
                `${fn}: ${key}: TRL's option needs convention 'trl', got convention ${JSON.stringify(o.convention ?? "verl")}`,
            );
    if (F > 1 && !isTrl)
        throw new RangeError(
            `${fn}: shape: several reward functions ([N, ${F}]) need convention 'trl' (TRL's multi_objective_aggregation)`,
        );
    const scale = requireChoice(fn, "scaleRewards", o.scaleRewards, ["group", "batch", "none"], "group");
    const moa = requireChoice(
        fn,
        "multiObjectiveAggregation",
        o.multiObjectiveAggregation,
        ["sum_then_normalize", "normalize_then_sum"],
        "sum_then_normalize",
    );
    const rw =
        o.rewardWeights === undefined
            ? new Float32Array(F).fill(1)
            : requireArray(fn, "rewardWeights", o.rewardWeights, [Float32Array], F);
    rw.forEach((x, k) => {
        if (!Number.isFinite(x)) throw new RangeError(`${fn}: rewardWeights[${k}]: expected a finite number, got ${x}`);
    });
    const trlPath = isTrl && (F > 1 || scale === "batch" || moa === "normalize_then_sum");
    if (
        isTrl &&
        (o.scaleRewards !== undefined || F > 1 || o.multiObjectiveAggregation !== undefined) &&
        (o.estimator ?? "grpo") !== "grpo"
    )
        throw new RangeError(
            `${fn}: scaleRewards / several reward functions: TRL's GRPO advantages (estimator 'grpo'), got estimator ${JSON.stringify(o.estimator)}`,
        );
    if (broadcast === undefined && o.out !== undefined)
        requireDisjoint(fn, { out }, { scores, groups, ...(weights ? { weights } : {}) });
    // Whitening as the convention's system does it: OpenRLHF's biased variance and rsqrt(clamp(var, 1e-8)), else verl's.
    const whiten = !k.whiten ? 0 : conv === CONVENTIONS.openrlhf ? 2 : 1;
    return {
        args: {
            scores,
            groups,
            weights,
            N,
            baseline: k.baseline,
            scaleByStd: k.scaleByStd && scale !== "none",
            stdUnbiased: std === "unbiased",
            eps,
            singletonZero: singleton === "zero",
            nanExclude: conv.nanExclude,
            whiten,
            device,
            out,
        },
        ...(trlPath ? { trl: () => out.set(trlAdvantages(scores, F, groups, rw, scale, moa)) } : {}),
        out,
        broadcast,
    };
}

function finish(c: Call): Float32Array {
    if (c.broadcast === undefined) return c.out;
    const { mask, N, T, device, tokens } = c.broadcast;
    native.broadcastRows({ values: c.out, mask, N, T, device, out: tokens });
    return tokens;
}

/**
 * Group-relative advantages: one per response ([N]), or per token ([N, T], row-major) with `broadcast`.
 * @throws TypeError / RangeError on bad arguments (an unknown estimator lists the registered ones),
 * MaporlError on a native failure (e.g. a mask value other than 0/1, or `device: 'cuda'` without a GPU).
 */
export function groupAdvantages(batch: GroupBatch, options?: GroupAdvantageOptions): Float32Array {
    const c = prepare("groupAdvantages", batch, options, []);
    if (c.trl) c.trl();
    else native.groupAdvantages(c.args);
    return finish(c);
}

/** {@link groupAdvantages} off the main thread. */
export async function groupAdvantagesAsync(
    batch: GroupBatch,
    options?: GroupAdvantageAsyncOptions,
): Promise<Float32Array> {
    const c = prepare("groupAdvantagesAsync", batch, options, ["signal"]);
    if (c.trl) {
        options?.signal?.throwIfAborted();
        c.trl();
    } else await withSignal(() => native.groupAdvantagesAsync(c.args), options?.signal);
    return finish(c);
}
