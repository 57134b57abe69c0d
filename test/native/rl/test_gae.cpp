// test_gae.cpp: GAE in C++ without Node: every SIMD level and the double path against a plain float64 loop
// written here from verl's formula; the chunked scan that the CUDA kernel runs (native/rl/gae_scan.h),
// emulated on the CPU; thread-count invariance; error statuses; and, when a GPU is visible, CUDA against the
// CPU. `test_gae --bench` also times CPU and CUDA at B=256, T=4096 (for scripts/device-check.sh).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/rl/gae.h"
#include "maporl.h"

namespace {

struct Batch {
    int64_t B, T;
    std::vector<float> r, v, mf;
    std::vector<uint8_t> mu;
};

Batch make_batch(int64_t B, int64_t T, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Batch x{B,
            T,
            std::vector<float>(B * T),
            std::vector<float>(B * T),
            std::vector<float>(B * T),
            std::vector<uint8_t>(B * T)};
    for (int64_t b = 0; b < B; ++b) {
        const int pattern = (int)(b % 5);
        const int64_t len = (int64_t)(g() % (uint32_t)(T + 1)), rs = (int64_t)(g() % (uint32_t)T),
                      rl = (int64_t)(g() % (uint32_t)std::max<int64_t>(1, T / 3));
        for (int64_t t = 0; t < T; ++t) {
            int on = 1;
            if (pattern == 1)
                on = 0;
            else if (pattern == 2)
                on = t < len;
            else if (pattern == 3)
                on = !(t >= rs && t < rs + rl);
            else if (pattern == 4)
                on = (g() % 10) < 6;
            const int64_t i = b * T + t;
            x.r[i] = u(g);
            x.v[i] = u(g);
            x.mf[i] = (float)on;
            x.mu[i] = (uint8_t)on;
        }
    }
    return x;
}

struct Ref {
    std::vector<double> A, R, scaleA, scaleR;
};

// verl's loop in double; scale = the same recursion on absolute values (the size of what was summed).
Ref reference(const Batch & x, double gamma, double lambda, bool whiten) {
    const int64_t n = x.B * x.T;
    Ref o{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
    for (int64_t b = 0; b < x.B; ++b) {
        double nv = 0, lg = 0, ls = 0;
        for (int64_t t = x.T - 1; t >= 0; --t) {
            const int64_t i = b * x.T + t;
            if (x.mu[i] != 1) continue;
            const double delta = (double)x.r[i] + gamma * nv - (double)x.v[i];
            lg = delta + gamma * lambda * lg;
            ls = std::fabs(x.r[i]) + gamma * std::fabs(nv) + std::fabs(x.v[i]) + gamma * lambda * ls;
            nv = x.v[i];
            o.A[i] = lg;
            o.R[i] = lg + x.v[i];
            o.scaleA[i] = ls;
            o.scaleR[i] = ls + std::fabs(x.v[i]);
        }
    }
    if (whiten) {
        double s = 0, c = 0;
        for (int64_t i = 0; i < n; ++i)
            if (x.mu[i]) {
                s += o.A[i];
                c += 1;
            }
        if (c > 0) {
            const double mean = s / c;  // exact (verl's masked_mean divides by c + 1e-8; maporl does not: gae_scan.h)
            double dev = 0;
            for (int64_t i = 0; i < n; ++i)
                if (x.mu[i]) dev += (o.A[i] - mean) * (o.A[i] - mean);
            const double var = c >= 2 ? dev / (c + 1e-8) * c / (c - 1) : 0.0;
            const double rstd = 1.0 / std::sqrt(var + 1e-8);
            for (int64_t i = 0; i < n; ++i)
                if (x.mu[i]) {
                    o.A[i] = (o.A[i] - mean) * rstd;
                    o.scaleA[i] = (o.scaleA[i] + std::fabs(mean)) * rstd;
                }
        }
    }
    return o;
}

template <typename F>
int64_t first_mismatch(const std::vector<F> & got, const std::vector<double> & want, const std::vector<double> & scale,
                       double rtol, double atol) {
    for (size_t i = 0; i < got.size(); ++i)
        if (!check::close((double)got[i], want[i], rtol, atol, scale[i])) return (int64_t)i;
    return -1;
}

const int64_t kShapes[][2] = {{1, 1},   {1, 2},   {2, 1},   {1, 17},  {3, 5},   {7, 13},  {5, 31},
                              {16, 16}, {17, 33}, {11, 97}, {2, 257}, {64, 64}, {3, 1031}};
const float kParams[][2] = {{1.0f, 0.95f}, {0.99f, 0.9f}, {1.0f, 1.0f}, {0.5f, 0.0f}, {0.0f, 0.7f}};

}  // namespace

TEST(cpu_float_matches_reference_at_every_simd_level) {
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;  // not on this CPU
        uint32_t seed = 1;
        for (auto & sh : kShapes)
            for (auto & p : kParams)
                for (int whiten = 0; whiten < 2; ++whiten)
                    for (int u8 = 0; u8 < 2; ++u8) {
                        Batch x = make_batch(sh[0], sh[1], seed++);
                        Ref want = reference(x, p[0], p[1], whiten);
                        std::vector<float> A(x.B * x.T, -7.0f), R(x.B * x.T, -7.0f);
                        maporl_gae_params prm{p[0], p[1], whiten};
                        maporl_status st =
                            maporl_gae(MAPORL_DEVICE_CPU, x.r.data(), x.v.data(),
                                       u8 ? (const void *)x.mu.data() : (const void *)x.mf.data(),
                                       u8 ? MAPORL_MASK_U8 : MAPORL_MASK_F32, x.B, x.T, prm, A.data(), R.data());
                        CHECK(st == MAPORL_OK, "%s: %s", level, maporl_last_error());
                        int64_t ia = first_mismatch(A, want.A, want.scaleA, 1e-5, 1e-6);
                        int64_t ir = first_mismatch(R, want.R, want.scaleR, 1e-5, 1e-6);
                        CHECK(ia < 0 && ir < 0, "%s B=%lld T=%lld gamma=%g lambda=%g whiten=%d u8=%d: A@%lld R@%lld",
                              level, (long long)x.B, (long long)x.T, p[0], p[1], whiten, u8, (long long)ia,
                              (long long)ir);
                    }
    }
    maporl_set_simd("best");
}

