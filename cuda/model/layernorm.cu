// layernorm.cu: CUDA LayerNorm forward / backward (native/model/gpt_cuda.h; CPU reference native/model/layernorm.cpp):
// eps 1e-5, biased variance, mean and rstd saved for the backward. One warp per row (two passes over the row:
// mean, then centred variance, each lane's partial in float, the warp sum in a fixed butterfly order). The
// weight / bias gradients are sums over rows without atomics: one thread per (chunk of kChunk rows, channel)
// writes a partial, then one thread per channel adds the partials in chunk order.
#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"
#include "cuda/core/warp.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr int kChunk = 64;
constexpr int kWarps = 8;

using cuda_warp::warp_sum;

__global__ void layernorm_forward_kernel(float * out, float * mean, float * rstd, const float * inp, const float * w,
                                         const float * b, int64_t N, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    const float * x = inp + n * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int64_t c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    const float r = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
    float * o = out + n * C;
    for (int64_t c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

__global__ void layernorm_backward_dinp_kernel(float * dinp, const float * dout, const float * inp, const float * w,
                                               const float * mean, const float * rstd, int64_t N, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    const float * x = inp + n * C;
    const float * d = dout + n * C;
    const float m = mean[n], r = rstd[n];
    float dm = 0.0f, dnm = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r, dn = w[c] * d[c];
        dm += dn;
        dnm += dn * norm;
    }
    const float a = warp_sum(dm) / (float)C, bq = warp_sum(dnm) / (float)C;
    float * di = dinp + n * C;
    for (int64_t c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r, dn = w[c] * d[c];
        di[c] += (dn - a - norm * bq) * r;
    }
}

// partials [2, chunks, C]: dweight then dbias.
__global__ void layernorm_backward_partials_kernel(float * partials, const float * dout, const float * inp,
                                                   const float * mean, const float * rstd, int64_t N, int64_t C) {
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    const int64_t k = blockIdx.y;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        const int64_t n1 = min(N, (k + 1) * kChunk);
        for (int64_t n = k * kChunk; n < n1; ++n) {
            const float d = dout[n * C + c];
            sw += d * (inp[n * C + c] - mean[n]) * rstd[n];
            sb += d;
        }
        partials[k * C + c] = sw;
        partials[(chunks + k) * C + c] = sb;
    }
}

__global__ void layernorm_backward_reduce_kernel(float * dweight, float * dbias, const float * partials, int64_t chunks,
                                                 int64_t C) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int64_t k = 0; k < chunks; ++k) {
            sw += partials[k * C + c];
            sb += partials[(chunks + k) * C + c];
        }
        dweight[c] += sw;
        dbias[c] += sb;
    }
}

}  // namespace

void layernorm_forward(float * out, float * mean, float * rstd, const float * inp, const float * weight,
                       const float * bias, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    layernorm_forward_kernel<<<grid_dim((N + kWarps - 1) / kWarps, "layernorm_forward"), kWarps * 32>>>(
        out, mean, rstd, inp, weight, bias, N, C);
    MAPORL_CUDA_LAUNCHED("layernorm_forward");
}

int64_t layernorm_scratch(int64_t N, int64_t C) { return 2 * ((N + kChunk - 1) / kChunk) * C; }

void layernorm_backward(float * dinp, float * dweight, float * dbias, const float * dout, const float * inp,
                        const float * weight, const float * mean, const float * rstd, int64_t N, int64_t C,
                        float * scratch) {
    if (N <= 0 || C <= 0) return;
    layernorm_backward_dinp_kernel<<<grid_dim((N + kWarps - 1) / kWarps, "layernorm_backward"), kWarps * 32>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    MAPORL_CUDA_LAUNCHED("layernorm_backward");
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    if (chunks > 65535)
        throw_error(MAPORL_ERR_INVALID_ARG, "layernorm_backward: N: expected <= %d rows, got %lld", 65535 * kChunk,
                    (long long)N);
    const dim3 grid((unsigned)((C + 127) / 128), (unsigned)chunks);
    layernorm_backward_partials_kernel<<<grid, 128>>>(scratch, dout, inp, mean, rstd, N, C);
    MAPORL_CUDA_LAUNCHED("layernorm_backward");
    layernorm_backward_reduce_kernel<<<grid_for(C, 128), 128>>>(dweight, dbias, scratch, chunks, C);
    MAPORL_CUDA_LAUNCHED("layernorm_backward");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
