// peak_flops.cpp: measures the machine's peak float FMA rate with the thread pool (every thread runs independent
// FMA chains at the active SIMD level), the denominator of the benchmark harness's GEMM efficiency. Not a kernel.
#include <algorithm>
#include <chrono>
#include <vector>

#include "native/core/core.h"
#include "native/core/isa.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace avx512 {
double fma_loop(int64_t iters, float * sink);
}
namespace avx2 {
double fma_loop(int64_t iters, float * sink);
}
namespace {

// The scalar level: 12 chains of fmaf.
double scalar_fma_loop(int64_t iters, float * sink) {
    float acc[12];
    for (int r = 0; r < 12; ++r) acc[r] = 1e-3f * (float)r;
    for (int64_t it = 0; it < iters; ++it)
        for (int r = 0; r < 12; ++r) acc[r] = __builtin_fmaf(acc[r], 0.999f, 1e-4f);
    float s = 0;
    for (float a : acc) s += a;
    *sink = s;
    return 24.0 * (double)iters;
}

}  // namespace
}  // namespace maporl

extern "C" maporl_status maporl_measure_peak_flops(int reps, double * flops_per_second_out) {
    using namespace maporl;
    return guarded([&] {
        if (flops_per_second_out == nullptr)
            throw_error(MAPORL_ERR_INVALID_ARG, "flops_per_second_out: expected a non-NULL pointer, got NULL");
        if (reps < 1 || reps > 1000) throw_error(MAPORL_ERR_INVALID_ARG, "reps: expected in [1, 1000], got %d", reps);
        const Isa isa = active_isa();
        double (*loop)(int64_t, float *) = isa == Isa::Avx512 ? avx512::fma_loop
            : isa == Isa::Avx2                                ? avx2::fma_loop
                                                              : scalar_fma_loop;
        const int64_t threads = pool_threads(), iters = 2000000;
        std::vector<float> sink((size_t)threads);
        std::vector<double> flops((size_t)threads);
        auto run = [&] {
            parallel_for(threads, 1, [&](int64_t t0, int64_t t1) {
                for (int64_t t = t0; t < t1; ++t) flops[(size_t)t] = loop(iters, &sink[(size_t)t]);
            });
        };
        run();
        std::vector<double> rates;
        for (int i = 0; i < reps; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            run();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), total = 0;
            for (double f : flops) total += f;
            rates.push_back(total / std::max(s, 1e-9));
        }
        std::sort(rates.begin(), rates.end());
        *flops_per_second_out = rates[rates.size() / 2];
        return MAPORL_OK;
    });
}
