// group_advantages.h: group-relative advantages from outcome scores (GRPO and its relatives) and the row
// broadcast to tokens. Formulas and conventions: shared/reference/kernels.md section A (verl's
// compute_grpo_outcome_advantage, rloo, reinforce_plus_plus_baseline; TRL's NaN-aware nanstd; OpenRLHF's
// group_norm) and algorithms.md B.3 (MAGRPO baselines). CPU: group_advantages.cpp.
#pragma once

#include <cstdint>

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

// Per-group statistics -> advantage of one member with score s. Shared by CPU and CUDA.
struct GroupStats {
    double count;  // counted members (NaN excluded when nan_exclude)
    double sum;
    double dev;    // sum of squared deviations from the mean (or max, for MAPORL_BASELINE_MAX)
};

}  // namespace maporl
