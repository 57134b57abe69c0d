// sampling.h: internals of maporl_sample / maporl_sample_logprobs (see maporl.h for the contract). CPU:
// sampling.cpp (rows over the thread pool; the row passes of sampling_row.h per ISA). CUDA: cuda/sampling/sampling.cu.
#pragma once

#include <float.h>
#include <stdint.h>

#include "native/core/hd.h"
#include "maporl.h"
#include "native/sampling/sampling_row.h"

namespace maporl {

// Temperatures below this, the smallest normal float (2^-126, 1.2e-38), sample greedily: 1 / T and log2(e) / T
// stay finite floats for every T at or above it (subnormal temperatures made them +Inf, and 0 * Inf = NaN).
// vLLM samples greedily below 1e-5 (_SAMPLING_EPS); here T = 1e-30 still shares the draws among tied maxima.
constexpr float kMinTemperature = FLT_MIN;

// Whether a valid row (max logit m finite) is sampled as temperature 0: the first argmax, log-prob 0. True for
// T < kMinTemperature, and where the processed max m / T overflows float32: the exact quotients' softmax is
// then a point mass on the maxima to far below float's resolution, and the float ones would be +-Inf (the
// passes would compare Inf with Inf). The same decision on the CPU and in CUDA's kernels.
MAPORL_HD bool sample_greedy(float T, float m) {
    if (!(T >= kMinTemperature)) return true;
    const float M = T == 1.0f ? m : m / T;
    return !(M <= FLT_MAX && M >= -FLT_MAX);
}

// One row's parameters, resolved from the per-row arrays / scalars.
struct SampleRow {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    int64_t position;
    int order;
};

// Checks every row's parameters (names the field and row); throws Error.
void check_sample_params(const maporl_sample_params & p, int64_t B);
SampleRow sample_row(const maporl_sample_params & p, int64_t b);

// CUDA sampling's kernels (cuda/sampling/sampling_split.cu), after sample_cuda's checks; p: the device parameters, h: host
// copies of their per-row top-k and top-p (the rest stay on the device).
maporl_status sample_split_cuda(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p,
                                const maporl_sample_params & h, const int32_t * given, int32_t * tokens,
                                float * logprobs, float * raw_logprobs, uint8_t * valid);

maporl_status sample_cuda(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p,
                          const int32_t * given, int32_t * tokens, float * logprobs, float * raw_logprobs,
                          uint8_t * valid);

// cand_scan_f32 / gumbel_cands_f32: the candidates of the Gumbel race (sampling_row.h) and the Gumbel-max over
// them; gumbel_row_f32: the same race over a whole row without a candidate list (the unfiltered path).
#define MAPORL_SAMPLING_ISA_DECLS                                                                                   \
    RowMax row_max_f32(const float * z, int64_t V, float temp, bool with_raw, bool with_t, bool with_argmax);       \
    double row_sum_exp_f32(const float * z, int64_t V, float temp, float M, float min_e);                           \
    double row_sum_x_f32(const float * z, int64_t V, float temp, float M);                                          \
    float exp_one_f32(float x, float M);                                                                            \
    uint64_t row_fixed_mass_f32(const float * z, int64_t V, float temp, float M, int s);                            \
    uint64_t top_p_hist_f32(const float * z, int64_t V, float temp, float M, float lo, float inv, int nbins, int s, \
                            uint64_t * hist, int32_t * up_idx, uint16_t * up_bin, int64_t * n_up);                  \
    int64_t next_at_least_f32(const float * z, int64_t from, int64_t V, float temp, float thr, bool strict);        \
    int64_t cand_scan_f32(const float * z, int64_t V, float z0, int32_t * idx);                                     \
    int64_t gumbel_cands_f32(const float * z, const int32_t * idx, int64_t n, float temp, uint64_t seed,            \
                             int64_t position);                                                                     \
    int64_t gumbel_row_f32(const float * z, int64_t V, float temp, float floor_x, int64_t hint, uint64_t seed,      \
                           int64_t position, int32_t * scratch);
namespace avx512 {
MAPORL_SAMPLING_ISA_DECLS
}
namespace avx2 {
MAPORL_SAMPLING_ISA_DECLS
}
#undef MAPORL_SAMPLING_ISA_DECLS

}  // namespace maporl
