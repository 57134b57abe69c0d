// rollout_correction.cpp: the CPU rollout correction (rows on the pool, each row's sums by rc_row in
// rollout_correction.h) and the maporl_rollout_correction C entry point. The rows' sums are combined in row order,
// so nothing depends on the thread count.
#include "native/rl/rollout_correction.h"

#include <cmath>
#include <vector>

#include "native/core/core.h"
#include "native/core/threadpool.h"

namespace maporl {

void rc_check_params(const maporl_rollout_correction_params & p) {
    const int is = enum_int(p.is), mode = enum_int(p.is_mode);
    if (is < MAPORL_ROLLOUT_IS_NONE || is > MAPORL_ROLLOUT_IS_GEOMETRIC)
        throw_error(MAPORL_ERR_INVALID_ARG, "is: expected NONE, TOKEN, SEQUENCE or GEOMETRIC (0-3), got %d", is);
    if (mode != MAPORL_ROLLOUT_IS_TRUNCATE && mode != MAPORL_ROLLOUT_IS_MASK)
        throw_error(MAPORL_ERR_INVALID_ARG, "is_mode: expected TRUNCATE (0) or MASK (1), got %d", mode);
    if (!std::isfinite(p.is_threshold) || !(p.is_threshold > 0))
        throw_error(MAPORL_ERR_INVALID_ARG, "is_threshold: expected a finite number > 0, got %g", p.is_threshold);
    if (!std::isfinite(p.is_threshold_lower) || p.is_threshold_lower < 0 || p.is_threshold_lower >= p.is_threshold)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "is_threshold_lower: expected a finite number in [0, is_threshold = %g), got %g", p.is_threshold,
                    p.is_threshold_lower);
    if (p.batch_normalize != 0 && p.batch_normalize != 1)
        throw_error(MAPORL_ERR_INVALID_ARG, "batch_normalize: expected 0 or 1, got %d", p.batch_normalize);
    if (p.rs_count < 0 || p.rs_count > MAPORL_ROLLOUT_RS_MAX)
        throw_error(MAPORL_ERR_INVALID_ARG, "rs_count: expected 0 to %d, got %d", MAPORL_ROLLOUT_RS_MAX, p.rs_count);
    for (int c = 0; c < p.rs_count; ++c) {
        const maporl_rollout_rs_criterion & r = p.rs[c];
        const int o = enum_int(r.option);
        if (o < MAPORL_ROLLOUT_RS_TOKEN_K1 || o > MAPORL_ROLLOUT_RS_SEQ_MAX_K3)
            throw_error(MAPORL_ERR_INVALID_ARG, "rs[%d].option: expected 1-11 (TOKEN_K1 to SEQ_MAX_K3), got %d", c, o);
        int level, k;
        rc_option(r.option, &level, &k);
        if (!std::isfinite(r.upper) || !(r.upper > 0))
            throw_error(MAPORL_ERR_INVALID_ARG, "rs[%d].upper: expected a finite number > 0, got %g", c, r.upper);
        if (k == 1 && (!std::isfinite(r.lower) || !(r.lower > 0) || !(r.lower < r.upper)))
            throw_error(MAPORL_ERR_INVALID_ARG, "rs[%d].lower: expected a finite number in (0, upper = %g), got %g", c,
                        r.upper, r.lower);
    }
}

