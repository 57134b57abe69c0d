// sampling_radix.h: the top-k / top-p thresholds of the sampler found by radix selection over the order-preserving
// 32-bit keys of the logits, four rounds of eight bits, from histograms that can be summed in any order. CUDA's
// vocabulary split for filtered rows (cuda/sampling/sampling_split.cu) builds the histograms across blocks and decides with
// these functions; test_sampling_radix runs the same decisions on the CPU against a sort.
//
// The thresholds are the CPU sampler's (native/sampling/sampling.cpp, which walks the sorted candidates):
//   top-k: tk = the k-th largest finite key (with multiplicity); gt = how many keys are above it;
//   top-p: tp = the smallest key t whose mass above (within the top-k set) is < target = p * total; the nucleus is
//          every key above tp plus the first `radix_tie_keep` elements with key tp in index order.
// Masses are fixed-point integers (radix_fixed): integer sums are exact and associative, so the histograms come out
// the same whatever the order the blocks add them in (float atomics would not).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native/core/hd.h"

namespace maporl {

constexpr int kRadixBins = 256, kRadixRounds = 4;

// The key of a logit: larger logits have larger keys; every finite float maps above 0. -0.0 takes +0.0's key:
// the CPU's order ties them (then the lower index wins), so the kernels' must too.
MAPORL_HD uint32_t radix_key(float z) {
    if (z == 0.0f) z = 0.0f;
    uint32_t b;
    memcpy(&b, &z, 4);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
MAPORL_HD float radix_key_value(uint32_t key) {
    const uint32_t b = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
    float z;
    memcpy(&z, &b, 4);
    return z;
}

// Round r (0..3) reads the key's digit at this shift, among the keys whose bits above it equal the prefix.
MAPORL_HD int radix_shift(int round) { return 24 - 8 * round; }
MAPORL_HD uint32_t radix_fixed_mask(int round) { return round == 0 ? 0u : 0xFFFFFFFFu << (32 - 8 * round); }
MAPORL_HD int radix_digit(uint32_t key, int round) { return (int)((key >> radix_shift(round)) & 0xFFu); }

// A weight e in [0, 1] as a fixed-point integer with 2^s units per 1, s = radix_scale_bits(V) = 62 - ceil(log2 V),
// rounded to nearest (half up), so that V weights sum below 2^62. At V = 151,936 one unit is 2^-44 (the mass of a
// whole row is off the float64 sum by at most V / 2 units, ~4e-9). e * 2^s is exact in double and so is adding
// 0.5 below 2^52 (above, e * 2^s is an even integer and the sum rounds back to it): radix_fixed is exactly
// floor(e * 2^s + 0.5), which vec.h's vfixed_half computes the same way on SIMD lanes.
MAPORL_HD int radix_scale_bits(int64_t V) {
    int bits = 0;
    while (bits < 62 && ((int64_t)1 << bits) < V) ++bits;
    return 62 - bits;
}
MAPORL_HD double radix_scale(int64_t V) { return ldexp(1.0, radix_scale_bits(V)); }
MAPORL_HD unsigned long long radix_fixed(float e, double scale) {
    return (unsigned long long)((double)e * scale + 0.5);
}

// A selection in progress: the key bits fixed so far and the weight of the keys above the prefix's range.
struct RadixSel {
    uint32_t prefix;
    unsigned long long above;
};

// Top-k round: the digit holding the need-th largest key (need >= 1 and at most the keys in the range).
MAPORL_HD void radix_pick_count(const unsigned long long * hist, unsigned long long need, int round, RadixSel & s) {
    unsigned long long cum = s.above;
    int d = kRadixBins - 1;
    for (; d > 0; --d) {
        if (cum + hist[d] >= need) break;
        cum += hist[d];
    }
    s.prefix |= (uint32_t)d << radix_shift(round);
    s.above = cum;
}

// Top-p round: the highest digit whose keys bring the mass from above to >= target; if rounding leaves the whole
// range under target, its lowest non-empty digit (so the nucleus keeps everything, as the bisection does).
MAPORL_HD void radix_pick_mass(const unsigned long long * hist, double target, int round, RadixSel & s) {
    unsigned long long cum = s.above, cum_low = s.above;
    int low = 0;
    for (int d = kRadixBins - 1; d >= 0; --d) {
        if (hist[d] == 0) continue;
        if ((double)(cum + hist[d]) >= target) {
            s.prefix |= (uint32_t)d << radix_shift(round);
            s.above = cum;
            return;
        }
        low = d;
        cum_low = cum;
        cum += hist[d];
    }
    s.prefix |= (uint32_t)low << radix_shift(round);
    s.above = cum_low;
}

// How many of the `ties` elements with key tp (weight et each, in index order) the nucleus keeps after the mass
// `above`: the loop `while (keep < ties && before < target) { before += et; ++keep; }`, at least one.
MAPORL_HD unsigned long long radix_tie_keep(unsigned long long above, unsigned long long et, unsigned long long ties,
                                            double target) {
    unsigned long long keep = 0;
    if ((double)above < target) {
        if (et == 0) {
            keep = ties;
        } else {
            const double n = ceil((target - (double)above) / (double)et);
            keep = n >= (double)ties ? ties : (unsigned long long)(n > 0 ? n : 0);
            while (keep > 0 && (double)(above + (keep - 1) * et) >= target) --keep;  // the closed form's rounding
            while (keep < ties && (double)(above + keep * et) < target) ++keep;
        }
    }
    return keep < 1 ? 1 : keep;
}

}  // namespace maporl
