// attention_gqa.cu: CUDA causal attention with grouped key/value heads (native/model/llama_cuda.h; CPU reference
// native/model/attention_gqa.cpp). q [B, T, NH*hs]; k, v [B, T, NKV*hs]; query head h reads kv head h / (NH / NKV).
// Forward: one warp per query row (b, h, t), as attention.cu: lanes take the keys 0..t for the scores (kept in att,
// zeros above the diagonal), a warp max / sum gives the softmax, lanes take the channels for the weighted sum.
// Backward without atomics: pass 1 (warp per query row) writes g[t, t2] = a (datt - sum a datt) / sqrt(hs) to
// scratch and adds dq; pass 2 (warp per key row (b, kv head, t2)) adds dk and dv over the group's query heads in
// order and t >= t2 ascending (a fixed order).
// Rows may be strided (AttentionStrides): the embedded GPT's multi-head attention (attention.cu) runs these kernels on
// its fused qkv rows with NKV = NH.
// NOTE(perf): a warp per row rereads K and V for every query; a flash-style tiled kernel is the upgrade for long
// contexts.
#include <cmath>

#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"
#include "cuda/core/warp.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

constexpr int kWarps = 4;

using cuda_warp::warp_max;
using cuda_warp::warp_sum;

// The warp's scores a[0 .. t] (lanes strided) become probabilities: the warp max of the lanes' maxima mx, exp(a -
// max), their warp sum, then scaled by its inverse.
__device__ void softmax_in_place(float * a, int64_t t, int lane, float mx) {
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t t2 = lane; t2 <= t; t2 += 32) {
        const float e = expf(a[t2] - mx);
        a[t2] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t t2 = lane; t2 <= t; t2 += 32) a[t2] *= inv;
}

__global__ void forward_kernel(float * out, float * att, const float * q, const float * k, const float * v, int64_t B,
                               int64_t T, int64_t NH, int64_t NKV, int64_t hs, float scale, AttentionStrides st) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);  // (b, h, t)
    if (row >= B * NH * T) return;
    const int64_t t = row % T, h = (row / T) % NH, b = row / (T * NH), kvh = h / (NH / NKV);
    const int64_t KC = st.kv;
    const float * qr = q + (b * T + t) * st.q + h * hs;
    const float * kb = k + b * T * KC + kvh * hs;
    const float * vb = v + b * T * KC + kvh * hs;
    float * a = att + row * T;
    float mx = -INFINITY;
    for (int64_t t2 = lane; t2 <= t; t2 += 32) {
        const float * kk = kb + t2 * KC;
        float s = 0.0f;
        for (int64_t i = 0; i < hs; ++i) s += qr[i] * kk[i];
        s *= scale;
        a[t2] = s;
        mx = fmaxf(mx, s);
    }
    softmax_in_place(a, t, lane, mx);
    for (int64_t t2 = t + 1 + lane; t2 < T; t2 += 32) a[t2] = 0.0f;
    __syncwarp();
    float * o = out + (b * T + t) * st.out + h * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float s = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) s += a[t2] * vb[t2 * KC + i];
        o[i] = s;
    }
}

__global__ void backward_query_kernel(float * dq, float * g, const float * dout, const float * k, const float * v,
                                      const float * att, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                      float scale, AttentionStrides st) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= B * NH * T) return;
    const int64_t t = row % T, h = (row / T) % NH, b = row / (T * NH), kvh = h / (NH / NKV);
    const int64_t KC = st.kv;
    const float * kb = k + b * T * KC + kvh * hs;
    const float * vb = v + b * T * KC + kvh * hs;
    const float * a = att + row * T;
    const float * d = dout + (b * T + t) * st.out + h * hs;
    float * gr = g + row * T;
    float dot = 0.0f;
    for (int64_t t2 = lane; t2 <= t; t2 += 32) {
        const float * vv = vb + t2 * KC;
        float s = 0.0f;
        for (int64_t i = 0; i < hs; ++i) s += d[i] * vv[i];
        gr[t2] = s;
        dot += a[t2] * s;
    }
    dot = warp_sum(dot);
    for (int64_t t2 = lane; t2 <= t; t2 += 32) gr[t2] = a[t2] * (gr[t2] - dot) * scale;
    for (int64_t t2 = t + 1 + lane; t2 < T; t2 += 32) gr[t2] = 0.0f;
    __syncwarp();
    float * dqr = dq + (b * T + t) * st.q + h * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float s = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) s += gr[t2] * kb[t2 * KC + i];
        dqr[i] += s;
    }
}

