// test_sampling.cpp: the sampler against a float64 sort-based reference written here (support of top-k / top-p /
// min-p in both filter orders, renormalised probabilities, log-probs), chi-square tests of the sampled
// frequencies, Philox known answers, determinism (thread count, batch composition and order, SIMD level),
// invalid rows, greedy, and errors. `test_sampling --bench` times B=64, V=151936 (for scripts/device-check.sh).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/det_exp.h"
#include "maporl.h"
#include "native/core/philox.h"
#include "native/sampling/sampling_radix.h"

namespace {

struct Filter {
    double T;
    int k;
    double p, minp;
    int order;
};

struct RefRow {
    std::vector<double> prob;  // renormalised over the support; 0 outside
    std::vector<char> amb;     // membership within rounding of a boundary (either answer is right)
    bool any_amb = false;
};

// Float64, sort-based: order by (z desc, index asc); top-k; top-p prefix (kept while the mass ranked before
// is < p * total, total over the top-k set for top-k-first or over everything for joint); min-p on e / e_max.
RefRow reference(const float * z, int V, const Filter & f) {
    RefRow r;
    r.prob.assign(V, 0.0);
    r.amb.assign(V, 0);
    std::vector<double> e(V);
    double M = -INFINITY;
    for (int i = 0; i < V; ++i) M = std::max(M, (double)z[i] / f.T);
    for (int i = 0; i < V; ++i) e[i] = z[i] == -INFINITY ? 0.0 : std::exp((double)z[i] / f.T - M);
    std::vector<int> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    std::vector<char> in(V, 0);
    const bool has_k = f.k > 0 && f.k < V;
    const int n = has_k ? f.k : V;
    for (int j = 0; j < n; ++j) in[idx[j]] = z[idx[j]] > -INFINITY;
    if (f.p > 0 && f.p < 1) {
        double total = 0;
        for (int i = 0; i < V; ++i) total += (has_k && f.order == 0) ? (in[i] ? e[i] : 0.0) : e[i];
        const double target = f.p * total;
        double before = 0;
        for (int j = 0; j < n; ++j) {
            const int i = idx[j];
            if (!in[i]) continue;
            if (std::fabs(before - target) <= 1e-6 * total) {
                r.amb[i] = 1;
                r.any_amb = true;
            }
            if (!(before < target)) in[i] = 0;
            before += e[i];
        }
    }
    if (f.minp > 0)
        for (int i = 0; i < V; ++i) {
            if (std::fabs(e[i] - f.minp) <= 1e-6) {
                r.amb[i] = 1;
                r.any_amb = true;
            }
            if (e[i] < f.minp) in[i] = 0;
        }
    double S = 0;
    for (int i = 0; i < V; ++i) S += in[i] ? e[i] : 0.0;
    for (int i = 0; i < V; ++i) r.prob[i] = in[i] ? e[i] / S : 0.0;
    return r;
}

maporl_sample_params params_of(const Filter & f, uint64_t seed) {
    maporl_sample_params p = maporl_sample_default_params();
    p.temperature_all = (float)f.T;
    p.top_k_all = f.k;
    p.top_p_all = (float)f.p;
    p.min_p_all = (float)f.minp;
    p.seed_all = seed;
    p.filter_order = (maporl_filter_order)f.order;
    return p;
}

TEST(philox_known_answers) {
    const maporl::Philox4 a = maporl::philox4x32_10(0, 0, 0, 0, 0, 0);
    CHECK(a.v[0] == 0x6627e8d5u && a.v[1] == 0xe169c58du && a.v[2] == 0xbc57ac4cu && a.v[3] == 0x9b00dbd8u,
          "zero vector");
    const uint32_t f = 0xffffffffu;
    const maporl::Philox4 b = maporl::philox4x32_10(f, f, f, f, f, f);
    CHECK(b.v[0] == 0x408f276du && b.v[1] == 0x41c83b0eu && b.v[2] == 0xa20bc7c6u && b.v[3] == 0x6d5451fdu,
          "ones vector");
    // det_log against libm over the range the Gumbel transform uses.
    double worst = 0;
    for (float x = 3e-8f; x < 20.0f; x *= 1.0137f)
        worst = std::max(worst, std::fabs(maporl::det_log(x) - std::log((double)x)));
    CHECK(worst < 4e-6, "det_log max abs error %g", worst);
}

TEST(samples_lie_in_the_reference_support_and_logprobs_match) {
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    int checked = 0, bad = 0, lpbad = 0;
    for (int trial = 0; trial < 600; ++trial) {
        const int V = trial % 7 == 0 ? 1 : 1 + (int)(g() % (trial % 3 == 0 ? 300 : 40));
        std::vector<float> z(V);
        for (auto & v : z) v = nd(g);
        if (V > 3 && trial % 4 == 0) {  // ties, including at the boundary of every filter
            const float t = z[g() % V];
            for (int i = 0; i < V; i += 2) z[i] = t;
        }
        if (V > 2 && trial % 5 == 0) z[g() % V] = -INFINITY;
        Filter f;
        f.T = (double)(0.3 + 1.7 * ((g() % 1000) / 1000.0));
        f.k = trial % 3 == 0 ? 0 : (int)(g() % (uint32_t)(V + 3));                    // k >= V included
        f.p = trial % 4 == 1 ? 1.0 : trial % 11 == 0 ? 1e-9 : (g() % 1000) / 1000.0;  // p = 1 and tiny p
        f.minp = trial % 2 ? 0.0 : (g() % 500) / 1000.0;
        f.order = (int)(g() % 2);
        const RefRow ref = reference(z.data(), V, f);
        const int B = 64;
        std::vector<float> rows((size_t)B * V);
        std::vector<int64_t> pos(B);
        for (int b = 0; b < B; ++b) {
            std::copy(z.begin(), z.end(), rows.begin() + (size_t)b * V);
            pos[b] = b;
        }
        maporl_sample_params p = params_of(f, 1000 + trial);
        p.position = pos.data();
        std::vector<int32_t> tok(B);
        std::vector<float> lp(B), raw(B);
        std::vector<uint8_t> valid(B);
        CHECK(maporl_sample(MAPORL_DEVICE_CPU, rows.data(), B, V, &p, tok.data(), lp.data(), raw.data(),
                            valid.data()) == MAPORL_OK,
              "%s", maporl_last_error());
        double M = -INFINITY;
        for (float v : z) M = std::max(M, (double)v);
        double S = 0;
        for (float v : z) S += std::exp((double)v - M);
        for (int b = 0; b < B; ++b) {
            ++checked;
            const int t = tok[b];
            if (!valid[b] || t < 0 || t >= V || (ref.prob[t] == 0.0 && !ref.amb[t])) {
                ++bad;
                continue;
            }
            if (!ref.any_amb) lpbad += !(std::fabs(lp[b] - std::log(ref.prob[t])) <= 1e-5);
            lpbad += !(std::fabs(raw[b] - ((double)z[t] - M - std::log(S))) <= 1e-5);
        }
    }
    CHECK(bad == 0, "%d of %d samples outside the support", bad, checked);
    CHECK(lpbad == 0, "%d log-probs differ from the reference by more than 1e-5", lpbad);
}

// Chi-square critical value at p = 1e-3 (Wilson-Hilferty).
double chi2_critical(int df) {
    const double z = 3.0902, a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

TEST(frequencies_pass_chi_square_for_every_filter_and_temperature) {
    const int V = 8, N = 200000;
    const float z[V] = {1.2f, -0.3f, 0.7f, 2.0f, 0.7f, -1.5f, 0.1f, 1.9f};
    std::vector<float> rows((size_t)N * V);
    for (int n = 0; n < N; ++n) std::copy(z, z + V, rows.begin() + (size_t)n * V);
    std::vector<int64_t> pos(N);
    std::iota(pos.begin(), pos.end(), 0);
    const Filter filters[] = {{1, 0, 1, 0, 0},   {1, 3, 1, 0, 0},   {1, 0, 0.7, 0, 0},  {1, 0, 1, 0.2, 0},
                              {1, 5, 0.8, 0, 0}, {1, 5, 0.8, 0, 1}, {1, 4, 0.9, 0.1, 0}};
    std::vector<int32_t> tok(N);
    for (Filter f : filters)
        for (double T : {0.3, 1.0, 2.0}) {
            f.T = T;
            maporl_sample_params p = params_of(f, 42);
            p.position = pos.data();
            CHECK(maporl_sample(MAPORL_DEVICE_CPU, rows.data(), N, V, &p, tok.data(), nullptr, nullptr, nullptr) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            const RefRow ref = reference(z, V, f);
            std::vector<double> count(V, 0.0);
            int outside = 0;
            for (int32_t t : tok) {
                if (t < 0 || t >= V || ref.prob[t] == 0.0)
                    ++outside;
                else
                    count[t] += 1;
            }
            // Bins with an expected count under 5 are merged.
            double chi = 0, small_obs = 0, small_exp = 0;
            int bins = 0;
            for (int i = 0; i < V; ++i) {
                const double ex = ref.prob[i] * N;
                if (ex == 0) continue;
                if (ex < 5) {
                    small_obs += count[i];
                    small_exp += ex;
                    continue;
                }
                chi += (count[i] - ex) * (count[i] - ex) / ex;
                ++bins;
            }
            if (small_exp > 0) {
                chi += (small_obs - small_exp) * (small_obs - small_exp) / std::max(small_exp, 1e-9);
                ++bins;
            }
            const int df = std::max(1, bins - 1);
            CHECK(outside == 0 && (bins <= 1 || chi < chi2_critical(df)),
                  "T=%g k=%d p=%g minp=%g order=%d: chi2 %.2f (df %d, critical %.2f), %d outside", T, f.k, f.p, f.minp,
                  f.order, chi, df, chi2_critical(df), outside);
        }
}

TEST(same_seed_and_position_give_the_same_token_everywhere) {
    std::mt19937 g(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const int B = 48, V = 1000;
    std::vector<float> z((size_t)B * V);
    for (auto & v : z) v = nd(g);
    std::vector<uint64_t> seed(B);
    std::vector<int64_t> pos(B);
    std::vector<float> temp(B), topp(B);
    std::vector<int32_t> topk(B);
    for (int b = 0; b < B; ++b) {
        seed[b] = ((uint64_t)g() << 32) | g();
        pos[b] = (int64_t)(g() % 100000);
        temp[b] = b % 6 == 0 ? 0.0f : 0.5f + (b % 4) * 0.5f;
        topk[b] = b % 3 == 0 ? 0 : 1 + b * 7;
        topp[b] = b % 2 ? 1.0f : 0.85f;
    }
    maporl_sample_params p = maporl_sample_default_params();
    p.seed = seed.data();
    p.position = pos.data();
    p.temperature = temp.data();
    p.top_k = topk.data();
    p.top_p = topp.data();
    std::vector<int32_t> ref(B), tok(B);
    maporl_set_threads(1);
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, ref.data(), nullptr, nullptr, nullptr) == MAPORL_OK,
          "%s", maporl_last_error());
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (int threads : {1, 3}) {
            maporl_set_threads(threads);
            CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), nullptr, nullptr, nullptr) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            CHECK(tok == ref, "%s threads %d: tokens differ", level, threads);
        }
    }
    maporl_set_simd("best");
    maporl_set_threads(0);
    // Each row alone, and the batch reversed: the same token for the same (row, seed, position).
    std::vector<int> bad;
    for (int b = 0; b < B; ++b) {
        maporl_sample_params q = maporl_sample_default_params();
        q.seed_all = seed[b];
        q.position_all = pos[b];
        q.temperature_all = temp[b];
        q.top_k_all = topk[b];
        q.top_p_all = topp[b];
        int32_t t = -2;
        maporl_sample(MAPORL_DEVICE_CPU, z.data() + (size_t)b * V, 1, V, &q, &t, nullptr, nullptr, nullptr);
        if (t != ref[b]) bad.push_back(b);
    }
    CHECK(bad.empty(), "%zu rows differ when sampled alone", bad.size());
    std::vector<float> zr((size_t)B * V);
    std::vector<uint64_t> sr(B);
    std::vector<int64_t> pr(B);
    std::vector<float> tr(B), ppr(B);
    std::vector<int32_t> kr(B);
    for (int b = 0; b < B; ++b) {
        const int s = B - 1 - b;
        std::copy(z.begin() + (size_t)s * V, z.begin() + (size_t)(s + 1) * V, zr.begin() + (size_t)b * V);
        sr[b] = seed[s];
        pr[b] = pos[s];
        tr[b] = temp[s];
        kr[b] = topk[s];
        ppr[b] = topp[s];
    }
    p.seed = sr.data();
    p.position = pr.data();
    p.temperature = tr.data();
    p.top_k = kr.data();
    p.top_p = ppr.data();
    maporl_sample(MAPORL_DEVICE_CPU, zr.data(), B, V, &p, tok.data(), nullptr, nullptr, nullptr);
    int diff = 0;
    for (int b = 0; b < B; ++b) diff += tok[b] != ref[B - 1 - b];
    CHECK(diff == 0, "%d rows differ in reversed order", diff);
}

