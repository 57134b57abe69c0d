// encoder.cpp: token + position embedding (gpt_ops.h). The backward scatters into dwte, where tokens collide;
// it is split over channel blocks (each thread owns a slice of every embedding row), so there are no races and
// the accumulation order over tokens is always b, t.
#include <algorithm>

#include "gpt_ops.h"
#include "threadpool.h"

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

#define MAPORL_INSTANTIATE(F)                                                                                     \
    template void encoder_forward<F>(F *, const int32_t *, const F *, const F *, int64_t, int64_t, int64_t);     \
    template void encoder_backward<F>(F *, F *, const F *, const int32_t *, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
