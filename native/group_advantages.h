// group_advantages.h: group-relative advantages from outcome scores (GRPO and its relatives) and the row
// broadcast to tokens. Formulas and conventions: shared/reference/kernels.md section A (verl's
// compute_grpo_outcome_advantage, rloo, reinforce_plus_plus_baseline; TRL's NaN-aware nanstd; OpenRLHF's
// group_norm) and algorithms.md B.3 (MAGRPO baselines). CPU: group_advantages.cpp.
#pragma once

#include <cstdint>

#include <math.h>

#include "hd.h"
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


}  // namespace maporl