// The unfiltered vector race takes an LM-like row (a flat normal tail and a few raised tokens) in two heats over
// a candidate list (the head near the max, then the rest above the raised bar); the scalar race computes every
// key above the floor. Same tokens, for many seeds, temperatures and head sizes (0 raised tokens included), and
// log-probs within 1e-5 of float64 on both paths.
TEST(unfiltered_race_on_peaked_rows_matches_the_scalar_race) {
    std::mt19937 g(11);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    const int B = 96, V = 30011;
    std::vector<float> z((size_t)B * V);
    for (auto & v : z) v = nd(g);
    for (int b = 0; b < B; ++b)
        for (int j = 0; j < (b % 4) * 16; ++j) z[(size_t)b * V + (size_t)(ud(g) * V)] += 6.0f + 8.0f * ud(g);
    std::vector<uint64_t> seed(B);
    std::vector<int64_t> pos(B);
    std::vector<float> temp(B);
    for (int b = 0; b < B; ++b) {
        seed[b] = ((uint64_t)g() << 32) | g();
        pos[b] = (int64_t)(g() % 100000);
        temp[b] = b % 3 == 0 ? 0.7f : (b % 3 == 1 ? 1.0f : 1.5f);
    }
    maporl_sample_params p = maporl_sample_default_params();
    p.seed = seed.data();
    p.position = pos.data();
    p.temperature = temp.data();
    std::vector<int32_t> ref(B), tok(B);
    std::vector<float> lref(B), lp(B);
    maporl_set_simd("scalar");
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, ref.data(), lref.data(), nullptr, nullptr) == MAPORL_OK,
          "%s", maporl_last_error());
    for (const char * level : {"avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (int rep = 0; rep < 3; ++rep) {  // three positions per row
            for (int b = 0; b < B; ++b) pos[b] += 7919;
            maporl_set_simd("scalar");
            maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, ref.data(), lref.data(), nullptr, nullptr);
            maporl_set_simd(level);
            maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), lp.data(), nullptr, nullptr);
            int diff = 0;
            int ldiff = 0;
            for (int b = 0; b < B; ++b) {
                diff += tok[b] != ref[b];
                // The log-prob against a float64 softmax of the row (the float lane sums of a 30k row used to
                // drift past 1e-5: 1.7e-4 on the scalar path).
                const float * r = z.data() + (size_t)b * V;
                double M = -INFINITY, S = 0.0;
                for (int i = 0; i < V; ++i) M = std::max(M, (double)(r[i] / temp[b]));
                for (int i = 0; i < V; ++i) S += std::exp((double)(r[i] / temp[b]) - M);
                const double want = (double)(r[tok[b]] / temp[b]) - M - std::log(S);
                ldiff += std::fabs(lp[b] - want) > 1e-5 || std::fabs(lref[b] - want) > 1e-5;
            }
            CHECK(ldiff == 0,
                  "%s: %d of %d log-probs (vector or scalar path) off the float64 reference by more than 1e-5", level,
                  ldiff, B);
            CHECK(diff == 0, "%s: %d of %d rows differ from the scalar race", level, diff, B);
        }
    }
    maporl_set_simd("best");
}

