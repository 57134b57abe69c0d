// test_group_advantages.cpp: group advantages and the row broadcast without Node: the CPU kernel against a plain
// double loop written here (GRPO / RLOO / max, NaN policies, singletons, adjacent and shuffled ids, sparse ids),
// thread-count invariance, error statuses, and CUDA against the CPU when a GPU is visible.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <map>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "maporl.h"

namespace {

struct Batch {
    std::vector<float> s;
    std::vector<int32_t> g;
};

Batch make(int64_t N, uint32_t seed, bool shuffle, bool nan, bool sparse) {
    std::mt19937 r(seed);
    Batch b{std::vector<float>(N), std::vector<int32_t>(N)};
    int64_t i = 0;
    int32_t gid = 0;
    while (i < N) {
        const int64_t size = std::min<int64_t>(N - i, 1 + (int64_t)(r() % 8));
        const int32_t id = sparse ? (int32_t)(r() % 2000000000u) - 1000000000 : gid * 3;
        for (int64_t k = 0; k < size; ++k, ++i) {
            b.s[i] = (float)(r() % 1000) / 100.0f;
            if (nan && r() % 7 == 0) b.s[i] = NAN;
            b.g[i] = id;
        }
        ++gid;
    }
    if (shuffle)
        for (int64_t k = N - 1; k > 0; --k) {
            const int64_t j = (int64_t)(r() % (uint32_t)(k + 1));
            std::swap(b.s[k], b.s[j]);
            std::swap(b.g[k], b.g[j]);
        }
    return b;
}

std::vector<double> reference(const Batch & b, const maporl_group_params & p) {
    const int64_t N = (int64_t)b.s.size();
    std::map<int32_t, std::vector<int64_t>> members;
    for (int64_t i = 0; i < N; ++i)
        if (!(p.nan_exclude && std::isnan(b.s[i]))) members[b.g[i]].push_back(i);
    std::vector<double> out(N, 0.0);
    for (auto & kv : members) {
        const auto & idx = kv.second;
        const double n = (double)idx.size();
        double sum = 0, mx = -INFINITY;
        bool has_nan = false;
        for (int64_t i : idx) {
            sum += b.s[i];
            mx = std::max(mx, (double)b.s[i]);
            has_nan |= std::isnan(b.s[i]);
        }
        if (has_nan) mx = NAN;
        const double mean = sum / n;
        double dev = 0;
        for (int64_t i : idx) dev += (b.s[i] - mean) * (b.s[i] - mean);
        const double sd = n > 1 ? std::sqrt(dev / (p.std_unbiased ? n - 1 : n)) : 1.0;
        for (int64_t i : idx) {
            const double s = b.s[i];
            double a;
            if (p.baseline == MAPORL_BASELINE_NONE) {
                out[i] = s;
                continue;
            }
            if (n == 1) {
                if (p.singleton_zero) {
                    out[i] = 0;
                    continue;
                }
                a = s;
            } else if (p.baseline == MAPORL_BASELINE_RLOO)
                a = s - (sum - s) / (n - 1);
            else if (p.baseline == MAPORL_BASELINE_MAX)
                a = s - mx;
            else
                a = s - mean;
            out[i] = p.scale_by_std ? a / (sd + p.eps) : a;
        }
    }
    return out;
}

bool matches(const std::vector<float> & got, const std::vector<double> & want, double tol, int64_t * where) {
    for (size_t i = 0; i < got.size(); ++i)
        if (!check::close(got[i], want[i], tol, tol, std::max(1.0, std::fabs(want[i])))) {
            *where = (int64_t)i;
            return false;
        }
    return true;
}

std::vector<maporl_group_params> param_sets() {
    std::vector<maporl_group_params> v;
    maporl_group_params p = maporl_group_default_params();
    v.push_back(p);  // GRPO, verl
    p.eps = 1e-4f;
    p.singleton_zero = 1;
    p.nan_exclude = 1;  // GRPO, TRL
    v.push_back(p);
    p = maporl_group_default_params();
    p.scale_by_std = 0;
    v.push_back(p);  // Dr.GRPO
    p.baseline = MAPORL_BASELINE_RLOO;
    v.push_back(p);  // RLOO
    p.baseline = MAPORL_BASELINE_MAX;
    v.push_back(p);  // MAGRPO max
    p.baseline = MAPORL_BASELINE_NONE;
    v.push_back(p);  // MAGRPO none
    p = maporl_group_default_params();
    p.std_unbiased = 0;
    p.nan_exclude = 1;
    v.push_back(p);  // biased std
    return v;
}

}  // namespace