// Warp per key row (b, kv head, t2): dk[t2] = sum_h sum_{t >= t2} g[h, t, t2] q[t, h]; dv likewise with att and dout.
__global__ void backward_key_kernel(float * dk, float * dv, const float * g, const float * dout, const float * q,
                                    const float * att, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs,
                                    AttentionStrides st) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= B * NKV * T) return;
    const int64_t t2 = row % T, kvh = (row / T) % NKV, b = row / (T * NKV), group = NH / NKV;
    float * dkr = dk + (b * T + t2) * st.kv + kvh * hs;
    float * dvr = dv + (b * T + t2) * st.kv + kvh * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float sk = 0.0f, sv = 0.0f;
        for (int64_t j = 0; j < group; ++j) {
            const int64_t h = kvh * group + j, head = (b * NH + h) * T;
            for (int64_t t = t2; t < T; ++t) {
                const int64_t r = (head + t) * T + t2;
                sk += g[r] * q[(b * T + t) * st.q + h * hs + i];
                sv += att[r] * dout[(b * T + t) * st.out + h * hs + i];
            }
        }
        dkr[i] += sk;
        dvr[i] += sv;
    }
}

// kv_store: one thread per (row, kv head, channel) copies the row's key and value into slot rt[n] of cache row rb[n].
__global__ void kv_store_kernel(float * kc, float * vc, const float * k, const float * v, const int32_t * rb,
                                const int32_t * rt, int64_t N, int64_t NKV, int64_t max_len, int64_t hd) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < N * NKV * hd;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % hd, kh = (e / hd) % NKV, n = e / (hd * NKV);
        const int64_t at = (((int64_t)rb[n] * NKV + kh) * max_len + rt[n]) * hd + i;
        kc[at] = k[e];
        vc[at] = v[e];
    }
}

// attention_rows: one warp per (row n, head h) over the cache slots 0 .. rt[n] of cache row rb[n], as forward_kernel
// computes a row (the scores in `scratch` [N, NH, max_len]).
__global__ void rows_kernel(float * out, const float * q, const float * kc, const float * vc, const int32_t * rb,
                            const int32_t * rt, int64_t N, int64_t NH, int64_t NKV, int64_t max_len, int64_t hs,
                            float scale, float * scratch) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);  // (n, h)
    if (row >= N * NH) return;
    const int64_t n = row / NH, h = row % NH, t = rt[n], kvh = h / (NH / NKV);
    const float * qr = q + row * hs;
    const float * kb = kc + ((int64_t)rb[n] * NKV + kvh) * max_len * hs;
    const float * vb = vc + ((int64_t)rb[n] * NKV + kvh) * max_len * hs;
    float * a = scratch + row * max_len;
    float mx = -INFINITY;
    for (int64_t t2 = lane; t2 <= t; t2 += 32) {
        float s = 0.0f;
        for (int64_t i = 0; i < hs; ++i) s += qr[i] * kb[t2 * hs + i];
        s *= scale;
        a[t2] = s;
        mx = fmaxf(mx, s);
    }
    softmax_in_place(a, t, lane, mx);
    __syncwarp();
    float * o = out + row * hs;
    for (int64_t i = lane; i < hs; i += 32) {
        float s = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) s += a[t2] * vb[t2 * hs + i];
        o[i] = s;
    }
}