TEST(cpu_double_matches_reference_tightly) {
    uint32_t seed = 500;
    for (auto & sh : kShapes)
        for (auto & p : kParams) {
            Batch x = make_batch(sh[0], sh[1], seed++);
            Ref want = reference(x, p[0], p[1], true);
            std::vector<double> r(x.r.begin(), x.r.end()), v(x.v.begin(), x.v.end()), A(x.B * x.T), R(x.B * x.T);
            maporl::gae_cpu<double>(r.data(), v.data(), x.mu.data(), MAPORL_MASK_U8, x.B, x.T, (double)p[0],
                                    (double)p[1], true, A.data(), R.data());
            int64_t ia = first_mismatch(A, want.A, want.scaleA, 1e-12, 1e-12);
            CHECK(ia < 0, "B=%lld T=%lld at %lld", (long long)x.B, (long long)x.T, (long long)ia);
        }
}

// The CUDA kernel's algorithm: 32 chunks per row, a carry map per chunk, a suffix scan over the maps, then a
// second pass per chunk from its incoming carry. Emulated here so that the math is tested without a GPU.
TEST(chunked_scan_of_the_cuda_kernel_matches_reference) {
    uint32_t seed = 900;
    for (auto & sh : kShapes)
        for (auto & p : kParams) {
            Batch x = make_batch(sh[0], sh[1], seed++);
            Ref want = reference(x, p[0], p[1], false);
            const float gamma = p[0], gl = p[0] * p[1];
            std::vector<float> A(x.B * x.T), R(x.B * x.T);
            const int64_t chunk = (x.T + 31) / 32;
            for (int64_t b = 0; b < x.B; ++b) {
                maporl::GaeCarryMap<float> maps[32];
                for (int lane = 0; lane < 32; ++lane) {
                    const int64_t t0 = std::min(x.T, lane * chunk), t1 = std::min(x.T, t0 + chunk);
                    maps[lane] = maporl::gae_map_identity<float>();
                    for (int64_t t = t1 - 1; t >= t0; --t) {
                        const int64_t i = b * x.T + t;
                        maps[lane] = maporl::gae_map_step<float>(maps[lane], x.r[i], x.v[i], x.mu[i], gamma, gl);
                    }
                }
                maporl::GaeCarryMap<float> suffix[33];
                suffix[32] = maporl::gae_map_identity<float>();
                for (int lane = 31; lane >= 0; --lane)
                    suffix[lane] = maporl::gae_map_combine(maps[lane], suffix[lane + 1]);
                for (int lane = 0; lane < 32; ++lane) {
                    float nv = suffix[lane + 1].has ? suffix[lane + 1].nv : 0.0f, lg = suffix[lane + 1].c;
                    const int64_t t0 = std::min(x.T, lane * chunk), t1 = std::min(x.T, t0 + chunk);
                    for (int64_t t = t1 - 1; t >= t0; --t) {
                        const int64_t i = b * x.T + t;
                        if (!x.mu[i]) continue;
                        lg = x.r[i] + gamma * nv - x.v[i] + gl * lg;
                        nv = x.v[i];
                        A[i] = lg;
                        R[i] = lg + x.v[i];
                    }
                }
            }
            int64_t ia = first_mismatch(A, want.A, want.scaleA, 1e-5, 1e-6);
            CHECK(ia < 0, "B=%lld T=%lld gamma=%g lambda=%g at %lld", (long long)x.B, (long long)x.T, p[0], p[1],
                  (long long)ia);
        }
}

