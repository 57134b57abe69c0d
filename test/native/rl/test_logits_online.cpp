// test_logits_online.cpp: CUDA's logits kernels (cuda/rl/logits.cu) compute a row's log-sum-exp and entropy with
// native/rl/logits_online.h: 256 threads each push their strided share of the row, warps merge by shuffles down (a
// lane past the warp's end reads its own state), then the block merges the warps in order. That decomposition runs
// here on the CPU, on rows where a thread's first finite logit follows nothing or -Inf (it gave NaN entropies, and
// through a = gl + ge * H NaN gradients in every fused row, before the NOTE(first) guard), rows shorter than the
// block, all -Inf but one, wide-ranged and peaked: lse and entropy against float64.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/rl/logits_online.h"

namespace {

using maporl::OnlineSoftmax;

constexpr int kThreads = 256;

// row_softmax of logits.cu, its threads and warps run one after another.
void emulate(const std::vector<float> & z, float temp, double & lse, double & H) {
    const int64_t V = (int64_t)z.size();
    std::vector<OnlineSoftmax> o(kThreads, maporl::online_softmax_init());
    for (int t = 0; t < kThreads; ++t)
        for (int64_t v = t; v < V; v += kThreads)
            maporl::online_softmax_push(o[t], temp == 1.0f ? z[v] : z[v] / temp, true);
    for (int w = 0; w < kThreads / 32; ++w) {
        OnlineSoftmax * lane = o.data() + 32 * w;
        for (int d = 16; d > 0; d >>= 1) {
            std::vector<OnlineSoftmax> before(lane, lane + 32);
            for (int l = 0; l < 32; ++l)
                lane[l] = maporl::online_softmax_merge(before[l], l + d < 32 ? before[l + d] : before[l]);
        }
    }
    OnlineSoftmax r = o[0];
    for (int w = 1; w < kThreads / 32; ++w) r = maporl::online_softmax_merge(r, o[32 * w]);
    lse = maporl::online_softmax_lse(r);
    H = maporl::online_softmax_entropy(r);
}

void reference(const std::vector<float> & z, float temp, double & lse, double & H) {
    double m = -INFINITY;
    for (float x : z) m = std::fmax(m, (double)x / temp);
    double s = 0, t = 0;
    for (float x : z) {
        const double q = (double)x / temp - m;
        if (q == -INFINITY) continue;
        s += std::exp(q);
        t += std::exp(q) * q;
    }
    lse = m + std::log(s);
    H = std::log(s) - t / s;
}

bool agree(const std::vector<float> & z, float temp, const char * what) {
    double l1, h1, l2, h2;
    emulate(z, temp, l1, h1);
    reference(z, temp, l2, h2);
    const bool ok = std::isfinite(l1) && std::isfinite(h1) && std::fabs(l1 - l2) <= 1e-5 * (1 + std::fabs(l2)) &&
        std::fabs(h1 - h2) <= 1e-5 * (1 + std::fabs(h2));
    if (!ok)
        std::printf("  %s (V %zu, T %g): lse %.9g vs %.9g, entropy %.9g vs %.9g\n", what, z.size(), temp, l1, l2, h1,
                    h2);
    return ok;
}

TEST(first_finite_logit_after_nothing_or_minus_inf) {
    // Every thread's first element finite: the first push meets the empty state (m = -Inf, s = 0).
    std::mt19937 g(1);
    std::normal_distribution<float> n(0.0f, 3.0f);
    std::vector<float> z(1000);
    for (auto & x : z) x = n(g);
    CHECK(agree(z, 1.0f, "dense row"), "first push on an empty state");
    CHECK(agree(z, 0.7f, "dense row, T 0.7"), "tempered");
    // Each thread's share opens with -Inf, then finite logits: the first finite push after skipped -Inf.
    for (int64_t v = 0; v < kThreads * 2; ++v) z[(size_t)v] = -INFINITY;
    CHECK(agree(z, 1.0f, "-Inf prefix"), "first finite after -Inf");
}

TEST(short_rows_single_survivors_and_wide_ranges) {
    CHECK(agree({0.5f}, 1.0f, "V = 1"), "one logit: entropy 0");
    CHECK(agree({1.0f, 2.0f, 3.0f}, 1.0f, "V = 3"), "most threads hold nothing");
    std::vector<float> one(5000, -INFINITY);
    one[4321] = 7.0f;
    CHECK(agree(one, 1.0f, "one finite"), "a single finite logit among -Inf");
    std::vector<float> two(777, -INFINITY);
    two[3] = -2.0f;
    two[700] = 4.0f;
    CHECK(agree(two, 1.0f, "two finite"), "two survivors in different threads and warps");
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-80.0f, 80.0f);
    for (int64_t V : {31, 256, 257, 4099, 151936}) {
        std::vector<float> z((size_t)V);
        for (auto & x : z) x = u(g);
        CHECK(agree(z, 1.0f, "wide"), "V %lld", (long long)V);
        z[(size_t)(V / 2)] = 200.0f;  // peaked
        CHECK(agree(z, 1.0f, "peaked"), "V %lld peaked", (long long)V);
    }
}

TEST(only_minus_inf_is_nan) {
    double l, h;
    emulate(std::vector<float>(300, -INFINITY), 1.0f, l, h);
    CHECK(std::isnan(l) && std::isnan(h), "a row of only -Inf gives NaN (as torch's log_softmax): %g %g", l, h);
}

}  // namespace

int main() { return check::run_all("test_logits_online"); }
