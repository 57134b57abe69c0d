// policy_loss.cpp: the CPU policy loss (the reference for CUDA) and the maporl_policy_loss / maporl_value_loss C
// entry points. Three steps: a pre-pass over the mask (valid tokens per row, 0/1 check, gspo's sequence
// mean), the aggregation weight of each row (agg_weight), then the segment loop (policy_loss.h) per row on
// the thread pool. Statistics are summed per row in double and reduced in row order, so nothing depends
// on the thread count.
#include "native/rl/policy_loss.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "native/core/core.h"
#include "native/core/isa.h"
#include "native/core/threadpool.h"

namespace maporl {

LossCfg loss_cfg(const maporl_policy_loss_params & p, bool has_ref, bool has_entropy, bool has_old) {
    if (enum_int(p.type) < MAPORL_LOSS_PPO || enum_int(p.type) > MAPORL_LOSS_REINFORCE)
        throw_error(MAPORL_ERR_INVALID_ARG, "params.type: expected a maporl_loss_type (0..3), got %d",
                    enum_int(p.type));
    if (!(p.clip_low >= 0.0f && p.clip_low <= 1.0f))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.clip_low: expected a number in [0, 1], got %g", (double)p.clip_low);
    if (!(p.clip_high >= 0.0f))
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "params.clip_high: expected a number >= 0 (Infinity: no upper clip), got %g", (double)p.clip_high);
    if (!(p.dual_clip == 0.0f || (p.dual_clip > 1.0f && std::isfinite(p.dual_clip))))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.dual_clip: expected 0 (off) or a finite number > 1, got %g",
                    (double)p.dual_clip);
    if (!(p.log_ratio_clamp > 0.0f))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.log_ratio_clamp: expected a number > 0 (Infinity: none), got %g",
                    (double)p.log_ratio_clamp);
    if (enum_int(p.kl) < MAPORL_KL_NONE || enum_int(p.kl) > MAPORL_KL_K3)
        throw_error(MAPORL_ERR_INVALID_ARG, "params.kl: expected a maporl_kl_estimator (0..4), got %d", enum_int(p.kl));
    if (!std::isfinite(p.kl_coef))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.kl_coef: expected a finite number, got %g", (double)p.kl_coef);
    if (!std::isfinite(p.entropy_coef))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.entropy_coef: expected a finite number, got %g",
                    (double)p.entropy_coef);
    if (enum_int(p.agg) < MAPORL_AGG_TOKEN_MEAN || enum_int(p.agg) > MAPORL_AGG_SEQ_MEAN_TOKEN_SUM_NORM)
        throw_error(MAPORL_ERR_INVALID_ARG, "params.agg: expected a maporl_loss_agg (0..3), got %d", enum_int(p.agg));
    if (!(p.normalizer >= 0.0 && std::isfinite(p.normalizer)))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.normalizer: expected a finite number >= 0 (0: local), got %g",
                    p.normalizer);
    if (!(p.seq_normalizer >= 0.0 && std::isfinite(p.seq_normalizer)))
        throw_error(MAPORL_ERR_INVALID_ARG, "params.seq_normalizer: expected a finite number >= 0 (0: local), got %g",
                    p.seq_normalizer);
    if (p.kl != MAPORL_KL_NONE && !has_ref)
        throw_error(MAPORL_ERR_INVALID_ARG, "ref_logp: required when params.kl is not MAPORL_KL_NONE, got NULL");
    if (p.entropy_coef != 0.0f && !has_entropy)
        throw_error(MAPORL_ERR_INVALID_ARG, "entropy: required when params.entropy_coef is not 0, got NULL");
    if (!has_old && p.type != MAPORL_LOSS_REINFORCE)
        throw_error(MAPORL_ERR_INVALID_ARG, "old_logp: required for every loss type but REINFORCE, got NULL");
    LossCfg c;
    c.type = (int)p.type;
    c.lo = p.clip_low;
    c.hi = p.clip_high;
    c.dual = p.type == MAPORL_LOSS_PPO ? p.dual_clip : 0.0f;
    c.clamp = p.log_ratio_clamp;
    c.kl = (int)p.kl;
    c.kl_st = p.kl_straight_through ? 1 : 0;
    c.kl_coef = p.kl_coef;
    c.ent_coef = p.entropy_coef;
    return c;
}