TEST(results_do_not_depend_on_thread_count) {
    Batch x = make_batch(97, 301, 4242);
    std::vector<float> A0, R0;
    for (int threads : {1, 2, 3, 8}) {
        maporl_set_threads(threads);
        std::vector<float> A(x.B * x.T), R(x.B * x.T);
        maporl_gae_params prm{0.99f, 0.95f, 1};
        CHECK(maporl_gae(MAPORL_DEVICE_CPU, x.r.data(), x.v.data(), x.mu.data(), MAPORL_MASK_U8, x.B, x.T, prm,
                         A.data(), R.data()) == MAPORL_OK,
              "%s", maporl_last_error());
        if (A0.empty()) {
            A0 = A;
            R0 = R;
            continue;
        }
        CHECK(std::memcmp(A.data(), A0.data(), A.size() * 4) == 0, "advantages differ at %d threads", threads);
        CHECK(std::memcmp(R.data(), R0.data(), R.size() * 4) == 0, "returns differ at %d threads", threads);
    }
    maporl_set_threads(0);
}

TEST(bad_arguments_give_statuses_and_messages) {
    float r[6] = {}, v[6] = {}, A[6], R[6];
    uint8_t m[6] = {1, 1, 1, 1, 1, 1};
    maporl_gae_params p = maporl_gae_default_params();
    CHECK(p.gamma == 1.0f && p.lambda == 0.95f && p.whiten == 0, "defaults");
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, nullptr, v, m, MAPORL_MASK_U8, 2, 3, p, A, R) == MAPORL_ERR_INVALID_ARG,
          "null");
    CHECK(std::strstr(maporl_last_error(), "rewards") != nullptr, "%s", maporl_last_error());
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, -1, 3, p, A, R) == MAPORL_ERR_INVALID_ARG, "B<0");
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, (maporl_mask_type)7, 2, 3, p, A, R) == MAPORL_ERR_INVALID_ARG,
          "mask type");
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, INT64_MAX, 2, p, A, R) == MAPORL_ERR_INVALID_ARG,
          "overflow");
    CHECK(maporl_gae((maporl_device)9, r, v, m, MAPORL_MASK_U8, 2, 3, p, A, R) == MAPORL_ERR_INVALID_ARG, "device");
    maporl_gae_params bad = p;
    bad.gamma = NAN;
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, 2, 3, bad, A, R) == MAPORL_ERR_INVALID_ARG,
          "NaN gamma");
    CHECK(std::strstr(maporl_last_error(), "gamma") != nullptr, "%s", maporl_last_error());
    bad = p;
    bad.lambda = 1.5f;
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, 2, 3, bad, A, R) == MAPORL_ERR_INVALID_ARG, "lambda");
    bad = p;
    bad.whiten = 2;
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, 2, 3, bad, A, R) == MAPORL_ERR_INVALID_ARG, "whiten");
    m[4] = 2;
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, m, MAPORL_MASK_U8, 2, 3, p, A, R) == MAPORL_ERR_INVALID_ARG, "mask 2");
    CHECK(std::strstr(maporl_last_error(), "index 4 (row 1, t 1)") != nullptr, "%s", maporl_last_error());
    CHECK(maporl_gae(MAPORL_DEVICE_CPU, r, v, nullptr, MAPORL_MASK_U8, 0, 3, p, nullptr, nullptr) == MAPORL_OK,
          "empty batch with NULL pointers: %s", maporl_last_error());
    CHECK(std::strcmp(maporl_status_name(MAPORL_ERR_NO_DEVICE), "MAPORL_ERR_NO_DEVICE") == 0, "name");
    CHECK(std::strcmp(maporl_status_name((maporl_status)-99), "MAPORL_ERR_UNKNOWN") == 0, "unknown name");
}

