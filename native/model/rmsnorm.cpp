// rmsnorm.cpp: RMSNorm forward / backward (llama_ops.h), as transformers' LlamaRMSNorm: the mean of squares in
// double, out = x * rstd * weight. The weight gradient is a sum over rows: each fixed block of 64 rows sums into its
// own partial and the partials are added in block order, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "native/model/llama_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace llama {

template <typename F>
void rmsnorm_forward(F * out, F * rstd, const F * inp, const F * weight, int64_t N, int64_t C, double eps) {
    parallel_for(N, 8, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            const F * x = inp + n * C;
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += (double)x[c] * (double)x[c];
            const F r = (F)(1.0 / std::sqrt(s / (double)C + eps));
            F * o = out + n * C;
            for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
            rstd[n] = r;
        }
    });
}

template <typename F>
void rmsnorm_backward(F * dinp, F * dweight, const F * dout, const F * inp, const F * weight, const F * rstd, int64_t N,
                      int64_t C) {
    constexpr int64_t kBlock = 64;
    const int64_t nb = (N + kBlock - 1) / kBlock;
    std::vector<F> pw(dweight ? (size_t)(nb * C) : 0, F(0));  // dweight null: a frozen weight, no partials
    parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            F * w = dweight ? pw.data() + blk * C : nullptr;
            for (int64_t n = blk * kBlock; n < std::min(N, (blk + 1) * kBlock); ++n) {
                const F * x = inp + n * C;
                const F * d = dout + n * C;
                const F r = rstd[n];
                double dnm = 0;  // mean of dnorm * norm
                for (int64_t c = 0; c < C; ++c) dnm += (double)(weight[c] * d[c]) * (double)(x[c] * r);
                const F a = (F)(dnm / (double)C);
                F * di = dinp + n * C;
                for (int64_t c = 0; c < C; ++c) {
                    const F norm = x[c] * r;
                    di[c] += (weight[c] * d[c] - norm * a) * r;
                    if (w) w[c] += d[c] * norm;
                }
            }
        }
    });
    if (dweight)
        for (int64_t blk = 0; blk < nb; ++blk)
            for (int64_t c = 0; c < C; ++c) dweight[c] += pw[(size_t)(blk * C + c)];
}

#define MAPORL_INSTANTIATE(F)                                                                   \
    template void rmsnorm_forward<F>(F *, F *, const F *, const F *, int64_t, int64_t, double); \
    template void rmsnorm_backward<F>(F *, F *, const F *, const F *, const F *, const F *, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
