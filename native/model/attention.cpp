// attention.cpp: causal multi-head self-attention from packed qkv (gpt_ops.h). Scores are scaled by
// 1/sqrt(head size); the softmax row t covers keys 0..t and is kept in att for the backward (entries above the
// diagonal are 0). Both passes split over (batch, head) pairs: a pair touches only its own head's columns, so
// there are no races and every sum runs in index order.
#include <cmath>
#include <type_traits>
#include <vector>

#include "native/model/gpt_ops.h"
#include "native/core/isa.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace gpt {

AttentionRows attention_rows() {
    switch (active_isa()) {
        case Isa::Avx512:
            return {avx512::attention_row_f32, avx512::attention_row_backward_f32, avx512::attention_rows_f32};
        case Isa::Avx2:
            return {avx2::attention_row_f32, avx2::attention_row_backward_f32, avx2::attention_rows_f32};
        default:
            return {nullptr, nullptr, nullptr};
    }
}

template <typename F>
void attention_forward(F * out, F * att, const F * qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const F scale = F(1) / (F)std::sqrt((double)hs);
    if constexpr (std::is_same<F, float>::value) {
        if (const auto rows = attention_rows().forward_rows) {
            parallel_for(B * NH, 1, [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) {
                    const int64_t b = p / NH, h = p % NH;
                    for (int64_t t = 0; t < T; t += kAttentionRowBlock) {
                        const int64_t R = T - t < kAttentionRowBlock ? T - t : kAttentionRowBlock;
                        F * a = att + ((b * NH + h) * T + t) * T;
                        rows(qkv + (b * T + t) * C3 + h * hs, C3, qkv + b * T * C3 + C + h * hs, C3,
                             qkv + b * T * C3 + 2 * C + h * hs, C3, t + 1, R, hs, scale, a, T,
                             out + (b * T + t) * C + h * hs, C);
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t t2 = t + r + 1; t2 < T; ++t2) a[r * T + t2] = F(0);
                    }
                }
            });
            return;
        }
    }
    parallel_for(B * NH, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p / NH, h = p % NH;
            for (int64_t t = 0; t < T; ++t) {
                const F * q = qkv + (b * T + t) * C3 + h * hs;
                F * a = att + ((b * NH + h) * T + t) * T;
                F mx = -INFINITY;
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    const F * k = qkv + (b * T + t2) * C3 + C + h * hs;
                    F s = F(0);
                    for (int64_t i = 0; i < hs; ++i) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    mx = s > mx ? s : mx;
                }
                F sum = F(0);
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    const F e = (F)std::exp((double)(a[t2] - mx));
                    a[t2] = e;
                    sum += e;
                }
                const F inv = F(1) / sum;
                for (int64_t t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
                for (int64_t t2 = t + 1; t2 < T; ++t2) a[t2] = F(0);
                F * o = out + (b * T + t) * C + h * hs;
                for (int64_t i = 0; i < hs; ++i) o[i] = F(0);
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    const F * v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    const F w = a[t2];
                    for (int64_t i = 0; i < hs; ++i) o[i] += w * v[i];
                }
            }
        }
    });
}

template <typename F>
void attention_backward(F * dqkv, const F * dout, const F * qkv, const F * att, int64_t B, int64_t T, int64_t C,
                        int64_t NH) {
    const int64_t hs = C / NH, C3 = 3 * C;
    const F scale = F(1) / (F)std::sqrt((double)hs);
    if constexpr (std::is_same<F, float>::value) {
        if (const auto row = attention_rows().backward) {
            parallel_for(B * NH, 1, [&](int64_t p0, int64_t p1) {
                std::vector<F> datt((size_t)T);
                for (int64_t p = p0; p < p1; ++p) {
                    const int64_t b = p / NH, h = p % NH;
                    const int64_t q0 = b * T * C3 + h * hs;
                    for (int64_t t = 0; t < T; ++t)
                        row(qkv + q0 + t * C3, dqkv + q0 + t * C3, qkv + q0 + C, dqkv + q0 + C, C3, qkv + q0 + 2 * C,
                            dqkv + q0 + 2 * C, C3, att + ((b * NH + h) * T + t) * T, dout + (b * T + t) * C + h * hs,
                            t + 1, hs, scale, datt.data());
                }
            });
            return;
        }
    }
    parallel_for(B * NH, 1, [&](int64_t p0, int64_t p1) {
        std::vector<F> datt((size_t)T);
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p / NH, h = p % NH;
            for (int64_t t = 0; t < T; ++t) {
                const F * a = att + ((b * NH + h) * T + t) * T;
                const F * d = dout + (b * T + t) * C + h * hs;
                F dot = F(0);
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    const F * v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    F * dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
                    F s = F(0);
                    for (int64_t i = 0; i < hs; ++i) {
                        s += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[(size_t)t2] = s;
                    dot += a[t2] * s;
                }
                const F * q = qkv + (b * T + t) * C3 + h * hs;
                F * dq = dqkv + (b * T + t) * C3 + h * hs;
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    const F g = a[t2] * (datt[(size_t)t2] - dot) * scale;
                    const F * k = qkv + (b * T + t2) * C3 + C + h * hs;
                    F * dk = dqkv + (b * T + t2) * C3 + C + h * hs;
                    for (int64_t i = 0; i < hs; ++i) {
                        dq[i] += g * k[i];
                        dk[i] += g * q[i];
                    }
                }
            }
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                                                    \
    template void attention_forward<F>(F *, F *, const F *, int64_t, int64_t, int64_t, int64_t); \
    template void attention_backward<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
