// swiglu.cpp: the SwiGLU gate of the Llama-family MLP (llama_ops.h): out = silu(gate) * up, elementwise.
// Float: sigmoid(g) = (g >= 0 ? 1 : e) / (1 + e) with e = exp(-|g|) from det_exp_nonpos, each step one IEEE
// operation in a fixed order, so the vector levels (swiglu_vec.inc, vexp_nonpos lane for lane) and this scalar path
// give the same bits. Double (the reference build): libm's exp.
#include <cmath>
#include <type_traits>

#include "native/core/det_exp.h"
#include "native/core/isa.h"
#include "native/model/llama_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace avx512 {
void swiglu_forward_f32(float * out, const float * gate, const float * up, int64_t i0, int64_t i1);
void swiglu_backward_f32(float * dgate, float * dup, const float * dout, const float * gate, const float * up,
                         int64_t i0, int64_t i1);
}
namespace avx2 {
void swiglu_forward_f32(float * out, const float * gate, const float * up, int64_t i0, int64_t i1);
void swiglu_backward_f32(float * dgate, float * dup, const float * dout, const float * gate, const float * up,
                         int64_t i0, int64_t i1);
}
namespace llama {

namespace {
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float sigmoid(float g) {
    const float e = det_exp_nonpos(-std::fabs(g));
    return (g >= 0.0f ? 1.0f : e) / (1.0f + e);
}
}  // namespace

template <typename F>
void swiglu_forward(F * out, const F * gate, const F * up, int64_t n) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa != Isa::Scalar) {
            parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
                (isa == Isa::Avx512 ? avx512::swiglu_forward_f32 : avx2::swiglu_forward_f32)(out, gate, up, i0, i1);
            });
            return;
        }
    }
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const F g = gate[i];
            out[i] = g * sigmoid(g) * up[i];
        }
    });
}

template <typename F>
void swiglu_backward(F * dgate, F * dup, const F * dout, const F * gate, const F * up, int64_t n) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa != Isa::Scalar) {
            parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
                (isa == Isa::Avx512 ? avx512::swiglu_backward_f32 : avx2::swiglu_backward_f32)(dgate, dup, dout, gate,
                                                                                               up, i0, i1);
            });
            return;
        }
    }
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const F g = gate[i], s = sigmoid(g), d = dout[i];
            dgate[i] += d * up[i] * (s * (F(1) + g * (F(1) - s)));
            dup[i] += d * (g * s);
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                            \
    template void swiglu_forward<F>(F *, const F *, const F *, int64_t); \
    template void swiglu_backward<F>(F *, F *, const F *, const F *, const F *, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
