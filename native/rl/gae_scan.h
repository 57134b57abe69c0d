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
    m.has = 0; m.nv = T(0); m.c = T(0); m.al = T(1); m.an = T(0);
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

// Whitening statistics as verl's masked_whiten computes them: mean = sum / (n + 1e-8),
// var = (sum_sq_dev / (n + 1e-8)) * n / (n - 1). NOTE(whiten): with n < 2 verl raises; we take the variance
// as 0 and the mean as exact, so a single valid token whitens to exactly 0; an empty batch is left as it is.
struct WhitenStats {
    double mean;
    double rstd;  // 1 / sqrt(var + 1e-8)
};

MAPORL_HD WhitenStats whiten_stats(double sum, double sum_sq, double count) {
    WhitenStats st;
    st.mean = count >= 2 ? sum / (count + 1e-8) : sum / (count > 0 ? count : 1.0);
    double var = 0.0;
    if (count >= 2) {
        double dev = sum_sq - 2.0 * st.mean * sum + count * st.mean * st.mean;  // sum of (x - mean)^2
        if (dev < 0.0) dev = 0.0;
        var = dev / (count + 1e-8) * count / (count - 1.0);
    }
    st.rstd = 1.0 / sqrt(var + 1e-8);
    return st;
}

}  // namespace maporl
