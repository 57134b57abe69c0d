// scratch.h: a per-thread scratch buffer kept between calls. A fresh multi-MiB allocation is served by mmap and
// faults in every 4 KiB page on every call (about 0.5 us each here: 1-2 ms for 8 MiB, as much as the work
// itself for the table path of group advantages); a kernel that needs a large temporary leases it from here
// instead. Up to kScratchKeep bytes stay cached per thread (the calling thread: the main thread or a libuv
// worker); a larger lease is a plain allocation freed when the lease ends.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace maporl {

constexpr size_t kScratchKeep = size_t(64) << 20;

class ScratchLease {
public:
    explicit ScratchLease(size_t bytes) {
        bytes = bytes == 0 ? 1 : bytes;
        Cache & c = cache();
        if (bytes <= kScratchKeep && !c.leased) {
            if (c.size < bytes) {
                c.buf.reset();
                c.buf.reset(static_cast<unsigned char *>(alloc(bytes)));
                c.size = bytes;
            }
            c.leased = true;
            ptr_ = c.buf.get();
            cached_ = true;
        } else {
            own_.reset(static_cast<unsigned char *>(alloc(bytes)));
            ptr_ = own_.get();
        }
    }
    ~ScratchLease() {
        if (cached_) cache().leased = false;
    }
    ScratchLease(const ScratchLease &) = delete;
    ScratchLease & operator=(const ScratchLease &) = delete;

    // 64-byte aligned, uninitialised.
    void * data() const { return ptr_; }

private:
    struct Free {
        void operator()(unsigned char * p) const { std::free(p); }
    };
    struct Cache {
        std::unique_ptr<unsigned char[], Free> buf;
        size_t size = 0;
        bool leased = false;  // a nested lease on the same thread gets its own allocation
    };
    static Cache & cache() {
        thread_local Cache c;
        return c;
    }
    static void * alloc(size_t bytes) {
        void * p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (p == nullptr) throw std::bad_alloc();
        return p;
    }
    unsigned char * ptr_ = nullptr;
    bool cached_ = false;
    std::unique_ptr<unsigned char[], Free> own_;
};

}  // namespace maporl
