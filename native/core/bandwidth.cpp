// bandwidth.cpp: measures host memory bandwidth with the thread pool, the denominators of the benchmark harness's
// memory floors (bytes a kernel must move / this rate): a copy (read + write) and a read-only stream. Not kernels.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "native/core/core.h"
#include "native/core/threadpool.h"

namespace {

void check_probe_args(size_t bytes, int reps, const double * out) {
    using namespace maporl;
    if (out == nullptr)
        throw_error(MAPORL_ERR_INVALID_ARG, "bytes_per_second_out: expected a non-NULL pointer, got NULL");
    if (bytes < 4096 || bytes > ((size_t)1 << 34))
        throw_error(MAPORL_ERR_INVALID_ARG, "bytes: expected in [4096, 2^34], got %zu", bytes);
    if (reps < 1 || reps > 1000) throw_error(MAPORL_ERR_INVALID_ARG, "reps: expected in [1, 1000], got %d", reps);
}

// The sum of a[i0 .. i1) in eight independent chains, prefetching 4 KiB ahead: a plain read stream (the compiler
// vectorises it at the baseline ISA; wider loads or other prefetch distances and hints measured the same here).
uint64_t read_words(const uint64_t * a, int64_t i0, int64_t i1) {
    uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        __builtin_prefetch(a + i + 512);
        for (int j = 0; j < 8; ++j) s[j] += a[i + j];
    }
    for (; i < i1; ++i) s[0] += a[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// `run` once untimed (page faults, caches), then `reps` timed runs: the median of counted_bytes / time.
template <typename Run>
double median_rate(int reps, double counted_bytes, Run run) {
    run();
    std::vector<double> rates;
    for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        run();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back(counted_bytes / std::max(s, 1e-9));
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

}  // namespace

extern "C" maporl_status maporl_measure_copy_bandwidth(size_t bytes, int reps, double * bytes_per_second_out) {
    using namespace maporl;
    return guarded([&] {
        check_probe_args(bytes, reps, bytes_per_second_out);
        std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched once: no page faults inside the timing
        *bytes_per_second_out = median_rate(reps, 2.0 * (double)bytes, [&] {
            parallel_for((int64_t)bytes, 1 << 16,
                         [&](int64_t b, int64_t e) { std::memcpy(dst.data() + b, src.data() + b, (size_t)(e - b)); });
        });
        return MAPORL_OK;
    });
}

extern "C" maporl_status maporl_measure_read_bandwidth(size_t bytes, int reps, double * bytes_per_second_out) {
    using namespace maporl;
    return guarded([&] {
        check_probe_args(bytes, reps, bytes_per_second_out);
        const int64_t words = (int64_t)(bytes / 8);
        std::vector<uint64_t> src((size_t)words + 512, 1);  // (the prefetches past the end stay inside)
        std::atomic<uint64_t> sink{0};                      // the sums are used: the reads cannot be dropped
        const double rate = median_rate(reps, 8.0 * (double)words, [&] {
            parallel_for(words, 1 << 13, [&](int64_t i0, int64_t i1) {
                sink.fetch_add(read_words(src.data(), i0, i1), std::memory_order_relaxed);
            });
        });
        if (sink.load() == 0) throw_error(MAPORL_ERR_INTERNAL, "measure_read_bandwidth: the stream summed to 0");
        *bytes_per_second_out = rate;
        return MAPORL_OK;
    });
}