TEST(cpu_matches_double_reference_on_every_layout) {
    uint32_t seed = 1;
    for (int64_t N : {1, 2, 7, 100, 4099})
        for (int layout = 0; layout < 4; ++layout)
            for (int nan = 0; nan < 2; ++nan) {
                Batch b = make(N, seed++, layout >= 1, nan, layout == 3);
                if (layout == 2)
                    std::stable_sort(b.g.begin(), b.g.end());  // ascending ids, members not adjacent to scores order
                for (auto & p : param_sets()) {
                    std::vector<float> out(N, -7.0f);
                    CHECK(maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, N, p,
                                                  out.data()) == MAPORL_OK,
                          "%s", maporl_last_error());
                    int64_t at = -1;
                    CHECK(matches(out, reference(b, p), 1e-5, &at),
                          "N=%lld layout=%d nan=%d baseline=%d scale=%d excl=%d at %lld", (long long)N, layout, nan,
                          (int)p.baseline, p.scale_by_std, p.nan_exclude, (long long)at);
                }
            }
}

// Groups of one size stored in order take the AVX-512 gather path where the CPU has it; it must give the same
// bits as the scalar run path and as the same groups shuffled through the table path.
TEST(uniform_adjacent_groups_are_bit_identical_across_paths) {
    for (int64_t G : {1, 3, 8, 16, 33})
        for (int64_t groups_n : {1, 15, 16, 17, 100}) {
            const int64_t N = G * groups_n;
            std::mt19937 r((uint32_t)(G * 1000 + groups_n));
            std::vector<float> s(N);
            std::vector<int32_t> g(N);
            for (int64_t i = 0; i < N; ++i) {
                s[i] = (float)(r() % 1000) / 100.0f;
                if (r() % 9 == 0) s[i] = NAN;
                g[i] = (int32_t)(i / G) * 2 + 5;
            }
            for (int excl = 0; excl < 2; ++excl) {
                maporl_group_params p = maporl_group_default_params();
                p.nan_exclude = excl;
                std::vector<float> best(N), avx2(N), scalar(N), table(N);
                maporl_set_simd("best");
                maporl_group_advantages(MAPORL_DEVICE_CPU, s.data(), g.data(), nullptr, N, p, best.data());
                const bool has_avx2 = maporl_set_simd("avx2") == MAPORL_OK;
                maporl_group_advantages(MAPORL_DEVICE_CPU, s.data(), g.data(), nullptr, N, p, avx2.data());
                maporl_set_simd("scalar");
                maporl_group_advantages(MAPORL_DEVICE_CPU, s.data(), g.data(), nullptr, N, p, scalar.data());
                maporl_set_simd("best");
                // Interleave the groups (ids no longer ascend, so the table path runs) keeping each group's members
                // in their order, hence the same summation order.
                std::vector<int64_t> order(N);
                for (int64_t i = 0; i < N; ++i)
                    order[i] = (i % groups_n) * G + i / groups_n;  // member-major interleave
                std::vector<float> s2(N);
                std::vector<int32_t> g2(N);
                for (int64_t i = 0; i < N; ++i) {
                    s2[i] = s[order[i]];
                    g2[i] = g[order[i]];
                }
                std::vector<float> t2(N);
                maporl_group_advantages(MAPORL_DEVICE_CPU, s2.data(), g2.data(), nullptr, N, p, t2.data());
                for (int64_t i = 0; i < N; ++i) table[order[i]] = t2[i];
                CHECK(std::memcmp(best.data(), scalar.data(), 4 * N) == 0,
                      "gather vs scalar G=%lld groups=%lld excl=%d", (long long)G, (long long)groups_n, excl);
                CHECK(!has_avx2 || std::memcmp(avx2.data(), scalar.data(), 4 * N) == 0,
                      "avx2 gather vs scalar G=%lld groups=%lld", (long long)G, (long long)groups_n);
                CHECK(std::memcmp(best.data(), table.data(), 4 * N) == 0, "gather vs table G=%lld groups=%lld excl=%d",
                      (long long)G, (long long)groups_n, excl);
            }
        }
}

// The table path (shuffled or sparse ids) writes the advantages with fold gathers on AVX-512 / AVX2; every SIMD
// level must give the scalar loop's bits, NaN members, singletons and the max baseline included.
TEST(table_path_is_bit_identical_across_simd_levels) {
    uint32_t seed = 500;
    for (int64_t N : {1, 9, 1000, 70001})
        for (int sparse = 0; sparse < 2; ++sparse) {
            Batch b = make(N, seed++, true, true, sparse == 1);
            for (auto & p : param_sets()) {
                std::vector<float> scalar(N), avx2(N), best(N);
                maporl_set_simd("scalar");
                CHECK(maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, N, p,
                                              scalar.data()) == MAPORL_OK,
                      "%s", maporl_last_error());
                const bool has_avx2 = maporl_set_simd("avx2") == MAPORL_OK;
                maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, N, p, avx2.data());
                maporl_set_simd("best");
                maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, N, p, best.data());
                CHECK(!has_avx2 || std::memcmp(avx2.data(), scalar.data(), 4 * N) == 0,
                      "avx2 vs scalar N=%lld sparse=%d baseline=%d excl=%d", (long long)N, sparse, (int)p.baseline,
                      p.nan_exclude);
                CHECK(std::memcmp(best.data(), scalar.data(), 4 * N) == 0,
                      "best vs scalar N=%lld sparse=%d baseline=%d excl=%d", (long long)N, sparse, (int)p.baseline,
                      p.nan_exclude);
                int64_t at = -1;
                CHECK(matches(best, reference(b, p), 1e-5, &at), "N=%lld sparse=%d baseline=%d at %lld", (long long)N,
                      sparse, (int)p.baseline, (long long)at);
            }
        }
}

