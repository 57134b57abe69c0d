// rmsnorm.cu: CUDA RMSNorm forward / backward (native/model/llama_cuda.h; CPU reference native/model/rmsnorm.cpp).
// One warp per row: the mean square in float, the warp sum in a fixed butterfly order, rstd saved. The weight
// gradient is a sum over rows without atomics: one thread per (chunk of kChunk rows, channel) writes a partial, then
// one thread per channel adds the partials in chunk order (as layernorm.cu).
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"
#include "cuda/core/warp.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

constexpr int kChunk = 64;
constexpr int kWarps = 8;

using cuda_warp::warp_sum;

__global__ void rmsnorm_forward_kernel(float * out, float * rstd, const float * inp, const float * w, int64_t N,
                                       int64_t C, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    const float * x = inp + n * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) s += x[c] * x[c];
    const float r = rsqrtf(warp_sum(s) / (float)C + eps);
    __syncwarp();  // (out may be inp: every lane has read its row before any writes)
    float * o = out + n * C;
    for (int64_t c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
    if (lane == 0) rstd[n] = r;
}

// dx = r * (w dout - x r^2 mean(w dout x)).
__global__ void rmsnorm_backward_dinp_kernel(float * dinp, const float * dout, const float * inp, const float * w,
                                             const float * rstd, int64_t N, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    const float * x = inp + n * C;
    const float * d = dout + n * C;
    const float r = rstd[n];
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) s += w[c] * d[c] * x[c];
    const float m = warp_sum(s) / (float)C;
    float * di = dinp + n * C;
    for (int64_t c = lane; c < C; c += 32) di[c] += r * (w[c] * d[c] - x[c] * r * r * m);
}

__global__ void rmsnorm_backward_partials_kernel(float * partials, const float * dout, const float * inp,
                                                 const float * rstd, int64_t N, int64_t C) {
    const int64_t k = blockIdx.y;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        float sw = 0.0f;
        const int64_t n1 = min(N, (k + 1) * kChunk);
        for (int64_t n = k * kChunk; n < n1; ++n) sw += dout[n * C + c] * inp[n * C + c] * rstd[n];
        partials[k * C + c] = sw;
    }
}

__global__ void rmsnorm_backward_reduce_kernel(float * dweight, const float * partials, int64_t chunks, int64_t C) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t k = 0; k < chunks; ++k) s += partials[k * C + c];
        dweight[c] += s;
    }
}

unsigned row_grid(int64_t N, const char * what) {
    const int64_t blocks = (N + kWarps - 1) / kWarps;
    if (blocks > 2147483647LL) throw_error(MAPORL_ERR_INVALID_ARG, "%s: too many rows (%lld)", what, (long long)N);
    return (unsigned)blocks;
}

}  // namespace

void rmsnorm_forward(float * out, float * rstd, const float * inp, const float * weight, int64_t N, int64_t C,
                     double eps) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_forward_kernel<<<row_grid(N, "rmsnorm_forward"), kWarps * 32>>>(out, rstd, inp, weight, N, C, (float)eps);
    MAPORL_CUDA_LAUNCHED("rmsnorm_forward");
}

int64_t rmsnorm_scratch(int64_t N, int64_t C) { return ((N + kChunk - 1) / kChunk) * C; }

void rmsnorm_backward(float * dinp, float * dweight, const float * dout, const float * inp, const float * weight,
                      const float * rstd, int64_t N, int64_t C, float * scratch) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_backward_dinp_kernel<<<row_grid(N, "rmsnorm_backward"), kWarps * 32>>>(dinp, dout, inp, weight, rstd, N, C);
    MAPORL_CUDA_LAUNCHED("rmsnorm_backward");
    if (!dweight) return;  // (a frozen weight)
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    if (chunks > 65535)
        throw_error(MAPORL_ERR_INVALID_ARG, "rmsnorm_backward: N: expected <= %d rows, got %lld", 65535 * kChunk,
                    (long long)N);
    const dim3 grid((unsigned)((C + 127) / 128), (unsigned)chunks);
    rmsnorm_backward_partials_kernel<<<grid, 128>>>(scratch, dout, inp, rstd, N, C);
    MAPORL_CUDA_LAUNCHED("rmsnorm_backward");
    rmsnorm_backward_reduce_kernel<<<grid_for(C, 128), 128>>>(dweight, scratch, chunks, C);
    MAPORL_CUDA_LAUNCHED("rmsnorm_backward");
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