// Regression: the top 24-bit value used to round to u = 1 in float, where the noise blew up to ~88 (det_log(1) is
// not exactly 0), so an element far below the floor could win on the vector paths, which give noise to whole
// vectors. Element 10 at seed 7060, position 5 draws that value (found by search).
TEST(the_top_random_value_never_breaks_the_noise_bound) {
    CHECK((maporl::philox_bits(7060, 5, 10) >> 8) == 0xFFFFFFu, "the search's element draws the top value");
    CHECK(maporl::uniform24(0xFFFFFFFFu) < 1.0f && maporl::uniform24(0xFFFFFFFFu) > maporl::uniform24(0xFFFFFEFFu),
          "uniform24 top");
    const float g = maporl::gumbel(7060, 5, 10);
    CHECK(std::isfinite(g) && g <= 17.34f, "noise %g", (double)g);
    const int64_t V = 103;
    std::vector<float> z((size_t)V);
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(-8.0f, 5.0f);
    for (auto & x : z) x = u(gen);
    z[26] = 13.0f;   // the row's max
    z[10] = -10.0f;  // more than kGumbelSpan below it: can never win
    maporl_sample_params p = maporl_sample_default_params();
    p.seed_all = 7060;
    p.position_all = 5;
    int32_t want = -2;
    for (const char * lvl : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(lvl) != MAPORL_OK) continue;  // a level this CPU lacks
        int32_t tok = -1;
        CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &tok, nullptr, nullptr, nullptr) == MAPORL_OK, "%s",
              maporl_last_error());
        CHECK(tok != 10, "%s drew the element below the floor", lvl);
        if (want == -2) want = tok;
        CHECK(tok == want, "%s: token %d, scalar %d", lvl, (int)tok, (int)want);
    }
    maporl_set_simd("best");
}

