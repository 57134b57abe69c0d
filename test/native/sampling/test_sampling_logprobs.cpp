// test_sampling_logprobs.cpp: the sampler's first pass (sampling_row.h's row_max_t, whose softmax terms come from
// vec.h's vexp2_sum, not det_exp) against float64 on vocabulary-wide rows, at every SIMD level: the raw and
// tempered sums directly, then sample()'s logprobs and rawLogprobs end to end, to the 1e-5; its NaN /
// +Inf detection, which rides on those sums; and the vector races' pruning against the scalar race far from 0.
// The rows are what an LM's head gives and what breaks float sums: wide (151,936, and lengths that leave a ragged
// tail), offset far from 0 (the terms' exponents are then large before the max is taken away), with -Inf entries
// (masked tokens) and a peaked head, at temperatures 0.3 to 2.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/isa.h"
#include "maporl.h"
#include "native/sampling/sampling.h"

namespace {

struct Level {
    const char * name;
    maporl::RowMax (*max)(const float *, int64_t, float, bool, bool, bool);
};

std::vector<Level> vector_levels() {
    std::vector<Level> out;
    if ((int)maporl::cpu_isa() >= (int)maporl::Isa::Avx2) out.push_back({"avx2", maporl::avx2::row_max_f32});
    if ((int)maporl::cpu_isa() >= (int)maporl::Isa::Avx512) out.push_back({"avx512", maporl::avx512::row_max_f32});
    return out;
}

// A row: normal(0, sd) + offset, `peaks` entries raised by 6..14, every 97th entry -Inf when `masked`.
std::vector<float> make_row(std::mt19937 & g, int64_t V, float sd, float offset, int peaks, bool masked) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> z((size_t)V);
    for (auto & v : z) v = nd(g) + offset;
    for (int j = 0; j < peaks; ++j) z[(size_t)(g() % (uint32_t)V)] += 6.0f + 8.0f * u(g);
    if (masked)
        for (int64_t i = 5; i < V; i += 97) z[(size_t)i] = -INFINITY;
    return z;
}

// The sampler's processed logits are x = z / T rounded to float (as vLLM's logits.div_(T) computes them): lse_t
// is their log-sum-exp, what sample()'s log-probs answer to. The first pass's tempered sum is of (z - max) / T in
// exact arithmetic (sampling_row.h): lse_exact. Both in float64 here.
struct Ref {
    double max, lse_raw, lse_t, lse_exact;
};
Ref reference(const std::vector<float> & z, float T) {
    Ref r{-INFINITY, 0, 0, 0};
    for (float v : z) r.max = std::max(r.max, (double)v);
    const double Mt = (double)((float)r.max / T);
    double s = 0, st = 0, se = 0;
    for (float v : z) {
        if (v == -INFINITY) continue;
        s += std::exp((double)v - r.max);
        st += std::exp((double)(v / T) - Mt);
        se += std::exp(((double)v - r.max) / T);
    }
    r.lse_raw = r.max + std::log(s);
    r.lse_t = Mt + std::log(st);
    r.lse_exact = r.max / T + std::log(se);
    return r;
}

struct Case {
    int64_t V;
    float sd, offset;
    int peaks;
    bool masked;
};
const Case kCases[] = {{151936, 2.0f, 0.0f, 64, false}, {151936, 2.0f, 80.0f, 64, true},
                       {50257, 3.0f, -300.0f, 8, true}, {32000, 0.5f, 20.0f, 0, false},
                       {1003, 2.0f, 0.0f, 1, true},     {17, 1.0f, 0.0f, 0, true},
                       {151936, 0.7f, 41.4f, 0, true}};  // max / 0.7 near 64, tempered_sum_serves's bound
const float kTemps[] = {0.3f, 0.7f, 1.0f, 2.0f};