TEST(results_do_not_depend_on_thread_count) {
    for (int layout = 0; layout < 2; ++layout) {
        Batch b = make(30000, 77, layout == 1, true, false);
        maporl_group_params p = maporl_group_default_params();
        p.whiten = 1;
        p.nan_exclude = 1;
        std::vector<float> first;
        for (int threads : {1, 2, 5}) {
            maporl_set_threads(threads);
            std::vector<float> out(b.s.size());
            maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, (int64_t)b.s.size(), p,
                                    out.data());
            if (first.empty()) first = out;
            CHECK(std::memcmp(first.data(), out.data(), 4 * out.size()) == 0, "layout %d differs at %d threads", layout,
                  threads);
        }
    }
    maporl_set_threads(0);
}

TEST(broadcast_and_errors) {
    float v[2] = {3, -1}, out[6];
    uint8_t m[6] = {1, 1, 0, 0, 1, 1};
    CHECK(maporl_broadcast_rows(MAPORL_DEVICE_CPU, v, m, MAPORL_MASK_U8, 2, 3, out) == MAPORL_OK, "%s",
          maporl_last_error());
    CHECK(out[0] == 3 && out[1] == 3 && out[2] == 0 && out[3] == 0 && out[4] == -1 && out[5] == -1, "broadcast values");
    m[2] = 4;
    CHECK(maporl_broadcast_rows(MAPORL_DEVICE_CPU, v, m, MAPORL_MASK_U8, 2, 3, out) == MAPORL_ERR_INVALID_ARG,
          "bad mask");
    float s[3] = {1, 2, 3}, a[3];
    int32_t g[3] = {0, 0, 1};
    maporl_group_params p = maporl_group_default_params();
    p.eps = -1;
    CHECK(maporl_group_advantages(MAPORL_DEVICE_CPU, s, g, nullptr, 3, p, a) == MAPORL_ERR_INVALID_ARG, "eps");
    p = maporl_group_default_params();
    p.baseline = MAPORL_BASELINE_MAX;
    CHECK(maporl_group_advantages(MAPORL_DEVICE_CPU, s, g, nullptr, 3, p, a) == MAPORL_ERR_INVALID_ARG,
          "max + std scaling");
    p = maporl_group_default_params();
    p.whiten = 1;
    float w[3] = {1, NAN, 1};
    CHECK(maporl_group_advantages(MAPORL_DEVICE_CPU, s, g, w, 3, p, a) == MAPORL_ERR_INVALID_ARG, "NaN weight");
    CHECK(std::strstr(maporl_last_error(), "weights") != nullptr, "%s", maporl_last_error());
}

// CUDA validates the whitening weights as the CPU does (it took NaN, Inf and negatives silently): the same error,
// naming the first bad index, and nothing written.
TEST(cuda_rejects_bad_weights_as_the_cpu) {
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;  // (CPU-only machine: the CPU's check is tested with the weights above)
    const int64_t N = 6;
    float s[N] = {1, 2, 3, 4, 5, 6};
    int32_t g[N] = {0, 0, 1, 1, 2, 2};
    maporl_group_params p = maporl_group_default_params();
    p.whiten = true;
    p.scale_by_std = false;
    for (float badw : {-1.0f, NAN, INFINITY}) {
        float w[N] = {1, 1, 1, badw, 1, 1}, out[N], sentinel[N];
        for (int64_t i = 0; i < N; ++i) sentinel[i] = 123.0f;
        const maporl_status cpu = maporl_group_advantages(MAPORL_DEVICE_CPU, s, g, w, N, p, out);
        const std::string cpu_msg = maporl_last_error();
        void *ds, *dg, *dw, *dout;
        maporl_device_malloc(4 * N, &ds);
        maporl_device_malloc(4 * N, &dg);
        maporl_device_malloc(4 * N, &dw);
        maporl_device_malloc(4 * N, &dout);
        maporl_memcpy_to_device(ds, s, 4 * N);
        maporl_memcpy_to_device(dg, g, 4 * N);
        maporl_memcpy_to_device(dw, w, 4 * N);
        maporl_memcpy_to_device(dout, sentinel, 4 * N);
        const maporl_status gpu =
            maporl_group_advantages(MAPORL_DEVICE_CUDA, (float *)ds, (int32_t *)dg, (float *)dw, N, p, (float *)dout);
        float back[N];
        maporl_memcpy_to_host(back, dout, 4 * N);
        CHECK(cpu == MAPORL_ERR_INVALID_ARG && gpu == MAPORL_ERR_INVALID_ARG && cpu_msg == maporl_last_error(),
              "weight %g: cpu %d (%s), cuda %d (%s)", (double)badw, (int)cpu, cpu_msg.c_str(), (int)gpu,
              maporl_last_error());
        CHECK(std::equal(back, back + N, sentinel), "nothing written on the device");
        for (void * q : {ds, dg, dw, dout}) maporl_device_free(q);
    }
}

