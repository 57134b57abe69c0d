// test_sampling_support.cpp: what makes the CPU sampler's support CUDA's, at every SIMD level: det_exp_nonpos
// (native/core/det_exp.h) against float64 exp and against every SIMD level's exp to the bit, the vector fixed-point
// weights and sums against radix_fixed, the CPU sampler's support against the emulated kernels
// (sampling_split_emulation.h) on rows whose top-p / min-p boundaries sit on the rounding, and top-p's histogram
// cut (native/sampling/sampling_top_p.cpp) on wide and degenerate rows against the sorted reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/det_exp.h"
#include "native/core/isa.h"
#include "maporl.h"
#include "native/sampling/sampling.h"
#include "native/sampling/sampling_radix.h"
#include "test/native/sampling/sampling_split_emulation.h"

namespace {

using namespace split_emulation;

// Negative floats from hi (<= -0) down to lo, every `stride`-th bit pattern (and lo).
std::vector<float> negative_sweep(float hi, float lo, uint32_t stride) {
    std::vector<float> xs;
    uint32_t begin, end;
    std::memcpy(&begin, &hi, 4);
    std::memcpy(&end, &lo, 4);
    for (uint32_t b = begin; b <= end; b += stride) {
        float x;
        std::memcpy(&x, &b, 4);
        xs.push_back(x);
    }
    xs.push_back(lo);
    return xs;
}

TEST(det_exp_is_exp_to_float_accuracy) {
    double worst = 0.0;
    for (float x : negative_sweep(-0.0f, -87.0f, 331)) {  // ~3.3M arguments; results normal down to -87
        const double want = std::exp((double)x);
        worst = std::max(worst, std::fabs((double)maporl::det_exp_nonpos(x) - want) / want);
    }
    std::printf("  max relative error over [-87, 0]: %.2e\n", worst);
    CHECK(worst < 3e-7, "relative error %.3g", worst);
    bool tail = true;  // below the smallest normal's log: 0; between -87 and there: within a few float ulps of 2^-126
    for (float x : negative_sweep(-87.0f, -87.3365447f, 1))
        if (x < -87.0f) tail = tail && std::fabs((double)maporl::det_exp_nonpos(x) - std::exp((double)x)) < 1e-44;
    CHECK(tail, "[-87.34, -87]");
    CHECK(maporl::det_exp_nonpos(0.0f) == 1.0f && maporl::det_exp_nonpos(-0.0f) == 1.0f, "exp(0) = 1");
    CHECK(maporl::det_exp_nonpos(-87.34f) == 0.0f && maporl::det_exp_nonpos(-1e30f) == 0.0f &&
              maporl::det_exp_nonpos(-INFINITY) == 0.0f,
          "0 below the normal range and at -Inf");
    CHECK(std::isnan(maporl::det_exp_nonpos(NAN)), "NaN stays NaN");
}

// The SIMD levels this CPU and build have, by name, with the sampler's exported passes.
struct Level {
    const char * name;
    float (*exp_one)(float, float);
    uint64_t (*fixed_mass)(const float *, int64_t, float, float, int);
};
std::vector<Level> vector_levels() {
    std::vector<Level> out;
    if ((int)maporl::cpu_isa() >= (int)maporl::Isa::Avx2)
        out.push_back({"avx2", maporl::avx2::exp_one_f32, maporl::avx2::row_fixed_mass_f32});
    if ((int)maporl::cpu_isa() >= (int)maporl::Isa::Avx512)
        out.push_back({"avx512", maporl::avx512::exp_one_f32, maporl::avx512::row_fixed_mass_f32});
    return out;
}

TEST(every_simd_level_computes_det_exp_and_the_fixed_point_weights_to_the_bit) {
    const std::vector<Level> levels = vector_levels();
    std::printf("  vector levels here: %zu\n", levels.size());
    const std::vector<float> xs =
        negative_sweep(-0.0f, -87.5f, 4093);  // ~270k arguments, the denormal results included
    const float zero = 0.0f;
    for (const Level & L : levels) {
        int64_t exp_bad = 0, fixed_bad = 0;
        for (float x : xs) {
            const float want = maporl::det_exp_nonpos(x);
            const float got = L.exp_one(x, 0.0f);
            exp_bad += std::memcmp(&want, &got, sizeof got) != 0;
            for (int s : {62, 52, 44, 31, 10, 0}) {  // a one-element row: e = exp(0 - (-x))
                const bool differs =
                    L.fixed_mass(&zero, 1, 1.0f, -x, s) != maporl::radix_fixed(want, std::ldexp(1.0, s));
                if (differs && fixed_bad < 3)
                    std::printf("  %s: e %a s %d: %llu vs %llu\n", L.name, want, s,
                                (unsigned long long)L.fixed_mass(&zero, 1, 1.0f, -x, s),
                                maporl::radix_fixed(want, std::ldexp(1.0, s)));
                fixed_bad += differs;
            }
        }
        // exp(x - M) with M != 0: the subtraction in float first, as the kernels do.
        std::mt19937 g(5);
        std::uniform_real_distribution<float> u(-40.0f, 40.0f);
        for (int t = 0; t < 100000; ++t) {
            const float M = u(g), x = M - std::fabs(u(g)) * 2.2f;
            exp_bad += L.exp_one(x, M) != maporl::det_exp_nonpos(x - M);
        }
        // Whole rows (tails shorter than a vector, -Inf holes, temperatures): the integer sum of the weights.
        for (int64_t V : {1, 7, 15, 16, 17, 33, 1000, 4099}) {
            for (float T : {1.0f, 0.7f, 1.9f}) {
                std::vector<float> z((size_t)V);
                std::normal_distribution<float> nd(0.0f, 3.0f);
                for (auto & v : z) v = nd(g);
                for (int64_t i = 1; i < V; i += 5) z[(size_t)i] = -INFINITY;  // (an all -Inf row never gets here)
                float m = -INFINITY;
                for (float v : z) m = std::max(m, v);
                const float M = T == 1.0f ? m : m / T;
                const int sb = maporl::radix_scale_bits(V);
                unsigned long long want = 0;
                for (float v : z)
                    want +=
                        maporl::radix_fixed(maporl::det_exp_nonpos((T == 1.0f ? v : v / T) - M), std::ldexp(1.0, sb));
                fixed_bad += L.fixed_mass(z.data(), V, T, M, sb) != want;
            }
        }
        CHECK(exp_bad == 0, "%s: %lld exp values differ from det_exp_nonpos", L.name, (long long)exp_bad);
        CHECK(fixed_bad == 0, "%s: %lld fixed-point weights or sums differ from radix_fixed", L.name,
              (long long)fixed_bad);
    }
    // radix_fixed itself is floor(e * 2^s + 0.5), including where e * 2^s passes 2^52.
    bool ok = true;
    for (float e : {0.0f, 1e-45f, 1e-38f, 0.3f, 0.5f, 0.99999994f, 1.0f})
        for (int s : {62, 53, 52, 44, 0}) {
            const long double x = (long double)e * std::ldexp(1.0L, s);
            ok = ok && maporl::radix_fixed(e, std::ldexp(1.0, s)) == (unsigned long long)std::floor(x + 0.5L);
        }
    CHECK(ok, "radix_fixed rounds half up exactly");
}

// The CPU sampler's support for a row (every token scored through maporl_sample_logprobs: finite = kept).
std::vector<char> cpu_support(const Row & r, float min_p) {
    const int64_t V = (int64_t)r.z.size();
    std::vector<float> logits((size_t)(V * V));
    std::vector<int32_t> tokens((size_t)V);
    for (int64_t b = 0; b < V; ++b) {
        std::copy(r.z.begin(), r.z.end(), logits.begin() + b * V);
        tokens[(size_t)b] = (int32_t)b;
    }
    maporl_sample_params p = maporl_sample_default_params();
    p.temperature_all = r.T;
    p.top_k_all = r.k;
    p.top_p_all = r.p;
    p.min_p_all = min_p;
    p.filter_order = r.renorm ? MAPORL_FILTER_TOP_K_FIRST : MAPORL_FILTER_JOINT;
    std::vector<float> lp((size_t)V);
    std::vector<char> keep((size_t)V, 0);
    if (maporl_sample_logprobs(MAPORL_DEVICE_CPU, logits.data(), V, V, &p, tokens.data(), lp.data(), nullptr) !=
        MAPORL_OK)
        return {};
    for (int64_t i = 0; i < V; ++i) keep[(size_t)i] = lp[(size_t)i] > -INFINITY;
    return keep;
}

// Rows whose top-p boundary sits on the rounding of the masses: p = (mass of the first j + 1 in the sampler's
// order) / total, rounded to float, and its float neighbours; min-p boundaries at an element's own e and the next
// float above. The CPU sampler's support, at every SIMD level, must be the kernels' (the emulation above).
TEST(cpu_support_is_the_kernels_support_at_rounding_boundaries_on_every_simd_level) {
    std::vector<const char *> levels = {"scalar"};
    for (const Level & L : vector_levels()) levels.push_back(L.name);
    std::mt19937 g(23);
    int cases = 0, bad = 0;
    for (int64_t V : {6, 37, 300}) {
        for (int rep = 0; rep < 8; ++rep) {
            Row r;
            r.z.resize((size_t)V);
            std::normal_distribution<float> nd(0.0f, 1.5f);
            for (auto & v : r.z) v = rep % 4 == 3 ? (float)(int)(nd(g) * 2.0f) * 0.5f : nd(g);  // every 4th: heavy ties
            r.T = rep % 2 ? 0.7f : 1.0f;
            r.k = rep % 3 == 0 ? 0 : (int)std::min<int64_t>(V - 1, 20);
            r.renorm = rep % 4 < 2;
            float m = -INFINITY;
            for (float v : r.z) m = std::max(m, v);
            const float M = r.T == 1.0f ? m : m / r.T;
            const double scale = maporl::radix_scale(V);
            // The top-k set in the sampler's order, and the masses.
            std::vector<int64_t> idx((size_t)V);
            std::iota(idx.begin(), idx.end(), 0);
            std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
                return r.z[(size_t)a] != r.z[(size_t)b] ? r.z[(size_t)a] > r.z[(size_t)b] : a < b;
            });
            if (r.k > 0) idx.resize((size_t)r.k);
            unsigned long long total = 0;
            if (r.renorm && r.k > 0)
                for (int64_t i : idx) total += maporl::radix_fixed(e_of(r, M, i), scale);
            else
                for (int64_t i = 0; i < V; ++i) total += maporl::radix_fixed(e_of(r, M, i), scale);
            std::vector<float> ps;
            unsigned long long cum = 0;
            for (size_t j = 0; j < idx.size() && j < 12; ++j) {
                cum += maporl::radix_fixed(e_of(r, M, idx[j]), scale);
                const float p0 = (float)((double)cum / (double)total);
                for (float p : {std::nextafter(p0, 0.0f), p0, std::nextafter(p0, 1.0f)})
                    if (p > 0.0f && p < 1.0f) ps.push_back(p);
            }
            std::vector<float> minps = {0.0f};
            for (int j = 0; j < 4; ++j) {
                const float e = e_of(r, M, (int64_t)(g() % V));
                minps.push_back(e);
                minps.push_back(std::nextafter(e, 1.0f));
            }
            for (float p : ps) {
                for (float mp : {minps[(size_t)(g() % minps.size())], 0.0f}) {
                    r.p = p;
                    std::vector<char> want = split_support(r, split_select(r, 1 + (int)(g() % 5)));
                    if (mp > 0.0f)
                        for (int64_t i = 0; i < V; ++i)
                            want[(size_t)i] &= (char)(r.z[(size_t)i] > -INFINITY && !(e_of(r, M, i) < mp));
                    for (const char * level : levels) {
                        maporl_set_simd(level);
                        const std::vector<char> got = cpu_support(r, mp);
                        ++cases;
                        if (got != want && bad++ < 5)
                            std::printf("  %s V=%lld T=%g k=%d p=%.9g min_p=%.9g renorm=%d: %lld kept, want %lld\n",
                                        level, (long long)V, r.T, r.k, r.p, mp, (int)r.renorm,
                                        (long long)std::count(got.begin(), got.end(), 1),
                                        (long long)std::count(want.begin(), want.end(), 1));
                    }
                    maporl_set_simd("best");
                }
            }
            for (float mp : minps) {  // min-p alone (the unfiltered path's candidate scan)
                r.p = 1.0f;
                r.k = 0;
                std::vector<char> want((size_t)V);
                for (int64_t i = 0; i < V; ++i) want[(size_t)i] = r.z[(size_t)i] > -INFINITY && !(e_of(r, M, i) < mp);
                for (const char * level : levels) {
                    maporl_set_simd(level);
                    ++cases;
                    if (cpu_support(r, mp) != want && bad++ < 5)
                        std::printf("  %s min-p alone %.9g differs\n", level, mp);
                }
                maporl_set_simd("best");
            }
        }
    }
    std::printf("  %d (row, p, min-p, level) cases\n", cases);
    CHECK(bad == 0, "%d of %d cases", bad, cases);
}

