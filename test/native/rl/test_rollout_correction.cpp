// test_rollout_correction.cpp: maporl_rollout_correction in C++ without Node: the weights against a float64 loop
// written here from verl's token-level TIS formula; the same bits at 1 and 2 pool threads and for uint8 and float
// masks; error statuses naming the field; and, when a GPU is visible, the CUDA kernel (the same row function, one
// thread per row; CUDA's exp and log may differ from the host's by an ulp) against the CPU. The full option matrix is tested against verl's code in
// test/rl/rolloutCorrection.test.ts.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "maporl.h"
#include "test/native/core/check.h"

namespace {

struct Batch {
    int64_t B, T;
    std::vector<float> old, roll, mf;
    std::vector<uint8_t> mu;
};

Batch make_batch(int64_t B, int64_t T, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    Batch x{B,
            T,
            std::vector<float>(B * T),
            std::vector<float>(B * T),
            std::vector<float>(B * T),
            std::vector<uint8_t>(B * T)};
    for (int64_t b = 0; b < B; ++b) {
        const int64_t len = (int64_t)(g() % (uint32_t)(T + 1));
        for (int64_t t = 0; t < T; ++t) {
            const int64_t i = b * T + t;
            const bool on = t < len && u(g) > 0.1f;
            x.mu[i] = on ? 1 : 0;
            x.mf[i] = on ? 1.0f : 0.0f;
            x.roll[i] = on ? -3.0f * u(g) : NAN;
            x.old[i] = on ? x.roll[i] + 0.8f * (2.0f * u(g) - 1.0f) : NAN;
        }
    }
    return x;
}

maporl_rollout_correction_params params_with_rs() {
    maporl_rollout_correction_params p = maporl_rollout_correction_default_params();
    p.is = MAPORL_ROLLOUT_IS_TOKEN;
    p.rs_count = 2;
    p.rs[0] = {MAPORL_ROLLOUT_RS_TOKEN_K1, 0.5, 2.0};
    p.rs[1] = {MAPORL_ROLLOUT_RS_SEQ_MEAN_K3, 0.0, 0.12};
    return p;
}

}  // namespace

TEST(token_tis_matches_float64_loop) {
    Batch x = make_batch(9, 37, 11);
    const int64_t n = x.B * x.T;
    maporl_rollout_correction_params p = maporl_rollout_correction_default_params();
    p.is = MAPORL_ROLLOUT_IS_TOKEN;
    std::vector<float> w(n);
    maporl_rollout_correction_stats st;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, x.old.data(), x.roll.data(), x.mu.data(), MAPORL_MASK_U8, x.B,
                                    x.T, p, w.data(), nullptr, &st) == MAPORL_OK,
          "%s", maporl_last_error());
    double tokens = 0, k3 = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (!x.mu[i]) {
            CHECK(w[i] == 0.0f, "masked weight %lld = %g", (long long)i, w[i]);
            continue;
        }
        const double lr = (double)x.old[i] - (double)x.roll[i];
        const double want = std::fmin(std::exp(lr), 2.0);
        CHECK(std::fabs(w[i] - want) <= 1e-6 * want, "w[%lld] = %.9g, want %.9g", (long long)i, w[i], want);
        tokens += 1;
        k3 += std::exp(lr) - 1 - lr;
    }
    CHECK(st.tokens == tokens, "tokens %g vs %g", st.tokens, tokens);
    CHECK(std::fabs(st.k3_kl - k3 / tokens) <= 1e-12, "k3 %.17g vs %.17g", st.k3_kl, k3 / tokens);
}

TEST(same_bits_at_every_thread_count_and_mask_type) {
    Batch x = make_batch(300, 129, 5);
    const int64_t n = x.B * x.T;
    maporl_rollout_correction_params p = params_with_rs();
    p.batch_normalize = 1;
    std::vector<float> w1(n), k1(n), w2(n), k2(n), w3(n), k3(n);
    maporl_rollout_correction_stats s1, s2, s3;
    maporl_set_threads(1);
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, x.old.data(), x.roll.data(), x.mu.data(), MAPORL_MASK_U8, x.B,
                                    x.T, p, w1.data(), k1.data(), &s1) == MAPORL_OK,
          "%s", maporl_last_error());
    maporl_set_threads(2);
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, x.old.data(), x.roll.data(), x.mu.data(), MAPORL_MASK_U8, x.B,
                                    x.T, p, w2.data(), k2.data(), &s2) == MAPORL_OK,
          "%s", maporl_last_error());
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, x.old.data(), x.roll.data(), x.mf.data(), MAPORL_MASK_F32, x.B,
                                    x.T, p, w3.data(), k3.data(), &s3) == MAPORL_OK,
          "%s", maporl_last_error());
    maporl_set_threads(0);
    CHECK(std::memcmp(w1.data(), w2.data(), 4 * n) == 0 && std::memcmp(w1.data(), w3.data(), 4 * n) == 0, "weights");
    CHECK(std::memcmp(k1.data(), k2.data(), 4 * n) == 0 && std::memcmp(k1.data(), k3.data(), 4 * n) == 0, "keep");
    CHECK(std::memcmp(&s1, &s2, sizeof s1) == 0 && std::memcmp(&s1, &s3, sizeof s1) == 0, "stats");
    CHECK(s1.rs_masked_fraction > 0 && s1.rs_masked_fraction < 1, "rs fraction %g", s1.rs_masked_fraction);
    CHECK(s1.batch_norm_factor != 1.0, "batch normalisation factor %g", s1.batch_norm_factor);
}

