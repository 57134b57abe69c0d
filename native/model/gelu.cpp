// gelu.cpp: GELU with the tanh approximation (GPT-2), forward and backward (gpt_ops.h). Elementwise. Float on
// AVX2 / AVX-512 runs gelu_vec.inc (tanh from the polynomial exp); the libm path below is the reference.
#include <cmath>
#include <type_traits>

#include "native/model/gpt_ops.h"
#include "native/core/isa.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace avx512 {
void gelu_forward_f32(float * out, const float * inp, int64_t i0, int64_t i1);
void gelu_backward_f32(float * dinp, const float * inp, const float * dout, int64_t i0, int64_t i1);
}
namespace avx2 {
void gelu_forward_f32(float * out, const float * inp, int64_t i0, int64_t i1);
void gelu_backward_f32(float * dinp, const float * inp, const float * dout, int64_t i0, int64_t i1);
}
namespace gpt {

namespace {
constexpr double kS = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kA = 0.044715;
}  // namespace

template <typename F>
void gelu_forward(F * out, const F * inp, int64_t n) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa != Isa::Scalar) {
            parallel_for(n, 1024, [&](int64_t i0, int64_t i1) {
                (isa == Isa::Avx512 ? avx512::gelu_forward_f32 : avx2::gelu_forward_f32)(out, inp, i0, i1);
            });
            return;
        }
    }
    parallel_for(n, 1024, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const F x = inp[i];
            out[i] = F(0.5) * x * (F(1) + (F)std::tanh((double)((F)kS * (x + (F)kA * x * x * x))));
        }
    });
}

template <typename F>
void gelu_backward(F * dinp, const F * inp, const F * dout, int64_t n) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa != Isa::Scalar) {
            parallel_for(n, 1024, [&](int64_t i0, int64_t i1) {
                (isa == Isa::Avx512 ? avx512::gelu_backward_f32 : avx2::gelu_backward_f32)(dinp, inp, dout, i0, i1);
            });
            return;
        }
    }
    parallel_for(n, 1024, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const F x = inp[i];
            const F th = (F)std::tanh((double)((F)kS * (x + (F)kA * x * x * x)));
            const F sech2 = F(1) - th * th;
            const F local = F(0.5) * (F(1) + th) + F(0.5) * x * sech2 * (F)kS * (F(1) + F(3) * (F)kA * x * x);
            dinp[i] += local * dout[i];
        }
    });
}

#define MAPORL_INSTANTIATE(F)                               \
    template void gelu_forward<F>(F *, const F *, int64_t); \
    template void gelu_backward<F>(F *, const F *, const F *, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