// Top-p without top-k finds its cut from a histogram of the row (sampling_top_p.cpp's top_p_cut), binning the cut's bin
// again while it holds more than 4096 elements. Rows that stress that: near-uniform logits (one bin holds almost
// the whole row), all-equal logits (ties only: index order), extreme temperatures and magnitudes, a wide row whose
// cut falls far below the max (the nucleus's mass from the fixed-point sum), tiny min-p with it. Checked against
// the sorted reference: the tokens on either side of the reference cut and random ones are in or out alike, and
// sampled tokens lie in the support with log-probs from the reference's float64 sums.
TEST(top_p_cut_without_top_k_on_wide_and_degenerate_rows) {
    std::vector<const char *> levels = {"scalar"};
    for (const Level & L : vector_levels()) levels.push_back(L.name);
    std::mt19937 g(31);
    struct Case {
        const char * name;
        int64_t V;
        float T, p, min_p;
        int kind;  // 0 normal(0, sd), 1 all equal, 2 +-3e38, 3 half-unit grid, 4 one 0 and the rest in [-21.5, -20.5]
        float sd;
    };
    const Case cases[] = {
        {"near-uniform", 20000, 1.0f, 0.9f, 0.0f, 0, 1e-3f},
        {"near-uniform p 0.5", 20000, 0.7f, 0.5f, 0.0f, 0, 1e-4f},
        {"all equal", 10000, 1.0f, 0.3f, 0.0f, 1, 0.0f},
        {"huge magnitudes", 5000, 1.0f, 0.9f, 0.0f, 2, 0.0f},
        {"T 1e-30, ties", 9000, 1e-30f, 0.9f, 0.0f, 3, 2.0f},
        {"T 1e30", 9000, 1e30f, 0.6f, 0.0f, 0, 2.0f},
        {"wide, cut far down", 30000, 1.0f, 0.9999999f, 0.0f, 0, 5.0f},
        {"wide with tiny min-p", 30000, 1.0f, 0.9999999f, 6e-10f, 0, 5.0f},
        {"vocabulary 151936", 151936, 0.7f, 0.9f, 0.0f, 0, 2.0f},
        {"tiny p", 151936, 1.3f, 1e-6f, 0.0f, 0, 2.0f},
        // One logit 21 above a bulk of 151,935: the bulk holds 1e-4 of the mass, all below the race's floor, and min-p
        // cuts it in half (the support's mass then needs its own pass).
        {"bulk below the floor, min-p", 151936, 1.0f, 0.9999999f, 7.6e-10f, 4, 0.0f},
    };
    int bad = 0, probes = 0;
    for (const Case & c : cases) {
        Row r;
        r.z.resize((size_t)c.V);
        std::normal_distribution<float> nd(0.0f, c.sd > 0 ? c.sd : 1.0f);
        std::uniform_real_distribution<float> u(-1.0f,
                                                1.0f);  // times 3e38 (a range of 6e38 would overflow the distribution)
        for (auto & v : r.z)
            v = c.kind == 0   ? nd(g)
                : c.kind == 1 ? 0.5f
                : c.kind == 2 ? u(g) * 3e38f
                : c.kind == 3 ? std::round(nd(g) * 2.0f) * 0.5f
                              : -21.0f + 0.5f * u(g);
        if (c.kind == 4) r.z[7] = 0.0f;
        r.T = c.T;
        r.k = 0;
        r.p = c.p;
        r.renorm = true;
        std::vector<char> want = sorted_support(r);
        float m = -INFINITY;
        for (float v : r.z) m = std::max(m, v);
        const float M = r.T == 1.0f ? m : m / r.T;
        if (c.min_p > 0.0f)
            for (int64_t i = 0; i < c.V; ++i) want[(size_t)i] &= (char)!(e_of(r, M, i) < c.min_p);
        // Probes: the reference's last kept and first dropped in the sampler's order, and random tokens.
        std::vector<int64_t> order((size_t)c.V);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            return r.z[(size_t)a] != r.z[(size_t)b] ? r.z[(size_t)a] > r.z[(size_t)b] : a < b;
        });
        size_t kept = 0;
        while (kept < order.size() && want[(size_t)order[kept]]) ++kept;
        std::vector<int32_t> probe;
        for (int64_t d = -3; d <= 3; ++d)
            if ((int64_t)kept + d >= 0 && (int64_t)kept + d < c.V) probe.push_back((int32_t)order[(size_t)(kept + d)]);
        for (int j = 0; j < 25; ++j) probe.push_back((int32_t)(g() % c.V));
        const int64_t B = (int64_t)probe.size();
        std::vector<float> logits((size_t)(B * c.V)), lp((size_t)B);
        for (int64_t b = 0; b < B; ++b) std::copy(r.z.begin(), r.z.end(), logits.begin() + b * c.V);
        maporl_sample_params p = maporl_sample_default_params();
        p.temperature_all = c.T;
        p.top_p_all = c.p;
        p.min_p_all = c.min_p;
        // The reference log-normaliser: float64 sum of e over the support.
        double S = 0.0;
        for (int64_t i = 0; i < c.V; ++i)
            if (want[(size_t)i]) S += (double)e_of(r, M, i);
        for (const char * level : levels) {
            maporl_set_simd(level);
            int wrong = 0;
            CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CPU, logits.data(), B, c.V, &p, probe.data(), lp.data(),
                                         nullptr) == MAPORL_OK,
                  "%s", maporl_last_error());
            for (int64_t b = 0; b < B; ++b)
                wrong += (lp[(size_t)b] > -INFINITY) != (bool)want[(size_t)probe[(size_t)b]];
            // Sampled tokens: in the support, log-probs as the reference's.
            std::vector<int32_t> tok((size_t)B);
            for (int64_t b = 0; b < B; ++b)
                p.seed_all = (uint64_t)b,
                maporl_sample(MAPORL_DEVICE_CPU, logits.data(), 1, c.V, &p, tok.data() + b, lp.data() + b, nullptr,
                              nullptr);
            p.seed_all = 0;
            for (int64_t b = 0; b < B; ++b) {
                const int32_t t = tok[(size_t)b];
                const double x = r.T == 1.0f ? r.z[(size_t)t] : r.z[(size_t)t] / r.T;
                const double ref = x - (double)M - std::log(S);
                wrong += !(t >= 0 && want[(size_t)t] && std::fabs(lp[(size_t)b] - ref) <= 1e-5 + 1e-5 * std::fabs(ref));
            }
            probes += 2 * (int)B;
            if (wrong && bad++ < 6)
                std::printf("  %s (%s): %d of %lld probes wrong (reference keeps %zu)\n", c.name, level, wrong,
                            (long long)(2 * B), kept);
        }
        maporl_set_simd("best");
    }
    std::printf("  %d probes over %zu rows and every SIMD level\n", probes, sizeof(cases) / sizeof(cases[0]));
    CHECK(bad == 0, "%d (row, level) pairs wrong", bad);
}


}  // namespace

int main() { return check::run_all("test_sampling_support"); }