TEST(invalid_rows_greedy_and_token_logprobs) {
    const int V = 6;
    std::vector<float> z = {0.f,       1.f,       3.f,       3.f,       -1.f,      2.f,        // greedy tie -> 2
                            0.f,       NAN,       1.f,       1.f,       1.f,       1.f,        // NaN
                            -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // all -Inf
                            0.f,       INFINITY,  1.f,       1.f,       1.f,       1.f};       // +Inf
    maporl_sample_params p = maporl_sample_default_params();
    p.temperature_all = 0.0f;
    std::vector<int32_t> tok(4);
    std::vector<float> lp(4), raw(4);
    std::vector<uint8_t> valid(4);
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), 4, V, &p, tok.data(), lp.data(), raw.data(), valid.data()) ==
              MAPORL_OK,
          "%s", maporl_last_error());
    CHECK(tok[0] == 2 && valid[0] == 1 && lp[0] == 0.0f, "greedy: token %d lp %g", tok[0], lp[0]);
    for (int b = 1; b < 4; ++b)
        CHECK(tok[b] == -1 && valid[b] == 0 && std::isnan(lp[b]) && std::isnan(raw[b]), "row %d: token %d valid %d", b,
              tok[b], valid[b]);
    // Token log-probs: outside the top-k support -> -Inf; inside: the sampler's value.
    p = maporl_sample_default_params();
    p.top_k_all = 2;
    p.seed_all = 5;
    int32_t t = -1;
    float slp = 0, sraw = 0;
    maporl_sample(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &t, &slp, &sraw, nullptr);
    float glp = 0, graw = 0;
    CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &t, &glp, &graw) == MAPORL_OK, "%s",
          maporl_last_error());
    CHECK(glp == slp && graw == sraw, "sample_logprobs %g %g vs sample %g %g", glp, graw, slp, sraw);
    const int32_t outside = 5;
    maporl_sample_logprobs(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &outside, &glp, &graw);
    CHECK(glp == -INFINITY && std::isfinite(graw), "outside the support: %g", glp);
    const int32_t oob = 6;
    CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &oob, &glp, &graw) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "tokens") != nullptr,
          "%s", maporl_last_error());
    // Parameter errors name the field and the row.
    std::vector<float> topp = {0.5f, 1.5f};
    maporl_sample_params q = maporl_sample_default_params();
    q.top_p = topp.data();
    std::vector<float> z2(2 * V, 0.0f);
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z2.data(), 2, V, &q, tok.data(), nullptr, nullptr, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "params.top_p[1]") != nullptr,
          "%s", maporl_last_error());
    q = maporl_sample_default_params();
    q.temperature_all = NAN;
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z2.data(), 2, V, &q, tok.data(), nullptr, nullptr, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "params.temperature") != nullptr,
          "%s", maporl_last_error());
}

