// bandwidth.cpp: measures host copy bandwidth with the thread pool, the denominator of the benchmark
// harness's memory floor (bytes a kernel must move / this rate). Not a kernel.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "native/core/core.h"
#include "native/core/threadpool.h"

extern "C" maporl_status maporl_measure_copy_bandwidth(size_t bytes, int reps, double * bytes_per_second_out) {
    using namespace maporl;
    return guarded([&] {
        if (bytes_per_second_out == nullptr)
            throw_error(MAPORL_ERR_INVALID_ARG, "bytes_per_second_out: expected a non-NULL pointer, got NULL");
        if (bytes < 4096 || bytes > ((size_t)1 << 34))
            throw_error(MAPORL_ERR_INVALID_ARG, "bytes: expected in [4096, 2^34], got %zu", bytes);
        if (reps < 1 || reps > 1000) throw_error(MAPORL_ERR_INVALID_ARG, "reps: expected in [1, 1000], got %d", reps);
        std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched once: no page faults inside the timing
        const int64_t grain = 1 << 16;
        auto copy = [&] {
            parallel_for((int64_t)bytes, grain, [&](int64_t b, int64_t e) {
                std::memcpy(dst.data() + b, src.data() + b, (size_t)(e - b));
            });
        };
        copy();
        std::vector<double> rates;
        for (int i = 0; i < reps; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            copy();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            rates.push_back(2.0 * (double)bytes / std::max(s, 1e-9));
        }
        std::sort(rates.begin(), rates.end());
        *bytes_per_second_out = rates[rates.size() / 2];
        return MAPORL_OK;
    });
}
