// gae_scan.h: GAE's reverse recursion written as an associative scan, shared by the CUDA kernel (which
// splits a row into chunks, one per lane) and by the C++ test that checks the decomposition on the CPU.
// Not used by the CPU kernel, which runs the plain recursion vectorised across rows.
//
// The carry from right to left is (nv, lg): the value at the next unmasked position and the advantage
// there. A chunk maps an incoming carry to an outgoing one:
//   nv_out = has ? nv : nv_in
//   lg_out = c + al * lg_in + an * nv_in
// (an multiplies nv_in only through the chunk's rightmost unmasked step). Composition is associative.
#pragma once

#include <math.h>

#include "native/core/hd.h"

namespace maporl {

template <typename T>
struct GaeCarryMap {
    int has;  // 1 if the chunk holds an unmasked position
    T nv;     // value at the chunk's leftmost unmasked position (when has)
    T c, al, an;
};

template <typename T>
MAPORL_HD GaeCarryMap<T> gae_map_identity() {
    GaeCarryMap<T> m;
    m.has = 0;
    m.nv = T(0);
    m.c = T(0);
    m.al = T(1);
    m.an = T(0);
    return m;
}

// Extends map `m` (covering positions to the right) by one step to its left: position with reward r,
// value v and mask bit `valid`.
template <typename T>
MAPORL_HD GaeCarryMap<T> gae_map_step(GaeCarryMap<T> m, T r, T v, int valid, T gamma, T gl) {
    if (!valid) return m;
    if (m.has) {
        m.c = r + gamma * m.nv - v + gl * m.c;
        m.an = gl * m.an;
    } else {
        m.c = (r - v) + gl * m.c;
        m.an = gamma + gl * m.an;
    }
    m.al = gl * m.al;
    m.has = 1;
    m.nv = v;
    return m;
}

// The map of "apply R (right chunk) first, then L (left chunk)".
template <typename T>
MAPORL_HD GaeCarryMap<T> gae_map_combine(GaeCarryMap<T> L, GaeCarryMap<T> R) {
    GaeCarryMap<T> o;
    o.al = L.al * R.al;
    if (R.has) {
        o.c = L.c + L.al * R.c + L.an * R.nv;
        o.an = L.al * R.an;
    } else {
        o.c = L.c + L.al * R.c;
        o.an = L.al * R.an + L.an;
    }
    o.has = L.has | R.has;
    o.nv = L.has ? L.nv : R.nv;
    return o;
}

// Whitening statistics. NOTE(whiten): the mean is sum / n exactly (verl's masked_whiten divides by n + 1e-8, which
// whitens a constant batch of -1e6 to -0.89 instead of 0); m2 is the sum of squared deviations from it; the variance
// is verl's m2 / (n + 1e-8) * n / (n - 1) (unbiased) and rstd = 1 / sqrt(var + 1e-8), or OpenRLHF's m2 / n (biased)
// and rstd = 1 / sqrt(max(var, 1e-8)) (`biased_clamp`). With n < 2 verl raises; we take the variance as 0, so a
// single valid token whitens to exactly 0; an empty batch is left as it is.
struct WhitenStats {
    double mean;
    double rstd;
};

MAPORL_HD double whiten_mean(double sum, double count) { return count > 0 ? sum / count : 0.0; }

// m2 from one pass of double sums, and whether it can be trusted: where the squares dwarf the deviations (mean / std
// past ~1e4, sum_sq > 1e8 m2) the subtraction loses the digits float outputs need, and the callers take a second,
// exact pass over the values (sum of (x - mean)^2).
MAPORL_HD double whiten_m2_one_pass(double sum, double sum_sq, double mean) {
    const double m2 = sum_sq - sum * mean;
    return m2 > 0.0 ? m2 : 0.0;
}
MAPORL_HD bool whiten_one_pass_ok(double sum_sq, double m2) { return !(sum_sq > 0.0 && m2 <= 1e-8 * sum_sq); }

MAPORL_HD WhitenStats whiten_from_m2(double mean, double m2, double count, int biased_clamp) {
    WhitenStats st;
    st.mean = mean;
    if (biased_clamp) {
        const double var = count > 0 ? m2 / count : 0.0;
        st.rstd = 1.0 / sqrt(var > 1e-8 ? var : 1e-8);
        return st;
    }
    const double var = count >= 2 ? m2 / (count + 1e-8) * count / (count - 1.0) : 0.0;
    st.rstd = 1.0 / sqrt(var + 1e-8);
    return st;
}

}  // namespace maporl