double agg_weight(maporl_loss_agg agg, double normalizer, double len, double tokens, double seqs, int64_t T) {
    if (len <= 0) return 0.0;
    double d;
    switch (agg) {
        case MAPORL_AGG_TOKEN_MEAN:
            d = normalizer > 0 ? normalizer : tokens;
            break;
        case MAPORL_AGG_SEQ_MEAN_TOKEN_SUM:
            d = normalizer > 0 ? normalizer : seqs;
            break;
        case MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN:
            d = (normalizer > 0 ? normalizer : seqs) * len;
            break;
        default:
            d = normalizer > 0 ? normalizer : (double)T;
            break;
    }
    return d > 0 ? 1.0 / d : 0.0;
}

void plan_weights(const maporl_policy_loss_params & prm, int64_t T, RowPlan & p) {
    const size_t B = p.len.size();
    p.w.assign(B, 0.0);
    p.wa.assign(B, 0.0);
    // GSPO: the policy term as seq-mean-token-mean over the sequences, whatever `agg` says (verl's rule); `agg`
    // weighs the KL and entropy terms.
    const bool gspo = prm.type == MAPORL_LOSS_GSPO;
    const bool seq_agg = prm.agg != MAPORL_AGG_TOKEN_MEAN && prm.agg != MAPORL_AGG_SEQ_MEAN_TOKEN_SUM_NORM;
    const double seq_norm = prm.seq_normalizer > 0 ? prm.seq_normalizer : seq_agg ? prm.normalizer : 0.0;
    for (size_t b = 0; b < B; ++b) {
        p.wa[b] = agg_weight(prm.agg, prm.normalizer, p.len[b], p.tokens, p.seqs, T);
        p.w[b] = gspo ? agg_weight(MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN, seq_norm, p.len[b], p.tokens, p.seqs, T) : p.wa[b];
    }
}

template <typename F>
bool run_segment(const LossCfg & c, const PgSeg<F> & s, PgSums & out) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa == Isa::Avx512) return avx512::pg_segment_f32(c, s, out);
        if (isa == Isa::Avx2) return avx2::pg_segment_f32(c, s, out);
    }
    if (s.mask_type == MAPORL_MASK_U8)
        return pg_segment<ScalarLoad<F>, F, uint8_t>(c, s, static_cast<const uint8_t *>(s.mask), 0, s.n, out);
    return pg_segment<ScalarLoad<F>, F, float>(c, s, static_cast<const float *>(s.mask), 0, s.n, out);
}
template bool run_segment<float>(const LossCfg &, const PgSeg<float> &, PgSums &);
template bool run_segment<double>(const LossCfg &, const PgSeg<double> &, PgSums &);

template <typename F>
PgSeg<F> row_segment(const PolicyLossArgs<F> & a, int64_t b, int64_t t0, int64_t t1, double seq, double w, double wa) {
    const int64_t o = b * a.T + t0;
    const size_t msz = a.mask_type == MAPORL_MASK_U8 ? 1 : 4;
    PgSeg<F> s;
    s.lp = a.logp + o;
    s.old = a.old_logp ? a.old_logp + o : nullptr;
    s.adv = a.adv_per_seq ? nullptr : a.advantages + o;
    s.adv_seq = a.adv_per_seq ? a.advantages[b] : F(0);
    s.mask = static_cast<const char *>(a.mask) + (size_t)o * msz;
    s.mask_type = a.mask_type;
    s.ref = a.ref_logp ? a.ref_logp + o : nullptr;
    s.ent = a.entropy ? a.entropy + o : nullptr;
    s.seq = (F)seq;
    s.w = (F)w;
    s.w_aux = (F)wa;
    s.grad = a.grad_logp ? a.grad_logp + o : nullptr;
    s.gent = a.grad_entropy ? a.grad_entropy + o : nullptr;
    s.n = t1 - t0;
    return s;
}
template PgSeg<float> row_segment<float>(const PolicyLossArgs<float> &, int64_t, int64_t, int64_t, double, double,
                                         double);
