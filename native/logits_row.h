// logits_row.h: the two passes over one logits row, for any execution width (Ops as in policy_loss.h:
// scalar float/double on the CPU reference path, SIMD vectors in the per-ISA units).
//   row_stats: one read of the row, online max / sum of exp / entropy sum per lane, one exp per element
//              (the running max is rescaled once per chunk of 8 vectors, not per element).
//   row_grad:  one read and one write: g_v = -p_v * (dlogp + dH * (x_v - lse + H)) / temp, then g_y += dlogp/temp,
//              p_v = exp(x_v - lse), x = z / temp. Safe in place (g == z).
// -Inf logits contribute p = 0 and no NaN; a row of only -Inf gives NaN (as torch's log_softmax); +Inf or NaN
// logits give NaN.
#pragma once

#include <math.h>
#include <stdint.h>

#include "policy_loss.h"

namespace maporl {

template <class Ops, typename F>
RowStats row_stats_t(const F * z, int64_t V, int32_t y, F temp, bool entropy) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W, CH = 8 * W;
    const Vv ninf = Ops::splat(-INFINITY), zero = Ops::splat(0.0), tv = Ops::splat((double)temp);
    const bool scaled = temp != F(1);
    Vv m = ninf, s = zero, t = zero;
    auto chunk = [&](const F * p) {
        Vv x[8];
        Vv cm = ninf;
        for (int k = 0; k < 8; ++k) {
            x[k] = Ops::load(p + k * W);
            if (scaled) x[k] = x[k] / tv;
            cm = Ops::sel(x[k] > cm, x[k], cm);
        }
        const Vv mn = Ops::sel(cm > m, cm, m);
        const Vv ms = Ops::sel(mn == ninf, zero, mn);
        const Vv scale = Ops::exp(m - ms);
        if (entropy) t = scale * (t + Ops::sel(s == zero, zero, s * (m - ms)));
        s = s * scale;
        for (int k = 0; k < 8; ++k) {
            const Vv q = x[k] - ms;
            const Vv e = Ops::exp(q);
            s += e;
            if (entropy) t += Ops::sel(e == zero, zero, e * q);
        }
        m = mn;
    };
    const int64_t full = V - V % CH;
    for (int64_t i = 0; i < full; i += CH) chunk(z + i);
    if (full < V) {
        F buf[CH];
        for (int k = 0; k < CH; ++k) buf[k] = full + k < V ? z[full + k] : F(-INFINITY);
        chunk(buf);
    }
    double M = -INFINITY;
    for (int l = 0; l < W; ++l) M = Ops::lane(m, l) > M ? Ops::lane(m, l) : M;
    RowStats r;
    if (!(M > -INFINITY)) {  // all -Inf (or NaN max): undefined softmax
        r.lse = r.logp = r.entropy = NAN;
        return r;
    }
    double S = 0, Tr = 0;
    for (int l = 0; l < W; ++l) {
        const double sl = Ops::lane(s, l);
        if (sl == 0) continue;
        const double ml = Ops::lane(m, l), sc = ::exp(ml - M);
        S += sl * sc;
        if (entropy) Tr += sc * (Ops::lane(t, l) + sl * (ml - M));
    }
    const double logS = ::log(S);
    r.lse = M + logS;
    r.entropy = entropy ? logS - Tr / S : 0.0;
    const F zy = scaled ? z[y] / temp : z[y];
    r.logp = (double)zy - r.lse;
    return r;
}

template <class Ops, typename F>
void row_grad_t(const F * z, int64_t V, int32_t y, F temp, F lse, F H, F gl, F ge, F * g) {
    typedef typename Ops::V Vv;
    typedef ScalarLoad<F> S1;
    constexpr int W = Ops::W;
    const bool scaled = temp != F(1);
    const F a = gl + ge * H;
    const Vv tv = Ops::splat((double)temp), lv = Ops::splat((double)lse), av = Ops::splat((double)a),
             gv = Ops::splat((double)ge), ninf = Ops::splat(-INFINITY), zero = Ops::splat(0.0);
    const int64_t full = V - V % W;
    for (int64_t i = 0; i < full; i += W) {
        Vv x = Ops::load(z + i);
        if (scaled) x = x / tv;
        const Vv q = x - lv;
        const Vv p = Ops::exp(q);
        Ops::store(g + i, Ops::sel(q == ninf, zero, -p * (av + gv * q)));
    }
    for (int64_t i = full; i < V; ++i) {
        const F x = scaled ? z[i] / temp : z[i];
        const F q = x - lse;
        const F p = S1::exp(q);
        g[i] = q == F(-INFINITY) ? F(0) : -p * (a + ge * q);
    }
    g[y] += gl;
}

}  // namespace maporl