TEST(errors_name_the_field) {
    float a[2] = {0, 0}, w[2];
    uint8_t m[2] = {1, 2};
    maporl_rollout_correction_params p = maporl_rollout_correction_default_params();
    p.is = MAPORL_ROLLOUT_IS_TOKEN;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, a, a, m, MAPORL_MASK_U8, 1, 2, p, w, nullptr, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "mask"),
          "bad mask: %s", maporl_last_error());
    m[1] = 1;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, a, a, m, MAPORL_MASK_U8, 1, 2, p, nullptr, nullptr, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "weights_out"),
          "no weights: %s", maporl_last_error());
    p.is_threshold = NAN;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, a, a, m, MAPORL_MASK_U8, 1, 2, p, w, nullptr, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "is_threshold"),
          "NaN threshold: %s", maporl_last_error());
    p = params_with_rs();
    int bad = 12;
    std::memcpy(&p.rs[0].option, &bad, sizeof bad);
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, a, a, m, MAPORL_MASK_U8, 1, 2, p, w, w, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "rs[0].option"),
          "bad option: %s", maporl_last_error());
    p = params_with_rs();
    p.rs[0].lower = 3.0;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, a, a, m, MAPORL_MASK_U8, 1, 2, p, w, w, nullptr) ==
                  MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "rs[0].lower"),
          "k1 lower >= upper: %s", maporl_last_error());
}

TEST(cuda_matches_cpu_or_reports_no_device) {
    int count = -1;
    CHECK(maporl_cuda_device_count(&count) == MAPORL_OK, "%s", maporl_last_error());
    Batch x = make_batch(513, 77, 9);
    const int64_t n = x.B * x.T;
    maporl_rollout_correction_params p = params_with_rs();
    p.is = MAPORL_ROLLOUT_IS_GEOMETRIC;
    p.is_mode = MAPORL_ROLLOUT_IS_MASK;
    p.is_threshold_lower = 0.5;
    p.batch_normalize = 1;
    if (count <= 0) {
        float w[1];
        CHECK(maporl_rollout_correction(MAPORL_DEVICE_CUDA, x.old.data(), x.roll.data(), x.mu.data(), MAPORL_MASK_U8, 1,
                                        1, p, w, w, nullptr) == MAPORL_ERR_NO_DEVICE,
              "%s", maporl_last_error());
        std::printf("  (no CUDA device: compiled=%d; CUDA-vs-CPU comparison not run)\n", maporl_cuda_compiled());
        return;
    }
    std::vector<float> w(n), k(n), cw(n), ck(n);
    maporl_rollout_correction_stats s, cs;
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CPU, x.old.data(), x.roll.data(), x.mu.data(), MAPORL_MASK_U8, x.B,
                                    x.T, p, w.data(), k.data(), &s) == MAPORL_OK,
          "%s", maporl_last_error());
    void *d_old, *d_roll, *d_m, *d_w, *d_k;
    CHECK(maporl_device_malloc(4 * n, &d_old) == MAPORL_OK && maporl_device_malloc(4 * n, &d_roll) == MAPORL_OK &&
              maporl_device_malloc(n, &d_m) == MAPORL_OK && maporl_device_malloc(4 * n, &d_w) == MAPORL_OK &&
              maporl_device_malloc(4 * n, &d_k) == MAPORL_OK,
          "%s", maporl_last_error());
    maporl_memcpy_to_device(d_old, x.old.data(), 4 * n);
    maporl_memcpy_to_device(d_roll, x.roll.data(), 4 * n);
    maporl_memcpy_to_device(d_m, x.mu.data(), n);
    CHECK(maporl_rollout_correction(MAPORL_DEVICE_CUDA, (float *)d_old, (float *)d_roll, d_m, MAPORL_MASK_U8, x.B, x.T,
                                    p, (float *)d_w, (float *)d_k, &cs) == MAPORL_OK,
          "%s", maporl_last_error());
    maporl_memcpy_to_host(cw.data(), d_w, 4 * n);
    maporl_memcpy_to_host(ck.data(), d_k, 4 * n);
    for (int64_t i = 0; i < n; ++i) {
        CHECK(check::close(cw[i], w[i], 1e-6, 0, std::fabs(w[i])), "CUDA w[%lld] %.9g, CPU %.9g", (long long)i, cw[i],
              w[i]);
        CHECK(ck[i] == k[i], "CUDA keep[%lld] %g, CPU %g", (long long)i, ck[i], k[i]);
    }
    const double *a = &s.tokens, *b = &cs.tokens;
    for (size_t f = 0; f < sizeof s / sizeof(double); ++f)
        CHECK(check::close(b[f], a[f], 1e-12, 1e-15, std::fabs(a[f])), "stats field %zu: CUDA %.17g, CPU %.17g", f,
              b[f], a[f]);
    for (void * d : {d_old, d_roll, d_m, d_w, d_k}) maporl_device_free(d);
}

int main() { return check::run_all("test_rollout_correction"); }
