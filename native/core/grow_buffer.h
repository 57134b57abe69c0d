// grow_buffer.h: a buffer whose reset allocates the new block before it releases the old one (allocate, then swap).
// When the allocation fails (out of memory), the old block, its size and every pointer carved from it stay valid, so
// a retry with a smaller batch, or a call that reads the old contents, uses live memory: cuda/model/gpt.cu's
// activation arena, KV cache and token buffers are GrowBuffer<CudaAlloc>. Alloc supplies static
// `void * allocate(int64_t bytes)` (throws on failure) and `void release(void *)` (null-safe).
#pragma once

#include <stdint.h>

namespace maporl {

template <class Alloc>
struct GrowBuffer {
    void * p = nullptr;
    int64_t bytes = 0;

    GrowBuffer() = default;
    GrowBuffer(const GrowBuffer &) = delete;
    GrowBuffer & operator=(const GrowBuffer &) = delete;
    ~GrowBuffer() { Alloc::release(p); }

    // A new block of n bytes (the old contents are not kept; n <= 0 frees the block). Throws, changing nothing, when
    // the allocation fails.
    void reset(int64_t n) {
        void * q = n > 0 ? Alloc::allocate(n) : nullptr;
        Alloc::release(p);
        p = q;
        bytes = n > 0 ? n : 0;
    }

    // At least n bytes: a new block (the contents lost) only when the current one is smaller; true when it made one.
    bool reserve(int64_t n) {
        if (n <= bytes) return false;
        reset(n);
        return true;
    }

    float * f() const { return static_cast<float *>(p); }
    int32_t * i() const { return static_cast<int32_t *>(p); }
};

}  // namespace maporl