TEST(cuda_matches_cpu_or_reports_no_device) {
    int count = -1;
    CHECK(maporl_cuda_device_count(&count) == MAPORL_OK, "%s", maporl_last_error());
    if (count <= 0) {
        float x[1] = {0}, A[1], R[1];
        uint8_t m[1] = {1};
        maporl_status st =
            maporl_gae(MAPORL_DEVICE_CUDA, x, x, m, MAPORL_MASK_U8, 1, 1, maporl_gae_default_params(), A, R);
        CHECK(st == MAPORL_ERR_NO_DEVICE, "got %s: %s", maporl_status_name(st), maporl_last_error());
        void * p = nullptr;
        CHECK(maporl_device_malloc(16, &p) == MAPORL_ERR_NO_DEVICE && p == nullptr, "malloc without device");
        maporl_device_info info;
        CHECK(maporl_cuda_device_info(0, &info) == MAPORL_ERR_NO_DEVICE, "info without device");
        std::printf("  (no CUDA device: compiled=%d; CUDA-vs-CPU comparison not run)\n", maporl_cuda_compiled());
        return;
    }
    maporl_device_info info;
    CHECK(maporl_cuda_device_info(0, &info) == MAPORL_OK, "%s", maporl_last_error());
    std::printf("  device 0: %s, cc %d.%d, %lld MiB\n", info.name, info.compute_major, info.compute_minor,
                (long long)(info.total_memory >> 20));
    uint32_t seed = 7000;
    const int64_t shapes[][2] = {{1, 1}, {3, 5}, {17, 33}, {2, 257}, {64, 64}, {3, 1031}, {256, 4096}, {1, 100000}};
    for (auto & sh : shapes)
        for (auto & p : kParams)
            for (int whiten = 0; whiten < 2; ++whiten)
                for (int u8 = 0; u8 < 2; ++u8) {
                    Batch x = make_batch(sh[0], sh[1], seed++);
                    const int64_t n = x.B * x.T;
                    Ref want = reference(x, p[0], p[1], whiten);
                    void *dr, *dv, *dm, *dA, *dR;
                    const size_t mb = u8 ? (size_t)n : 4 * (size_t)n;
                    CHECK(maporl_device_malloc(4 * n, &dr) == MAPORL_OK &&
                              maporl_device_malloc(4 * n, &dv) == MAPORL_OK &&
                              maporl_device_malloc(mb, &dm) == MAPORL_OK &&
                              maporl_device_malloc(4 * n, &dA) == MAPORL_OK &&
                              maporl_device_malloc(4 * n, &dR) == MAPORL_OK,
                          "%s", maporl_last_error());
                    maporl_memcpy_to_device(dr, x.r.data(), 4 * n);
                    maporl_memcpy_to_device(dv, x.v.data(), 4 * n);
                    maporl_memcpy_to_device(dm, u8 ? (const void *)x.mu.data() : (const void *)x.mf.data(), mb);
                    maporl_gae_params prm{p[0], p[1], whiten};
                    maporl_status st =
                        maporl_gae(MAPORL_DEVICE_CUDA, (float *)dr, (float *)dv, dm,
                                   u8 ? MAPORL_MASK_U8 : MAPORL_MASK_F32, x.B, x.T, prm, (float *)dA, (float *)dR);
                    CHECK(st == MAPORL_OK, "%s", maporl_last_error());
                    std::vector<float> A(n), R(n);
                    maporl_memcpy_to_host(A.data(), dA, 4 * n);
                    maporl_memcpy_to_host(R.data(), dR, 4 * n);
                    int64_t ia = first_mismatch(A, want.A, want.scaleA, 1e-5, 1e-6);
                    int64_t ir = first_mismatch(R, want.R, want.scaleR, 1e-5, 1e-6);
                    CHECK(ia < 0 && ir < 0, "CUDA B=%lld T=%lld gamma=%g lambda=%g whiten=%d u8=%d: A@%lld R@%lld",
                          (long long)x.B, (long long)x.T, p[0], p[1], whiten, u8, (long long)ia, (long long)ir);
                    // A bad mask value is reported with its index.
                    if (u8 && sh[0] * sh[1] > 5 && whiten == 0 && p[1] == 0.95f) {
                        uint8_t two = 2;
                        maporl_memcpy_to_device((uint8_t *)dm + 5, &two, 1);
                        st = maporl_gae(MAPORL_DEVICE_CUDA, (float *)dr, (float *)dv, dm, MAPORL_MASK_U8, x.B, x.T, prm,
                                        (float *)dA, (float *)dR);
                        CHECK(st == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "index 5") != nullptr,
                              "bad mask on CUDA: %s", maporl_last_error());
                    }
                    for (void * q : {dr, dv, dm, dA, dR}) maporl_device_free(q);
                }
}