// Four equal logits and p = 0.5: the mass before the third is exactly 0.5, not < 0.5, so the support is exactly
// the first two indices (the total order puts the lower index first). With top-k 2 first and p = 0.5, the mass
// before the second is exactly half of the top-k set: only index 0 remains.
TEST(top_p_boundary_with_exact_ties) {
    const int V = 4, N = 4000;
    std::vector<float> z((size_t)N * V, 0.75f);
    std::vector<int64_t> pos(N);
    std::iota(pos.begin(), pos.end(), 0);
    for (const Filter f : {Filter{1.0, 0, 0.5, 0, 0}, Filter{0.5, 0, 0.5, 0, 1}, Filter{1.0, 2, 0.5, 0, 0}}) {
        maporl_sample_params p = params_of(f, 77);
        p.position = pos.data();
        std::vector<int32_t> tok(N);
        std::vector<float> lp(N);
        CHECK(
            maporl_sample(MAPORL_DEVICE_CPU, z.data(), N, V, &p, tok.data(), lp.data(), nullptr, nullptr) == MAPORL_OK,
            "%s", maporl_last_error());
        int seen[V] = {0, 0, 0, 0};
        for (int32_t t : tok) seen[t >= 0 && t < V ? t : 0]++;
        const bool one = f.k == 2;
        CHECK(seen[2] == 0 && seen[3] == 0 && (one ? seen[1] == 0 && seen[0] == N : seen[0] > N / 3 && seen[1] > N / 3),
              "k=%d p=%g: counts %d %d %d %d", f.k, f.p, seen[0], seen[1], seen[2], seen[3]);
        CHECK(std::fabs(lp[0] - (one ? 0.0f : std::log(0.5f))) < 1e-6, "log-prob %g", lp[0]);
    }
}

TEST(top_p_fallback_beyond_the_window_is_exact) {
    // Flat logits at a high temperature: the top-1024 window holds < 0.9 of the mass, so every finite element is
    // ranked; the support must still be the exact prefix.
    const int V = 5000, B = 32;
    std::mt19937 g(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> z((size_t)B * V);
    for (auto & v : z) v = u(g);
    Filter f{2.0, 0, 0.9, 0, 0};
    maporl_sample_params p = params_of(f, 9);
    std::vector<int64_t> pos(B);
    std::iota(pos.begin(), pos.end(), 0);
    p.position = pos.data();
    std::vector<int32_t> tok(B);
    std::vector<float> lp(B);
    CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), lp.data(), nullptr, nullptr) == MAPORL_OK,
          "%s", maporl_last_error());
    int bad = 0;
    for (int b = 0; b < B; ++b) {
        const RefRow r = reference(z.data() + (size_t)b * V, V, f);
        bad += r.prob[tok[b]] == 0.0 && !r.amb[tok[b]];
        bad += !r.any_amb && !(std::fabs(lp[b] - std::log(r.prob[tok[b]])) <= 1e-5);
    }
    CHECK(bad == 0, "%d rows wrong", bad);
}

