// common.cuh: shared CUDA helpers. MAPORL_CUDA_CALL returns a status with CUDA's message (it never exits,
// unlike llm.c's cudaCheck); DeviceBuffer frees on every path; require_device answers MAPORL_ERR_NO_DEVICE
// when no GPU or driver is present.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "native/core/core.h"

#define MAPORL_CUDA_CALL(expr)                                                                                    \
    do {                                                                                                          \
        cudaError_t maporl_e_ = (expr);                                                                           \
        if (maporl_e_ != cudaSuccess) {                                                                           \
            (void)cudaGetLastError();                                                                             \
            return ::maporl::set_error(MAPORL_ERR_CUDA, "%s failed: %s (%s)", #expr, cudaGetErrorName(maporl_e_), \
                                       cudaGetErrorString(maporl_e_));                                            \
        }                                                                                                         \
    } while (0)

// The throwing twin, for host code that runs inside maporl::guarded (the GPT ops and model).
#define MAPORL_CUDA_THROW(expr)                                                                              \
    do {                                                                                                     \
        cudaError_t maporl_e_ = (expr);                                                                      \
        if (maporl_e_ != cudaSuccess) {                                                                      \
            (void)cudaGetLastError();                                                                        \
            ::maporl::throw_error(MAPORL_ERR_CUDA, "%s failed: %s (%s)", #expr, cudaGetErrorName(maporl_e_), \
                                  cudaGetErrorString(maporl_e_));                                            \
        }                                                                                                    \
    } while (0)

// After a kernel launch: a bad launch configuration throws here (execution errors surface at the next sync).
// Each one is counted (cuda_launches: bench/device/bench_device.cu reports kernel launches per decode step).
namespace maporl {
inline std::atomic<int64_t> cuda_launches{0};
}
#define MAPORL_CUDA_LAUNCHED(what)                                       \
    do {                                                                 \
        ::maporl::cuda_launches.fetch_add(1, std::memory_order_relaxed); \
        MAPORL_CUDA_THROW(cudaPeekAtLastError());                        \
    } while (0)

#define MAPORL_RETURN_IF_ERROR(expr)                  \
    do {                                              \
        maporl_status maporl_s_ = (expr);             \
        if (maporl_s_ != MAPORL_OK) return maporl_s_; \
    } while (0)

namespace maporl {

// MAPORL_OK when at least one device is usable; else MAPORL_ERR_NO_DEVICE naming `what`.
maporl_status cuda_require_device(const char * what);

// Owns a device allocation; frees it on scope exit.
struct DeviceBuffer {
    void * ptr = nullptr;
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer & operator=(const DeviceBuffer &) = delete;
    ~DeviceBuffer() {
        if (ptr) cudaFree(ptr);
    }
    maporl_status alloc(size_t bytes) {
        MAPORL_CUDA_CALL(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
        return MAPORL_OK;
    }
    template <typename X>
    X * as() const {
        return static_cast<X *>(ptr);
    }
};

// Block-wide reductions (every thread gets the result); `sh` holds one value per warp (32 entries). The sum is
// over warps in a fixed order, so it does not depend on scheduling.
template <typename T>
__device__ T block_sum(T v, T * sh) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T s = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += sh[w];
    return s;
}

template <typename T>
__device__ T block_max(T v, T * sh) {
    for (int d = 16; d > 0; d >>= 1) {
        const T o = __shfl_down_sync(0xffffffffu, v, d);
        v = o > v ? o : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T s = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) s = sh[w] > s ? sh[w] : s;
    return s;
}

}  // namespace maporl

namespace maporl {

// gridDim.x holds up to 2^31 - 1 blocks, y and z 65,535: a launch of more is an error naming `what`, not a cast to
// unsigned that wraps (or a launch that fails with a bare "invalid configuration").
constexpr int64_t kGridX = 2147483647, kGridYZ = 65535;

inline maporl_status check_grid(int64_t blocks, const char * what, int64_t limit = kGridX) {
    if (blocks > limit)
        return set_error(MAPORL_ERR_INVALID_ARG, "%s: %lld blocks, over CUDA's grid limit of %lld (split the call)",
                         what, (long long)blocks, (long long)limit);
    return MAPORL_OK;
}

// The throwing twin, for host code inside maporl::guarded; returns the count as gridDim takes it.
inline unsigned grid_dim(int64_t blocks, const char * what, int64_t limit = kGridX) {
    if (blocks > limit)
        throw_error(MAPORL_ERR_INVALID_ARG, "%s: %lld blocks, over CUDA's grid limit of %lld (split the call)", what,
                    (long long)blocks, (long long)limit);
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

// Blocks for a grid-stride loop over n elements with `threads` per block (at least 1, at most 65535 * 16).
inline unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 1048560 ? 1048560 : b));
}

}  // namespace maporl
