// w8a8.cu: the int8 base's forward on CUDA (native/model/gpt_cuda.h's matmul_forward_w8a8; the arithmetic: w8a8.h,
// the CPU's at every level). The decomposition (one thread per input block for the quantizer; output-column x
// four-row threads over tiles whose input passes through shared memory) is native/model/w8a8_tile.h's, shared with
// its CPU emulation, which the emulated device runs (llama_device_host.h): these kernels are its loops with the
// threads and barriers made real.
// NOTE(perf): no tensor cores (int8 MMA), no reuse of a weight word across more than four rows per thread. Not yet
// run on a GPU in this project's CI; test_w8a8_cuda compares it with the CPU where one is visible and times it.
#include <cuda_fp16.h>

#include <type_traits>

#include "native/model/gpt_cuda.h"
#include "native/model/w8a8_tile.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

namespace W = w8a8_tile;

__global__ void w8a8_quantize_kernel(const float * __restrict__ x, int64_t blocks, int8_t * __restrict__ q,
                                     float * __restrict__ d) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < blocks; i += (int64_t)gridDim.x * blockDim.x)
        W::quantize_block(x, i, q, d);
}

template <int TO>
__global__ void __launch_bounds__(W::kThreads)
    w8a8_gemm_kernel(const int8_t * __restrict__ xq, const float * __restrict__ xd, const uint8_t * __restrict__ pq,
                     const uint16_t * __restrict__ pd, const float * __restrict__ bias, float * __restrict__ out,
                     int64_t N, int64_t C, int64_t OC, bool rows_on_x) {
    __shared__ W::Tile<TO> sh;
    const int tid = threadIdx.x;
    const int64_t ot = rows_on_x ? blockIdx.y : blockIdx.x, nt = rows_on_x ? blockIdx.x : blockIdx.y;
    const int64_t o = ot * TO + tid % TO, n0 = nt * W::Tile<TO>::TN;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b0 = 0; b0 < C / 32; b0 += W::kChunk) {
        W::load_chunk<TO>(sh, tid, xq, xd, N, C, n0, b0);
        __syncthreads();
        if (o < OC) W::compute_chunk<TO>(sh, tid, pq, pd, C, o, b0, acc);
        __syncthreads();
    }
    if (o < OC) W::store<TO>(tid, acc, bias, out, N, OC, o, n0);
}

}  // namespace

void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd, const float * bias,
                         int64_t N, int64_t C, int64_t OC, int8_t * xq, float * xd) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0 || C % 32 != 0)
        throw_error(MAPORL_ERR_INTERNAL,
                    "matmul_forward_w8a8: the weight's rows have %lld values, not a multiple of 32", (long long)C);
    const int64_t blocks = N * (C / 32);
    w8a8_quantize_kernel<<<grid_for(blocks, W::kThreads), W::kThreads>>>(inp, blocks, xq, xd);
    MAPORL_CUDA_LAUNCHED("matmul_forward_w8a8");
    // The larger tile count goes on gridDim.x (2^31 - 1 blocks), the other on y (65,535), as the SGEMM's.
    auto launch = [&](auto tile) {
        constexpr int TO = decltype(tile)::value, TN = W::Tile<TO>::TN;
        const int64_t ct = (OC + TO - 1) / TO, rt = (N + TN - 1) / TN;
        const bool rows_on_x = rt > ct;
        const unsigned gx = grid_dim(rows_on_x ? rt : ct, "matmul_forward_w8a8"),
                       gy = grid_dim(rows_on_x ? ct : rt, "matmul_forward_w8a8", kGridYZ);
        w8a8_gemm_kernel<TO><<<dim3(gx, gy), W::kThreads>>>(xq, xd, pq, pd, bias, out, N, C, OC, rows_on_x);
    };
    if (W::narrow(N))
        launch(std::integral_constant<int, 256>{});
    else
        launch(std::integral_constant<int, 64>{});
    MAPORL_CUDA_LAUNCHED("matmul_forward_w8a8");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
