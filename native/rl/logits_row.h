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

#include "native/rl/policy_loss.h"

namespace maporl {

// e_out (V) and ms_out (one vector per chunk of 8 vectors, the tail chunk included), when not null, keep what
// row_grad_e_t needs to write the gradient without a second exp per element: e_v = exp(x_v - ms) with ms the
// running max of v's lane when v's chunk was read.
// How far ahead (elements) row_stats_t prefetches the row it reads first (from DRAM: a batch of logits rarely
// fits the caches): 2 KiB of floats, as the sampler's row pass (sampling_row.h).
constexpr int64_t kRowPrefetch = 512;

template <class Ops, typename F>
RowStats row_stats_t(const F * z, int64_t V, int32_t y, F temp, bool entropy, F * e_out = nullptr,
                     F * ms_out = nullptr) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W, CH = 8 * W;
    const Vv ninf = Ops::splat(-INFINITY), zero = Ops::splat(0.0), tv = Ops::splat((double)temp);
    const bool scaled = temp != F(1);
    Vv m = ninf, ms = zero, s = zero, t = zero;  // ms: m, or 0 while m = -Inf
    // The float lane sums move into double every kFlushChunks chunks (at most 128 float adds per lane): summed in
    // float over a row of 151,936 the log-probs were off by up to 5e-5 (1e-4 on AVX2, 8e-4 on the scalar path).
    constexpr int kFlushChunks = 16;
    double sd[W] = {}, td[W] = {};
    int pending = 0;
    auto flush = [&] {
        drain_lanes<Ops>(s, sd);
        drain_lanes<Ops>(t, td);
    };
    auto chunk = [&](const F * p, F * e_dst, F * ms_dst) {
        Vv x[8];
        Vv cm = ninf;
        for (int k = 0; k < 8; ++k) {
            x[k] = Ops::load(p + k * W);
            if (scaled) x[k] = x[k] / tv;
            cm = Ops::max(cm, x[k]);
        }
        const auto up = cm > m;
        if (Ops::any(up)) {  // rescale the lanes whose max rose (sums relative to the running max)
            const Vv mn = Ops::sel(up, cm, m);
            const Vv ms_new = Ops::sel(mn == ninf, zero, mn);
            const Vv d = m - ms_new, scale = Ops::exp_nonpos(d);
            if (entropy) {
                t = scale * (t + Ops::sel(s == zero, zero, s * d));
                for (int l = 0; l < W; ++l)
                    td[l] = Ops::lane(scale, l) * (td[l] + (sd[l] == 0.0 ? 0.0 : sd[l] * Ops::lane(d, l)));
            }
            s = s * scale;
            for (int l = 0; l < W; ++l) sd[l] *= Ops::lane(scale, l);
            m = mn;
            ms = ms_new;
        }
        for (int k = 0; k < 8; ++k) {
            const Vv q = x[k] - ms;
            const Vv e = Ops::exp_nonpos(q);
            s += e;
            if (entropy) t += Ops::sel(e == zero, zero, e * q);
            if (e_dst) Ops::store(e_dst + k * W, e);
        }
        if (ms_dst) Ops::store(ms_dst, ms);
        if (++pending == kFlushChunks) {
            pending = 0;
            flush();
        }
    };
    const int64_t full = V - V % CH;
    for (int64_t i = 0; i < full; i += CH) {
        if (i + kRowPrefetch + CH <= V)
            for (int k = 0; k < CH; k += 64 / (int)sizeof(F)) __builtin_prefetch(z + i + kRowPrefetch + k);
        chunk(z + i, e_out ? e_out + i : nullptr, ms_out ? ms_out + (i / CH) * W : nullptr);
    }
    if (full < V) {
        F buf[CH], ebuf[CH];
        for (int k = 0; k < CH; ++k) buf[k] = full + k < V ? z[full + k] : F(-INFINITY);
        chunk(buf, e_out ? ebuf : nullptr, ms_out ? ms_out + (full / CH) * W : nullptr);
        if (e_out)
            for (int64_t k = 0; k < V - full; ++k) e_out[full + k] = ebuf[k];
    }
    flush();
    double M = -INFINITY;
    for (int l = 0; l < W; ++l) M = Ops::lane(m, l) > M ? Ops::lane(m, l) : M;
    RowStats r;
    if (!(M > -INFINITY)) {  // all -Inf (or NaN max): undefined softmax
        r.lse = r.logp = r.entropy = NAN;
        return r;
    }
    double S = 0, Tr = 0;
    for (int l = 0; l < W; ++l) {
        const double sl = sd[l];
        if (sl == 0) continue;
        const double ml = Ops::lane(m, l), sc = ::exp(ml - M);
        S += sl * sc;
        if (entropy) Tr += sc * (td[l] + sl * (ml - M));
    }
    const double logS = ::log(S);
    r.lse = M + logS;
    r.entropy = entropy ? logS - Tr / S : 0.0;
    const F zy = scaled ? z[y] / temp : z[y];
    r.logp = (double)zy - r.lse;
    return r;
}

