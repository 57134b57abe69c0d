// gae.h: generalized advantage estimation with verl's semantics (compute_gae_advantage_return): reverse
// scan over T per row, masked positions skipped (the carries pass through), bootstrap 0 after the last step,
// returns = advantages + values, optional whitening over all unmasked tokens. See maporl.h for the contract.
// CPU: gae.cpp (the reference; threaded over row blocks, vectorised across rows). CUDA: cuda/gae.cu.
#pragma once

#include <cstdint>

#include "gae_scan.h"
#include "maporl.h"

namespace maporl {

// Rows per CPU block: the kernel runs the recursion for this many rows at once, one per SIMD lane.
constexpr int kGaeLanes = 16;

// Host pointers. T_ is the storage and compute type (float, or double for reference tests).
// Throws Error on a mask value other than 0/1.
template <typename F>
void gae_cpu(const F * rewards, const F * values, const void * mask, maporl_mask_type mask_type, int64_t B,
             int64_t T, F gamma, F lambda, bool whiten, F * advantages, F * returns);

// Device pointers; same semantics. Returns MAPORL_ERR_NO_DEVICE in a build without CUDA.
maporl_status gae_cuda(const float * rewards, const float * values, const void * mask, maporl_mask_type mask_type,
                       int64_t B, int64_t T, float gamma, float lambda, bool whiten, float * advantages,
                       float * returns);

// Whitening statistics (maporl::whiten_stats) live in gae_scan.h, shared with CUDA.


}  // namespace maporl