unsigned warps_grid(int64_t rows, const char * what) {
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > 2147483647LL) throw_error(MAPORL_ERR_INVALID_ARG, "%s: too many rows (%lld)", what, (long long)rows);
    return (unsigned)blocks;
}

// The strides with 0 replaced by the packed widths.
AttentionStrides packed(AttentionStrides s, int64_t NH, int64_t NKV, int64_t hs) {
    if (s.q == 0) s.q = NH * hs;
    if (s.kv == 0) s.kv = NKV * hs;
    if (s.out == 0) s.out = NH * hs;
    return s;
}

void require_groups(int64_t NH, int64_t NKV, const char * what) {
    if (NKV < 1 || NH % NKV != 0)
        throw_error(MAPORL_ERR_INVALID_ARG, "%s: NKV: expected a divisor of NH (%lld), got %lld", what, (long long)NH,
                    (long long)NKV);
}

}  // namespace

void attention_gqa_forward(float * out, float * att, const float * q, const float * k, const float * v, int64_t B,
                           int64_t T, int64_t NH, int64_t NKV, int64_t hs, AttentionStrides strides) {
    if (B * T <= 0) return;
    require_groups(NH, NKV, "attention_gqa_forward");
    const float scale = 1.0f / std::sqrt((float)hs);
    forward_kernel<<<warps_grid(B * NH * T, "attention_gqa_forward"), kWarps * 32>>>(
        out, att, q, k, v, B, T, NH, NKV, hs, scale, packed(strides, NH, NKV, hs));
    MAPORL_CUDA_LAUNCHED("attention_gqa_forward");
}

void attention_gqa_backward(float * dq, float * dk, float * dv, const float * dout, const float * q, const float * k,
                            const float * v, const float * att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t hs, float * scratch, AttentionStrides strides) {
    if (B * T <= 0) return;
    require_groups(NH, NKV, "attention_gqa_backward");
    const float scale = 1.0f / std::sqrt((float)hs);
    const AttentionStrides st = packed(strides, NH, NKV, hs);
    backward_query_kernel<<<warps_grid(B * NH * T, "attention_gqa_backward"), kWarps * 32>>>(
        dq, scratch, dout, k, v, att, B, T, NH, NKV, hs, scale, st);
    MAPORL_CUDA_LAUNCHED("attention_gqa_backward");
    backward_key_kernel<<<warps_grid(B * NKV * T, "attention_gqa_backward"), kWarps * 32>>>(dk, dv, scratch, dout, q,
                                                                                            att, B, T, NH, NKV, hs, st);
    MAPORL_CUDA_LAUNCHED("attention_gqa_backward");
}

void kv_store(float * kc, float * vc, const float * k, const float * v, const int32_t * rb, const int32_t * rt,
              int64_t N, int64_t NKV, int64_t max_len, int64_t hd) {
    if (N * NKV * hd <= 0) return;
    kv_store_kernel<<<grid_for(N * NKV * hd, 256), 256>>>(kc, vc, k, v, rb, rt, N, NKV, max_len, hd);
    MAPORL_CUDA_LAUNCHED("kv_store");
}

void attention_rows(float * out, const float * q, const float * kc, const float * vc, const int32_t * rb,
                    const int32_t * rt, int64_t N, int64_t NH, int64_t NKV, int64_t max_len, int64_t hs,
                    float * scratch) {
    if (N <= 0) return;
    require_groups(NH, NKV, "attention_rows");
    const float scale = 1.0f / std::sqrt((float)hs);
    rows_kernel<<<warps_grid(N * NH, "attention_rows"), kWarps * 32>>>(out, q, kc, vc, rb, rt, N, NH, NKV, max_len, hs,
                                                                       scale, scratch);
    MAPORL_CUDA_LAUNCHED("attention_rows");
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