TEST(cuda_matches_cpu_or_reports_no_device) {
    int count = 0;
    maporl_cuda_device_count(&count);
    float s[2] = {1, 2}, a[2];
    int32_t g[2] = {0, 0};
    if (count == 0) {
        CHECK(maporl_group_advantages(MAPORL_DEVICE_CUDA, s, g, nullptr, 2, maporl_group_default_params(), a) ==
                  MAPORL_ERR_NO_DEVICE,
              "%s", maporl_last_error());
        return;
    }
    uint32_t seed = 900;
    for (int64_t N : {1, 100, 4099, 1 << 20})
        for (int layout = 0; layout < 2; ++layout) {
            Batch b = make(N, seed++, layout == 1, true, false);
            for (auto p : param_sets()) {
                for (int whiten = 0; whiten < 2; ++whiten) {
                    p.whiten = whiten && p.baseline == MAPORL_BASELINE_MEAN && !p.scale_by_std;
                    std::vector<float> cpu(N), gpu(N);
                    maporl_group_advantages(MAPORL_DEVICE_CPU, b.s.data(), b.g.data(), nullptr, N, p, cpu.data());
                    void *ds, *dg, *dout;
                    maporl_device_malloc(4 * N, &ds);
                    maporl_device_malloc(4 * N, &dg);
                    maporl_device_malloc(4 * N, &dout);
                    maporl_memcpy_to_device(ds, b.s.data(), 4 * N);
                    maporl_memcpy_to_device(dg, b.g.data(), 4 * N);
                    CHECK(maporl_group_advantages(MAPORL_DEVICE_CUDA, (float *)ds, (int32_t *)dg, nullptr, N, p,
                                                  (float *)dout) == MAPORL_OK,
                          "%s", maporl_last_error());
                    maporl_memcpy_to_host(gpu.data(), dout, 4 * N);
                    std::vector<double> want(cpu.begin(), cpu.end());
                    int64_t at = -1;
                    CHECK(matches(gpu, want, 1e-5, &at), "CUDA N=%lld layout=%d baseline=%d whiten=%d at %lld",
                          (long long)N, layout, (int)p.baseline, p.whiten, (long long)at);
                    for (void * q : {ds, dg, dout}) maporl_device_free(q);
                }
            }
        }
}

// --bench: CUDA group advantages at N = 2^20, G = 16, adjacent and shuffled ids (for scripts/device-check.sh).
static void bench() {
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;
    const int64_t N = 1 << 20;
    for (int layout = 0; layout < 2; ++layout) {
        std::vector<float> s(N);
        std::vector<int32_t> g(N);
        std::mt19937 r(5);
        for (int64_t i = 0; i < N; ++i) {
            s[i] = (float)(r() % 1000) / 100.0f;
            g[i] = (int32_t)(i / 16);
        }
        if (layout) std::shuffle(g.begin(), g.end(), r);
        void *ds, *dg, *dout;
        maporl_device_malloc(4 * N, &ds);
        maporl_device_malloc(4 * N, &dg);
        maporl_device_malloc(4 * N, &dout);
        maporl_memcpy_to_device(ds, s.data(), 4 * N);
        maporl_memcpy_to_device(dg, g.data(), 4 * N);
        const maporl_group_params p = maporl_group_default_params();
        std::vector<double> ts;
        for (int k = 0; k < 30; ++k) {
            auto t0 = std::chrono::steady_clock::now();
            maporl_group_advantages(MAPORL_DEVICE_CUDA, (float *)ds, (int32_t *)dg, nullptr, N, p, (float *)dout);
            ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ts.begin(), ts.end());
        std::printf("BENCH group_advantages cuda N=%lld G=16 %s median_ms=%.4f\n", (long long)N,
                    layout ? "shuffled" : "adjacent", ts[15]);
        for (void * q : {ds, dg, dout}) maporl_device_free(q);
    }
}

int main(int argc, char ** argv) {
    int rc = check::run_all("test_group_advantages");
    if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) bench();
    return rc;
}
