// attention.cu: CUDA causal multi-head attention from packed qkv (native/model/gpt_cuda.h; CPU reference
// native/model/attention.cpp), and one decoding step against a KV cache. One warp per query row (b, h, t): lanes take the
// keys 0..t in strides of 32 for the scores (kept in att, zeros above the diagonal), a warp max / sum gives the
// softmax, and lanes take the head's channels for the weighted sum of values. The backward has no atomics: pass 1
// (warp per query row) writes the pre-softmax gradient g[t, t2] = a (datt - sum a datt) / sqrt(hs) to scratch and
// adds dq; pass 2 (warp per key row t2) adds dk[t2] = sum_t g[t, t2] q[t] and dv[t2] = sum_t a[t, t2] dout[t]
// over t >= t2 in ascending order.
// NOTE(perf): a warp per row rereads K and V from L2 for every query; a flash-style tiled kernel is the upgrade
// for long contexts. The embedded policy's contexts are short (<= a few hundred).
#include <cmath>

#include "native/model/gpt_cuda.h"
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

__global__ void attention_forward_kernel(float * out, float * att, const float * qkv, int64_t B, int64_t T, int64_t C,
                                         int64_t NH, float scale) {
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);  // (b, h, t)
    if (row >= B * NH * T) return;
    const int64_t t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const int64_t hs = C / NH, C3 = 3 * C;
    const float * base = qkv + b * T * C3 + h * hs;
    float * a = att + row * T;
    attention_row(base + t * C3, base + C, C3, base + 2 * C, C3, t + 1, hs, scale, a, out + (b * T + t) * C + h * hs);
    for (int64_t t2 = t + 1 + (threadIdx.x & 31); t2 < T; t2 += 32) a[t2] = 0.0f;
}

// Pass 1: g[t, 0..t] into scratch (same layout as att), dq[t] += sum_t2 g k[t2].
__global__ void attention_backward_query_kernel(float * dqkv, float * g, const float * dout, const float * qkv,
                                                const float * att, int64_t B, int64_t T, int64_t C, int64_t NH,
                                                float scale) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= B * NH * T) return;
    const int64_t t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const int64_t hs = C / NH, C3 = 3 * C;
    const float * base = qkv + b * T * C3 + h * hs;
    const float * a = att + row * T;
    const float * d = dout + (b * T + t) * C + h * hs;
    float * gr = g + row * T;
    float dot = 0.0f;
    for (int64_t t2 = lane; t2 <= t; t2 += 32) {
        const float * v = base + t2 * C3 + 2 * C;
        float s = 0.0f;
        for (int64_t i = 0; i < hs; ++i) s += d[i] * v[i];
        gr[t2] = s;
        dot += a[t2] * s;
    }
    dot = warp_sum(dot);
    for (int64_t t2 = lane; t2 <= t; t2 += 32) gr[t2] = a[t2] * (gr[t2] - dot) * scale;
    for (int64_t t2 = t + 1 + lane; t2 < T; t2 += 32) gr[t2] = 0.0f;
    __syncwarp();
    float * dq = dqkv + (b * T + t) * C3 + h * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float s = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) s += gr[t2] * base[t2 * C3 + C + i];
        dq[i] += s;
    }
}

// Pass 2: warp per key row (b, h, t2).
__global__ void attention_backward_key_kernel(float * dqkv, const float * g, const float * dout, const float * qkv,
                                              const float * att, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= B * NH * T) return;
    const int64_t t2 = row % T, h = (row / T) % NH, b = row / (T * NH);
    const int64_t hs = C / NH, C3 = 3 * C;
    const float * base = qkv + b * T * C3 + h * hs;
    const int64_t head = (b * NH + h) * T;  // row index of (b, h, 0)
    float * dk = dqkv + (b * T + t2) * C3 + C + h * hs;
    float * dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float sk = 0.0f, sv = 0.0f;
        for (int64_t t = t2; t < T; ++t) {
            const int64_t r = (head + t) * T + t2;
            sk += g[r] * base[t * C3 + i];
            sv += att[r] * dout[(b * T + t) * C + h * hs + i];
        }
        dk[i] += sk;
        dv[i] += sv;
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
    if (B * T <= 0) return;
    const float scale = 1.0f / std::sqrt((float)(C / NH));
    attention_forward_kernel<<<warps_grid(B * NH * T, "attention_forward"), kWarps * 32>>>(out, att, qkv, B, T, C, NH,
                                                                                           scale);
    MAPORL_CUDA_LAUNCHED("attention_forward");
}

void attention_backward(float * dqkv, const float * dout, const float * qkv, const float * att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, float * scratch) {
    if (B * T <= 0) return;
    const float scale = 1.0f / std::sqrt((float)(C / NH));
    const unsigned grid = warps_grid(B * NH * T, "attention_backward");
    attention_backward_query_kernel<<<grid, kWarps * 32>>>(dqkv, scratch, dout, qkv, att, B, T, C, NH, scale);
    MAPORL_CUDA_LAUNCHED("attention_backward");
    attention_backward_key_kernel<<<grid, kWarps * 32>>>(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    MAPORL_CUDA_LAUNCHED("attention_backward");
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
