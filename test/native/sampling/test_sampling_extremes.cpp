// test_sampling_extremes.cpp: the sampler on the inputs that hung or crashed it (the hardening issue): temperatures
// down to the smallest subnormal, finite logits up to FLT_MAX whose quotient by the temperature overflows, signed
// zeros and -Inf holes, under every filter setting, at every SIMD level. The decision under test
// (sampling.h's sample_greedy): below kMinTemperature (FLT_MIN, 2^-126: subnormal temperatures), and where max z / T overflows
// float32, a row is sampled as temperature 0 (first argmax, log-prob 0); every other finite row is sampled as
// usual. Properties: a finite row is always valid; a greedy row gives the first argmax with log-prob 0; where
// the finite logits are spread so far apart (relative to T) that the softmax is a point mass on the maxima, the
// token is one of the maxima; scoring a given token agrees with sampling. scripts/test-native.mjs runs every
// binary under a timeout, so a hang fails the suite instead of wedging it.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "maporl.h"
#include "native/sampling/sampling.h"

namespace {

struct Filter {
    int k;
    float p, minp;
    bool raw;
};
const Filter kFilters[] = {{0, 1.0f, 0.0f, true},  {0, 1.0f, 0.0f, false}, {1, 1.0f, 0.0f, true},
                           {3, 1.0f, 0.0f, false}, {0, 0.9f, 0.0f, true},  {0, 0.9f, 0.0f, false},
                           {0, 0.01f, 0.0f, true}, {5, 0.5f, 0.0f, true},  {0, 1.0f, 0.1f, false},
                           {4, 0.8f, 0.05f, true}};
const float kTemps[] = {1.4e-45f, 1e-40f, 1.1e-38f, 1.2e-38f, 1e-30f, 1e-6f, 9.99e-6f,
                        1e-5f,    1e-3f,  0.7f,     1.0f,     2.0f,   1e30f, 3e38f};
const char * kLevels[] = {"scalar", "avx2", "avx512"};

int first_argmax(const std::vector<float> & z) {
    int a = 0;
    for (int i = 1; i < (int)z.size(); ++i)
        if (z[(size_t)i] > z[(size_t)a]) a = i;
    return a;
}

// Rows of huge, tiny, signed-zero and -Inf logits (at least one finite), V from 1 to 4099.
std::vector<float> extreme_row(std::mt19937 & g, int V) {
    const float pool[] = {3e38f, FLT_MAX, -FLT_MAX, -3e38f, 1e38f,   2.9e38f, 1e30f,
                          5.0f,  0.0f,    -0.0f,    1e-45f, -1e-45f, -1e20f,  -INFINITY};
    std::vector<float> z((size_t)V);
    for (auto & v : z) v = pool[g() % (sizeof(pool) / sizeof(pool[0]))];
    z[(size_t)(g() % V)] = pool[g() % 13];  // one finite
    return z;
}

bool point_mass_expected(const std::vector<float> & z, float T) {
    // Every finite logit other than the max sits at least 60 T below it (in double): the noise (< 17.4) can never
    // lift it, so the token is one of the maxima.
    const double m = *std::max_element(z.begin(), z.end());
    for (float v : z)
        if (v > -INFINITY && (double)v != m && ((double)v - m) / (double)T > -60.0) return false;
    return true;
}

TEST(finite_rows_are_valid_at_every_temperature_filter_and_simd_level) {
    std::mt19937 g(5);
    int rows = 0, wrong = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (int rep = 0; rep < 60; ++rep) {
            const int V = rep % 5 == 0 ? 1 : rep % 5 == 1 ? 2 : rep % 5 == 2 ? 17 : rep % 5 == 3 ? 1000 : 4099;
            const std::vector<float> z = extreme_row(g, V);
            const int am = first_argmax(z);
            for (float T : kTemps)
                for (const Filter & f : kFilters) {
                    maporl_sample_params p = maporl_sample_default_params();
                    p.temperature_all = T;
                    p.top_k_all = f.k;
                    p.top_p_all = f.p;
                    p.min_p_all = f.minp;
                    p.seed_all = (uint64_t)rep;
                    int32_t tok = -7;
                    float lp = 0.0f, raw = 0.0f, glp = 0.0f;
                    uint8_t valid = 9;
                    const bool call_ok = maporl_sample(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &tok, &lp,
                                                       f.raw ? &raw : nullptr, &valid) == MAPORL_OK &&
                        tok >= 0 && tok < V &&
                        maporl_sample_logprobs(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &tok, &glp, nullptr) == MAPORL_OK;
                    const float M = T == 1.0f ? z[(size_t)am] : z[(size_t)am] / T;
                    const bool greedy = T < FLT_MIN || !std::isfinite(M);
                    bool ok = call_ok && valid == 1 && z[(size_t)tok] > -INFINITY && std::isfinite(lp) && lp <= 1e-5f &&
                        glp == lp;
                    if (ok && greedy) ok = tok == am && lp == 0.0f;
                    if (ok && point_mass_expected(z, T)) ok = z[(size_t)tok] == z[(size_t)am];
                    if (ok && f.raw)
                        ok =
                            raw <= 1e-5f && !std::isnan(raw);  // (the raw sum's terms are vexp2_sum's: 1.5e-7 relative)
                    ++rows;
                    if (!ok && wrong++ < 8)
                        std::printf(
                            "  %s V=%d T=%g k=%d p=%g minp=%g: valid %d token %d (argmax %d, z %g) lp %g given-lp %g "
                            "raw %g\n",
                            level, V, (double)T, f.k, (double)f.p, (double)f.minp, valid, tok, am,
                            tok >= 0 && tok < V ? (double)z[(size_t)tok] : NAN, (double)lp, (double)glp,
                            f.raw ? (double)raw : 0.0);
                }
        }
    }
    maporl_set_simd("best");
    CHECK(wrong == 0, "%d of %d rows", wrong, rows);
}

