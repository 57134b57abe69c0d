// sampling_row.h: the passes over one logits row that the sampler needs, for any execution width (Ops: the
// scalar ScalarLoad<float> or a SIMD VecOps). x = z / temperature is computed on the fly (IEEE division: the
// same float everywhere). Tails shorter than a vector are padded with -Inf, so every element goes through the
// same vector code and exp_nonpos gives the same float for the same input wherever it sits in the row.
#pragma once

#include <math.h>
#include <stdint.h>

#include "policy_loss.h"

namespace maporl {

struct RowMax {
    float max;       // max of z (-Inf when every logit is -Inf)
    int64_t argmax;  // its first index
    bool bad;        // a NaN or +Inf logit
    double sum;      // sum of exp(z - max) (the raw softmax denominator)
};

template <class Ops>
typename Ops::V load_padded(const float * z, int64_t i, int64_t V) {
    constexpr int W = Ops::W;
    if (i + W <= V) return Ops::load(z + i);
    float buf[W];
    for (int k = 0; k < W; ++k) buf[k] = i + k < V ? z[i + k] : -INFINITY;
    return Ops::load(buf);
}

template <class Ops>
typename Ops::V scaled(typename Ops::V x, float temp) {
    return temp == 1.0f ? x : x / Ops::splat((double)temp);
}

// One read of the row: max, NaN / +Inf, and the raw softmax denominator by an online sum (one exp per element,
// the running max rescaled once per chunk of 8 vectors); then the first argmax from cache.
template <class Ops>
RowMax row_max_t(const float * z, int64_t V) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W, CH = 8 * W;
    const Vv ninf = Ops::splat(-INFINITY), inf = Ops::splat(INFINITY), zero = Ops::splat(0.0);
    Vv m = ninf, s = zero;
    bool bad = false;
    for (int64_t i0 = 0; i0 < V; i0 += CH) {
        Vv x[8];
        Vv cm = ninf;
        for (int k = 0; k < 8; ++k) {
            x[k] = load_padded<Ops>(z, i0 + k * W, V);
            bad |= Ops::any((x[k] != x[k]) | (x[k] == inf));
            cm = Ops::max(cm, x[k]);
        }
        const Vv mn = Ops::sel(cm > m, cm, m);
        const Vv ms = Ops::sel(mn == ninf, zero, mn);
        s = s * Ops::exp_nonpos(m - ms);
        for (int k = 0; k < 8; ++k) s += Ops::exp_nonpos(x[k] - ms);
        m = mn;
    }
    RowMax r{-INFINITY, -1, bad, 0.0};
    for (int l = 0; l < W; ++l) r.max = (float)Ops::lane(m, l) > r.max ? (float)Ops::lane(m, l) : r.max;
    if (bad || r.max == -INFINITY) return r;
    for (int l = 0; l < W; ++l) {
        const double sl = Ops::lane(s, l);
        if (sl > 0) r.sum += sl * ::exp(Ops::lane(m, l) - (double)r.max);
    }
    const Vv mx = Ops::splat((double)r.max);
    for (int64_t i = 0; i < V; i += W)
        if (Ops::any(load_padded<Ops>(z, i, V) == mx))
            for (int64_t k = i; k < i + W && k < V; ++k)
                if (z[k] == r.max) {
                    r.argmax = k;
                    return r;
                }
    return r;
}

// One pass at the temperature: the sum of e = exp(x - M) over the elements with e >= min_e (when with_sum or
// min_e > 0), and the indices of the candidates of the Gumbel race (x >= floor_x, and e >= min_e), in order.
struct CandPass {
    double sum;
    int64_t count;
};

template <class Ops>
CandPass cand_pass_t(const float * z, int64_t V, float temp, float M, float floor_x, bool with_sum, float min_e,
                     int32_t * idx) {
    typedef typename Ops::V Vv;
    typedef typename Ops::K Kk;
    constexpr int W = Ops::W;
    const Vv mv = Ops::splat((double)M), lim = Ops::splat((double)min_e), fl = Ops::splat((double)floor_x),
             zero = Ops::splat(0.0);
    const bool need_e = with_sum || min_e > 0.0f;
    CandPass c{0.0, 0};
    for (int64_t b0 = 0; b0 < V; b0 += 64 * W) {
        const int64_t b1 = b0 + 64 * W < V ? b0 + 64 * W : V;
        Vv acc = zero;
        for (int64_t i = b0; i < b1; i += W) {
            const Vv x = scaled<Ops>(load_padded<Ops>(z, i, V), temp);
            Kk cand = x >= fl;
            if (need_e) {
                const Vv e = Ops::exp_nonpos(x - mv);
                const Kk in = e >= lim;
                acc += Ops::sel(in, e, zero);
                cand = cand & in;
            }
            if (Ops::any(cand)) c.count += Ops::compress(cand, i, idx + c.count);  // padded lanes are -Inf: never set
        }
        c.sum += Ops::hsum(acc);
    }
    return c;
}

// Sum over the row of e = exp(x - M) for the elements with e >= min_e (min_e = 0: all), in double.
template <class Ops>
double row_sum_exp_t(const float * z, int64_t V, float temp, float M, float min_e) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W;
    const Vv mv = Ops::splat((double)M), lim = Ops::splat((double)min_e), zero = Ops::splat(0.0);
    double s = 0.0;
    for (int64_t b0 = 0; b0 < V; b0 += 64 * W) {  // float lanes for 64 vectors, then double
        const int64_t b1 = b0 + 64 * W < V ? b0 + 64 * W : V;
        Vv acc = zero;
        for (int64_t i = b0; i < b1; i += W) {
            const Vv e = Ops::exp_nonpos(scaled<Ops>(load_padded<Ops>(z, i, V), temp) - mv);
            acc += Ops::sel(e >= lim, e, zero);
        }
        s += Ops::hsum(acc);
    }
    return s;
}

// exp(x - M) of one element, through the same code as row_sum_exp_t (so the two agree to the bit).
template <class Ops>
float exp_one_t(float x, float M) {
    return (float)Ops::lane(Ops::exp_nonpos(Ops::splat((double)x) - Ops::splat((double)M)), 0);
}

// First index i >= from with x_i > thr (strict) or x_i >= thr, else V.
template <class Ops>
int64_t next_at_least_t(const float * z, int64_t from, int64_t V, float temp, float thr, bool strict) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W;
    const Vv t = Ops::splat((double)thr);
    int64_t i = from;
    for (; i < V && i % W != 0; ++i) {
        const float x = temp == 1.0f ? z[i] : z[i] / temp;
        if (strict ? x > thr : x >= thr) return i;
    }
    for (; i < V; i += W) {
        const Vv x = scaled<Ops>(load_padded<Ops>(z, i, V), temp);
        if (!Ops::any(strict ? x > t : x >= t)) continue;
        for (int k = 0; k < W && i + k < V; ++k) {
            const float xs = temp == 1.0f ? z[i + k] : z[i + k] / temp;
            if (strict ? xs > thr : xs >= thr) return i + k;
        }
    }
    return V;
}

}  // namespace maporl
