// matmul.cpp: the linear layer out = inp @ weight^T + bias (gpt_ops.h). Every loop is written as an axpy over a
// contiguous output row (the forward on a transposed copy of the weight), so the compiler vectorises it without
// reassociating any sum: each output element is summed in index order, the same for any thread count.
// NOTE(perf): portable first version; a register-tiled AVX-512 / AVX2 kernel is the planned upgrade (issue 7's
// training-throughput target), measured against it.
#include <vector>

#include "gpt_ops.h"
#include "threadpool.h"

namespace maporl {
namespace gpt {

template <typename F>
void matmul_forward(F * out, const F * inp, const F * weight, const F * bias, int64_t N, int64_t C, int64_t OC) {
    std::vector<F> wt((size_t)(C * OC));  // [C, OC]
    parallel_for(OC, 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t c = 0; c < C; ++c) wt[(size_t)(c * OC + o)] = weight[o * C + c];
    });
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            F * __restrict__ o = out + n * OC;
            const F * x = inp + n * C;
            for (int64_t k = 0; k < OC; ++k) o[k] = bias ? bias[k] : F(0);
            for (int64_t c = 0; c < C; ++c) {
                const F a = x[c];
                const F * __restrict__ w = wt.data() + c * OC;
                for (int64_t k = 0; k < OC; ++k) o[k] += a * w[k];
            }
        }
    });
}

template <typename F>
void matmul_backward(F * dinp, F * dweight, F * dbias, const F * dout, const F * inp, const F * weight, int64_t N,
                     int64_t C, int64_t OC) {
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            F * __restrict__ di = dinp + n * C;
            const F * d = dout + n * OC;
            for (int64_t o = 0; o < OC; ++o) {
                const F g = d[o];
                const F * __restrict__ w = weight + o * C;
                for (int64_t c = 0; c < C; ++c) di[c] += g * w[c];
            }
        }
    });
    parallel_for(OC, 4, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
            F * __restrict__ dw = dweight + o * C;
            F db = F(0);
            for (int64_t n = 0; n < N; ++n) {
                const F g = dout[n * OC + o];
                db += g;
                const F * __restrict__ x = inp + n * C;
                for (int64_t c = 0; c < C; ++c) dw[c] += g * x[c];
            }
            if (dbias) dbias[o] += db;
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                                                              \
    template void matmul_forward<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t);     \
    template void matmul_backward<F>(F *, F *, F *, const F *, const F *, const F *, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
