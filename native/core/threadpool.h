// threadpool.h: the one CPU thread pool shared by every kernel. Work is split into contiguous chunks whose
// boundaries are multiples of a grain, so a kernel that computes each index independently gives the same
// result whatever the thread count. Not a task scheduler: one parallel_for runs at a time (concurrent
// callers wait their turn), and a nested parallel_for called from inside a chunk runs inline.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>

namespace maporl {

// Threads used by parallel_for, the calling thread included (>= 1).
int pool_threads();
// n = 0: hardware threads. Throws Error(MAPORL_ERR_INVALID_ARG) outside [0, 1024].
void pool_set_threads(int n);

// Calls fn(begin, end) on disjoint ranges covering [0, n). Every range boundary except n itself is a
// multiple of `grain` (>= 1). Runs inline when one chunk covers everything. Exceptions thrown by fn are
// rethrown in the caller (the first one; the other chunks still finish).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> & fn);

// a[0 .. n) = 0 on the pool's threads (a full model's gradients are 4 bytes per parameter: 540 MB at 135M).
template <typename T>
void zero_parallel(T * a, size_t n) {
    parallel_for((int64_t)n, (int64_t)1 << 14,
                 [a](int64_t i0, int64_t i1) { std::memset(a + i0, 0, sizeof(T) * (size_t)(i1 - i0)); });
}

}  // namespace maporl