// The reproducers, at every level: each gave a hang (z_threshold stepping -Inf to -Inf) or SIGSEGV
// (top_p_cut's empty member list).
TEST(the_reported_reproducers_give_the_first_argmax) {
    struct Case {
        std::vector<float> z;
        float T, p;
    };
    const Case cases[] = {{{5.0f, 0.0f}, 1e-38f, 1.0f},     {{3e38f}, 0.7f, 1.0f},
                          {{1.0f, 0.5f}, 1e-45f, 0.9f},     {{3e38f, 3e38f}, 0.7f, 0.9f},
                          {{-3e38f, -3.1e38f}, 0.5f, 0.9f}, {{-0.0f, 0.0f, -1.0f}, 1e-45f, 1.0f}};
    int wrong = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (const Case & c : cases) {
            maporl_sample_params p = maporl_sample_default_params();
            p.temperature_all = c.T;
            p.top_p_all = c.p;
            int32_t tok = -7;
            float lp = NAN;
            uint8_t valid = 0;
            const bool ok = maporl_sample(MAPORL_DEVICE_CPU, c.z.data(), 1, (int64_t)c.z.size(), &p, &tok, &lp, nullptr,
                                          &valid) == MAPORL_OK &&
                valid == 1 && tok == 0 && lp == 0.0f;
            if (!ok && wrong++ < 8)
                std::printf("  %s T=%g p=%g: valid %d token %d lp %g\n", level, (double)c.T, (double)c.p, valid, tok,
                            (double)lp);
        }
    }
    maporl_set_simd("best");
    CHECK(wrong == 0, "%d wrong", wrong);
}

// Near the float range but without overflow the row is sampled, not made greedy: two maxima tied at 3e38 / 1.5
// each weigh 1/2 (log-prob -log 2), the third logit never wins. (Which of the two wins is the lower index for
// every seed: an ulp of the keys there, 2^104, swallows the Gumbel noise; keys are x + noise in float32 at any
// magnitude, which the README states.)
TEST(huge_logits_without_overflow_are_sampled) {
    const std::vector<float> z = {3e38f, -1e38f, 3e38f};
    int wrong = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (uint64_t s = 0; s < 50; ++s) {
            maporl_sample_params p = maporl_sample_default_params();
            p.temperature_all = 1.5f;
            p.seed_all = s;
            int32_t tok = -1;
            float lp = NAN;
            uint8_t valid = 0;
            if (maporl_sample(MAPORL_DEVICE_CPU, z.data(), 1, 3, &p, &tok, &lp, nullptr, &valid) != MAPORL_OK ||
                valid != 1 || (tok != 0 && tok != 2) || std::fabs(lp - (float)-std::log(2.0)) > 1e-6f)
                ++wrong;
        }
    }
    maporl_set_simd("best");
    CHECK(wrong == 0, "%d wrong", wrong);
}

// rawLogprobs at a low temperature on a row with masked (-Inf) logits, against float64: the first pass clamped
// the raw and the tempered exponents at one bound, -86.5 T, so each masked logit weighed exp(-86.5 T) in the raw sum
// (4.3e-5 each at T = 0.05 here: thousands of them).
TEST(raw_logprobs_at_low_temperatures_with_masked_logits_match_float64) {
    std::mt19937 g(9);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    const int V = 4099;
    std::vector<float> z((size_t)V);
    for (auto & v : z) v = nd(g);
    for (int i = 0; i < V; ++i)
        if (i % 3 != 0) z[(size_t)i] = -INFINITY;
    double m = -INFINITY, s = 0.0;
    for (float v : z) m = std::max(m, (double)v);
    for (float v : z) s += std::exp((double)v - m);
    double worst = 0.0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (float T : {0.05f, 0.2f, 1e-5f, 0.7f}) {
            maporl_sample_params p = maporl_sample_default_params();
            p.temperature_all = T;
            int32_t tok = -1;
            float lp, raw = NAN;
            uint8_t valid = 0;
            if (maporl_sample(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &tok, &lp, &raw, &valid) != MAPORL_OK ||
                valid != 1)
                worst = INFINITY;
            else
                worst = std::max(worst, std::fabs((double)raw - ((double)z[(size_t)tok] - m - std::log(s))));
        }
    }
    maporl_set_simd("best");
    CHECK(worst < 1e-5, "worst |raw - float64| %g", worst);
}

}  // namespace

int main() { return check::run_all("test_sampling_extremes"); }
