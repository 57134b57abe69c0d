// sampling_split_emulation.h: CUDA sampling's vocabulary split (cuda/sampling/sampling_split.cu) run on the CPU the way the
// kernels run it, and the sorted reference it must agree with; shared by test_sampling_radix.cpp (the selection
// against the sort) and test_sampling_support.cpp (the CPU sampler against the kernels).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "native/core/det_exp.h"
#include "native/sampling/sampling_radix.h"

namespace split_emulation {

using maporl::RadixSel;

struct Row {
    std::vector<float> z;
    float T;
    int k;        // 0 = off
    float p;      // 1 = off
    bool renorm;  // filter order top-k-first (top-p's total over the top-k set) or joint (over every finite logit)
};

struct Picked {
    bool k_on = false, p_on = false;
    int64_t ik = -1, ip = -1;  // the last index kept at the threshold key (in index order)
    uint32_t tk = 0, tp = 0;
};

// e of logit i at temperature T relative to the row's M, as the kernels compute it.
inline float e_of(const Row & r, float M, int64_t i) {
    return maporl::det_exp_nonpos((r.T == 1.0f ? r.z[i] : r.z[i] / r.T) - M);
}

// The split algorithm on the CPU: slices [s * len, (s + 1) * len).
inline Picked split_select(const Row & r, int S) {
    const int64_t V = (int64_t)r.z.size(), len = (V + S - 1) / S;
    float m = -INFINITY;
    int64_t finite = 0;
    for (float v : r.z) m = std::max(m, v), finite += v > -INFINITY;
    const float M = r.T == 1.0f ? m : m / r.T;
    const double scale = maporl::radix_scale(V);
    Picked o;
    // Histograms per slice, summed in reverse slice order.
    auto select = [&](auto weight, auto in_set, auto pick) {
        RadixSel sel{0, 0};
        for (int round = 0; round < maporl::kRadixRounds; ++round) {
            std::vector<unsigned long long> hist(maporl::kRadixBins, 0);
            for (int s = S - 1; s >= 0; --s) {
                std::vector<unsigned long long> h(maporl::kRadixBins, 0);
                for (int64_t i = s * len; i < std::min(V, (s + 1) * len); ++i) {
                    const uint32_t key = maporl::radix_key(r.z[i]);
                    if (in_set(i) && (key & maporl::radix_fixed_mask(round)) == sel.prefix)
                        h[maporl::radix_digit(key, round)] += weight(i);
                }
                for (int d = 0; d < maporl::kRadixBins; ++d) hist[d] += h[d];
            }
            pick(hist.data(), round, sel);
        }
        return sel;
    };
    // The m-th (1-based) element of the set with the threshold key, in index order, found slice by slice.
    auto nth_tie = [&](uint32_t key, unsigned long long mth, auto in_set) -> int64_t {
        for (int s = 0; s < S; ++s) {
            unsigned long long c = 0;
            for (int64_t i = s * len; i < std::min(V, (s + 1) * len); ++i)
                c += in_set(i) && maporl::radix_key(r.z[i]) == key;
            if (mth > c) {
                mth -= c;
                continue;
            }
            for (int64_t i = s * len; i < std::min(V, (s + 1) * len); ++i)
                if (in_set(i) && maporl::radix_key(r.z[i]) == key && --mth == 0) return i;
        }
        return -1;
    };
    auto finite_at = [&](int64_t i) { return r.z[i] > -INFINITY; };
    if (r.k > 0 && r.k < V && finite > r.k) {
        o.k_on = true;
        const RadixSel s = select([](int64_t) { return 1ull; }, finite_at,
                                  [&](const unsigned long long * h, int round, RadixSel & sel) {
                                      maporl::radix_pick_count(h, (unsigned long long)r.k, round, sel);
                                  });
        o.tk = s.prefix;
        o.ik = nth_tie(o.tk, (unsigned long long)r.k - s.above, finite_at);
    }
    auto in_k = [&](int64_t i) {
        if (!finite_at(i)) return false;
        if (!o.k_on) return true;
        const uint32_t q = maporl::radix_key(r.z[i]);
        return q > o.tk || (q == o.tk && i <= o.ik);
    };
    if (r.p > 0.0f && r.p < 1.0f) {
        o.p_on = true;
        auto w = [&](int64_t i) { return maporl::radix_fixed(e_of(r, M, i), scale); };
        unsigned long long total = 0;
        for (int64_t i = 0; i < V; ++i)
            if (r.renorm && r.k > 0 ? in_k(i) : finite_at(i)) total += w(i);
        const double target = (double)r.p * (double)total;
        const RadixSel s = select(w, in_k, [&](const unsigned long long * h, int round, RadixSel & sel) {
            maporl::radix_pick_mass(h, target, round, sel);
        });
        o.tp = s.prefix;
        unsigned long long ties = 0;
        for (int64_t i = 0; i < V; ++i) ties += in_k(i) && maporl::radix_key(r.z[i]) == o.tp;
        const float zt = maporl::radix_key_value(o.tp);
        const float et = maporl::det_exp_nonpos((r.T == 1.0f ? zt : zt / r.T) - M);
        const unsigned long long keep = maporl::radix_tie_keep(s.above, maporl::radix_fixed(et, scale), ties, target);
        o.ip = ties ? nth_tie(o.tp, std::min(keep, ties), in_k) : -1;
    }
    return o;
}

// The kept set by sorting: top-k = the first k finite logits in (logit desc, index asc) order; top-p = the shortest
// prefix of the top-k set in that order whose mass reaches p * total (all of it if none does).
// Also gives the last element kept by each filter in that order (-1 when the filter is off): the thresholds.
inline std::vector<char> sorted_support(const Row & r, int64_t * last_k = nullptr, int64_t * last_p = nullptr) {
    const int64_t V = (int64_t)r.z.size();
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < V; ++i)
        if (r.z[i] > -INFINITY) idx.push_back(i);
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return r.z[a] != r.z[b] ? r.z[a] > r.z[b] : a < b; });
    float m = -INFINITY;
    for (float v : r.z) m = std::max(m, v);
    const float M = r.T == 1.0f ? m : m / r.T;
    const double scale = maporl::radix_scale(V);
    const size_t finite = idx.size();
    if (last_k) *last_k = -1;
    if (last_p) *last_p = -1;
    if (r.k > 0 && r.k < V && (int64_t)finite > r.k) {
        idx.resize((size_t)r.k);
        if (last_k) *last_k = idx.back();
    }
    std::vector<char> keep((size_t)V, 0);
    size_t n = idx.size();
    if (r.p > 0.0f && r.p < 1.0f) {
        unsigned long long total = 0;
        if (r.renorm && r.k > 0)
            for (int64_t i : idx) total += maporl::radix_fixed(e_of(r, M, i), scale);
        else
            for (int64_t i = 0; i < V; ++i)
                if (r.z[i] > -INFINITY) total += maporl::radix_fixed(e_of(r, M, i), scale);
        const double target = (double)r.p * (double)total;
        unsigned long long cum = 0;
        for (size_t j = 0; j < idx.size(); ++j) {
            cum += maporl::radix_fixed(e_of(r, M, idx[j]), scale);
            if ((double)cum >= target) {
                n = j + 1;
                break;
            }
        }
        if (last_p && n > 0) *last_p = idx[n - 1];
    }
    for (size_t j = 0; j < n; ++j) keep[(size_t)idx[j]] = 1;
    return keep;
}

inline std::vector<char> split_support(const Row & r, const Picked & o) {
    std::vector<char> keep(r.z.size(), 0);
    for (size_t i = 0; i < r.z.size(); ++i) {
        if (!(r.z[i] > -INFINITY)) continue;
        const uint32_t q = maporl::radix_key(r.z[i]);
        if (o.k_on && !(q > o.tk || (q == o.tk && (int64_t)i <= o.ik))) continue;
        if (o.p_on && !(q > o.tp || (q == o.tp && (int64_t)i <= o.ip))) continue;
        keep[i] = 1;
    }
    return keep;
}

}  // namespace split_emulation
