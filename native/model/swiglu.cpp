// swiglu.cpp: the SwiGLU gate of the Llama-family MLP (llama_ops.h): out = silu(gate) * up, elementwise. The
// sigmoid runs in double and is rounded once, so float results do not depend on the SIMD level.
#include <cmath>

#include "native/model/llama_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace llama {

namespace {
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

template <typename F>
void swiglu_forward(F * out, const F * gate, const F * up, int64_t n) {
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const double g = (double)gate[i];
            out[i] = (F)(g * sigmoid(g)) * up[i];
        }
    });
}

template <typename F>
void swiglu_backward(F * dgate, F * dup, const F * dout, const F * gate, const F * up, int64_t n) {
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const double g = (double)gate[i], s = sigmoid(g);
            const F silu = (F)(g * s), dsilu = (F)(s * (1.0 + g * (1.0 - s)));
            dgate[i] += dout[i] * up[i] * dsilu;
            dup[i] += dout[i] * silu;
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                                  \
    template void swiglu_forward<F>(F *, const F *, const F *, int64_t);      \
    template void swiglu_backward<F>(F *, F *, const F *, const F *, const F *, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