template PgSeg<double> row_segment<double>(const PolicyLossArgs<double> &, int64_t, int64_t, int64_t, double, double,
                                           double);

template <typename F>
RowPlan plan_rows(const PolicyLossArgs<F> & a, bool with_seq) {
    RowPlan p;
    p.len.assign((size_t)a.B, 0.0);
    p.seq.assign((size_t)a.B, 0.0);
    p.w.assign((size_t)a.B, 0.0);
    const int64_t T = a.T;
    const bool gspo = with_seq && a.params.type == MAPORL_LOSS_GSPO;
    std::vector<int64_t> bad((size_t)a.B, -1);
    parallel_for(a.B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            // Branch-free counting loops (the compiler vectorises them); the slow search runs only on a bad row.
            int64_t n = 0;
            bool any_bad = false;
            if (a.mask_type == MAPORL_MASK_U8) {
                const uint8_t * m = static_cast<const uint8_t *>(a.mask) + b * T;
                uint8_t hi = 0;
                for (int64_t t = 0; t < T; ++t) {
                    n += m[t] == 1;
                    hi |= m[t];
                }
                any_bad = hi > 1;
            } else {
                const float * m = static_cast<const float *>(a.mask) + b * T;
                int64_t z = 0;
                for (int64_t t = 0; t < T; ++t) {
                    n += m[t] == 1.0f;
                    z += m[t] == 0.0f;
                }
                any_bad = n + z != T;
            }
            if (any_bad)
                for (int64_t t = 0; t < T; ++t) {
                    const int64_t i = b * T + t;
                    const float m = a.mask_type == MAPORL_MASK_U8 ? (float)static_cast<const uint8_t *>(a.mask)[i]
                                                                  : static_cast<const float *>(a.mask)[i];
                    if (m != 0.0f && m != 1.0f) {
                        bad[b] = i;
                        break;
                    }
                }
            double d = 0;
            if (gspo)
                for (int64_t t = 0; t < T; ++t) {
                    const int64_t i = b * T + t;
                    const bool on = a.mask_type == MAPORL_MASK_U8 ? static_cast<const uint8_t *>(a.mask)[i] == 1
                                                                  : static_cast<const float *>(a.mask)[i] == 1.0f;
                    if (on) d += (double)a.logp[i] - (double)a.old_logp[i];
                }
            p.len[b] = (double)n;
            p.seq[b] = n > 0 ? d / (double)n : 0.0;
        }
    });
    for (int64_t b = 0; b < a.B; ++b)
        if (bad[b] >= 0) {
            const int64_t i = bad[b];
            const double m = a.mask_type == MAPORL_MASK_U8 ? (double)static_cast<const uint8_t *>(a.mask)[i]
                                                           : (double)static_cast<const float *>(a.mask)[i];
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "mask: expected 0 or 1 at every position, got %g at index %lld (row %lld, t %lld)", m,
                        (long long)i, (long long)b, (long long)(i % (T > 0 ? T : 1)));
        }
    for (int64_t b = 0; b < a.B; ++b) {
        p.tokens += p.len[b];
        p.seqs += p.len[b] > 0 ? 1 : 0;
    }
    plan_weights(a.params, T, p);
    return p;
}
template RowPlan plan_rows<float>(const PolicyLossArgs<float> &, bool);
template RowPlan plan_rows<double>(const PolicyLossArgs<double> &, bool);

