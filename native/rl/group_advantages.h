// group_advantages.h: group-relative advantages from outcome scores (GRPO and its relatives) and the row
// broadcast to tokens. Formulas and conventions: docs/conventions.md (verl's
// compute_grpo_outcome_advantage, rloo, reinforce_plus_plus_baseline; TRL's NaN-aware nanstd; OpenRLHF's
// group_norm) and docs/algorithms.md B.3 (MAGRPO baselines). CPU: group_advantages.cpp.
#pragma once

#include <cstdint>

#include <math.h>

#include "native/core/hd.h"
#include "maporl.h"

namespace maporl {

void group_advantages_cpu(const float * scores, const int32_t * groups, const float * weights, int64_t N,
                          const maporl_group_params & p, float * out);

void broadcast_rows_cpu(const float * values, const void * mask, maporl_mask_type mask_type, int64_t N, int64_t T,
                        float * out);

// Device pointers; MAPORL_ERR_NO_DEVICE in a build without CUDA.
maporl_status group_advantages_cuda(const float * scores, const int32_t * groups, const float * weights, int64_t N,
                                    const maporl_group_params & p, float * out);
maporl_status broadcast_rows_cuda(const float * values, const void * mask, maporl_mask_type mask_type, int64_t N,
                                  int64_t T, float * out);

// Per-group accumulators. Two passes, both in index order: n and sum (or the max), then the squared
// deviations from mean = sum / n. No division per element (Welford's would put one on each group's
// dependency chain) and no cancellation. The adjacent-run path sums each run with four interleaved partials
// and the table path sums in index order, so the two paths agree to rounding, not to the bit.
struct alignas(32) Slot {
    double n;     // counted members
    double sum;   // sum of scores
    double mean;  // sum / n, set between the passes
    double aux;   // sum of squared deviations, or the max (MAPORL_BASELINE_MAX)
};

// A member's advantage is (s - center) * factor, both folded per group and applied in double (a float center
// would cost up to half an ulp of the mean, amplified by 1/std for tight groups). RLOO: s - (sum - s)/(n - 1)
// = (s - sum/n) * n/(n - 1). factor = 0 marks "advantage 0" (a singleton under 'zero'), NaN-safe.
struct Fold {
    double center;
    double factor;
};

// A sample weight of the whitening: finite and >= 0 (NaN, Inf and negatives are MAPORL_ERR_INVALID_ARG on both devices).
MAPORL_HD bool group_weight_ok(float w) { return w >= 0.0f && w <= 3.40282347e38f; }

MAPORL_HD Fold fold(const Slot & g, const maporl_group_params & p) {
    if (p.baseline == MAPORL_BASELINE_NONE) return {0.0, 1.0};
    if (g.n == 1.0) {  // singleton: verl treats it as mean 0, std 1
        if (p.singleton_zero) return {0.0, 0.0};
        return {0.0, p.scale_by_std ? 1.0 / (1.0 + (double)p.eps) : 1.0};
    }
    double center = g.mean, factor = 1.0;
    if (p.baseline == MAPORL_BASELINE_RLOO) {
        center = g.sum / g.n;
        factor = g.n / (g.n - 1.0);
    } else if (p.baseline == MAPORL_BASELINE_MAX) {
        center = g.aux;
    }
    if (p.scale_by_std) factor /= sqrt(g.aux / (p.std_unbiased ? g.n - 1.0 : g.n)) + (double)p.eps;
    return {center, factor};
}


// A group's advantages from its fold: (s − center) · factor in double; 0 for excluded NaN members and when the
// fold says 0 (a singleton under 'zero').
inline void write_group(const float * __restrict__ x, float * __restrict__ out, int64_t n, const Fold & f, bool excl) {
    const double c = f.center, fa = f.factor;
    if (fa == 0.0)
        for (int64_t t = 0; t < n; ++t) out[t] = 0.0f;
    else if (excl)
        for (int64_t t = 0; t < n; ++t) out[t] = x[t] != x[t] ? 0.0f : (float)(((double)x[t] - c) * fa);
    else
        for (int64_t t = 0; t < n; ++t) out[t] = (float)(((double)x[t] - c) * fa);
}

// One member's advantage from its group's fold (the table path's last pass).
inline float write_one(float s, const Fold & f, bool excl) {
    return ((excl && s != s) || f.factor == 0.0) ? 0.0f : (float)(((double)s - f.center) * f.factor);
}

// The statistics' two passes for one counted member: pass 1 counts and sums it and, for the max baseline, takes
// the max (a NaN member makes the max NaN and it stays NaN); pass 2, after g.mean is set, adds its squared
// deviation. Shared by the run path and the table path, so both accumulate the same way.
inline void add_member(Slot & g, float s, bool use_max) {
    g.n += 1.0;
    g.sum += (double)s;
    if (use_max && (s != s || (double)s > g.aux)) g.aux = g.aux != g.aux ? g.aux : (double)s;
}
inline void add_deviation(Slot & g, float s) {
    const double d = (double)s - g.mean;
    g.aux += d * d;
}

// One group stored contiguously, x[0..n): the statistics in index order (the same order as the table path, so
// every path gives the same bits), then the members' advantages. Used by the adjacent-run paths.
inline void group_run_sequential(const float * x, float * out, int64_t n, const maporl_group_params & p) {
    const bool excl = p.nan_exclude != 0;
    const bool use_max = p.baseline == MAPORL_BASELINE_MAX;
    Slot g{0.0, 0.0, 0.0, use_max ? -INFINITY : 0.0};
    for (int64_t i = 0; i < n; ++i) {
        const float s = x[i];
        if (excl && s != s) continue;
        add_member(g, s, use_max);
    }
    g.mean = g.sum / g.n;
    if (p.scale_by_std && !use_max)
        for (int64_t i = 0; i < n; ++i) {
            const float s = x[i];
            if (excl && s != s) continue;
            add_deviation(g, s);
        }
    write_group(x, out, n, fold(g, p), excl);
}

// Groups [k0, k1) of exactly G members stored one after the other (ids ascending), 16 (AVX-512) or 8 (AVX2)
// groups at a time with one group per lane (gathers), in the same arithmetic order as the scalar run path
// (bit-identical). Not for the max baseline. group_advantages_vec.inc, built as group_advantages_avx512.cpp /
// _avx2.cpp (x86-64, GCC/Clang).
//
// write_from_folds: the table path's last pass, O[i] = write_one(S[i], folds[ids[i] - lo]) for i in [b, e), with
// gathers of the folds (bit-identical to the scalar loop; needs 2 * (ids[i] - lo) + 1 < 2^31).
namespace avx2 {
void group_uniform_f32(const float * S, float * O, int64_t G, int64_t k0, int64_t k1, const maporl_group_params & p);
void write_from_folds(const float * S, const int32_t * ids, int32_t lo, const Fold * folds, float * O, int64_t b,
                      int64_t e, bool excl);
}
namespace avx512 {
void group_uniform_f32(const float * S, float * O, int64_t G, int64_t k0, int64_t k1, const maporl_group_params & p);
void write_from_folds(const float * S, const int32_t * ids, int32_t lo, const Fold * folds, float * O, int64_t b,
                      int64_t e, bool excl);
}

}  // namespace maporl