TEST(first_pass_softmax_sums_match_float64_on_wide_rows_at_every_vector_level) {
    std::mt19937 g(11);
    for (const Level & L : vector_levels()) {
        double worst = 0;
        for (const Case & c : kCases)
            for (float T : kTemps) {
                const std::vector<float> z = make_row(g, c.V, c.sd, c.offset, c.peaks, c.masked);
                const Ref ref = reference(z, T);
                const maporl::RowMax m = L.max(z.data(), c.V, T, true, true, false);
                CHECK(!m.bad && (double)m.max == ref.max, "%s V=%lld: max %g vs %g", L.name, (long long)c.V,
                      (double)m.max, ref.max);
                // The sums are relative to the row's max: exp(z - max) and exp((z - max) / T).
                const double got_raw = m.max + std::log(m.sum), got_t = (double)m.max / T + std::log(m.sum_t);
                worst = std::max({worst, std::fabs(got_raw - ref.lse_raw), std::fabs(got_t - ref.lse_exact)});
                CHECK(std::fabs(got_raw - ref.lse_raw) <= 2e-6 && std::fabs(got_t - ref.lse_exact) <= 2e-6,
                      "%s V=%lld offset %g T=%g: log-sum-exp raw %.9g vs %.9g, tempered %.9g vs %.9g", L.name,
                      (long long)c.V, (double)c.offset, (double)T, got_raw, ref.lse_raw, got_t, ref.lse_exact);
            }
        std::printf("  %s: worst log-sum-exp error %.2e\n", L.name, worst);
    }
}

TEST(unfiltered_logprobs_and_raw_logprobs_match_float64_on_wide_rows_at_every_simd_level) {
    const char * levels[] = {"scalar", "avx2", "avx512"};
    for (const char * level : levels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;  // a level this CPU lacks
        std::mt19937 g(12);
        double worst = 0;
        int bad = 0;
        for (const Case & c : kCases)
            for (float T : kTemps) {
                const std::vector<float> z = make_row(g, c.V, c.sd, c.offset, c.peaks, c.masked);
                const Ref ref = reference(z, T);
                const int B = 4;
                std::vector<float> rows;
                for (int b = 0; b < B; ++b) rows.insert(rows.end(), z.begin(), z.end());
                maporl_sample_params p = maporl_sample_default_params();
                p.temperature_all = T;
                p.seed_all = 99;
                std::vector<int64_t> pos = {0, 1, 2, 3};
                p.position = pos.data();
                std::vector<int32_t> tok(B);
                std::vector<float> lp(B), raw(B);
                CHECK(maporl_sample(MAPORL_DEVICE_CPU, rows.data(), B, c.V, &p, tok.data(), lp.data(), raw.data(),
                                    nullptr) == MAPORL_OK,
                      "%s", maporl_last_error());
                for (int b = 0; b < B; ++b) {
                    const int t = tok[b];
                    if (t < 0 || t >= c.V || z[(size_t)t] == -INFINITY) {
                        ++bad;
                        continue;
                    }
                    const double want_lp = (double)(z[(size_t)t] / T) - ref.lse_t,
                                 want_raw = (double)z[(size_t)t] - ref.lse_raw;
                    const double e = std::max(std::fabs(lp[b] - want_lp), std::fabs(raw[b] - want_raw));
                    worst = std::max(worst, e);
                    if (!(e <= 1e-5))
                        std::printf("  %s V=%lld offset %g T=%g token %d: lp %.9g vs %.9g, raw %.9g vs %.9g\n", level,
                                    (long long)c.V, (double)c.offset, (double)T, t, (double)lp[b], want_lp,
                                    (double)raw[b], want_raw);
                    bad += !(e <= 1e-5);
                }
            }
        CHECK(bad == 0, "%s: %d of %d draws invalid or with log-probs off float64 by more than 1e-5 (worst %.2e)",
              level, bad, (int)(sizeof kCases / sizeof kCases[0] * 4 * 4), worst);
        std::printf("  %s: worst log-prob error %.2e\n", level, worst);
    }
    maporl_set_simd("best");
}

