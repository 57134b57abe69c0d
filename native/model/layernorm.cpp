// layernorm.cpp: LayerNorm forward / backward (gpt_ops.h). Row statistics in double. The weight and bias
// gradients are sums over rows: each fixed block of 64 rows sums into its own partial, and the partials are
// added in block order, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "native/model/gpt_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace gpt {

template <typename F>
void layernorm_forward(F * out, F * mean, F * rstd, const F * inp, const F * weight, const F * bias, int64_t N,
                       int64_t C) {
    parallel_for(N, 8, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            const F * x = inp + n * C;
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += (double)x[c];
            const double m = s / (double)C;
            double v = 0;
            for (int64_t c = 0; c < C; ++c) v += ((double)x[c] - m) * ((double)x[c] - m);
            const F r = (F)(1.0 / std::sqrt(v / (double)C + 1e-5));
            const F mf = (F)m;
            F * o = out + n * C;
            for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - mf) * r * weight[c] + bias[c];
            mean[n] = mf;
            rstd[n] = r;
        }
    });
}

template <typename F>
void layernorm_backward(F * dinp, F * dweight, F * dbias, const F * dout, const F * inp, const F * weight,
                        const F * mean, const F * rstd, int64_t N, int64_t C) {
    constexpr int64_t kBlock = 64;
    const int64_t nb = (N + kBlock - 1) / kBlock;
    std::vector<F> pw((size_t)(nb * C), F(0)), pb((size_t)(nb * C), F(0));
    parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            F * w = pw.data() + blk * C;
            F * bsum = pb.data() + blk * C;
            for (int64_t n = blk * kBlock; n < std::min(N, (blk + 1) * kBlock); ++n) {
                const F * x = inp + n * C;
                const F * d = dout + n * C;
                const F m = mean[n], r = rstd[n];
                double dm = 0, dnm = 0;  // means of dnorm and dnorm * norm
                for (int64_t c = 0; c < C; ++c) {
                    const F norm = (x[c] - m) * r, dn = weight[c] * d[c];
                    dm += (double)dn;
                    dnm += (double)dn * (double)norm;
                }
                const F a = (F)(dm / (double)C), bq = (F)(dnm / (double)C);
                F * di = dinp + n * C;
                for (int64_t c = 0; c < C; ++c) {
                    const F norm = (x[c] - m) * r, dn = weight[c] * d[c];
                    di[c] += (dn - a - norm * bq) * r;
                    w[c] += d[c] * norm;
                    bsum[c] += d[c];
                }
            }
        }
    });
    for (int64_t blk = 0; blk < nb; ++blk)
        for (int64_t c = 0; c < C; ++c) {
            dweight[c] += pw[(size_t)(blk * C + c)];
            dbias[c] += pb[(size_t)(blk * C + c)];
        }
}

#define MAPORL_INSTANTIATE(F)                                                                                          \
    template void layernorm_forward<F>(F *, F *, F *, const F *, const F *, const F *, int64_t, int64_t);              \
    template void layernorm_backward<F>(F *, F *, F *, const F *, const F *, const F *, const F *, const F *, int64_t, \
                                        int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl
