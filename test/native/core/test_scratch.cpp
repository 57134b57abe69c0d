// test_scratch.cpp: the per-thread scratch lease (native/core/scratch.h): a lease is 64-byte aligned and writable in
// full; a second lease on the same thread reuses the first one's memory; a nested lease (while one is held) and
// a lease above kScratchKeep get their own memory; leases on other threads never share a buffer.
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/scratch.h"

using maporl::ScratchLease;

TEST(a_lease_is_aligned_writable_and_reused) {
    void * first = nullptr;
    {
        ScratchLease a(1000);
        first = a.data();
        CHECK(((uintptr_t)first & 63) == 0, "alignment %p", first);
        std::memset(first, 0xAB, 1000);
    }
    {
        ScratchLease b(600);  // smaller: the same buffer
        CHECK(b.data() == first, "reuse: %p vs %p", b.data(), first);
    }
    {
        ScratchLease c(1 << 20);  // larger: regrown, then kept
        std::memset(c.data(), 1, 1 << 20);
        first = c.data();
    }
    ScratchLease d(1 << 20);
    CHECK(d.data() == first, "regrown buffer kept: %p vs %p", d.data(), first);
}

TEST(nested_and_oversized_leases_get_their_own_memory) {
    ScratchLease outer(4096);
    ScratchLease inner(4096);
    CHECK(inner.data() != outer.data(), "a nested lease shares the held buffer");
    std::memset(inner.data(), 2, 4096);
    std::memset(outer.data(), 3, 4096);
    CHECK(static_cast<unsigned char *>(inner.data())[4095] == 2, "nested lease overwritten");
    ScratchLease big(maporl::kScratchKeep + 64);
    CHECK(big.data() != outer.data() && ((uintptr_t)big.data() & 63) == 0, "oversized lease");
    static_cast<unsigned char *>(big.data())[maporl::kScratchKeep + 63] = 1;
}

TEST(threads_get_separate_buffers) {
    void * mine = nullptr;
    {
        ScratchLease a(256);
        mine = a.data();
    }
    void * theirs = nullptr;
    std::thread t([&] {
        ScratchLease b(256);
        theirs = b.data();
        std::memset(theirs, 5, 256);
    });
    t.join();
    ScratchLease c(256);
    CHECK(c.data() == mine && theirs != nullptr && theirs != mine, "per-thread buffers: %p %p", theirs, mine);
}

int main() { return check::run_all("test_scratch"); }