// REINFORCE++ returns: a plain double loop from verl's formula (running *= mask resets the chain).
TEST(reinforce_returns_match_reference_at_every_simd_level_and_on_cuda) {
    int count = 0;
    maporl_cuda_device_count(&count);
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        uint32_t seed = 3000;
        for (auto & sh : kShapes)
            for (float gamma : {1.0f, 0.9f, 0.0f})
                for (int whiten = 0; whiten < 2; ++whiten) {
                    Batch x = make_batch(sh[0], sh[1], seed++);
                    const int64_t n = x.B * x.T;
                    std::vector<double> G(n, 0.0), S(n, 0.0);
                    for (int64_t b = 0; b < x.B; ++b) {
                        double run = 0, abs = 0;
                        for (int64_t t = x.T - 1; t >= 0; --t) {
                            const int64_t i = b * x.T + t;
                            if (!x.mu[i]) {
                                run = 0;
                                abs = 0;
                                continue;
                            }
                            run = x.r[i] + gamma * run;
                            abs = std::fabs(x.r[i]) + gamma * abs;
                            G[i] = run;
                            S[i] = abs;
                        }
                    }
                    std::vector<float> Rg(n), Ra(n);
                    maporl_returns_params p{gamma, whiten};
                    CHECK(maporl_reinforce_returns(MAPORL_DEVICE_CPU, x.r.data(), x.mu.data(), MAPORL_MASK_U8, x.B, x.T,
                                                   p, Rg.data(), Ra.data()) == MAPORL_OK,
                          "%s", maporl_last_error());
                    int64_t at = first_mismatch(Rg, G, S, 1e-5, 1e-6);
                    CHECK(at < 0, "%s B=%lld T=%lld gamma=%g at %lld", level, (long long)x.B, (long long)x.T, gamma,
                          (long long)at);
                    if (!whiten)
                        CHECK(std::memcmp(Rg.data(), Ra.data(), 4 * n) == 0, "advantages != returns without whitening");
                    if (count > 0 && std::strcmp(level, "scalar") == 0) {
                        void *dr, *dm, *dg, *da;
                        maporl_device_malloc(4 * n, &dr);
                        maporl_device_malloc(n, &dm);
                        maporl_device_malloc(4 * n, &dg);
                        maporl_device_malloc(4 * n, &da);
                        maporl_memcpy_to_device(dr, x.r.data(), 4 * n);
                        maporl_memcpy_to_device(dm, x.mu.data(), n);
                        CHECK(maporl_reinforce_returns(MAPORL_DEVICE_CUDA, (float *)dr, dm, MAPORL_MASK_U8, x.B, x.T, p,
                                                       (float *)dg, (float *)da) == MAPORL_OK,
                              "%s", maporl_last_error());
                        std::vector<float> cg(n), ca(n);
                        maporl_memcpy_to_host(cg.data(), dg, 4 * n);
                        maporl_memcpy_to_host(ca.data(), da, 4 * n);
                        CHECK(first_mismatch(cg, G, S, 1e-5, 1e-6) < 0, "CUDA returns B=%lld T=%lld", (long long)x.B,
                              (long long)x.T);
                        std::vector<double> cpu_a(Ra.begin(), Ra.end()), ones(n, 1.0);
                        CHECK(first_mismatch(ca, cpu_a, ones, 1e-4, 1e-5) < 0, "CUDA advantages B=%lld T=%lld",
                              (long long)x.B, (long long)x.T);
                        for (void * q : {dr, dm, dg, da}) maporl_device_free(q);
                    }
                }
    }
    maporl_set_simd("best");
}

