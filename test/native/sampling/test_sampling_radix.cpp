// test_sampling_radix.cpp: the radix selection of native/sampling/sampling_radix.h, which CUDA's vocabulary split uses for
// rows with top-k / top-p, run here on the CPU the way the kernels run it (sampling_split_emulation.h): each of S
// slices of a row builds its histograms, the slices' histograms are added (in reverse order: integer sums do not
// care), a row step picks the digit, four rounds; then the threshold's ties are found across slices in index
// order. Checked against a sort of the row by the sampler's total order (logit descending, then index ascending)
// on random rows with ties, -Inf, every filter order, temperatures and slice counts, and the keys' order-preserving
// encoding on special floats.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/sampling/sampling_radix.h"
#include "test/native/sampling/sampling_split_emulation.h"

namespace {

using namespace split_emulation;

TEST(keys_preserve_the_order_of_floats_and_invert) {
    const float vals[] = {-INFINITY, -3e38f, -1.0f, -1e-30f, -0.0f, 0.0f, 1e-45f, 1e-30f, 0.5f, 1.0f, 3e38f, INFINITY};
    bool ok = true;
    for (size_t i = 0; i + 1 < sizeof(vals) / sizeof(vals[0]); ++i)
        ok = ok &&
            (maporl::radix_key(vals[i]) < maporl::radix_key(vals[i + 1]) || (vals[i] == 0.0f && vals[i + 1] == 0.0f));
    for (float v : vals)
        ok = ok && maporl::radix_key_value(maporl::radix_key(v)) == v &&
            (v == 0.0f || std::signbit(maporl::radix_key_value(maporl::radix_key(v))) == std::signbit(v));
    CHECK(ok, "keys are monotone and invert");
    CHECK(maporl::radix_key(-0.0f) == maporl::radix_key(0.0f), "-0.0 and +0.0 tie (the CPU's order)");
    CHECK(maporl::radix_key(-1e-45f) > 0 && maporl::radix_fixed(1.0f, maporl::radix_scale(151936)) == (1ull << 44),
          "scale at V = 151,936");
}

TEST(tie_keep_is_the_loop_it_replaces) {
    std::mt19937_64 g(3);
    bool ok = true;
    for (int t = 0; t < 20000 && ok; ++t) {
        const unsigned long long above = g() % 1000, et = g() % 50, ties = 1 + g() % 40;
        const double target = (double)(g() % 3000) + (t % 2 ? 0.5 : 0.0);
        unsigned long long keep = 0, before = above;
        while (keep < ties && (double)before < target) before += et, ++keep;
        if (keep < 1) keep = 1;
        ok = maporl::radix_tie_keep(above, et, ties, target) == keep;
        if (!ok)
            std::printf("  above %llu et %llu ties %llu target %g: %llu vs %llu\n", above, et, ties, target,
                        maporl::radix_tie_keep(above, et, ties, target), keep);
    }
    CHECK(ok, "closed form = loop");
}

TEST(split_radix_selection_keeps_the_sorted_support) {
    std::mt19937 g(11);
    int rows = 0, bad = 0;
    for (int64_t V : {1, 2, 3, 7, 64, 300, 1000, 4099}) {
        for (int rep = 0; rep < 40; ++rep) {
            Row r;
            r.z.resize((size_t)V);
            const int mode = rep % 4;  // continuous, heavy ties, -Inf holes, one dominant logit
            std::normal_distribution<float> nd(0.0f, 2.0f);
            for (auto & v : r.z) v = mode == 1 ? (float)(int)(nd(g) * 2.0f) * 0.5f : nd(g);
            if (mode == 2)
                for (int64_t i = 0; i < V; i += 3) r.z[(size_t)i] = -INFINITY;
            if (mode == 3) r.z[(size_t)(g() % V)] = 40.0f;
            const float Ts[] = {0.3f, 1.0f, 1.7f};
            const float ps[] = {1.0f, 0.9f, 0.5f, 0.01f, 0.999f};
            const int ks[] = {0, 1, 2, 50, (int)V - 1, (int)V + 3};
            r.T = Ts[rep % 3];
            r.k = ks[(rep / 3) % 6];
            r.p = ps[rep % 5];
            r.renorm = rep % 2 == 0;
            const int S = 1 + (int)(g() % 7);
            int64_t last_k, last_p;
            const std::vector<char> want = sorted_support(r, &last_k, &last_p);
            const Picked o = split_select(r, S);
            const std::vector<char> got = split_support(r, o);
            ++rows;
            // The thresholds themselves: the key and index of the last element kept by each filter.
            const bool k_ok = o.k_on == (last_k >= 0) &&
                (!o.k_on || (o.tk == maporl::radix_key(r.z[(size_t)last_k]) && o.ik == last_k));
            const bool p_ok =
                !o.p_on || last_p < 0 || (o.tp == maporl::radix_key(r.z[(size_t)last_p]) && o.ip == last_p);
            if (got != want || !k_ok || !p_ok) {
                if (bad++ < 5)
                    std::printf(
                        "  V=%lld T=%g k=%d p=%g renorm=%d S=%d mode=%d: k %d p %d, supports %lld vs %lld kept\n",
                        (long long)V, r.T, r.k, r.p, (int)r.renorm, S, mode, (int)k_ok, (int)p_ok,
                        (long long)std::count(got.begin(), got.end(), 1),
                        (long long)std::count(want.begin(), want.end(), 1));
            }
        }
    }
    CHECK(bad == 0, "%d of %d rows", bad, rows);
}

// -0.0 and +0.0 tie in the sampler's order, so the lower index is kept first (the kernels ranked +0.0 above -0.0:
// z = [-0, +0, -1, -1] at top-k 1 kept index 1 there, index 0 on the CPU).
TEST(signed_zeros_tie_in_the_split_selection) {
    int bad = 0, rows = 0;
    for (int k : {1, 2, 3})
        for (float p : {1.0f, 0.3f, 0.6f})
            for (int S : {1, 2, 3}) {
                Row r;
                r.z = {-0.0f, 0.0f, -1.0f, -1.0f, 0.0f, -0.0f};
                r.T = 1.0f;
                r.k = k;
                r.p = p;
                r.renorm = true;
                const std::vector<char> want = sorted_support(r), got = split_support(r, split_select(r, S));
                bad += got != want;
                ++rows;
            }
    CHECK(bad == 0, "%d of %d rows", bad, rows);
}

}  // namespace

int main() { return check::run_all("test_sampling_radix"); }