// With a GPU: CUDA against the CPU on random rows and every filter (tokens equal, log-probs to 1e-5); a
// boundary decided within float rounding may go either way, so a handful of differences in 4800 rows would be
// tolerated (none are expected). Without one: the status says so.
TEST(cuda_matches_cpu_or_reports_no_device) {
    int count = 0;
    CHECK(maporl_cuda_device_count(&count) == MAPORL_OK, "%s", maporl_last_error());
    const int B = 96, V = 777;
    std::vector<float> z((size_t)B * V);
    std::mt19937 g(21);
    std::normal_distribution<float> nd(0.0f, 2.5f);
    for (auto & v : z) v = nd(g);
    std::vector<int32_t> tok(B);
    if (count == 0) {
        const maporl_sample_params p = maporl_sample_default_params();
        const maporl_status s =
            maporl_sample(MAPORL_DEVICE_CUDA, z.data(), B, V, &p, tok.data(), nullptr, nullptr, nullptr);
        CHECK(s == MAPORL_ERR_NO_DEVICE || s == MAPORL_ERR_INVALID_ARG, "status %d", (int)s);
        std::printf("  (no CUDA device: compiled=%d; CUDA-vs-CPU comparison not run)\n", maporl_cuda_compiled());
        return;
    }
    void *dz, *dt, *dl, *dr, *dv, *dp;
    maporl_device_malloc(4 * z.size(), &dz);
    maporl_device_malloc(4 * B, &dt);
    maporl_device_malloc(4 * B, &dl);
    maporl_device_malloc(4 * B, &dr);
    maporl_device_malloc(B, &dv);
    maporl_device_malloc(8 * B, &dp);
    maporl_memcpy_to_device(dz, z.data(), 4 * z.size());
    std::vector<int64_t> pos(B);
    std::iota(pos.begin(), pos.end(), 1000);
    maporl_memcpy_to_device(dp, pos.data(), 8 * B);
    int diff = 0, lpdiff = 0, rows = 0;
    const Filter filters[] = {{1, 0, 1, 0, 0},      {0.7, 50, 1, 0, 0},      {0.7, 50, 0.9, 0, 0}, {1.3, 0, 0.8, 0, 0},
                              {0.9, 0, 1, 0.05, 0}, {1.0, 20, 0.7, 0.02, 1}, {0.0, 0, 1, 0, 0}};
    for (const Filter & f : filters)
        for (uint64_t seed = 0; seed < 4; ++seed) {
            maporl_sample_params p = params_of(f, seed);
            std::vector<float> lp(B), lp2(B);
            std::vector<int32_t> t2(B);
            p.position = pos.data();
            CHECK(maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), lp.data(), nullptr, nullptr) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            p.position = (const int64_t *)dp;
            CHECK(maporl_sample(MAPORL_DEVICE_CUDA, (float *)dz, B, V, &p, (int32_t *)dt, (float *)dl, (float *)dr,
                                (uint8_t *)dv) == MAPORL_OK,
                  "%s", maporl_last_error());
            maporl_memcpy_to_host(t2.data(), dt, 4 * B);
            maporl_memcpy_to_host(lp2.data(), dl, 4 * B);
            for (int b = 0; b < B; ++b) {
                ++rows;
                diff += t2[b] != tok[b];
                lpdiff += t2[b] == tok[b] && !(std::fabs(lp2[b] - lp[b]) <= 1e-5 + 1e-5 * std::fabs(lp[b]));
            }
        }
    CHECK(diff <= 3 && lpdiff == 0, "CUDA vs CPU: %d of %d tokens differ, %d log-probs", diff, rows, lpdiff);
    for (void * q : {dz, dt, dl, dr, dv, dp}) maporl_device_free(q);
}

