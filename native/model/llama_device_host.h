// llama_device_host.h: the op table of llama_device.h on the CPU ("device" memory is host memory), the emulation
// of the CUDA model: the layers are the CPU ops themselves (llama_ops.h, gpt_ops.h), and the kernels that exist only
// on the device (the embedding gather and its bucketed scatter, per-row rotation, the KV-cache store, attention of
// rows over the cache) are written here the way cuda/model/embedding.cu, rope.cu and attention_gqa.cu compute them:
// the same loops per thread, run one after another. DeviceLlama<HostDevice> is the CUDA model's composition on any
// machine: test_llama_device.cpp checks it against llama::Model, and maporl_llama_emulate_device puts it behind the
// C entry points' device branches (the JS tests drive NativePolicy through them).
#pragma once

#include <stdint.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "native/core/core.h"
#include "native/model/gpt_ops.h"
#include "native/model/llama_device.h"
#include "native/model/llama_ops.h"
#include "native/model/w8a8_tile.h"
#include "native/core/bf16.h"
#include "native/core/q8.h"

namespace maporl {
namespace llama {

namespace G = maporl::gpt;
namespace L = maporl::llama;

struct HostDevice {
    // The emulated device's accounting (tests): bytes held now, and an injected failure: the fail_after-th
    // allocation from now (0: none) fails as cudaMalloc's out-of-memory does in cuda/model/gpt.cu, and so do the
    // fail_more allocations right after it.
    struct Counters {
        int64_t live = 0, allocs = 0, fail_after = 0, fail_more = 0;
    };
    static Counters & counters() {
        static Counters c;
        return c;
    }
    static void * alloc(int64_t bytes) {
        Counters & c = counters();
        if (c.fail_after > 0 && --c.fail_after == 0) {
            if (c.fail_more > 0) --c.fail_more, c.fail_after = 1;
            throw_error(MAPORL_ERR_OUT_OF_MEMORY,
                        "out of device memory asking for %lld bytes (an injected failure of the emulated device)",
                        (long long)bytes);
        }
        // A header before the block keeps its size, for the count at release.
        void * p = std::malloc((size_t)bytes + 16);
        if (!p) throw std::bad_alloc();
        *static_cast<int64_t *>(p) = bytes;
        c.live += bytes;
        ++c.allocs;
        return static_cast<char *>(p) + 16;
    }
    static void release(void * p) {
        if (!p) return;
        char * h = static_cast<char *>(p) - 16;
        counters().live -= *reinterpret_cast<int64_t *>(h);
        std::free(h);
    }
    static void to_device(void * d, const void * s, int64_t b) {
        if (b > 0) std::memcpy(d, s, (size_t)b);
    }
    static void to_host(void * d, const void * s, int64_t b) {
        if (b > 0) std::memcpy(d, s, (size_t)b);
    }
    static void zero(void * p, int64_t b) {
        if (b > 0) std::memset(p, 0, (size_t)b);
    }

