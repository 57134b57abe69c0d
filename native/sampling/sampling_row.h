// sampling_row.h: the passes over one logits row that the sampler needs, for any execution width (Ops: the
// scalar ScalarLoad<float> or a SIMD VecOps). x = z / temperature is computed on the fly (IEEE division: the
// same float everywhere). Tails shorter than a vector are padded with -Inf, so every element goes through the
// same vector code and exp_nonpos gives the same float for the same input wherever it sits in the row.
#pragma once

#include <math.h>
#include <stdint.h>

#include "native/rl/policy_loss.h"

namespace maporl {

struct RowMax {
    float max;       // max of z (-Inf when every logit is -Inf)
    int64_t argmax;  // its first index (when asked; else -1)
    int64_t hint;    // the first index of a chunk of the row that holds a max element (a place to start a race)
    bool bad;        // a NaN or +Inf logit
    double sum;      // sum of exp(z - max) (the raw softmax denominator)
    double sum_t;    // sum of exp(x - max / temp), x = z / temp (when asked; else 0)
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

// How far ahead (floats) the row passes that read a row first prefetch it: 2 KiB. The first pass over a row
// comes from L3 or DRAM, and the hardware prefetcher alone left the exp work unoverlapped with the loads here:
// max + sum at the temperature over 64 rows of 151,936 went from ~10 to ~6.5 ms on one core.
constexpr int64_t kPrefetchAhead = 512;

// One read of the row: max, NaN / +Inf, and the softmax denominators by online sums (the running max rescaled
// when a lane's max rises): raw when with_raw, and at the temperature when with_t. The terms are vexp2_sum's
// 2^((z - ms) * log2(e)) and 2^((z - ms) * (log2(e) / temp)), ms the lane's running max: one subtraction for
// both, then a multiply each. The tempered terms are those of (z - max) / temp in exact arithmetic (to ~6e-8 of
// the exponent), not of the floats x = z / temp the race and the filters compare, which differ from them by up
// to an ulp of x: a log-prob x - M - log(sum_t) is then within an ulp of the largest x that weighs in, under
// 4e-6 while tempered_sum_serves(M) (sampling.cpp sums the floats' own terms by row_sum_x_t otherwise: IEEE
// division's quotient in this pass, by Markstein's FMA correction of z * (1 / temp), cost 35% more on every
// row). The sums only scale log-probs, never choose a token, so their terms need not be det_exp's bits. z - ms
// is clamped at -86.5 for the raw terms and at -86.5 * min(1, temp) for the tempered ones, so that both exponents
// stay in vexp2_sum's [-125, 0] (-Inf logits weigh 2^-124.8 instead of 0: under V * 3e-38 of a sum that is at least
// 1; one clamp for both, as before, let each -Inf or far logit weigh exp(-86.5 T) in the raw sum: at T = 1e-5 on a
// 1-logit row padded to a vector, rawLogprobs came out -2.08 instead of 0); the clamp lets NaN through, so a NaN
// or +Inf logit (whose z - ms is NaN once the running max is +Inf) turns the sums NaN, which is the row's bad
// flag when a sum is taken (a per-vector check otherwise). The float lane sums move into double every
// kFlushChunks chunks (at most 128 float adds per lane): summed in float over a whole row of 151,936 they were
// off by up to 6e-5 relative (1e-3 on the scalar path), past the log-probs' 1e-5. The chunk where each lane first
// reached its max gives `hint`. Then the first argmax from cache, when asked.
template <class Ops>
RowMax row_max_t(const float * z, int64_t V, float temp, bool with_raw, bool with_t, bool with_argmax) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W, CH = 8 * W, kFlushChunks = 16;
    const Vv ninf = Ops::splat(-INFINITY), inf = Ops::splat(INFINITY), zero = Ops::splat(0.0),
             itv = Ops::splat(1.0 / (double)temp), l2e = Ops::splat(M_LOG2E), l2et = Ops::splat(M_LOG2E / (double)temp),
             dlo = Ops::splat(-86.5), dlo_t = Ops::splat(-86.5 * (temp < 1.0f ? (double)temp : 1.0));
    const bool check_bad = !with_raw && !with_t;             // else the sums carry NaN
    Vv m = ninf, ms = zero, s = zero, st = zero, mc = zero;  // ms: m, or 0 while m = -Inf
    double sd[W] = {}, td[W] = {};  // the lane sums moved out of float, relative to the same running max
    auto flush = [&] {
        drain_lanes<Ops>(s, sd);
        drain_lanes<Ops>(st, td);
    };
    auto badk = ninf != ninf;  // all false
    int pending = 0;
    for (int64_t i0 = 0; i0 < V; i0 += CH) {
        Vv x[8];
        Vv cm = ninf;
        if (i0 + kPrefetchAhead + CH <= V)
            for (int k = 0; k < CH; k += 16) __builtin_prefetch(z + i0 + kPrefetchAhead + k);
        for (int k = 0; k < 8; ++k) {
            x[k] = load_padded<Ops>(z, i0 + k * W, V);
            cm = Ops::max(cm, x[k]);
        }
        if (check_bad)
            for (int k = 0; k < 8; ++k) badk = badk | !(x[k] < inf);  // NaN or +Inf
        const auto up = cm > m;
        if (Ops::any(up)) {  // rescale the lanes whose max rose (often at the start of a row, rarely after)
            mc = Ops::sel(up, Ops::splat((double)(i0 / CH)), mc);
            const Vv mn = Ops::sel(up, cm, m);
            const Vv ms_new = Ops::sel(mn == ninf, zero, mn);
            if (with_raw) {
                const Vv f = Ops::exp_nonpos(m - ms_new);
                s = s * f;
                for (int l = 0; l < W; ++l) sd[l] *= Ops::lane(f, l);
            }
            if (with_t) {
                const Vv f = Ops::exp_nonpos((m - ms_new) * itv);
                st = st * f;
                for (int l = 0; l < W; ++l) td[l] *= Ops::lane(f, l);
            }
            m = mn;
            ms = ms_new;
        }
        if (!check_bad)
            for (int k = 0; k < 8; ++k) {
                const Vv d = x[k] - ms;  // (max keeps a NaN second operand)
                if (with_raw) s += Ops::exp2_sum(Ops::max(dlo, d) * l2e);
                if (with_t) st += Ops::exp2_sum(Ops::max(dlo_t, d) * l2et);
            }
        if (++pending == kFlushChunks) {
            pending = 0;
            flush();
        }
    }
    flush();
    RowMax r{-INFINITY, -1, 0, Ops::any(badk), 0.0, 0.0};
    for (int l = 0; l < W; ++l) r.bad |= sd[l] != sd[l] || td[l] != td[l];
    for (int l = 0; l < W; ++l) r.max = (float)Ops::lane(m, l) > r.max ? (float)Ops::lane(m, l) : r.max;
    if (r.bad || r.max == -INFINITY) return r;
    int64_t hint_chunk = -1;
    for (int l = 0; l < W; ++l)
        if ((float)Ops::lane(m, l) == r.max && (hint_chunk < 0 || (int64_t)Ops::lane(mc, l) < hint_chunk))
            hint_chunk = (int64_t)Ops::lane(mc, l);
    r.hint = hint_chunk * CH;
    for (int l = 0; l < W; ++l) {  // (a lane whose max is -Inf weighs exp(-Inf) = 0)
        const double d = Ops::lane(m, l) - (double)r.max;
        if (sd[l] > 0) r.sum += sd[l] * ::exp(d);
        if (with_t && td[l] > 0) r.sum_t += td[l] * ::exp(d / (double)temp);
    }
    if (!with_argmax) return r;
    const Vv mx = Ops::splat((double)r.max);
    for (int64_t i = r.hint; i < V; i += W)  // the first max lies in the hint's chunk
        if (Ops::any(load_padded<Ops>(z, i, V) == mx))
            for (int64_t k = i; k < i + W && k < V; ++k)
                if (z[k] == r.max) {
                    r.argmax = k;
                    return r;
                }
    return r;
}

// Whether row_max_t's tempered sum, of (z - max) / temp in exact arithmetic, gives log-probs of the floats
// x = z / temp to 1e-5: a log-prob x - M - log(sum) is then off by at most an ulp of the largest |x| that weighs in
// (x >= M - 25; below, all of a row's terms weigh under 2e-6 of the sum), so while those lie in (-64, 64) by
// under 3.8e-6 plus the sum's 1e-6. Else row_sum_x_t sums the floats' own terms.
inline bool tempered_sum_serves(float M) { return M < 64.0f && M > -39.0f; }

// Sum over the row of exp(x - M), x = z / temp as the sampler rounds it (Ops::quotient), M = max x: the tempered
// softmax denominator of the floats themselves, in double (float lanes for 64 vectors at a time). The exponent is
// clamped at -125 with NaN going to the clamp (Ops::max's second operand): -Inf's quotient is NaN here, and the
// row is known valid.
template <class Ops>
double row_sum_x_t(const float * z, int64_t V, float temp, float M) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W;
    const Vv tv = Ops::splat((double)temp), itv = Ops::splat((double)(1.0f / temp)), mv = Ops::splat((double)M),
             l2e = Ops::splat(M_LOG2E), zero = Ops::splat(0.0), lo = Ops::splat(-125.0);
    double s = 0.0;
    for (int64_t b0 = 0; b0 < V; b0 += 64 * W) {
        const int64_t b1 = b0 + 64 * W < V ? b0 + 64 * W : V;
        Vv acc = zero;
        for (int64_t i = b0; i < b1; i += W)
            acc += Ops::exp2_sum(Ops::max((Ops::quotient(load_padded<Ops>(z, i, V), tv, itv) - mv) * l2e, lo));
        s += Ops::hsum(acc);
    }
    return s;
}