static double time_ms(const std::function<void()> & fn, int reps) {
    std::vector<double> ts;
    fn();
    for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

static void bench() {
    const int64_t B = 256, T = 4096, n = B * T;
    Batch x = make_batch(B, T, 1);
    std::fill(x.mf.begin(), x.mf.end(), 1.0f);
    std::vector<float> A(n), R(n);
    maporl_gae_params p = maporl_gae_default_params();
    double cpu = time_ms(
        [&] {
            maporl_gae(MAPORL_DEVICE_CPU, x.r.data(), x.v.data(), x.mf.data(), MAPORL_MASK_F32, B, T, p, A.data(),
                       R.data());
        },
        20);
    std::printf("BENCH gae cpu B=%lld T=%lld threads=%d simd=%s median_ms=%.4f\n", (long long)B, (long long)T,
                maporl_get_threads(), maporl_simd(), cpu);
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;
    void *dr, *dv, *dm, *dA, *dR;
    maporl_device_malloc(4 * n, &dr);
    maporl_device_malloc(4 * n, &dv);
    maporl_device_malloc(4 * n, &dm);
    maporl_device_malloc(4 * n, &dA);
    maporl_device_malloc(4 * n, &dR);
    maporl_memcpy_to_device(dr, x.r.data(), 4 * n);
    maporl_memcpy_to_device(dv, x.v.data(), 4 * n);
    maporl_memcpy_to_device(dm, x.mf.data(), 4 * n);
    for (int whiten = 0; whiten < 2; ++whiten) {
        p.whiten = whiten;
        double gpu = time_ms(
            [&] {
                maporl_gae(MAPORL_DEVICE_CUDA, (float *)dr, (float *)dv, dm, MAPORL_MASK_F32, B, T, p, (float *)dA,
                           (float *)dR);
            },
            50);
        const double bytes = 20.0 * (double)n;
        std::printf("BENCH gae cuda B=%lld T=%lld whiten=%d median_ms=%.4f effective_GBps=%.1f\n", (long long)B,
                    (long long)T, whiten, gpu, bytes / (gpu * 1e-3) / 1e9);
    }
    maporl_returns_params rp{1.0f, 1};
    double ret = time_ms(
        [&] {
            maporl_reinforce_returns(MAPORL_DEVICE_CUDA, (float *)dr, dm, MAPORL_MASK_F32, B, T, rp, (float *)dA,
                                     (float *)dR);
        },
        50);
    std::printf("BENCH reinforce_returns cuda B=%lld T=%lld whiten=1 median_ms=%.4f\n", (long long)B, (long long)T,
                ret);
    for (void * q : {dr, dv, dm, dA, dR}) maporl_device_free(q);
}

int main(int argc, char ** argv) {
    int rc = check::run_all("test_gae");
    if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) bench();
    return rc;
}