double rc_finish(const maporl_rollout_correction_params & p, const RcRow * rows, int64_t B,
                 maporl_rollout_correction_stats * st) {
    RcRow s;  // token-level sums
    double seqs = 0, rej_rows = 0, high_rows = 0, low_rows = 0, chi2_seq = 0, tppl = 0, rppl = 0, dppl = 0, adppl = 0,
           wseq = 0;
    for (int64_t b = 0; b < B; ++b) {
        const RcRow & r = rows[b];
        if (r.n == 0) continue;
        s.n += r.n;
        s.lr_sum += r.lr_sum;
        s.k3_sum += r.k3_sum;
        s.rho2_sum += r.rho2_sum;
        s.rho_sum += r.rho_sum;
        if (r.rho_max > s.rho_max) s.rho_max = r.rho_max;
        if (r.rho_min < s.rho_min) s.rho_min = r.rho_min;
        s.high += r.high;
        s.low += r.low;
        s.c_sum += r.c_sum;
        s.c2_sum += r.c2_sum;
        s.corrected += r.corrected;
        s.w_sum += r.w_sum;
        s.rejected += r.rejected;
        seqs += 1;
        rej_rows += r.rejected > 0 ? 1 : 0;
        high_rows += r.high > 0 ? 1 : 0;
        low_rows += r.low > 0 ? 1 : 0;
        const double ls = r.lr_sum < -kRcSafety ? -kRcSafety : (r.lr_sum > kRcSafety ? kRcSafety : r.lr_sum);
        chi2_seq += std::exp(2.0 * ls);
        const double mo = r.old_sum / r.n, mr = r.roll_sum / r.n;
        tppl += std::exp(-mo);
        rppl += std::exp(-mr);
        dppl += mr - mo;
        adppl += std::fabs(mr - mo);
        wseq += r.w_sum / r.n;
    }
    maporl_rollout_correction_stats o = {};
    o.tokens = s.n;
    o.sequences = seqs;
    o.batch_norm_factor = 1.0;
    if (s.n == 0) {
        if (st) *st = o;
        return 1.0;
    }
    const double n = s.n;
    if (p.is != MAPORL_ROLLOUT_IS_NONE) {
        o.is_mean = s.rho_sum / n;
        o.is_max = s.rho_max;
        o.is_min = s.rho_min;
        const double m = s.c_sum / n, m2 = s.c2_sum / n;
        o.is_std = n > 1 ? std::sqrt(std::fmax(0.0, m2 - m * m)) : 0.0;
        o.is_ess = (m + 1e-8) * (m + 1e-8) / m2;
        const bool token = p.is == MAPORL_ROLLOUT_IS_TOKEN;
        o.is_fraction_high = token ? s.high / n : high_rows / seqs;
        o.is_fraction_low = token ? s.low / n : low_rows / seqs;
        o.is_corrected_fraction = s.corrected / n;
        if (p.batch_normalize) {
            const double mean = token ? s.w_sum / n : wseq / seqs;
            if (mean > 1e-8) o.batch_norm_factor = mean;
        }
    }
    o.rs_masked_fraction = s.rejected / n;
    o.rs_seq_masked_fraction = rej_rows / seqs;
    o.kl = -s.lr_sum / n;
    o.k3_kl = s.k3_sum / n;
    o.chi2_token = s.rho2_sum / n - 1.0;
    o.chi2_seq = chi2_seq / seqs - 1.0;
    o.training_ppl = tppl / seqs;
    o.rollout_ppl = rppl / seqs;
    o.log_ppl_diff = dppl / seqs;
    o.log_ppl_abs_diff = adppl / seqs;
    if (st) *st = o;
    return o.batch_norm_factor;
}

namespace {

template <typename M>
void rows_cpu(const float * old, const float * roll, const M * mask, int64_t B, int64_t T,
              const maporl_rollout_correction_params & p, float * w, float * keep, RcRow * rows) {
    parallel_for(B, T > 0 ? (int64_t)1 + (int64_t)(1 << 14) / T : B, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
            rows[b] = rc_row<M>(p, old + b * T, roll + b * T, mask + b * T, T, w ? w + b * T : nullptr,
                                keep ? keep + b * T : nullptr);
    });
}

}  // namespace
}  // namespace maporl

extern "C" {

maporl_rollout_correction_params maporl_rollout_correction_default_params(void) {
    maporl_rollout_correction_params p = {};
    p.is = MAPORL_ROLLOUT_IS_NONE;
    p.is_mode = MAPORL_ROLLOUT_IS_TRUNCATE;
    p.is_threshold = 2.0;
    p.is_threshold_lower = 0.0;
    p.batch_normalize = 0;
    p.rs_count = 0;
    return p;
}

maporl_status maporl_rollout_correction(maporl_device device, const float * old_logp, const float * rollout_logp,
                                        const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
                                        maporl_rollout_correction_params params, float * weights_out, float * keep_out,
                                        maporl_rollout_correction_stats * stats_out) {
    using namespace maporl;
    return guarded([&] {
        require_device(device);
        require_mask_type(mask_type);
        require_dims(B, T, "B", "T");
        const int64_t n = B * T;
        require_ptr(old_logp, "old_logp", n);
        require_ptr(rollout_logp, "rollout_logp", n);
        require_ptr(mask, "mask", n);
        rc_check_params(params);
        if (params.is != MAPORL_ROLLOUT_IS_NONE) require_ptr(weights_out, "weights_out", n);
        if (params.rs_count > 0) require_ptr(keep_out, "keep_out", n);
        if (device == MAPORL_DEVICE_CUDA)
            return rollout_correction_cuda(old_logp, rollout_logp, mask, mask_type, B, T, params, weights_out, keep_out,
                                           stats_out);
        float * w = params.is != MAPORL_ROLLOUT_IS_NONE ? weights_out : nullptr;
        std::vector<RcRow> rows((size_t)B);
        if (mask_type == MAPORL_MASK_U8)
            rows_cpu<uint8_t>(old_logp, rollout_logp, (const uint8_t *)mask, B, T, params, w, keep_out, rows.data());
        else
            rows_cpu<float>(old_logp, rollout_logp, (const float *)mask, B, T, params, w, keep_out, rows.data());
        for (int64_t b = 0; b < B; ++b)
            if (rows[(size_t)b].bad_mask)
                throw_error(MAPORL_ERR_INVALID_ARG, "mask: expected 0 or 1 (row %lld)", (long long)b);
        const double f = rc_finish(params, rows.data(), B, stats_out);
        if (w && f != 1.0) {
            parallel_for(n, (int64_t)1 << 16, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) w[i] = (float)((double)w[i] / f);
            });
        }
        return MAPORL_OK;
    });
}

}  // extern "C"
