// rollout_correction.cu: the CUDA rollout correction, one thread per row running rc_row (rollout_correction.h,
// the CPU kernel's row function: the same operations in the same order; CUDA's exp and log may round differently
// from the host's by an ulp); the rows' sums come back to
// the host and rc_finish combines them in row order as the CPU driver does; batch normalisation is an elementwise
// kernel. The correction reads each log-prob twice and is a small part of a training step; a row-parallel version
// is not written (no GPU has profiled this one).
#include <vector>

#include "cuda/core/common.cuh"
#include "native/rl/rollout_correction.h"

namespace maporl {
namespace {

template <typename M>
__global__ void rc_rows_kernel(const float * __restrict__ old, const float * __restrict__ roll,
                               const M * __restrict__ mask, int64_t B, int64_t T, maporl_rollout_correction_params p,
                               float * __restrict__ w, float * __restrict__ keep, RcRow * __restrict__ rows) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    rows[b] = rc_row<M>(p, old + b * T, roll + b * T, mask + b * T, T, w ? w + b * T : nullptr,
                        keep ? keep + b * T : nullptr);
}

__global__ void rc_scale_kernel(float * __restrict__ w, int64_t n, double f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = (float)((double)w[i] / f);
}

}  // namespace

maporl_status rollout_correction_cuda(const float * old, const float * roll, const void * mask,
                                      maporl_mask_type mask_type, int64_t B, int64_t T,
                                      const maporl_rollout_correction_params & p, float * weights, float * keep,
                                      maporl_rollout_correction_stats * stats) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("rollout_correction"));
    float * w = p.is != MAPORL_ROLLOUT_IS_NONE ? weights : nullptr;
    std::vector<RcRow> rows((size_t)B);
    if (B > 0) {
        DeviceBuffer d_rows;
        MAPORL_RETURN_IF_ERROR(d_rows.alloc(sizeof(RcRow) * (size_t)B));
        constexpr int kThreads = 128;
        const int64_t blocks = (B + kThreads - 1) / kThreads;
        MAPORL_RETURN_IF_ERROR(check_grid(blocks, "rollout_correction"));
        if (mask_type == MAPORL_MASK_U8)
            rc_rows_kernel<uint8_t><<<(unsigned)blocks, kThreads>>>(old, roll, (const uint8_t *)mask, B, T, p, w, keep,
                                                                    d_rows.as<RcRow>());
        else
            rc_rows_kernel<float>
                <<<(unsigned)blocks, kThreads>>>(old, roll, (const float *)mask, B, T, p, w, keep, d_rows.as<RcRow>());
        MAPORL_CUDA_CALL(cudaPeekAtLastError());
        MAPORL_CUDA_CALL(cudaMemcpy(rows.data(), d_rows.ptr, sizeof(RcRow) * (size_t)B, cudaMemcpyDeviceToHost));
    }
    for (int64_t b = 0; b < B; ++b)
        if (rows[(size_t)b].bad_mask)
            return set_error(MAPORL_ERR_INVALID_ARG, "mask: expected 0 or 1 (row %lld)", (long long)b);
    const double f = rc_finish(p, rows.data(), B, stats);
    if (w && f != 1.0) {
        rc_scale_kernel<<<grid_for(B * T, 256), 256>>>(w, B * T, f);
        MAPORL_CUDA_CALL(cudaPeekAtLastError());
        MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    }
    return MAPORL_OK;
}

}  // namespace maporl
