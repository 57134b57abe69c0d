// attention.cu: CUDA causal multi-head attention from packed qkv (native/model/gpt_cuda.h; CPU reference
// native/model/attention.cpp), and one decoding step against a KV cache. The forward and backward are the grouped-query
// kernels of attention_gqa.cu with as many key/value heads as heads, on the fused qkv rows (q, k, v at offsets 0, C,
// 2C of rows 3C wide). The decoding step: one warp per (row, head); lanes take the keys 0..pos in strides of 32 for
// the scores, a warp max / sum gives the softmax, and lanes take the head's channels for the weighted sum of values.
#include <cmath>

#include "native/model/gpt_cuda.h"
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"
#include "cuda/core/warp.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr int kWarps = 4;

using cuda_warp::warp_max;
using cuda_warp::warp_sum;

// One query row against `len` keys: att[0..len) = softmax(q . k / sqrt(hs)); out[0..hs) = sum att v. The whole
// warp calls it.
__device__ void attention_row(const float * q, const float * k, int64_t kstride, const float * v, int64_t vstride,
                              int64_t len, int64_t hs, float scale, float * att, float * out) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int64_t t2 = lane; t2 < len; t2 += 32) {
        const float * kk = k + t2 * kstride;
        float s = 0.0f;
        for (int64_t i = 0; i < hs; ++i) s += q[i] * kk[i];
        s *= scale;
        att[t2] = s;
        mx = fmaxf(mx, s);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t t2 = lane; t2 < len; t2 += 32) {
        const float e = expf(att[t2] - mx);
        att[t2] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t t2 = lane; t2 < len; t2 += 32) att[t2] *= inv;
    __syncwarp();
    for (int64_t i = lane; i < hs; i += 32) {
        float o = 0.0f;
        for (int64_t t2 = 0; t2 < len; ++t2) o += att[t2] * v[t2 * vstride + i];
        out[i] = o;
    }
}

__global__ void attention_decode_kernel(float * out, float * kcache, float * vcache, const float * qkv, int64_t batch,
                                        int64_t max_len, int64_t pos, int64_t C, int64_t NH, float scale,
                                        float * scratch) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);  // (b, h)
    if (row >= batch * NH) return;
    const int64_t h = row % NH, b = row / NH, hs = C / NH;
    float * kc = kcache + row * max_len * hs;
    float * vc = vcache + row * max_len * hs;
    const float * q = qkv + b * 3 * C + h * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        kc[pos * hs + i] = q[C + i];
        vc[pos * hs + i] = q[2 * C + i];
    }
    __syncwarp();
    attention_row(q, kc, hs, vc, hs, pos + 1, hs, scale, scratch + row * max_len, out + b * C + h * hs);
}

unsigned warps_grid(int64_t rows, const char * what) {
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > 2147483647LL) throw_error(MAPORL_ERR_INVALID_ARG, "%s: too many rows (%lld)", what, (long long)rows);
    return (unsigned)blocks;
}

}  // namespace

void attention_forward(float * out, float * att, const float * qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int64_t hs = C / NH;
    llama::cuda::attention_gqa_forward(out, att, qkv, qkv + C, qkv + 2 * C, B, T, NH, NH, hs, {3 * C, 3 * C, C});
}

void attention_backward(float * dqkv, const float * dout, const float * qkv, const float * att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, float * scratch) {
    const int64_t hs = C / NH;
    llama::cuda::attention_gqa_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, att, B, T, NH,
                                        NH, hs, scratch, {3 * C, 3 * C, C});
}

void attention_decode(float * out, float * kcache, float * vcache, const float * qkv, int64_t batch, int64_t max_len,
                      int64_t pos, int64_t C, int64_t NH, float * scratch) {
    if (batch <= 0) return;
    const float scale = 1.0f / std::sqrt((float)(C / NH));
    attention_decode_kernel<<<warps_grid(batch * NH, "attention_decode"), kWarps * 32>>>(
        out, kcache, vcache, qkv, batch, max_len, pos, C, NH, scale, scratch);
    MAPORL_CUDA_LAUNCHED("attention_decode");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
