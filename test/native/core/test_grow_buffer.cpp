// test_grow_buffer.cpp: native/core/grow_buffer.h, which CUDA's model buffers use, with a host allocator that fails
// on demand (as cudaMalloc does when the device is out of memory): a failed reset or reserve leaves the old block, its
// size and the pointers carved from it valid (written and read after the failure: under AddressSanitizer, in CI, a
// freed block would be reported), and the next successful one replaces it. The pattern it replaced (release, then
// allocate: Dev::reset in gpt.cu) fails it: the block is gone while the size still describes it.
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "test/native/core/check.h"
#include "native/core/grow_buffer.h"

namespace {

struct FailingAlloc {
    static int fail_next;  // the next allocations that fail
    static int live;
    static void * allocate(int64_t bytes) {
        if (fail_next > 0) {
            --fail_next;
            throw std::runtime_error("out of memory");
        }
        ++live;
        return std::malloc((size_t)bytes);
    }
    static void release(void * p) {
        if (p) --live;
        std::free(p);
    }
};
int FailingAlloc::fail_next = 0;
int FailingAlloc::live = 0;

using Buf = maporl::GrowBuffer<FailingAlloc>;

TEST(a_failed_reset_keeps_the_old_block_valid) {
    {
        Buf b;
        b.reset(64 * sizeof(float));
        float * carved = b.f() + 16;  // a pointer into the block, as the arena's layer pointers are
        for (int i = 0; i < 64; ++i) b.f()[i] = (float)i;
        FailingAlloc::fail_next = 1;
        bool threw = false;
        try {
            b.reset(1 << 20);
        } catch (const std::runtime_error &) { threw = true; }
        CHECK(threw, "the failed allocation is reported");
        CHECK(b.bytes == 64 * (int64_t)sizeof(float), "the size still describes the old block: %lld",
              (long long)b.bytes);
        CHECK(b.f() + 16 == carved && carved[0] == 16.0f && b.f()[63] == 63.0f,
              "the old block and its contents are live");
        carved[1] = -1.0f;  // written after the failure (ASan: a use after free in the old pattern)
        CHECK(b.f()[17] == -1.0f, "and writable");
        CHECK(!b.reserve(32 * sizeof(float)), "a smaller request keeps the block");
        CHECK(b.reserve(128 * sizeof(float)) && b.bytes == 128 * (int64_t)sizeof(float),
              "a larger one, now succeeding, replaces it");
        b.f()[127] = 1.0f;
        FailingAlloc::fail_next = 1;
        threw = false;
        try {
            b.reserve(1 << 20);
        } catch (const std::runtime_error &) { threw = true; }
        CHECK(threw && b.bytes == 128 * (int64_t)sizeof(float) && b.f()[127] == 1.0f,
              "a failed reserve changes nothing");
        b.reset(0);
        CHECK(b.p == nullptr && b.bytes == 0, "reset(0) frees");
    }
    CHECK(FailingAlloc::live == 0, "every block released: %d live", FailingAlloc::live);
}

}  // namespace

int main() { return check::run_all("test_grow_buffer"); }