// The smallest float z0 with fl(z0 / temp) >= x_floor: {z : z / temp >= x_floor} = {z >= z0}, as rounded
// division is monotone, so candidate scans compare raw logits without dividing.
// A floor of -Inf (M near -FLT_MAX less the race's span) admits every element: the loop below would step from
// -Inf to -Inf for ever.
inline float z_threshold(float x_floor, float temp) {
    if (temp == 1.0f || !(x_floor > -INFINITY)) return x_floor;
    float z0 = x_floor * temp;
    while (z0 / temp < x_floor) z0 = nextafterf(z0, INFINITY);
    for (float d = nextafterf(z0, -INFINITY); d / temp >= x_floor; d = nextafterf(z0, -INFINITY)) z0 = d;
    return z0;
}

// Indices (ascending) of the elements with z >= z0: the candidates of the Gumbel race. idx needs room for
// V + kCandSlack entries (Ops::compress_bits stores whole vectors). One branch per 4 vectors, then branch-free
// compresses whose popcounts are taken apart from the stores, so that the only serial chain is the adds of the
// write offset: at the bench's density (2% of a row, a hit in a quarter of the vectors) a branch per vector
// mispredicted often enough to cost 2.5x the loop, and a popcount in the chain another 2x; a sparse row still
// skips 4 vectors per compare.
constexpr int64_t kCandSlack = 64;
// The scratch a row's race needs (gumbel_row_f32 keeps a second list after the first).
inline int64_t race_scratch_size(int64_t V) { return 2 * V + 2 * kCandSlack; }

