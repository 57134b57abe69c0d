// attention_gqa.cpp: causal attention with grouped key/value heads (llama_ops.h), the Llama family's attention
// (GQA; MQA when NKV = 1; plain multi-head when NKV = NH). The forward splits over (batch, query head) pairs; the
// backward over (batch, kv head) groups, running the group's query heads in order, so the shared dk / dv rows
// are summed without races in a fixed order. For float the rows are the SIMD rows of attention_vec.inc (the same
// ones the KV-cache decoder calls), so cached decoding computes exactly what the full forward computes.
#include <cmath>
#include <type_traits>
#include <vector>

#include "native/model/gpt_ops.h"
#include "native/model/llama_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace llama {

template <typename F>
void attention_gqa_forward(F * out, F * att, const F * q, const F * k, const F * v, int64_t B, int64_t T, int64_t NH,
                           int64_t NKV, int64_t hs) {
    const int64_t QC = NH * hs, KC = NKV * hs, group = NH / NKV;
    const F scale = F(1) / (F)std::sqrt((double)hs);
    [[maybe_unused]] const auto rows = gpt::attention_rows();
    parallel_for(B * NH, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p / NH, h = p % NH, kh = h / group;
            const F * kb = k + b * T * KC + kh * hs;
            const F * vb = v + b * T * KC + kh * hs;
            if constexpr (std::is_same<F, float>::value) {
                if (rows.forward_rows) {  // blocks of query rows (each row's floats those of rows.forward, as the decoder's)
                    for (int64_t t = 0; t < T; t += gpt::kAttentionRowBlock) {
                        const int64_t R = T - t < gpt::kAttentionRowBlock ? T - t : gpt::kAttentionRowBlock;
                        F * a = att + ((b * NH + h) * T + t) * T;
                        rows.forward_rows(q + (b * T + t) * QC + h * hs, QC, kb, KC, vb, KC, t + 1, R, hs, scale, a, T,
                                          out + (b * T + t) * QC + h * hs, QC);
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t t2 = t + r + 1; t2 < T; ++t2) a[r * T + t2] = F(0);
                    }
                    continue;
                }
            }
            for (int64_t t = 0; t < T; ++t) {
                const F * qr = q + (b * T + t) * QC + h * hs;
                F * a = att + ((b * NH + h) * T + t) * T;
                F * o = out + (b * T + t) * QC + h * hs;
                for (int64_t t2 = t + 1; t2 < T; ++t2) a[t2] = F(0);
                if constexpr (std::is_same<F, float>::value) {
                    if (rows.forward) {
                        rows.forward(qr, kb, KC, vb, KC, t + 1, hs, scale, a, o);
                        continue;
                    }
                }
                F mx = -INFINITY;
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    F s = F(0);
                    for (int64_t i = 0; i < hs; ++i) s += qr[i] * kb[t2 * KC + i];
                    s *= scale;
                    a[t2] = s;
                    mx = s > mx ? s : mx;
                }
                F sum = F(0);
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    a[t2] = (F)std::exp((double)(a[t2] - mx));
                    sum += a[t2];
                }
                const F inv = F(1) / sum;
                for (int64_t i = 0; i < hs; ++i) o[i] = F(0);
                for (int64_t t2 = 0; t2 <= t; ++t2) {
                    a[t2] *= inv;
                    for (int64_t i = 0; i < hs; ++i) o[i] += a[t2] * vb[t2 * KC + i];
                }
            }
        }
    });
}

template <typename F>
void attention_gqa_backward(F * dq, F * dk, F * dv, const F * dout, const F * q, const F * k, const F * v,
                            const F * att, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
    const int64_t QC = NH * hs, KC = NKV * hs, group = NH / NKV;
    const F scale = F(1) / (F)std::sqrt((double)hs);
    [[maybe_unused]] const auto rows = gpt::attention_rows();
    parallel_for(B * NKV, 1, [&](int64_t p0, int64_t p1) {
        std::vector<F> datt((size_t)T);
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p / NKV, kh = p % NKV;
            const F * kb = k + b * T * KC + kh * hs;
            const F * vb = v + b * T * KC + kh * hs;
            F * dkb = dk + b * T * KC + kh * hs;
            F * dvb = dv + b * T * KC + kh * hs;
            for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
                for (int64_t t = 0; t < T; ++t) {
                    const F * qr = q + (b * T + t) * QC + h * hs;
                    F * dqr = dq + (b * T + t) * QC + h * hs;
                    const F * a = att + ((b * NH + h) * T + t) * T;
                    const F * d = dout + (b * T + t) * QC + h * hs;
                    if constexpr (std::is_same<F, float>::value) {
                        if (rows.backward) {
                            rows.backward(qr, dqr, kb, dkb, KC, vb, dvb, KC, a, d, t + 1, hs, scale, datt.data());
                            continue;
                        }
                    }
                    F dot = F(0);
                    for (int64_t t2 = 0; t2 <= t; ++t2) {
                        F s = F(0);
                        for (int64_t i = 0; i < hs; ++i) {
                            s += d[i] * vb[t2 * KC + i];
                            dvb[t2 * KC + i] += a[t2] * d[i];
                        }
                        datt[(size_t)t2] = s;
                        dot += a[t2] * s;
                    }
                    for (int64_t t2 = 0; t2 <= t; ++t2) {
                        const F g = a[t2] * (datt[(size_t)t2] - dot) * scale;
                        for (int64_t i = 0; i < hs; ++i) {
                            dqr[i] += g * kb[t2 * KC + i];
                            dkb[t2 * KC + i] += g * qr[i];
                        }
                    }
                }
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                                                                     \
    template void attention_gqa_forward<F>(F *, F *, const F *, const F *, const F *, int64_t, int64_t, int64_t,  \
                                           int64_t, int64_t);                                                     \
    template void attention_gqa_backward<F>(F *, F *, F *, const F *, const F *, const F *, const F *, const F *, \
                                            int64_t, int64_t, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