    static void rmsnorm_forward(float * out, float * rstd, const float * inp, const float * w, int64_t N, int64_t C,
                                double eps) {
        L::rmsnorm_forward<float>(out, rstd, inp, w, N, C, eps);
    }
    static int64_t rmsnorm_scratch(int64_t, int64_t) { return 0; }
    static void rmsnorm_backward(float * dinp, float * dw, const float * dout, const float * inp, const float * w,
                                 const float * rstd, int64_t N, int64_t C, float *) {
        L::rmsnorm_backward<float>(dinp, dw, dout, inp, w, rstd, N, C);
    }
    static void rope_forward(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T,
                             int64_t pos0, int64_t H, int64_t dim) {
        L::rope_forward<float>(out, inp, cos, sin, B, T, pos0, H, dim);
    }
    static void rope_backward(float * dinp, const float * dout, const float * cos, const float * sin, int64_t B,
                              int64_t T, int64_t pos0, int64_t H, int64_t dim) {
        L::rope_backward<float>(dinp, dout, cos, sin, B, T, pos0, H, dim);
    }
    static void swiglu_forward(float * out, const float * gate, const float * up, int64_t n) {
        L::swiglu_forward<float>(out, gate, up, n);
    }
    static void swiglu_backward(float * dgate, float * dup, const float * dout, const float * gate, const float * up,
                                int64_t n) {
        L::swiglu_backward<float>(dgate, dup, dout, gate, up, n);
    }
    static void attention_gqa_forward(float * out, float * att, const float * q, const float * k, const float * v,
                                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
        L::attention_gqa_forward<float>(out, att, q, k, v, B, T, NH, NKV, hs);
    }
    static void attention_gqa_backward(float * dq, float * dk, float * dv, const float * dout, const float * q,
                                       const float * k, const float * v, const float * att, int64_t B, int64_t T,
                                       int64_t NH, int64_t NKV, int64_t hs, float *) {
        L::attention_gqa_backward<float>(dq, dk, dv, dout, q, k, v, att, B, T, NH, NKV, hs);
    }
    static void matmul_forward(float * out, const float * inp, const float * w, const float * bias, int64_t N,
                               int64_t C, int64_t OC) {
        G::matmul_forward<float>(out, inp, w, bias, N, C, OC);
    }
    static void matmul_backward(float * dinp, float * dw, float * db, const float * dout, const float * inp,
                                const float * w, int64_t N, int64_t C, int64_t OC) {
        G::matmul_backward<float>(dinp, dw, db, dout, inp, w, N, C, OC);
    }
    // A frozen base's products: the bfloat16 ones and the int8 input gradient are the CPU model's own (matmul.cpp),
    // whose arithmetic matmul.cu's widening slab loads repeat; the W8A8 forward is the CUDA kernels' decomposition
    // itself (w8a8_tile.h's emulation, through the device scratch xq, xd), which must give the CPU's bits.
    static void matmul_forward_bf16(float * out, const float * inp, const uint16_t * w, const float * bias, int64_t N,
                                    int64_t C, int64_t OC) {
        G::matmul_forward_bf16(out, inp, w, bias, N, C, OC);
    }
    static void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * w, int64_t N, int64_t C,
                                           int64_t OC) {
        G::matmul_backward_input_bf16(dinp, dout, w, N, C, OC);
    }
    static void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd,
                                    const float * bias, int64_t N, int64_t C, int64_t OC, int8_t * xq, float * xd) {
        G::w8a8_tile::emulate(out, inp, pq, pd, bias, N, C, OC, xq, xd);
    }
    static void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd,
                                         int64_t N, int64_t C, int64_t OC) {
        G::matmul_backward_input_q8(dinp, dout, pq, pd, N, C, OC);
    }
    // embedding.cu's bf16 / q8 gathers: each value widened (q * d for int8) exactly.
    static void embedding_forward_bf16(float * out, const int32_t * tok, const uint16_t * w, int64_t N, int64_t C) {
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c) out[n * C + c] = bf16_to_float(w[(int64_t)tok[n] * C + c]);
    }
    static void embedding_forward_q8(float * out, const int32_t * tok, const uint8_t * pq, const uint16_t * pd,
                                     int64_t N, int64_t C) {
        for (int64_t n = 0; n < N; ++n) q8_unpack_row(out + n * C, pq, pd, C, tok[n]);
    }
    static void add(float * out, const float * a, const float * b, int64_t n) {
        for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    }
    static void adamw(float * params, const float * grads, float * m, float * v, int64_t n, const G::AdamW & h,
                      int64_t t, float scale) {
        G::adamw_update<float>(params, grads, m, v, n, h, t, scale);
    }
    static double global_norm(const float * x, int64_t n) { return std::sqrt(G::sum_squares(x, n)); }

    // lora.cu's scale and add_rows.
    static void scale(float * x, float s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }
    static void add_rows(float * out, const float * d, const int32_t * mask, int64_t N, int64_t C) {
        for (int64_t n = 0; n < N; ++n)
            if (mask[n])
                for (int64_t c = 0; c < C; ++c) out[n * C + c] = out[n * C + c] + d[n * C + c];
    }
    // embedding.cu: one thread per (row, channel) copies; the backward gives each token id one thread per channel,
    // adding its rows in ascending order (the CPU model's order: row order).
    static void embedding_forward(float * out, const int32_t * tok, const float * wte, int64_t N, int64_t C) {
        for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * C, wte + (int64_t)tok[n] * C, sizeof(float) * (size_t)C);
    }
    static void embedding_backward(float * dwte, const float * dout, const int32_t * host_tokens, int64_t N,
                                   int64_t C) {
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c) dwte[(int64_t)host_tokens[n] * C + c] += dout[n * C + c];
    }
    // rope.cu's rope_rows: one thread per (row, head, pair), the row's own position.
    static void rope_rows(float * x, const float * cos, const float * sin, const int32_t * pos, int64_t N, int64_t H,
                          int64_t dim) {
        for (int64_t n = 0; n < N; ++n)
            L::rope_forward<float>(x + n * H * dim, x + n * H * dim, cos, sin, 1, 1, pos[n], H, dim);
    }
    // attention_gqa.cu's kv_store: row n's kv heads into slot rt[n] of cache row rb[n] ([batch, NKV, max_len, hd]).
    static void kv_store(float * kc, float * vc, const float * k, const float * v, const int32_t * rb,
                         const int32_t * rt, int64_t N, int64_t NKV, int64_t max_len, int64_t hd) {
        for (int64_t n = 0; n < N; ++n)
            for (int64_t kh = 0; kh < NKV; ++kh) {
                const int64_t at = ((rb[n] * NKV + kh) * max_len + rt[n]) * hd;
                std::memcpy(kc + at, k + (n * NKV + kh) * hd, sizeof(float) * (size_t)hd);
                std::memcpy(vc + at, v + (n * NKV + kh) * hd, sizeof(float) * (size_t)hd);
            }
    }
    // attention_gqa.cu's attention_rows: one block per (row, head): scores over slots 0 .. rt[n] (dot products in
    // ascending i, scaled), their max, exp(s - max) and their sum in slot order, then the weighted values.
    static void attention_rows(float * out, const float * q, const float * kc, const float * vc, const int32_t * rb,
                               const int32_t * rt, int64_t N, int64_t NH, int64_t NKV, int64_t max_len, int64_t hd,
                               float * scratch) {
        const float scale = 1.0f / std::sqrt((float)hd);
        const int64_t group = NH / NKV;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t h = 0; h < NH; ++h) {
                const float * qr = q + (n * NH + h) * hd;
                const float * K = kc + (rb[n] * NKV + h / group) * max_len * hd;
                const float * Vv = vc + (rb[n] * NKV + h / group) * max_len * hd;
                float * s = scratch + (n * NH + h) * max_len;
                float mx = -INFINITY;
                for (int64_t t = 0; t <= rt[n]; ++t) {
                    float d = 0.0f;
                    for (int64_t i = 0; i < hd; ++i) d += qr[i] * K[t * hd + i];
                    s[t] = d * scale;
                    mx = std::fmax(mx, s[t]);
                }
                float sum = 0.0f;
                for (int64_t t = 0; t <= rt[n]; ++t) sum += (s[t] = std::exp(s[t] - mx));
                const float inv = 1.0f / sum;
                float * o = out + (n * NH + h) * hd;
                for (int64_t i = 0; i < hd; ++i) {
                    float acc = 0.0f;
                    for (int64_t t = 0; t <= rt[n]; ++t) acc += s[t] * inv * Vv[t * hd + i];
                    o[i] = acc;
                }
            }
    }
};

}  // namespace llama
}  // namespace maporl