// Small B with a large vocabulary takes CUDA's vocabulary split (several blocks per row; top-k / top-p by radix
// selection across the blocks): the same tokens as the CPU (ties, -Inf and a row of heavy ties included), log-probs
// to 1e-5, and the given-token path; B = 1 too.
TEST(cuda_vocabulary_split_matches_cpu_or_reports_no_device) {
    int count = 0;
    maporl_cuda_device_count(&count);
    const int B = 4, V = 50000;
    std::vector<float> z((size_t)B * V);
    std::mt19937 g(5);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (auto & v : z) v = nd(g);
    for (int i = 0; i < V; i += 7) z[(size_t)V + i] = -INFINITY;  // row 1: a seventh of the vocabulary impossible
    z[(size_t)2 * V + 17] = z[(size_t)2 * V + 40001] = 30.0f;     // row 2: a tie for the max far apart
    for (int i = 0; i < V; ++i)
        z[(size_t)3 * V + i] = std::round(z[(size_t)3 * V + i] * 2.0f) * 0.5f;  // row 3: heavy ties
    std::vector<int32_t> tok(B), t2(B);
    if (count == 0) {
        const maporl_sample_params p = maporl_sample_default_params();
        CHECK(maporl_sample(MAPORL_DEVICE_CUDA, z.data(), B, V, &p, tok.data(), nullptr, nullptr, nullptr) ==
                  MAPORL_ERR_NO_DEVICE,
              "expected NO_DEVICE without a GPU");
        return;
    }
    void *dz, *dt, *dl, *dr, *dg;
    maporl_device_malloc(4 * z.size(), &dz);
    maporl_device_malloc(4 * B, &dt);
    maporl_device_malloc(4 * B, &dl);
    maporl_device_malloc(4 * B, &dr);
    maporl_device_malloc(4 * B, &dg);
    maporl_memcpy_to_device(dz, z.data(), 4 * z.size());
    int diff = 0, lpdiff = 0;
    const Filter filters[] = {{1, 0, 1, 0, 0},         {0.7, 0, 1, 0, 0},    {1.6, 0, 1, 0.01, 0},
                              {0.0, 0, 1, 0, 0},       {0.7, 50, 0.9, 0, 0}, {0.7, 50, 0.9, 0, 1},
                              {1.3, 0, 0.5, 0, 0},     {1, 1, 1, 0, 0},      {1, 1000, 1, 0, 0},
                              {0.5, 7, 0.95, 0.02, 0}, {2, 0, 0.001, 0, 0},  {1, 40000, 0.999, 0, 1}};
    int rows = 0, batch_diff = 0;
    void * d64;  // the 4 rows repeated 16 times
    maporl_device_malloc(4 * (size_t)64 * V, &d64);
    maporl_device_free(dt);
    maporl_device_malloc(4 * 64, &dt);
    for (int r = 0; r < 64; ++r)
        maporl_memcpy_to_device((float *)d64 + (size_t)r * V, z.data() + (size_t)(r % B) * V, 4 * (size_t)V);
    for (const Filter & f : filters)
        for (uint64_t seed = 0; seed < 8; ++seed) {
            for (const int Bn : {B, 1}) {  // the whole batch, and row 3 alone (B = 1: the most slices)
                const float * zb = Bn == B ? z.data() : z.data() + (size_t)3 * V;
                void * dzb = Bn == B ? dz : (void *)((float *)dz + (size_t)3 * V);
                rows += Bn;
                const maporl_sample_params p = params_of(f, seed);
                std::vector<float> lp(B), lp2(B), raw(B), raw2(B);
                CHECK(maporl_sample(MAPORL_DEVICE_CPU, zb, Bn, V, &p, tok.data(), lp.data(), raw.data(), nullptr) ==
                          MAPORL_OK,
                      "%s", maporl_last_error());
                CHECK(maporl_sample(MAPORL_DEVICE_CUDA, (float *)dzb, Bn, V, &p, (int32_t *)dt, (float *)dl,
                                    (float *)dr, nullptr) == MAPORL_OK,
                      "%s", maporl_last_error());
                maporl_memcpy_to_host(t2.data(), dt, 4 * Bn);
                maporl_memcpy_to_host(lp2.data(), dl, 4 * Bn);
                maporl_memcpy_to_host(raw2.data(), dr, 4 * Bn);
                for (int b = 0; b < Bn; ++b) {
                    diff += t2[b] != tok[b];
                    lpdiff += t2[b] == tok[b] &&
                        !(std::fabs(lp2[b] - lp[b]) <= 1e-5 + 1e-5 * std::fabs(lp[b]) &&
                          std::fabs(raw2[b] - raw[b]) <= 1e-5 + 1e-5 * std::fabs(raw[b]));
                }
                // The same tokens scored as given tokens.
                maporl_memcpy_to_device(dg, tok.data(), 4 * Bn);
                CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CUDA, (float *)dzb, Bn, V, &p, (const int32_t *)dg,
                                             (float *)dl, nullptr) == MAPORL_OK,
                      "%s", maporl_last_error());
                maporl_memcpy_to_host(lp2.data(), dl, 4 * Bn);
                for (int b = 0; b < Bn; ++b) lpdiff += !(std::fabs(lp2[b] - lp[b]) <= 1e-5 + 1e-5 * std::fabs(lp[b]));
                if (Bn != B) continue;
                // The same rows inside a batch of 64 (one slice per row): exactly the same CUDA tokens (the thresholds come
                // from integer sums, so they cannot depend on how the row was cut), the CPU's or not.
                maporl_memcpy_to_host(t2.data(), dt, 4 * B);
                std::vector<int32_t> t64(64);
                CHECK(maporl_sample(MAPORL_DEVICE_CUDA, (float *)d64, 64, V, &p, (int32_t *)dt, nullptr, nullptr,
                                    nullptr) == MAPORL_OK,
                      "%s", maporl_last_error());
                maporl_memcpy_to_host(t64.data(), dt, 4 * 64);
                for (int b = 0; b < 64; ++b) batch_diff += t64[b] != t2[b % B];
            }
        }
    CHECK(diff == 0 && lpdiff == 0, "vocabulary split vs CPU: %d of %d tokens differ, %d log-probs", diff, rows,
          lpdiff);
    CHECK(batch_diff == 0, "CUDA tokens depend on the batch: %d differ between B = %d and B = 64", batch_diff, B);
    // Top-p cuts placed on the masses' rounding, row 0 alone (the most slices), both filter orders with top-k 100:
    // p = (fixed-point mass of the first j + 1 tokens in the sampler's order) / total, as a float, and its float
    // neighbours. The tokens on either side of the cut must be in or out of the support on both devices alike.
    std::vector<int64_t> order((size_t)V);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 101, order.end(), [&](int64_t a, int64_t c) {
        return z[(size_t)a] != z[(size_t)c] ? z[(size_t)a] > z[(size_t)c] : a < c;
    });
    float m0 = -INFINITY;
    for (int i = 0; i < V; ++i) m0 = std::max(m0, z[(size_t)i]);
    const double scale = maporl::radix_scale(V);
    auto weight = [&](int64_t i) { return maporl::radix_fixed(maporl::det_exp_nonpos(z[(size_t)i] - m0), scale); };
    int cut_cases = 0, cut_diff = 0;
    for (const maporl_filter_order fo : {MAPORL_FILTER_TOP_K_FIRST, MAPORL_FILTER_JOINT}) {
        unsigned long long total = 0, cum = 0;
        if (fo == MAPORL_FILTER_TOP_K_FIRST)
            for (int j = 0; j < 100; ++j) total += weight(order[(size_t)j]);
        else
            for (int i = 0; i < V; ++i) total += weight(i);
        for (int j = 0; j < 40; ++j) {
            cum += weight(order[(size_t)j]);
            const float p0 = (float)((double)cum / (double)total);
            for (const float pv : {std::nextafter(p0, 0.0f), p0, std::nextafter(p0, 1.0f)}) {
                maporl_sample_params p = maporl_sample_default_params();
                p.top_k_all = 100;
                p.top_p_all = pv;
                p.filter_order = fo;
                for (const int64_t t : {order[(size_t)j], order[(size_t)j + 1]}) {
                    const int32_t ti = (int32_t)t;
                    float lc = 0, lg = 0;
                    maporl_memcpy_to_device(dg, &ti, 4);
                    CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CPU, z.data(), 1, V, &p, &ti, &lc, nullptr) == MAPORL_OK,
                          "%s", maporl_last_error());
                    CHECK(maporl_sample_logprobs(MAPORL_DEVICE_CUDA, (float *)dz, 1, V, &p, (const int32_t *)dg,
                                                 (float *)dl, nullptr) == MAPORL_OK,
                          "%s", maporl_last_error());
                    maporl_memcpy_to_host(&lg, dl, 4);
                    ++cut_cases;
                    cut_diff += (lc > -INFINITY) != (lg > -INFINITY);
                }
            }
        }
    }
    CHECK(cut_diff == 0, "top-p cuts on the rounding: %d of %d tokens in the support on one device only", cut_diff,
          cut_cases);
    for (void * q : {dz, dt, dl, dr, dg, d64}) maporl_device_free(q);
}

}  // namespace