template <class Ops>
int64_t cand_scan_t(const float * z, int64_t V, float z0, int32_t * idx) {
    typedef typename Ops::V Vv;
    constexpr int W = Ops::W;
    const Vv t = Ops::splat((double)z0);
    int64_t n = 0, i = 0;
    for (; i + 4 * W <= V; i += 4 * W) {
        const unsigned b0 = Ops::ge_bits(Ops::load(z + i), t), b1 = Ops::ge_bits(Ops::load(z + i + W), t);
        const unsigned b2 = Ops::ge_bits(Ops::load(z + i + 2 * W), t), b3 = Ops::ge_bits(Ops::load(z + i + 3 * W), t);
        if ((b0 | b1 | b2 | b3) == 0) continue;
        const int c0 = __builtin_popcount(b0), c1 = __builtin_popcount(b1), c2 = __builtin_popcount(b2);
        Ops::compress_bits(b0, i, idx + n);
        Ops::compress_bits(b1, i + W, idx + n + c0);
        Ops::compress_bits(b2, i + 2 * W, idx + n + c0 + c1);
        Ops::compress_bits(b3, i + 3 * W, idx + n + c0 + c1 + c2);
        n += c0 + c1 + c2 + __builtin_popcount(b3);
    }
    for (; i < V; i += W) {  // padded lanes are -Inf: never set
        const unsigned b = Ops::ge_bits(load_padded<Ops>(z, i, V), t);
        Ops::compress_bits(b, i, idx + n);
        n += __builtin_popcount(b);
    }
    return n;
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

// Sum over the row of the fixed-point weights of e = exp(x - M) (Ops::fixed_add: sampling_radix.h's radix_fixed with
// 2^s units): top-p's total over every logit (-Inf and the padding weigh 0). An integer sum of per-element
// weights, so the same number at every SIMD level and in CUDA's slices (Ops::exp_nonpos is det_exp_nonpos's
// arithmetic at every level).
template <class Ops>
uint64_t row_fixed_mass_t(const float * z, int64_t V, float temp, float M, int s) {
    constexpr int W = Ops::W;
    const typename Ops::V mv = Ops::splat((double)M);
    const double scale = ldexp(1.0, s);
    typename Ops::Fixed acc{};
    for (int64_t i = 0; i < V; i += W)
        Ops::fixed_add(acc, Ops::exp_nonpos(scaled<Ops>(load_padded<Ops>(z, i, V), temp) - mv), scale, s);
    return Ops::fixed_sum(acc);
}

// Top-p without top-k, one pass (sampling_top_p.cpp's top_p_cut): the row's total fixed-point weight (row_fixed_mass_t's
// sum, returned), and for the elements at or above lo their weights added into hist[bin], bin = 1 + min(nbins - 1,
// (int)((z - lo) * inv)) (non-decreasing in z, so the bins cut the sampler's order into runs), and their indices
// and bins listed in up_idx / up_bin (*n_up of them, ascending; both need room for V entries). A vector with no
// element at or above lo adds to the total only; hist[0] is left to the caller.
template <class Ops>
uint64_t top_p_hist_t(const float * z, int64_t V, float temp, float M, float lo, float inv, int nbins, int s,
                      uint64_t * hist, int32_t * up_idx, uint16_t * up_bin, int64_t * n_up) {
    constexpr int W = Ops::W;
    const double scale = ldexp(1.0, s);
    const typename Ops::V mv = Ops::splat((double)M), lov = Ops::splat((double)lo);
    typename Ops::Fixed acc{};  // the weights of the vectors wholly below lo
    uint64_t listed = 0;        // and of the others, added lane by lane
    uint64_t w[W];
    int32_t b[W];
    int64_t n = 0;
    for (int64_t i = 0; i < V; i += W) {
        const typename Ops::V zv = load_padded<Ops>(z, i, V);
        const typename Ops::V e = Ops::exp_nonpos(scaled<Ops>(zv, temp) - mv);
        if (!Ops::any(zv >= lov)) {
            Ops::fixed_add(acc, e, scale, s);
            continue;
        }
        Ops::fixed_lanes(e, scale, s, w);
        Ops::bins(zv, lo, inv, nbins, b);
        const int m = V - i < W ? (int)(V - i) : W;  // (padded lanes are -Inf: weight 0)
        for (int l = 0; l < m; ++l) {  // branch-free: bin 0 (below lo) collects weights the caller replaces
            listed += w[l];
            hist[b[l]] += w[l];
            up_idx[n] = (int32_t)(i + l);
            up_bin[n] = (uint16_t)b[l];
            n += b[l] != 0;
        }
    }
    *n_up = n;
    return Ops::fixed_sum(acc) + listed;
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
