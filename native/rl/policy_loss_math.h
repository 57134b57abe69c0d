// policy_loss_math.h: the per-token policy-loss formulas, written once for every execution width. `Ops`
// supplies the value type V (float, double, a SIMD vector of floats), its mask type K (bool, or a lane
// mask) and exp/abs/select; the scalar Ops here serve the CPU reference (float and double) and the CUDA
// kernels, the vector Ops live in the per-ISA units (policy_loss_vec.inc). Gradients follow autograd
// through verl's expressions: a clamp passes the gradient only inside its range (ends included), a max/min
// passes it to the branch that is taken. Masked tokens are handled by the callers (select, never multiply).
#pragma once

#include <math.h>
#include <stdint.h>

#include "native/core/hd.h"
#include "maporl.h"

namespace maporl {

// The loss parameters in the form the token code uses.
struct LossCfg {
    int type;      // maporl_loss_type
    float lo, hi;  // ratio clip range: [1 - clip_low, 1 + clip_high]
    float dual;    // ppo dual-clip constant c (> 1), 0 = off
    float clamp;   // log-ratio clamp (two-sided for ppo/cispo/reinforce stats, upper for gspo)
    int kl;        // maporl_kl_estimator
    int kl_st;     // straight-through: gradient of k2
    float kl_coef;
    float ent_coef;
};

template <typename F>
struct ScalarOps {
    typedef F V;
    typedef bool K;
    static constexpr int W = 1;
    static MAPORL_HD V splat(double x) { return (F)x; }
    static MAPORL_HD V exp(float x) { return expf(x); }
    static MAPORL_HD V exp(double x) { return ::exp(x); }
    static MAPORL_HD V abs(V x) { return x < 0 ? -x : x; }
    static MAPORL_HD V sel(K k, V a, V b) { return k ? a : b; }
};

// One token's terms (one lane per token for vector Ops).
template <class Ops>
struct TokenTerms {
    typename Ops::V pg;     // policy-gradient loss term
    typename Ops::V dpg;    // its d / d logp
    typename Ops::V ratio;  // rho (gspo: the sequence ratio)
    typename Ops::V
        nkl;  // old - logp (clamped as the ratio is for ppo/cispo; raw for reinforce and gspo), for approx_kl
    typename Ops::V kl;     // kl estimator value (0 without kl)
    typename Ops::V dkl;    // its d / d logp
    typename Ops::K clip;   // clipped term active (cispo: weight clamped)
    typename Ops::K lower;  // dual-clip cap active
};

// lp, old: log-probs (old = lp when there is no old policy); adv: advantage; seq: gspo's raw sequence mean of
// logp - old (unused otherwise); ref: reference log-prob (unused without kl).
template <class Ops>
MAPORL_HD TokenTerms<Ops> token_terms(const LossCfg & c, typename Ops::V lp, typename Ops::V old, typename Ops::V adv,
                                      typename Ops::V seq, typename Ops::V ref) {
    typedef typename Ops::V V;
    typedef typename Ops::K K;
    const V zero = Ops::splat(0.0), one = Ops::splat(1.0);
    const V C = Ops::splat(c.clamp), lo = Ops::splat(1.0 - (double)c.lo), hi = Ops::splat(1.0 + (double)c.hi);
    TokenTerms<Ops> o;
    const K never = zero > one;
    o.lower = never;
    o.clip = never;
    const V raw = lp - old;
    if (c.type == MAPORL_LOSS_GSPO) {
        const K dead = seq > C;
        const V rho = Ops::exp(Ops::sel(dead, C, seq));
        const V l1 = -adv * rho;
        const V l2 = -adv * Ops::sel(rho < lo, lo, Ops::sel(rho > hi, hi, rho));
        o.clip = l2 > l1;
        o.pg = Ops::sel(o.clip, l2, l1);
        o.dpg = Ops::sel(o.clip | dead, zero, -adv * rho);
        o.ratio = rho;
        o.nkl = -raw;
    } else {
        const K dead = (raw < -C) | (raw > C);
        const V d = Ops::sel(raw < -C, -C, Ops::sel(raw > C, C, raw));
        const V rho = Ops::exp(d);
        o.ratio = rho;
        o.nkl = c.type == MAPORL_LOSS_REINFORCE ? -raw : -d;  // (verl's reinforce loss reports the unclamped ppo_kl)
        if (c.type == MAPORL_LOSS_PPO) {
            const V l1 = -adv * rho;
            const V l2 = -adv * Ops::sel(rho < lo, lo, Ops::sel(rho > hi, hi, rho));
            o.clip = l2 > l1;
            V lc = Ops::sel(o.clip, l2, l1);
            V g = Ops::sel(o.clip | dead, zero, -adv * rho);
            if (c.dual > 0.0f) {
                const V l3 = -adv * Ops::splat(c.dual);
                o.lower = (adv < zero) & (lc > l3);
                lc = Ops::sel(o.lower, l3, lc);
                g = Ops::sel(o.lower, zero, g);
            }
            o.pg = lc;
            o.dpg = g;
        } else if (c.type == MAPORL_LOSS_CISPO) {
            o.clip = (rho < lo) | (rho > hi);
            const V w = Ops::sel(rho < lo, lo, Ops::sel(rho > hi, hi, rho));
            o.pg = -w * adv * lp;
            o.dpg = -w * adv;
        } else {  // REINFORCE
            o.pg = -adv * lp;
            o.dpg = -adv;
        }
    }
    o.kl = zero;
    o.dkl = zero;
    if (c.kl != MAPORL_KL_NONE) {
        const V d = lp - ref;
        if (c.kl == MAPORL_KL_K1) {
            o.kl = d;
            o.dkl = one;
        } else if (c.kl == MAPORL_KL_ABS) {
            o.kl = Ops::abs(d);
            o.dkl = Ops::sel(d > zero, one, Ops::sel(d < zero, -one, zero));
        } else if (c.kl == MAPORL_KL_K2) {
            o.kl = Ops::splat(0.5) * d * d;
            o.dkl = d;
        } else {  // K3: e = clamp(ref - lp, -20, 20); clamp(exp(e) - e - 1, -10, 10)
            const V e = -d, E = Ops::splat(20.0), L = Ops::splat(10.0);
            const V ec = Ops::sel(e < -E, -E, Ops::sel(e > E, E, e));
            const V ex = Ops::exp(ec);
            const V k = ex - ec - one;
            o.kl = Ops::sel(k < -L, -L, Ops::sel(k > L, L, k));
            o.dkl = Ops::sel((e < -E) | (e > E) | (k < -L) | (k > L), zero, one - ex);
        }
        if (c.kl_st) o.dkl = d;
    }
    return o;
}

}  // namespace maporl