static void bench() {
    const int64_t B = 64, V = 151936;
    std::mt19937 g(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> z((size_t)(B * V));
    for (auto & v : z) v = nd(g);
    std::vector<int32_t> tok(B);
    std::vector<float> lp(B), raw(B);
    for (int filtered = 0; filtered < 2; ++filtered) {
        maporl_sample_params p = maporl_sample_default_params();
        p.temperature_all = 0.7f;
        if (filtered) {
            p.top_k_all = 50;
            p.top_p_all = 0.9f;
        }
        std::vector<double> ts;
        for (int r = 0; r < 15; ++r) {
            p.position_all = r;
            const auto t0 = std::chrono::steady_clock::now();
            maporl_sample(MAPORL_DEVICE_CPU, z.data(), B, V, &p, tok.data(), lp.data(), raw.data(), nullptr);
            ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ts.begin(), ts.end());
        std::printf("BENCH sample cpu B=%lld V=%lld T=0.7 %s threads=%d median_ms=%.3f GBps=%.1f\n", (long long)B,
                    (long long)V, filtered ? "top-k 50 top-p 0.9" : "unfiltered", maporl_get_threads(),
                    ts[ts.size() / 2], 4.0 * B * V / (ts[ts.size() / 2] * 1e-3) / 1e9);
    }
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;
    void *dz, *dt, *dl;
    maporl_device_malloc(4 * z.size(), &dz);
    maporl_device_malloc(4 * B, &dt);
    maporl_device_malloc(4 * B, &dl);
    maporl_memcpy_to_device(dz, z.data(), 4 * z.size());
    for (int filtered = 0; filtered < 2; ++filtered)
        for (int64_t rows : {(int64_t)1, B}) {
            maporl_sample_params p = maporl_sample_default_params();
            p.temperature_all = 0.7f;
            if (filtered) {
                p.top_k_all = 50;
                p.top_p_all = 0.9f;
            }
            std::vector<double> ts;
            for (int r = 0; r < 20; ++r) {
                p.position_all = r;
                const auto t0 = std::chrono::steady_clock::now();
                maporl_sample(MAPORL_DEVICE_CUDA, (float *)dz, rows, V, &p, (int32_t *)dt, (float *)dl, nullptr,
                              nullptr);
                ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
            std::sort(ts.begin(), ts.end());
            std::printf("BENCH sample cuda B=%lld V=%lld T=0.7 %s median_ms=%.4f\n", (long long)rows, (long long)V,
                        filtered ? "top-k 50 top-p 0.9" : "unfiltered", ts[ts.size() / 2]);
        }
    for (void * q : {dz, dt, dl}) maporl_device_free(q);
}

int main(int argc, char ** argv) {
    const int rc = check::run_all("test_sampling");
    if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) bench();
    return rc;
}
