// gae.h: generalized advantage estimation with verl's semantics (compute_gae_advantage_return): reverse
// scan over T per row, masked positions skipped (the carries pass through), bootstrap 0 after the last step,
// returns = advantages + values, optional whitening over all unmasked tokens. See maporl.h for the contract.
// CPU: gae.cpp (the reference; threaded over row blocks, vectorised across rows). CUDA: cuda/rl/gae.cu.
#pragma once

#include <cstdint>

#include "native/rl/gae_scan.h"
#include "maporl.h"

namespace maporl {

// Host pointers. F is the storage and compute type (float, or double for reference tests).
// Throws Error on a mask value other than 0/1.
template <typename F>
void gae_cpu(const F * rewards, const F * values, const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
             F gamma, F lambda, bool whiten, F * advantages, F * returns);

// REINFORCE++ returns on host pointers (F = float or double); see maporl_reinforce_returns.
template <typename F>
void reinforce_returns_cpu(const F * rewards, const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
                           F gamma, bool whiten, F * returns, F * advantages);
maporl_status reinforce_returns_cuda(const float * rewards, const void * mask, maporl_mask_type mask_type, int64_t B,
                                     int64_t T, float gamma, bool whiten, float * returns, float * advantages);

// Device pointers; same semantics. Returns MAPORL_ERR_NO_DEVICE in a build without CUDA.
maporl_status gae_cuda(const float * rewards, const float * values, const void * mask, maporl_mask_type mask_type,
                       int64_t B, int64_t T, float gamma, float lambda, bool whiten, float * advantages,
                       float * returns);

// Whitening statistics (whiten_mean, whiten_from_m2) live in gae_scan.h, shared with CUDA.

// ---- internal: the CPU row kernels (gae.cpp dispatches to the per-ISA ones) ----
inline bool bad_mask_value(uint8_t m) { return m > 1; }
inline bool bad_mask_value(float m) { return !(m == 0.0f || m == 1.0f); }

struct GaeRowSums {
    double * sum;     // [B] sum of unmasked advantages per row, or null when not whitening (=)
    double * sum_sq;  // [B] sum of their squares (=)
    double * count;   // [B] unmasked tokens (=)
};

struct GaeRowsArgs {
    const float * r;
    const float * v;
    const void * mask;
    maporl_mask_type mask_type;
    int64_t T;
    float gamma, gl;  // gl = gamma * lambda
    float * A;
    float * R;
    GaeRowSums sums;
};

// Rows [b0, b1) of a float batch; returns the smallest flat index of a bad mask value in them, or -1.
// gae_whiten_f32: A[i] = mask ? ((X[i] - mean_hi) - mean_lo) * rstd : 0 over [0, n), in float (X may be A); the mean
// as two floats (hi + lo, lo its rounding error) centres as the double mean does (X - hi is exact near the mean).
// reinforce_rows_f32: REINFORCE++ returns for rows [b0, b1) (see maporl_reinforce_returns); same contract.
namespace avx512 {
int64_t reinforce_rows_f32(const float * r, const void * mask, maporl_mask_type mask_type, int64_t T, float gamma,
                           float * G, GaeRowSums sums, int64_t b0, int64_t b1);
int64_t gae_rows_f32(const GaeRowsArgs & g, int64_t b0, int64_t b1);
void gae_whiten_f32(const float * X, float * A, const void * mask, maporl_mask_type mask_type, int64_t n, float mean_hi,
                    float mean_lo, float rstd);
}  // namespace avx512
namespace avx2 {
int64_t reinforce_rows_f32(const float * r, const void * mask, maporl_mask_type mask_type, int64_t T, float gamma,
                           float * G, GaeRowSums sums, int64_t b0, int64_t b1);
int64_t gae_rows_f32(const GaeRowsArgs & g, int64_t b0, int64_t b1);
void gae_whiten_f32(const float * X, float * A, const void * mask, maporl_mask_type mask_type, int64_t n, float mean_hi,
                    float mean_lo, float rstd);
}  // namespace avx2


}  // namespace maporl
