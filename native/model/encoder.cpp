// encoder.cpp: token + position embedding (gpt_ops.h). The backward scatters into dwte, where tokens collide;
// it is split over channel blocks (each thread owns a slice of every embedding row), so there are no races and
// the accumulation order over tokens is always b, t.
#include <algorithm>

#include "native/model/gpt_cuda.h"
#include "native/model/gpt_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace gpt {

template <typename F>
void encoder_forward(F * out, const int32_t * inp, const F * wte, const F * wpe, int64_t B, int64_t T, int64_t C) {
    parallel_for(B * T, 16, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            const F * e = wte + (int64_t)inp[n] * C;
            const F * p = wpe + (n % T) * C;
            F * o = out + n * C;
            for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
        }
    });
}

template <typename F>
void encoder_backward(F * dwte, F * dwpe, const F * dout, const int32_t * inp, int64_t B, int64_t T, int64_t C) {
    parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
        for (int64_t n = 0; n < B * T; ++n) {
            const F * d = dout + n * C;
            F * e = dwte + (int64_t)inp[n] * C;
            F * p = dwpe + (n % T) * C;
            for (int64_t c = c0; c < c1; ++c) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    });
}

namespace cuda {

// Host code (also in builds without CUDA, where the tests check it): a counting sort of the token ids.
TokenBuckets bucket_tokens(const int32_t * tokens, int64_t N) {
    TokenBuckets tb;
    int32_t mx = -1;
    for (int64_t n = 0; n < N; ++n) mx = std::max(mx, tokens[n]);
    std::vector<int32_t> count((size_t)(mx + 1), 0);
    for (int64_t n = 0; n < N; ++n) ++count[(size_t)tokens[n]];
    std::vector<int32_t> slot((size_t)(mx + 1), -1);
    tb.offsets.push_back(0);
    for (int32_t v = 0; v <= mx; ++v)
        if (count[(size_t)v] > 0) {
            slot[(size_t)v] = (int32_t)tb.ids.size();
            tb.ids.push_back(v);
            tb.offsets.push_back(tb.offsets.back() + count[(size_t)v]);
        }
    std::vector<int32_t> next(tb.offsets.begin(), tb.offsets.end() - 1);
    tb.positions.resize((size_t)N);
    for (int64_t n = 0; n < N; ++n) tb.positions[(size_t)next[(size_t)slot[(size_t)tokens[n]]]++] = (int32_t)n;
    return tb;
}

}  // namespace cuda

#define MAPORL_INSTANTIATE(F)                                                                                \
    template void encoder_forward<F>(F *, const int32_t *, const F *, const F *, int64_t, int64_t, int64_t); \
    template void encoder_backward<F>(F *, F *, const F *, const int32_t *, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
