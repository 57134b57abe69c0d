// sampling_top_p.cpp: top-p without top-k on the CPU, the cut of the nucleus found from a histogram of the row
// instead of a sort (sampling_passes.h says how). sampling.cpp samples with it.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <vector>

#include "native/sampling/sampling_passes.h"
#include "native/sampling/sampling_radix.h"

namespace maporl {
namespace {

constexpr int kCutBins = 4096;
constexpr double kCutSpan = 40.0;
constexpr size_t kCutSort = 4096;

}  // namespace

size_t cut_scratch_bytes(int64_t V) {
    return sizeof(uint64_t) * (kCutBins + 1) + (sizeof(int32_t) + sizeof(uint16_t)) * (size_t)V;
}

Cut top_p_cut(const Passes & P, const float * z, int64_t V, float zmax, float T, float M, float top_p, void * scratch) {
    const int sbits = radix_scale_bits(V);
    const double scale = std::ldexp(1.0, sbits);
    auto weight = [&](int32_t i) { return fixed_weight(P, z, i, T, M, scale); };
    uint64_t * hist = static_cast<uint64_t *>(scratch);
    int32_t * up_idx = reinterpret_cast<int32_t *>(hist + kCutBins + 1);
    uint16_t * up_bin = reinterpret_cast<uint16_t *>(up_idx + V);
    // Any lo and width give the same cut (the bins only have to rise with z); these keep the cut's bin small. The
    // clamps keep (z - lo) * inv finite or +Inf, never NaN, for any finite temperature.
    const double tail = std::log((1.0 - (double)top_p) / (2.0 * (double)V));  // lo_x - M
    uint64_t above = 0, total = 0;
    double target = 0.0;
    int at = 0;
    int64_t n_up = 0;
    float lo = 0.0f;
    for (double depth : {std::min(-tail, kCutSpan), kCutSpan}) {
        const float span = (float)std::min(std::max(depth * (double)T, 1e-30), 1e30);
        lo = zmax - span;
        if (!(lo > -INFINITY)) lo = -FLT_MAX;
        std::fill(hist, hist + kCutBins + 1, 0);
        total = P.top_p_hist(z, V, T, M, lo, (float)kCutBins / span, kCutBins, sbits, hist, up_idx, up_bin, &n_up);
        target = (double)top_p * (double)total;  // > 0: the max weighs 2^sbits
        uint64_t binned = 0;
        for (int b = 1; b <= kCutBins; ++b) binned += hist[b];
        hist[0] = total - binned;
        // The first bin from the top whose mass reaches the target (bin 0 at the latest: target <= total).
        above = 0;
        at = 0;
        for (int b = kCutBins; b >= 0; --b) {
            if ((double)(above + hist[b]) >= target) {
                at = b;
                break;
            }
            above += hist[b];
        }
        if (at > 0 || depth >= kCutSpan) break;
    }
    std::vector<Cand> members;
    if (at > 0) {
        for (int64_t j = 0; j < n_up; ++j)
            if (up_bin[j] == at) members.push_back({z[up_idx[j]], up_idx[j]});
    } else {
        for (int64_t i = 0; i < V; ++i)
            if (z[i] < lo && z[i] > -INFINITY) members.push_back({z[i], (int32_t)i});
    }
    std::vector<uint64_t> sub;
    std::vector<uint16_t> sub_bin;
    while (members.size() > kCutSort) {  // binned again over the members' own range (in double: no overflow)
        float mlo = INFINITY, mhi = -INFINITY;
        for (const Cand & c : members) mlo = std::min(mlo, c.z), mhi = std::max(mhi, c.z);
        if (mlo == mhi) break;  // one logit: index order is the sampler's order
        const double inv = (double)(kCutBins - 1) / ((double)mhi - (double)mlo);
        sub.assign(kCutBins, 0);
        sub_bin.resize(members.size());
        for (size_t j = 0; j < members.size(); ++j) {
            sub_bin[j] = (uint16_t)std::min<double>(kCutBins - 1, ((double)members[j].z - mlo) * inv);
            sub[sub_bin[j]] += weight(members[j].i);
        }
        int sat = 0;  // mhi's bin is the top one and mlo's bin 0: the members shrink every round
        for (int b = kCutBins - 1; b >= 0; --b) {
            if ((double)(above + sub[b]) >= target) {
                sat = b;
                break;
            }
            above += sub[b];
        }
        size_t n = 0;
        for (size_t j = 0; j < members.size(); ++j)
            if (sub_bin[j] == sat) members[n++] = members[j];
        members.resize(n);
    }
    if (members.empty()) return Cut{zmax, INT32_MAX, 0};  // unreachable while M is finite (the max weighs 2^sbits)
    std::sort(members.begin(), members.end(), better);
    Cut c{members.front().z, members.front().i, above};  // the first member is kept: (double)above < target
    for (const Cand & m : members) {
        if (!((double)c.kept < target)) break;
        c.kept += weight(m.i);
        c.z = m.z;
        c.i = m.i;
    }
    return c;
}

}  // namespace maporl
