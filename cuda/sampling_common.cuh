// sampling_common.cuh: the pieces the one-block sampling kernel (sampling.cu) and the vocabulary split
// (sampling_split.cu) share: the order-preserving key, block reductions, the ordered n-th-match scan, and a row's
// parameters.
#pragma once

#include <climits>
#include <cstdint>

#include "../native/sampling.h"
#include "common.cuh"

namespace maporl {
namespace sampling_cuda {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t okey(float z) {
    const uint32_t b = __float_as_uint(z);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ inline long long block_min(long long v, long long * sh) {
    for (int d = 16; d > 0; d >>= 1) v = min(v, __shfl_down_sync(kFull, v, d));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    long long s = LLONG_MAX;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s = min(s, sh[w]);
    return s;
}

// Index of the m-th (1-based) element of [i0, i1) satisfying pred, in index order; i1 if there are fewer.
template <class Pred>
__device__ int64_t nth_index(int64_t i0, int64_t i1, int64_t m, Pred pred, int * shw) {
    __shared__ long long found, seen;
    if (threadIdx.x == 0) { found = i1; seen = 0; }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t base = i0; base < i1; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const bool f = i < i1 && pred(i);
        const unsigned ballot = __ballot_sync(kFull, f);
        if (lane == 0) shw[warp] = __popc(ballot);
        __syncthreads();
        long long off = seen, total = 0;
        for (int w = 0; w < nw; ++w) {
            if (w < warp) off += shw[w];
            total += shw[w];
        }
        const long long rank = off + __popc(ballot & ((1u << lane) - 1u));
        if (f && rank == m - 1) found = i;
        __syncthreads();
        if (threadIdx.x == 0) seen += total;
        __syncthreads();
        if (found != i1) break;
    }
    return found;
}

struct RowP {
    float T;
    int32_t k;
    float p, minp;
    uint64_t seed;
    int64_t pos;
};

__device__ inline RowP row_params(const maporl_sample_params & P, int64_t b) {
    RowP r;
    r.T = P.temperature ? P.temperature[b] : P.temperature_all;
    r.k = P.top_k ? P.top_k[b] : P.top_k_all;
    r.p = P.top_p ? P.top_p[b] : P.top_p_all;
    r.minp = P.min_p ? P.min_p[b] : P.min_p_all;
    r.seed = P.seed ? P.seed[b] : P.seed_all;
    r.pos = P.position ? P.position[b] : P.position_all;
    return r;
}

}  // namespace sampling_cuda
}  // namespace maporl