// Two tokens far from 0 whose quotients z / T round in opposite directions by over 0.3 ulp (3e-5 at 256..512),
// the rest -Inf: the log-prob of either is off by ~1.5e-5 unless the sum is of the rounded quotients, which
// sampling.cpp's row_sum_x_t past tempered_sum_serves gives (the first pass's exact-arithmetic sum alone fails
// this).
TEST(far_from_zero_logprobs_are_those_of_the_rounded_quotients) {
    const float T = 0.7f;
    auto err = [&](float z) { return (double)(z / T) - (double)z / (double)T; };  // the quotient's rounding
    const double ulp = std::ldexp(1.0, -15);                                      // of floats in [256, 512)
    float z1 = -292.0f, z2 = -292.6f;
    while (!(err(z1) > 0.3 * ulp)) z1 = std::nextafter(z1, 0.0f);
    while (!(err(z2) < -0.3 * ulp)) z2 = std::nextafter(z2, 0.0f);
    const int V = 64, B = 64;
    std::vector<float> rows((size_t)B * V, -INFINITY);
    std::vector<int64_t> pos(B);
    for (int b = 0; b < B; ++b) {
        rows[(size_t)b * V + 3] = z1;
        rows[(size_t)b * V + 40] = z2;
        pos[(size_t)b] = b;
    }
    const double x1 = (double)(z1 / T), x2 = (double)(z2 / T), M = std::max(x1, x2);
    const double lse = M + std::log(std::exp(x1 - M) + std::exp(x2 - M));
    const char * levels[] = {"scalar", "best"};
    for (const char * level : levels) {
        CHECK(maporl_set_simd(level) == MAPORL_OK, "%s", maporl_last_error());
        maporl_sample_params p = maporl_sample_default_params();
        p.temperature_all = T;
        p.position = pos.data();
        std::vector<int32_t> tok(B);
        std::vector<float> lp(B);
        CHECK(maporl_sample(MAPORL_DEVICE_CPU, rows.data(), B, V, &p, tok.data(), lp.data(), nullptr, nullptr) ==
                  MAPORL_OK,
              "%s", maporl_last_error());
        int seen[2] = {0, 0}, bad = 0;
        for (int b = 0; b < B; ++b) {
            const bool first = tok[(size_t)b] == 3;
            CHECK(first || tok[(size_t)b] == 40, "%s: token %d", level, tok[(size_t)b]);
            ++seen[first ? 0 : 1];
            bad += !(std::fabs(lp[(size_t)b] - ((first ? x1 : x2) - lse)) <= 1e-6);
        }
        CHECK(seen[0] > 0 && seen[1] > 0 && bad == 0, "%s: draws %d / %d, %d log-probs off by more than 1e-6", level,
              seen[0], seen[1], bad);
    }
    maporl_set_simd("best");
}

