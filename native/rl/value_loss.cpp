// value_loss.cpp: verl's clipped value loss (compute_value_loss) with its gradient, on the CPU, and the
// maporl_value_loss C entry point. Per row: sums in double, reduced in row order; the aggregation weights
// are the policy loss's (agg_weight). The loop has no transcendental, so the compiler vectorises it.
#include <cmath>
#include <vector>

#include "native/core/core.h"
#include "native/rl/policy_loss.h"
#include "native/core/threadpool.h"

namespace maporl {

template <typename F>
void value_loss_cpu(const F * values, const F * old_values, const F * returns, const void * mask,
                    maporl_mask_type mask_type, int64_t B, int64_t T, F clip, maporl_loss_agg agg, double normalizer,
                    F * grad, maporl_value_loss_stats * st) {
    maporl_policy_loss_params pp = maporl_policy_loss_default_params();
    pp.agg = agg;
    pp.normalizer = normalizer;
    loss_cfg(pp, false, false, true);  // checks agg and normalizer
    const bool clipped = clip > F(0);
    PolicyLossArgs<F> a{values, nullptr, values, 0, mask, mask_type, nullptr, nullptr, B, T, pp, nullptr, nullptr};
    const RowPlan p = plan_rows(a, false);
    std::vector<double> loss((size_t)B), nclip((size_t)B), vsum((size_t)B);
    parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const F w = (F)p.w[b];
            double l = 0, nc = 0, vs = 0;
            for (int64_t t = 0; t < T; ++t) {
                const int64_t i = b * T + t;
                const bool on = mask_type == MAPORL_MASK_U8 ? static_cast<const uint8_t *>(mask)[i] == 1
                                                            : static_cast<const float *>(mask)[i] == 1.0f;
                if (!on) {
                    if (grad) grad[i] = F(0);
                    continue;
                }
                const F v = values[i], R = returns[i];
                const F l1 = (v - R) * (v - R);
                F li = l1, g = (v - R) * w;
                if (clipped) {
                    const F lo = old_values[i] - clip, hi = old_values[i] + clip;
                    const F vc = v < lo ? lo : (v > hi ? hi : v);
                    const F l2 = (vc - R) * (vc - R);
                    if (l2 > l1) {  // the clipped branch: its clamp is active, so no gradient
                        li = l2;
                        g = F(0);
                        nc += 1;
                    }
                }
                l += (double)li;
                vs += (double)v;
                if (grad) grad[i] = g;
            }
            loss[b] = 0.5 * l;
            nclip[b] = nc;
            vsum[b] = vs;
        }
    });
    if (!st) return;
    double L = 0, C = 0, S = 0;
    for (int64_t b = 0; b < B; ++b) {
        L += p.w[b] * loss[b];
        C += nclip[b];
        S += vsum[b];
    }
    const double inv = p.tokens > 0 ? 1.0 / p.tokens : 0.0;
    st->loss = L;
    st->clip_frac = C * inv;
    st->value_mean = S * inv;
    st->tokens = p.tokens;
}
template void value_loss_cpu<float>(const float *, const float *, const float *, const void *, maporl_mask_type,
                                    int64_t, int64_t, float, maporl_loss_agg, double, float *,
                                    maporl_value_loss_stats *);
template void value_loss_cpu<double>(const double *, const double *, const double *, const void *, maporl_mask_type,
                                     int64_t, int64_t, double, maporl_loss_agg, double, double *,
                                     maporl_value_loss_stats *);

}  // namespace maporl

using namespace maporl;

extern "C" maporl_status maporl_value_loss(maporl_device device, const float * values, const float * old_values,
                                           const float * returns, const void * mask, maporl_mask_type mask_type,
                                           int64_t B, int64_t T, float clip, maporl_loss_agg agg, double normalizer,
                                           float * grad_values_out, maporl_value_loss_stats * stats_out) {
    return guarded([&] {
        require_device(device);
        require_mask_type(mask_type);
        if (enum_int(agg) < MAPORL_AGG_TOKEN_MEAN || enum_int(agg) > MAPORL_AGG_SEQ_MEAN_TOKEN_SUM_NORM)
            throw_error(MAPORL_ERR_INVALID_ARG, "agg: expected a maporl_loss_agg (0..3), got %d", enum_int(agg));
        require_dims(B, T, "B", "T");
        const int64_t n = B * T;
        require_ptr(values, "values", n);
        require_ptr(returns, "returns", n);
        require_ptr(mask, "mask", n);
        if (std::isnan(clip)) throw_error(MAPORL_ERR_INVALID_ARG, "clip: expected a number (<= 0: no clip), got NaN");
        if (clip > 0.0f) require_ptr(old_values, "old_values", n);
        if (device == MAPORL_DEVICE_CUDA)
            return value_loss_cuda(values, old_values, returns, mask, mask_type, B, T, clip, agg, normalizer,
                                   grad_values_out, stats_out);
        value_loss_cpu<float>(values, old_values, returns, mask, mask_type, B, T, clip, agg, normalizer,
                              grad_values_out, stats_out);
        return MAPORL_OK;
    });
}
