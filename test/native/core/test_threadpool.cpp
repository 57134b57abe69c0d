// test_threadpool.cpp: the shared CPU pool covers every index exactly once with grain-aligned chunks,
// propagates exceptions, runs nested calls inline, survives resizes and concurrent callers.
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/core.h"
#include "native/core/threadpool.h"

TEST(covers_every_index_once_with_grain_aligned_chunks) {
    for (int threads : {1, 2, 3, 7}) {
        maporl::pool_set_threads(threads);
        for (int64_t n : {1, 2, 5, 64, 1000, 4097}) {
            for (int64_t grain : {1, 3, 16, 5000}) {
                std::vector<std::atomic<int>> hits((size_t)n);
                std::atomic<bool> aligned{true};
                maporl::parallel_for(n, grain, [&](int64_t b, int64_t e) {
                    if (b % grain != 0 || b >= e) aligned = false;
                    for (int64_t i = b; i < e; ++i) hits[(size_t)i]++;
                });
                bool once = true;
                for (auto & h : hits) once &= h.load() == 1;
                CHECK(once, "threads=%d n=%lld grain=%lld", threads, (long long)n, (long long)grain);
                CHECK(aligned.load(), "threads=%d n=%lld grain=%lld", threads, (long long)n, (long long)grain);
            }
        }
    }
    maporl::pool_set_threads(0);
}

TEST(empty_range_calls_nothing) {
    bool called = false;
    maporl::parallel_for(0, 1, [&](int64_t, int64_t) { called = true; });
    CHECK(!called, "fn called for n = 0");
}

TEST(exceptions_reach_the_caller_and_the_pool_stays_usable) {
    maporl::pool_set_threads(4);
    bool caught = false;
    try {
        maporl::parallel_for(100, 1, [&](int64_t b, int64_t e) {  // the chunk holding index 50, wherever chunks start
            if (b <= 50 && 50 < e) throw std::runtime_error("boom");
        });
    } catch (const std::runtime_error & e) { caught = std::string(e.what()) == "boom"; }
    CHECK(caught, "exception not propagated");
    std::atomic<int64_t> sum{0};
    maporl::parallel_for(100, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
    });
    CHECK(sum.load() == 4950, "sum %lld", (long long)sum.load());
    maporl::pool_set_threads(0);
}

TEST(nested_calls_run_inline) {
    maporl::pool_set_threads(3);
    std::atomic<int64_t> total{0};
    maporl::parallel_for(10, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) maporl::parallel_for(10, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    });
    CHECK(total.load() == 100, "total %lld", (long long)total.load());
    maporl::pool_set_threads(0);
}

TEST(concurrent_callers_and_resizes) {
    std::atomic<int64_t> total{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c)
        callers.emplace_back([&] {
            for (int k = 0; k < 50; ++k) maporl::parallel_for(1000, 7, [&](int64_t b, int64_t e) { total += e - b; });
        });
    for (int k = 0; k < 20; ++k) maporl::pool_set_threads(1 + k % 4);
    for (auto & t : callers) t.join();
    CHECK(total.load() == 4 * 50 * 1000, "total %lld", (long long)total.load());
    maporl::pool_set_threads(0);
}

TEST(set_threads_validates_through_the_c_abi) {
    CHECK(maporl_set_threads(-1) == MAPORL_ERR_INVALID_ARG, "negative accepted");
    CHECK(std::strstr(maporl_last_error(), "threads") != nullptr, "message: %s", maporl_last_error());
    CHECK(maporl_set_threads(5000) == MAPORL_ERR_INVALID_ARG, "5000 accepted");
    CHECK(maporl_set_threads(2) == MAPORL_OK && maporl_get_threads() == 2, "threads %d", maporl_get_threads());
    CHECK(maporl_set_threads(0) == MAPORL_OK && maporl_get_threads() >= 1, "threads %d", maporl_get_threads());
    CHECK(std::strcmp(maporl_last_error(), "") == 0, "error not cleared: %s", maporl_last_error());
}

int main() { return check::run_all("test_threadpool"); }
