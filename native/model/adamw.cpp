// adamw.cpp: one AdamW step with decoupled weight decay and bias correction (gpt_ops.h), as torch.optim.AdamW:
//   g = grad * grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= lr * wd * p;  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
#include <algorithm>
#include <cmath>
#include <vector>

#include "native/model/gpt_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace gpt {

template <typename F>
void adamw_update(F * params, const F * grads, F * m, F * v, int64_t n, const AdamW & h, int64_t t, F grad_scale) {
    const double c1 = 1.0 - std::pow((double)h.beta1, (double)t), c2 = 1.0 - std::pow((double)h.beta2, (double)t);
    const F b1 = (F)h.beta1, b2 = (F)h.beta2, lr = (F)h.lr, wd = (F)h.weight_decay, eps = (F)h.eps;
    const F ic1 = (F)(1.0 / c1), ic2 = (F)(1.0 / c2);
    parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const F g = grads[i] * grad_scale;
            m[i] = b1 * m[i] + (F(1) - b1) * g;
            v[i] = b2 * v[i] + (F(1) - b2) * g * g;
            F p = params[i] * (F(1) - lr * wd);
            p -= lr * (m[i] * ic1) / ((F)std::sqrt((double)(v[i] * ic2)) + eps);
            params[i] = p;
        }
    });
}

template <typename F>
double sum_squares(const F * x, int64_t n) {
    constexpr int64_t kBlock = (int64_t)1 << 16;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<double> part((size_t)std::max<int64_t>(blocks, 0));
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const F * p = x + b * kBlock;
            const int64_t len = std::min(kBlock, n - b * kBlock), full = len - len % 8;
            double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t i = 0; i < full; i += 8)
                for (int j = 0; j < 8; ++j) acc[j] += (double)p[i + j] * (double)p[i + j];
            double s = 0;
            for (int j = 0; j < 8; ++j) s += acc[j];
            for (int64_t i = full; i < len; ++i) s += (double)p[i] * (double)p[i];
            part[(size_t)b] = s;
        }
    });
    double s = 0;
    for (double v : part) s += v;
    return s;
}

template double sum_squares<float>(const float *, int64_t);
template double sum_squares<double>(const double *, int64_t);
template void adamw_update<float>(float *, const float *, float *, float *, int64_t, const AdamW &, int64_t, float);
template void adamw_update<double>(double *, const double *, double *, double *, int64_t, const AdamW &, int64_t,
                                   double);

}  // namespace gpt
}  // namespace maporl