void finish_stats(const LossCfg & c, const RowPlan & p, const std::vector<PgSums> & sums,
                  const std::vector<int64_t> & row_of, maporl_policy_loss_stats * st) {
    if (!st) return;
    PgSums all;
    double pg = 0, kl = 0, ent = 0;
    for (size_t k = 0; k < sums.size(); ++k) {
        const double w = p.w[(size_t)row_of[k]], wa = p.wa[(size_t)row_of[k]];
        pg += w * sums[k].pg;
        kl += wa * sums[k].kl;
        ent += wa * sums[k].ent;
        all.add(sums[k]);
    }
    const double n = all.tokens, inv = n > 0 ? 1.0 / n : 0.0;
    st->pg_loss = pg;
    st->kl_loss = kl;
    st->entropy_loss = ent;
    st->loss = pg + (double)c.kl_coef * kl - (double)c.ent_coef * ent;
    st->clip_frac = all.clip * inv;
    st->clip_frac_lower = all.lower * inv;
    st->approx_kl = all.nkl * inv;
    st->kl_mean = all.kl * inv;
    st->entropy_mean = all.ent * inv;
    st->ratio_mean = all.ratio * inv;
    st->ratio_max = all.ratio_max;
    st->tokens = n;
    st->sequences = p.seqs;
}

template <typename F>
void policy_loss_cpu(const PolicyLossArgs<F> & a, maporl_policy_loss_stats * stats) {
    const LossCfg c = loss_cfg(a.params, a.ref_logp != nullptr, a.entropy != nullptr, a.old_logp != nullptr);
    const RowPlan p = plan_rows(a, true);
    std::vector<PgSums> sums((size_t)a.B);
    std::vector<int64_t> row_of((size_t)a.B);
    parallel_for(a.B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            row_of[b] = b;
            run_segment(c, row_segment(a, b, 0, a.T, p.seq[b], p.w[b], p.wa[b]), sums[b]);
        }
    });
    finish_stats(c, p, sums, row_of, stats);
}
template void policy_loss_cpu<float>(const PolicyLossArgs<float> &, maporl_policy_loss_stats *);
template void policy_loss_cpu<double>(const PolicyLossArgs<double> &, maporl_policy_loss_stats *);

}  // namespace maporl

using namespace maporl;

extern "C" {

maporl_policy_loss_params maporl_policy_loss_default_params(void) {
    maporl_policy_loss_params p;
    p.type = MAPORL_LOSS_PPO;
    p.clip_low = 0.2f;
    p.clip_high = 0.2f;
    p.dual_clip = 3.0f;
    p.log_ratio_clamp = 20.0f;
    p.kl = MAPORL_KL_NONE;
    p.kl_straight_through = 0;
    p.kl_coef = 0.0f;
    p.entropy_coef = 0.0f;
    p.agg = MAPORL_AGG_TOKEN_MEAN;
    p.normalizer = 0.0;
    p.seq_normalizer = 0.0;
    return p;
}

maporl_status maporl_policy_loss(maporl_device device, const float * logp, const float * old_logp,
                                 const float * advantages, int adv_per_seq, const void * mask,
                                 maporl_mask_type mask_type, const float * ref_logp, const float * entropy, int64_t B,
                                 int64_t T, maporl_policy_loss_params params, float * grad_logp_out,
                                 float * grad_entropy_out, maporl_policy_loss_stats * stats_out) {
    return guarded([&] {
        require_device(device);
        require_mask_type(mask_type);
        require_dims(B, T, "B", "T");
        const int64_t n = B * T;
        require_ptr(logp, "logp", n);
        require_ptr(advantages, "advantages", adv_per_seq ? B : n);
        require_ptr(mask, "mask", n);
        loss_cfg(params, ref_logp != nullptr, entropy != nullptr, old_logp != nullptr);
        PolicyLossArgs<float> a{
            logp, old_logp, advantages,    adv_per_seq ? 1 : 0, mask, mask_type, ref_logp, entropy, B,
            T,    params,   grad_logp_out, grad_entropy_out};
        if (device == MAPORL_DEVICE_CUDA) return policy_loss_cuda(a, stats_out);
        policy_loss_cpu<float>(a, stats_out);
        return MAPORL_OK;
    });
}

}  // extern "C"
