// rollout_correction.h: the rollout/trainer mismatch correction (maporl_rollout_correction; verl's
// rollout_corr_helper.py). One row at a time, in double: rc_row reads a row's trainer log-probs (old), the
// sampler's (rollout) and its mask, writes the row's importance weights and rejection keep-mask, and returns the
// row's sums. The CPU driver (rollout_correction.cpp) runs it on the pool, the CUDA kernel
// (cuda/rl/rollout_correction.cu) one thread per row; both combine the rows' sums in row order on the host (the two
// differ only where CUDA's exp and log round differently from the host's, by an ulp). See maporl.h for the contract.
#pragma once

#include <math.h>
#include <stdint.h>

#include "maporl.h"
#include "native/core/hd.h"

namespace maporl {

// verl's SAFETY_BOUND: log ratios are clamped to [-20, 20] before exp.
constexpr double kRcSafety = 20.0;

// One row's sums over its valid tokens (all double). Token-level sums add across rows; the row-level values
// (rejected, lr_sum, ...) are combined by the driver.
struct RcRow {
    double n = 0;                      // valid tokens
    double lr_sum = 0;                 // sum of old - rollout
    double old_sum = 0, roll_sum = 0;  // sums of the log-probs (perplexities)
    double k3_sum = 0, rho2_sum = 0;   // mismatch k3 and rho^2 (chi^2), on the clamped log ratio
    double rho_sum = 0, rho_max = -INFINITY, rho_min = INFINITY;  // raw IS weight (before truncation / masking)
    double high = 0, low = 0;      // tokens (token level) with rho above the threshold / below 1/threshold
    double c_sum = 0, c2_sum = 0;  // rho clamped to [1/threshold, threshold] (std, ESS)
    double corrected = 0;          // tokens whose weight truncation or masking changed
    double w_sum = 0;              // final weights (before batch normalisation)
    double rejected = 0;           // tokens a rejection criterion removed
    int bad_mask = 0;              // a mask value other than 0 / 1
};

MAPORL_HD double rc_clamp(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

template <typename M>
MAPORL_HD bool rc_valid(M m, int * bad) {
    const double v = (double)m;
    if (v != 0.0 && v != 1.0) *bad = 1;
    return v == 1.0;
}

// The k-estimator of a (clamped) log ratio lr = old - rollout, as verl's rejection sampling defines them:
// k1 = -lr, k2 = lr^2 / 2, k3 = exp(lr) - 1 - lr.
MAPORL_HD double rc_k(int k, double lr) { return k == 1 ? -lr : (k == 2 ? 0.5 * lr * lr : ::exp(lr) - 1.0 - lr); }


// Criterion option -> (level 0 token / 1 seq sum / 2 seq mean / 3 seq max, k).
MAPORL_HD void rc_option(maporl_rollout_rs o, int * level, int * k) {
    switch (o) {
        case MAPORL_ROLLOUT_RS_TOKEN_K1:
            *level = 0, *k = 1;
            return;
        case MAPORL_ROLLOUT_RS_TOKEN_K2:
            *level = 0, *k = 2;
            return;
        case MAPORL_ROLLOUT_RS_TOKEN_K3:
            *level = 0, *k = 3;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_SUM_K1:
            *level = 1, *k = 1;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_SUM_K2:
            *level = 1, *k = 2;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_SUM_K3:
            *level = 1, *k = 3;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_MEAN_K1:
            *level = 2, *k = 1;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_MEAN_K2:
            *level = 2, *k = 2;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_MEAN_K3:
            *level = 2, *k = 3;
            return;
        case MAPORL_ROLLOUT_RS_SEQ_MAX_K2:
            *level = 3, *k = 2;
            return;
        default:
            *level = 3, *k = 3;
            return;  // MAPORL_ROLLOUT_RS_SEQ_MAX_K3 (options are checked before)
    }
}

// A criterion as the row passes read it: its level, its k, and the band a statistic must lie in (k1: [log(lower),
// log(upper)]; else (-Inf, upper]; NaN fails).
struct RcCrit {
    int level, k;
    double lo, hi;
};

MAPORL_HD RcCrit rc_crit(const maporl_rollout_rs_criterion & c) {
    RcCrit r;
    rc_option(c.option, &r.level, &r.k);
    r.lo = r.k == 1 ? ::log(c.lower) : -INFINITY;
    r.hi = r.k == 1 ? ::log(c.upper) : c.upper;
    return r;
}

MAPORL_HD bool rc_pass(const RcCrit & c, double v) { return v >= c.lo && v <= c.hi; }

// One row: weights w (may be null when p.is is NONE) and keep (may be null when p.rs_count is 0) at [0, T); both are
// 0 at masked positions. Two passes over the row: the row's sums, then the per-token outputs.
template <typename M>
MAPORL_HD RcRow rc_row(const maporl_rollout_correction_params & p, const float * old, const float * roll,
                       const M * mask, int64_t T, float * w, float * keep) {
    RcRow r;
    const double up = p.is_threshold, lo_metric = 1.0 / p.is_threshold;
    RcCrit crit[MAPORL_ROLLOUT_RS_MAX];
    for (int c = 0; c < p.rs_count; ++c) crit[c] = rc_crit(p.rs[c]);
    // Pass 1: the row's sums of the log ratio and the sequence-level statistics of the criteria.
    double seq_sum[MAPORL_ROLLOUT_RS_MAX] = {0, 0, 0, 0}, seq_max[MAPORL_ROLLOUT_RS_MAX];
    for (int c = 0; c < MAPORL_ROLLOUT_RS_MAX; ++c) seq_max[c] = -INFINITY;
    for (int64_t t = 0; t < T; ++t) {
        if (!rc_valid(mask[t], &r.bad_mask)) continue;
        const double lr = (double)old[t] - (double)roll[t], ls = rc_clamp(lr, -kRcSafety, kRcSafety);
        r.n += 1;
        r.lr_sum += lr;
        r.old_sum += (double)old[t];
        r.roll_sum += (double)roll[t];
        r.k3_sum += ::exp(ls) - 1.0 - ls;
        r.rho2_sum += ::exp(2.0 * ls);
        for (int c = 0; c < p.rs_count; ++c) {
            const double v = rc_k(crit[c].k, ls);
            seq_sum[c] += v;
            if (v > seq_max[c]) seq_max[c] = v;
        }
    }
    // The row's sequence-level verdict (every sequence-level criterion must pass) and sequence-level IS weight.
    bool seq_keep = true;
    for (int c = 0; c < p.rs_count; ++c) {
        const int level = crit[c].level;
        if (level == 0 || r.n == 0) continue;
        const double v = level == 1 ? seq_sum[c] : (level == 2 ? seq_sum[c] / r.n : seq_max[c]);
        if (!rc_pass(crit[c], v)) seq_keep = false;
    }
    double seq_rho = 1.0;
    if (r.n > 0 && p.is == MAPORL_ROLLOUT_IS_SEQUENCE)
        seq_rho = ::exp(rc_clamp(r.lr_sum, -kRcSafety, kRcSafety));
    else if (r.n > 0 && p.is == MAPORL_ROLLOUT_IS_GEOMETRIC)
        seq_rho = ::exp(rc_clamp(r.lr_sum / r.n, -kRcSafety, kRcSafety));
    // Pass 2: per token.
    for (int64_t t = 0; t < T; ++t) {
        int ignore = 0;
        if (!rc_valid(mask[t], &ignore)) {
            if (w) w[t] = 0.0f;
            if (keep) keep[t] = 0.0f;
            continue;
        }
        const double lr = (double)old[t] - (double)roll[t], ls = rc_clamp(lr, -kRcSafety, kRcSafety);
        if (p.is != MAPORL_ROLLOUT_IS_NONE) {
            const double rho = p.is == MAPORL_ROLLOUT_IS_TOKEN ? ::exp(ls) : seq_rho;
            double wt;
            if (p.is_mode == MAPORL_ROLLOUT_IS_TRUNCATE)
                wt = rho > up ? up : rho;
            else
                wt = (rho > up || rho < p.is_threshold_lower) ? 0.0 : rho;
            r.rho_sum += rho;
            if (rho > r.rho_max) r.rho_max = rho;
            if (rho < r.rho_min) r.rho_min = rho;
            r.high += rho > up ? 1 : 0;
            r.low += rho < lo_metric ? 1 : 0;
            const double cl = rc_clamp(rho, lo_metric, up);
            r.c_sum += cl;
            r.c2_sum += cl * cl;
            r.corrected += wt != rho ? 1 : 0;
            r.w_sum += wt;
            if (w) w[t] = (float)wt;
        }
        bool k_ok = seq_keep;
        for (int c = 0; c < p.rs_count; ++c)
            if (crit[c].level == 0 && !rc_pass(crit[c], rc_k(crit[c].k, ls))) k_ok = false;
        if (!k_ok) r.rejected += 1;
        if (keep) keep[t] = k_ok ? 1.0f : 0.0f;
    }
    return r;
}

// The batch's statistics from the rows' sums, combined in row order (the CPU and CUDA drivers share it); the
// batch normalisation factor (1 when off or when the mean weight is <= 1e-8) is returned.
double rc_finish(const maporl_rollout_correction_params & p, const RcRow * rows, int64_t B,
                 maporl_rollout_correction_stats * st);

// Checks params (names the field on error).
void rc_check_params(const maporl_rollout_correction_params & p);

// CUDA (cuda/rl/rollout_correction.cu; a stub without CUDA). Device pointers; rows_out: B host rows.
maporl_status rollout_correction_cuda(const float * old, const float * roll, const void * mask,
                                      maporl_mask_type mask_type, int64_t B, int64_t T,
                                      const maporl_rollout_correction_params & p, float * weights, float * keep,
                                      maporl_rollout_correction_stats * stats);

}  // namespace maporl
