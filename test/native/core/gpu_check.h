// gpu_check.h: what the C++ tests that compare CUDA with the CPU share (check.h is the harness). GPU_TEST registers
// a test that main() adds to the harness only when a device is visible, so a machine without one neither runs nor
// counts it (it says how many it left out); D<X> is a device copy of a host vector; median_ms times a callable;
// rnd makes random inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/gpt_cuda.h"
#include "maporl.h"

namespace gpu_check {

// n uniform floats in [-scale, scale) from a fixed seed.
inline std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = u(r);
    return v;
}

// max |got - want| / (max |want| + 1e-30) <= tol, and no NaN / Inf in got. Prints the worst entry.
inline bool close_rel(const std::vector<float> & got, const std::vector<float> & want, double tol, const char * what) {
    if (got.size() != want.size()) {
        std::printf("  %s: size %zu vs %zu\n", what, got.size(), want.size());
        return false;
    }
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, (double)std::fabs(want[i]));
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            std::printf("  %s[%zu]: not finite (%g)\n", what, i, (double)got[i]);
            return false;
        }
        const double d = std::fabs((double)got[i] - (double)want[i]);
        if (d > worst) worst = d, at = i;
    }
    const double rel = worst / (scale + 1e-30);
    if (rel > tol)
        std::printf("  %s: worst at %zu: cuda %.8g, cpu %.8g (rel %.3g > %.3g)\n", what, at, (double)got[at],
                    (double)want[at], rel, tol);
    return rel <= tol;
}

inline int devices() {
    int n = 0;
    return maporl_cuda_device_count(&n) == MAPORL_OK ? n : 0;
}

inline std::vector<check::Test> & tests() {
    static std::vector<check::Test> t;
    return t;
}
struct Register {
    Register(const char * name, std::function<void()> fn) { tests().push_back({name, std::move(fn)}); }
};

// main() of a CUDA test binary: the GPU tests join the harness when a device is visible; `--bench` then runs bench.
inline int run(const char * binary, const char * what, int argc, char ** argv, void (*bench)()) {
    if (devices() > 0)
        for (auto & t : tests()) check::registry().push_back(t);
    else if (!tests().empty())
        std::printf("  (no CUDA device: %zu %s tests not run)\n", tests().size(), what);
    const int rc = check::run_all(binary);
    if (argc > 1 && std::strcmp(argv[1], "--bench") == 0 && bench) bench();
    return rc;
}

// The median of `reps` timed calls after one warm-up call, in milliseconds.
template <typename Fn>
double median_ms(Fn && fn, int reps) {
    std::vector<double> t;
    fn();
    for (int i = 0; i < reps; ++i) {
        const auto a = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

#ifdef MAPORL_WITH_CUDA

// A device copy of a host vector, freed on scope exit.
template <typename X>
struct D {
    X * p = nullptr;
    int64_t n = 0;
    explicit D(const std::vector<X> & h) : n((int64_t)h.size()) {
        p = (X *)maporl::gpt::cuda::alloc_f32((n * (int64_t)sizeof(X) + 3) / 4);
        maporl::gpt::cuda::to_device(p, h.data(), n * (int64_t)sizeof(X));
    }
    explicit D(int64_t count) : D(std::vector<X>((size_t)count, X(0))) {}
    D(const D &) = delete;
    D & operator=(const D &) = delete;
    ~D() { maporl::gpt::cuda::release(p); }
    std::vector<X> host() const {
        maporl::gpt::cuda::synchronize("test");
        std::vector<X> h((size_t)n);
        maporl::gpt::cuda::to_host(h.data(), p, n * (int64_t)sizeof(X));
        return h;
    }
};

#endif

}  // namespace gpu_check

#define GPU_TEST(name)                                                    \
    static void name();                                                   \
    static gpu_check::Register CHECK_CONCAT(gpu_reg_, name)(#name, name); \
    static void name()
