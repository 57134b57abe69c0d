// residual.cpp: the residual connection out = a + b and its backward (gpt_ops.h). Elementwise.
#include "native/model/gpt_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace gpt {

template <typename F>
void residual_forward(F * out, const F * a, const F * b, int64_t n) {
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
    });
}

template <typename F>
void residual_backward(F * da, F * db, const F * dout, int64_t n) {
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            da[i] += dout[i];
            db[i] += dout[i];
        }
    });
}

template void residual_forward<float>(float *, const float *, const float *, int64_t);
template void residual_forward<double>(double *, const double *, const double *, int64_t);
template void residual_backward<float>(float *, float *, const float *, int64_t);
template void residual_backward<double>(double *, double *, const double *, int64_t);

}  // namespace gpt
}  // namespace maporl