// Writes the gradient row: g[i..i+W) = vec(i) (one(i) only for rows shorter than a vector). Out of place, rows
// of 16 KiB or more go out with non-temporal stores (no read-for-ownership of lines about to be overwritten)
// after a head that aligns g; in place the lines are in cache already, from the read of z. Head and tail
// elements are lanes of vec() too, so the result does not depend on the buffer's alignment; the last vector
// is computed first, before an in-place write can reach its inputs.
template <class Ops, typename F, class One, class Vec>
inline void write_row(F * g, const F * z, int64_t V, One && one, Vec && vec) {
    constexpr int W = Ops::W;
    if (V < W) {
        for (int64_t i = 0; i < V; ++i) g[i] = one(i);
        return;
    }
    const auto last = vec(V - W);
    int64_t i = 0;
    if (g != z && V * (int64_t)sizeof(F) >= 16384) {
        for (; i + W <= V && (uintptr_t)(g + i) % (sizeof(F) * W) != 0; ++i) g[i] = (F)Ops::lane(vec(i), 0);
        for (; i + W <= V; i += W) Ops::stream(g + i, vec(i));
        Ops::fence();
    } else {
        for (; i + W <= V; i += W) Ops::store(g + i, vec(i));
    }
    for (; i < V; ++i) g[i] = (F)Ops::lane(last, (int)(i - (V - W)));
}

// The gradient pass from z alone (GSPO, whose pass A runs over every row first): one exp per element.
template <class Ops, typename F>
void row_grad_t(const F * z, int64_t V, int32_t y, F temp, F lse, F H, F gl, F ge, F * g) {
    typedef typename Ops::V Vv;
    typedef ScalarLoad<F> S1;
    const bool scaled = temp != F(1);
    const F a = gl + ge * H;
    const Vv tv = Ops::splat((double)temp), lv = Ops::splat((double)lse), av = Ops::splat((double)a),
             gv = Ops::splat((double)ge), ninf = Ops::splat(-INFINITY), zero = Ops::splat(0.0);
    write_row<Ops, F>(
        g, z, V,
        [&](int64_t i) {
            const F x = scaled ? z[i] / temp : z[i];
            const F q = x - lse;
            return q == F(-INFINITY) ? F(0) : -S1::exp(q) * (a + ge * q);
        },
        [&](int64_t i) {
            Vv x = Ops::load(z + i);
            if (scaled) x = x / tv;
            const Vv q = x - lv;
            return Ops::sel(q == ninf, zero, -Ops::exp_nonpos(q) * (av + gv * q));
        });
    g[y] += gl;
}

// row_grad_t from the e / ms buffers of row_stats_t: first p_v = e_v * exp(ms - lse) in place in e (one exp per
// lane and chunk), then the gradient from p (and x, read only when ge != 0: the entropy term needs it). Out of
// place, large rows are written with non-temporal stores after a scalar head that aligns g. g may be z.
template <class Ops, typename F>
void row_grad_e_t(const F * z, F * e, const F * msv, int64_t V, int32_t y, F temp, F lse, F H, F gl, F ge, F * g) {
    typedef typename Ops::V Vv;
    typedef ScalarLoad<F> S1;
    constexpr int W = Ops::W, CH = 8 * W;
    const bool scaled = temp != F(1), ent = ge != F(0);
    const F a = gl + ge * H;
    const Vv tv = Ops::splat((double)temp), lv = Ops::splat((double)lse), av = Ops::splat((double)a),
             gv = Ops::splat((double)ge), zero = Ops::splat(0.0);
    const int64_t full = V - V % CH;
    for (int64_t i = 0; i < full; i += CH) {
        const Vv sc = Ops::exp_nonpos(Ops::load(msv + (i / CH) * W) - lv);
        for (int k = 0; k < 8; ++k) Ops::store(e + i + k * W, Ops::load(e + i + k * W) * sc);
    }
    for (int64_t i = full; i < V; ++i) e[i] *= S1::exp(msv[(full / CH) * W + (int)((i - full) % W)] - lse);
    auto one = [&](int64_t i) {
        const F p = e[i];
        if (!ent) return -p * a;
        const F x = scaled ? z[i] / temp : z[i];
        return p == F(0) ? F(0) : -p * (a + ge * (x - lse));
    };
    auto vec = [&](int64_t i) {
        const Vv p = Ops::load(e + i);
        if (!ent) return -p * av;
        Vv x = Ops::load(z + i);
        if (scaled) x = x / tv;
        return Ops::sel(p == zero, zero, -p * (av + gv * (x - lv)));
    };
    write_row<Ops, F>(g, z, V, one, vec);
    g[y] += gl;
}

}  // namespace maporl