// The first pass finds a NaN or +Inf logit through the sums it takes (NaN there) or, taking none (greedy), by a
// compare per vector: either way the row is invalid (token -1, NaN log-probs) wherever the bad value sits (the
// first lane, inside a vector, the last element, the padded tail), with -Inf around it or not, at every SIMD level
// and for every filter setting; the same rows without it are valid.
TEST(a_nan_or_inf_logit_anywhere_invalidates_the_row_at_every_simd_level) {
    struct Setting {
        float T;
        int k;
        float p, minp;
        bool raw;
    };
    const Setting settings[] = {{0.0f, 0, 1.0f, 0.0f, true}, {1.0f, 0, 1.0f, 0.0f, true},  {1.0f, 0, 1.0f, 0.0f, false},
                                {0.7f, 0, 1.0f, 0.0f, true}, {0.7f, 0, 1.0f, 0.0f, false}, {0.7f, 5, 1.0f, 0.0f, true},
                                {0.7f, 0, 0.9f, 0.0f, true}, {0.7f, 0, 1.0f, 0.1f, false}, {2.0f, 7, 0.5f, 0.0f, true}};
    const char * levels[] = {"scalar", "avx2", "avx512"};
    std::mt19937 g(13);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    int checked = 0, wrong = 0;
    for (const char * level : levels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (int V : {1000, 4099}) {
            for (int pos : {0, 17, V / 2, V - 1})
                for (float badv : {NAN, INFINITY})
                    for (bool masked : {false, true}) {
                        std::vector<float> z((size_t)V);
                        for (auto & v : z) v = nd(g);
                        if (masked)
                            for (int i = 1; i < V; i += 3) z[(size_t)i] = -INFINITY;
                        std::vector<float> rows = z;
                        rows.insert(rows.end(), z.begin(), z.end());
                        rows[(size_t)pos] = badv;  // row 0 bad, row 1 clean
                        for (const Setting & st : settings) {
                            maporl_sample_params p = maporl_sample_default_params();
                            p.temperature_all = st.T;
                            p.top_k_all = st.k;
                            p.top_p_all = st.p;
                            p.min_p_all = st.minp;
                            int32_t tok[2];
                            float lp[2], raw[2];
                            uint8_t valid[2];
                            CHECK(maporl_sample(MAPORL_DEVICE_CPU, rows.data(), 2, V, &p, tok, lp,
                                                st.raw ? raw : nullptr, valid) == MAPORL_OK,
                                  "%s", maporl_last_error());
                            const int32_t given[2] = {3, 3};
                            float glp[2];
                            CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CPU, rows.data(), 2, V, &p, given, glp,
                                                         nullptr) == MAPORL_OK,
                                  "%s", maporl_last_error());
                            ++checked;
                            const bool ok = valid[0] == 0 && tok[0] == -1 && std::isnan(lp[0]) && std::isnan(glp[0]) &&
                                valid[1] == 1 && tok[1] >= 0 && tok[1] < V && std::isfinite(lp[1]);
                            if (!ok && wrong++ < 5)
                                std::printf(
                                    "  %s V=%d pos %d %g masked %d T=%g k=%d p=%g minp=%g raw %d: valid %d/%d token "
                                    "%d/%d lp %g/%g\n",
                                    level, V, pos, (double)badv, (int)masked, (double)st.T, st.k, (double)st.p,
                                    (double)st.minp, (int)st.raw, valid[0], valid[1], tok[0], tok[1], (double)lp[0],
                                    (double)lp[1]);
                        }
                    }
        }
    }
    maporl_set_simd("best");
    CHECK(wrong == 0, "%d of %d bad rows not flagged (or clean rows flagged)", wrong, checked);
}

// The vector races prune with bars (best key - 17.34 less 8 ulps, and a noise bound per lane) that must never
// drop the winner, also where an ulp of the keys outgrows their slack (|x| past 1e5): far from 0 the AVX2 and
// AVX-512 races give the scalar race's tokens (which computes every key above the floor), flat rows and peaked.
TEST(the_vector_races_are_the_scalar_race_far_from_zero) {
    const int B = 32, V = 20011;
    std::mt19937 g(14);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    int checked = 0, diff = 0;
    for (float offset : {0.0f, 300.0f, 1.0e5f, -3.0e5f, 4.0e6f})
        for (float T : {0.5f, 1.0f, 1.7f}) {
            std::vector<float> z((size_t)B * V);
            for (auto & v : z) v = nd(g) + offset;
            for (int b = 0; b < B; b += 2)  // every other row peaked
                for (int j = 0; j < 16; ++j) z[(size_t)b * V + g() % V] += 8.0f;
            std::vector<int64_t> pos(B);
            for (int b = 0; b < B; ++b) pos[(size_t)b] = (int64_t)(g() % 1000000);
            maporl_sample_params p = maporl_sample_default_params();
            p.temperature_all = T;
            p.seed_all = g();
            p.position = pos.data();
            std::vector<int32_t> ref(B), tok(B);
            CHECK(maporl_set_simd("scalar") == MAPORL_OK, "%s", maporl_last_error());
            CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, ref.data(), nullptr, nullptr, nullptr) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            for (const char * level : {"avx2", "avx512"}) {
                if (maporl_set_simd(level) != MAPORL_OK) continue;
                CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), nullptr, nullptr, nullptr) ==
                          MAPORL_OK,
                      "%s", maporl_last_error());
                for (int b = 0; b < B; ++b) {
                    ++checked;
                    if (tok[(size_t)b] != ref[(size_t)b] && diff++ < 5)
                        std::printf("  %s offset %g T=%g row %d: token %d, scalar %d\n", level, (double)offset,
                                    (double)T, b, tok[(size_t)b], ref[(size_t)b]);
                }
            }
        }
    maporl_set_simd("best");
    CHECK(diff == 0, "%d of %d vector draws differ from the scalar race", diff, checked);
}

}  // namespace

int main() { return check::run_all("test_sampling_logprobs"); }
