// policy_loss.h: internals of the policy losses (maporl_policy_loss, maporl_value_loss) and of the logits
// kernels (maporl_logprobs, maporl_fused_policy_loss). The per-token formulas are policy_loss_math.h; here
// are the row-segment loop that applies them with masking, weights and statistics (one template for the
// scalar CPU path, the double reference path and the per-ISA vector units), the CPU drivers, and the CUDA
// entry points. See maporl.h for the contracts.
#pragma once

#include <math.h>
#include <stdint.h>

#include <vector>

#include "maporl.h"
#include "native/core/bf16.h"
#include "native/rl/policy_loss_math.h"

namespace maporl {

// Per-segment sums (double) of one row's valid tokens.
struct PgSums {
    double pg = 0, kl = 0, ent = 0, clip = 0, lower = 0, nkl = 0, ratio = 0, tokens = 0;
    double ratio_max = -INFINITY;
    void add(const PgSums & o) {
        pg += o.pg;
        kl += o.kl;
        ent += o.ent;
        clip += o.clip;
        lower += o.lower;
        nkl += o.nkl;
        ratio += o.ratio;
        tokens += o.tokens;
        if (o.ratio_max > ratio_max) ratio_max = o.ratio_max;
    }
};

// One segment [0, n) of one row, pointers at the segment start.
template <typename F>
struct PgSeg {
    const F * lp;
    const F * old;  // null: ratio 1 (REINFORCE without an old policy)
    const F * adv;  // null: adv_seq for every token
    F adv_seq;
    const void * mask;  // of mask_type
    maporl_mask_type mask_type;
    const F * ref;  // read only with kl
    const F * ent;  // null: no entropy
    F seq;          // gspo: the row's mean of logp - old over valid tokens
    F w;            // aggregation weight of each valid token's policy term in this row
    F w_aux;        // of its KL and entropy terms (= w but for GSPO, whose policy term is seq-mean-token-mean)
    F * grad;       // null: not written
    F * gent;       // null: not written
    int64_t n;
};

template <typename F>
struct ScalarLoad : ScalarOps<F> {
    typedef F V;
    static V load(const F * p) { return *p; }
    static V loadm(const uint8_t * p) { return (F)*p; }
    static V loadm(const float * p) { return (F)*p; }
    static void store(F * p, V v) { *p = v; }
    static void stream(F * p, V v) { *p = v; }
    static void fence() {}
    static double hsum(V v) { return (double)v; }
    static double hmax(V v) { return (double)v; }
    static bool any(bool k) { return k; }
    static double lane(V v, int) { return (double)v; }
    static unsigned bits(bool k) { return k ? 1u : 0u; }
    static unsigned ge_bits(V a, V b) { return a >= b ? 1u : 0u; }
    static void compress_bits(unsigned m, int64_t base, int32_t * out) {
        if (m) *out = (int32_t)base;
    }
    static V exp_nonpos(V x) { return ScalarOps<F>::exp(x); }
    // vec.h's vexp2_sum: 2^t for a softmax sum's term, t in [-125, 0] (NaN stays NaN).
    static V exp2_sum(V t) { return (V)::exp2((double)t); }
    // vec_ops.h's quotient: z / t as IEEE division rounds it.
    static V quotient(V z, V t, V) { return z / t; }
    static V max(V a, V b) { return a > b ? a : b; }
};

// Moves a vector of lane sums into per-lane doubles and zeroes it (the row passes keep float lanes for at most
// a bounded number of terms, then drain them).
template <class Ops>
inline void drain_lanes(typename Ops::V & v, double * d) {
    for (int l = 0; l < Ops::W; ++l) d[l] += Ops::lane(v, l);
    v = Ops::splat(0.0);
}

// Applies token_terms to elements [i0, i1) of the segment (i1 - i0 a multiple of Ops::W), adding the sums to
// `out`. Returns true when a mask value other than 0/1 was seen. Float lanes accumulate at most 1024 tokens
// before the sums move to double.
template <class Ops, typename F, typename M>
bool pg_segment(const LossCfg & cfg, const PgSeg<F> & seg, const M * m, int64_t i0, int64_t i1, PgSums & out) {
    // Local copies: the gradient stores could alias the caller's structs for all the compiler knows, so through
    // the references every field (pointers, loss type, KL estimator) was loaded again after every store.
    const LossCfg c = cfg;
    const PgSeg<F> s = seg;
    typedef typename Ops::V V;
    typedef typename Ops::K K;
    const V zero = Ops::splat(0.0), one = Ops::splat(1.0), w = Ops::splat((double)s.w),
            wa = Ops::splat((double)s.w_aux);
    const bool split = s.w != s.w_aux;  // (else the one product, as before the GSPO rule: the same bits)
    const V kc = Ops::splat((double)c.kl_coef), ge = Ops::splat(-(double)c.ent_coef * (double)s.w_aux);
    const V seq = Ops::splat((double)s.seq), advs = Ops::splat((double)s.adv_seq);
    bool bad = false;
    for (int64_t b0 = i0; b0 < i1; b0 += 1024) {
        const int64_t b1 = i1 < b0 + 1024 ? i1 : b0 + 1024;
        V apg = zero, akl = zero, aent = zero, aclip = zero, alow = zero, ankl = zero, arat = zero, atok = zero;
        V amax = Ops::splat(-INFINITY);
        for (int64_t i = b0; i < b1; i += Ops::W) {
            const V mv = Ops::loadm(m + i);
            const K valid = mv == one;
            bad |= Ops::any((mv != zero) & (mv != one));
            const V lp = Ops::load(s.lp + i);
            const V old = s.old ? Ops::load(s.old + i) : lp;
            const V adv = s.adv ? Ops::load(s.adv + i) : advs;
            const V ref = c.kl != MAPORL_KL_NONE ? Ops::load(s.ref + i) : zero;
            const TokenTerms<Ops> t = token_terms<Ops>(c, lp, old, adv, seq, ref);
            if (s.grad)
                Ops::store(s.grad + i,
                           Ops::sel(valid, split ? w * t.dpg + wa * (kc * t.dkl) : w * (t.dpg + kc * t.dkl), zero));
            if (s.gent) Ops::store(s.gent + i, Ops::sel(valid, ge, zero));
            apg += Ops::sel(valid, t.pg, zero);
            akl += Ops::sel(valid, t.kl, zero);
            if (s.ent) aent += Ops::sel(valid, Ops::load(s.ent + i), zero);
            aclip += Ops::sel(valid & t.clip, one, zero);
            alow += Ops::sel(valid & t.lower, one, zero);
            ankl += Ops::sel(valid, t.nkl, zero);
            arat += Ops::sel(valid, t.ratio, zero);
            amax = Ops::sel(valid & (t.ratio > amax), t.ratio, amax);
            atok += Ops::sel(valid, one, zero);
        }
        out.pg += Ops::hsum(apg);
        out.kl += Ops::hsum(akl);
        out.ent += Ops::hsum(aent);
        out.clip += Ops::hsum(aclip);
        out.lower += Ops::hsum(alow);
        out.nkl += Ops::hsum(ankl);
        out.ratio += Ops::hsum(arat);
        out.tokens += Ops::hsum(atok);
        const double mx = Ops::hmax(amax);
        if (mx > out.ratio_max) out.ratio_max = mx;
    }
    return bad;
}

// Softmax statistics of one logits row: lse and entropy of softmax(z / temp), and z[y] / temp - lse.
struct RowStats {
    double lse, logp, entropy;
};

// ---- CPU drivers (policy_loss.cpp, value_loss.cpp, logits.cpp); F = float or double ----

template <typename F>
struct PolicyLossArgs {
    const F * logp;
    const F * old_logp;
    const F * advantages;
    int adv_per_seq;
    const void * mask;
    maporl_mask_type mask_type;
    const F * ref_logp;
    const F * entropy;
    int64_t B, T;
    maporl_policy_loss_params params;
    F * grad_logp;
    F * grad_entropy;
};

// Checks params (names the field on error) and returns the token form.
LossCfg loss_cfg(const maporl_policy_loss_params & p, bool has_ref, bool has_entropy, bool has_old);

template <typename F>
void policy_loss_cpu(const PolicyLossArgs<F> & a, maporl_policy_loss_stats * stats);

template <typename F>
void value_loss_cpu(const F * values, const F * old_values, const F * returns, const void * mask,
                    maporl_mask_type mask_type, int64_t B, int64_t T, F clip, maporl_loss_agg agg, double normalizer,
                    F * grad, maporl_value_loss_stats * stats);

template <typename F>
void logprobs_cpu(const F * logits, const int32_t * targets, int64_t N, int64_t V, F temperature, F * logp,
                  F * entropy);
// bfloat16 logits, widened row by row: the float path's results on the widened values, bit for bit.
void logprobs_cpu_bf16(const uint16_t * logits, const int32_t * targets, int64_t N, int64_t V, float temperature,
                       float * logp, float * entropy);

// The gradient over the logits of a loss given through the log-probs and entropies it read (the fused kernel's
// second pass, for callers that took logp / entropy from logprobs_cpu and their gradients from policy_loss_cpu):
// grad_logits[n, v] (=) = (1[v = y] - p_v) * grad_logp[n] / temp + grad_entropy[n] * dH/dz_v. A row whose
// grad_logp and grad_entropy are both 0 is written 0 without reading its logits. grad_entropy may be null (0);
// grad_logits may be logits (in place).
template <typename F>
void logits_backward_cpu(const F * logits, const int32_t * targets, int64_t N, int64_t V, F temperature,
                         const F * grad_logp, const F * grad_entropy, F * grad_logits);

template <typename F>
struct FusedArgs {
    const F * logits;                        // or null, with
    const uint16_t * logits_bf16 = nullptr;  // bfloat16 logits (F = float only), widened row by row
    const int32_t * targets;
    PolicyLossArgs<F> loss;  // loss.logp / loss.entropy / loss.grad_* point at outputs or scratch
    int64_t V;
    F temperature;
    F * grad_logits;
    F * logp_out;
    F * entropy_out;
    F * grad_logp_out;
};

template <typename F>
void fused_policy_loss_cpu(const FusedArgs<F> & a, maporl_policy_loss_stats * stats);

// Aggregation weight of each valid token of a row with `len` valid tokens; tokens/seqs are the batch totals.
double agg_weight(maporl_loss_agg agg, double normalizer, double len, double tokens, double seqs, int64_t T);

// The shared steps of the CPU drivers (policy_loss.cpp):
struct RowPlan {
    std::vector<double> len, seq, w, wa;  // per row: valid tokens, gspo mean of logp - old, the policy term's and the
                                          // KL / entropy terms' aggregation weights
    double tokens = 0, seqs = 0;
};
// Mask pre-pass (throws on a value other than 0/1), gspo means when with_seq, weights.
template <typename F>
RowPlan plan_rows(const PolicyLossArgs<F> & a, bool with_seq);
// The rows' weights (w, wa) from p.len and the totals (GSPO's rule included); plan_rows and the CUDA plan call it.
void plan_weights(const maporl_policy_loss_params & prm, int64_t T, RowPlan & p);
// Segment [t0, t1) of row b as PgSeg.
template <typename F>
PgSeg<F> row_segment(const PolicyLossArgs<F> & a, int64_t b, int64_t t0, int64_t t1, double seq, double w, double wa);
// The segment loop on the active ISA (float) or the scalar template (double, or the scalar level).
template <typename F>
bool run_segment(const LossCfg & c, const PgSeg<F> & s, PgSums & out);
// Statistics from per-part sums (part k belongs to row row_of[k]), summed in part order.
void finish_stats(const LossCfg & c, const RowPlan & p, const std::vector<PgSums> & sums,
                  const std::vector<int64_t> & row_of, maporl_policy_loss_stats * st);

// ---- CUDA (cuda/rl/policy_loss.cu, cuda/rl/logits.cu; stubs without CUDA). Device pointers. ----
maporl_status policy_loss_cuda(const PolicyLossArgs<float> & a, maporl_policy_loss_stats * stats);
maporl_status value_loss_cuda(const float * values, const float * old_values, const float * returns, const void * mask,
                              maporl_mask_type mask_type, int64_t B, int64_t T, float clip, maporl_loss_agg agg,
                              double normalizer, float * grad, maporl_value_loss_stats * stats);
// Exactly one of logits and logits_bf16 is set (device pointers).
maporl_status logprobs_cuda(const float * logits, const uint16_t * logits_bf16, const int32_t * targets, int64_t N,
                            int64_t V, float temperature, float * logp, float * entropy);
maporl_status fused_policy_loss_cuda(const FusedArgs<float> & a, maporl_policy_loss_stats * stats);

// ---- per-ISA vector kernels (policy_loss_vec.inc) ----
#define MAPORL_PL_ISA_DECLS                                                                                         \
    bool pg_segment_f32(const LossCfg & c, const PgSeg<float> & s, PgSums & out);                                   \
    RowStats row_stats_f32(const float * z, int64_t V, int32_t y, float temp, bool entropy, float * e, float * ms); \
    void row_grad_f32(const float * z, int64_t V, int32_t y, float temp, float lse, float H, float gl, float ge,    \
                      float * g);                                                                                   \
    void row_grad_e_f32(const float * z, float * e, const float * ms, int64_t V, int32_t y, float temp, float lse,  \
                        float H, float gl, float ge, float * g);                                                    \
    void widen_bf16(const uint16_t * src, float * dst, int64_t n);
namespace avx512 {
MAPORL_PL_ISA_DECLS
}
namespace avx2 {
MAPORL_PL_ISA_DECLS
}
#undef MAPORL_PL_ISA_DECLS

}  // namespace maporl
