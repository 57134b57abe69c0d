// output_pool.cpp: the pool behind the kernels' default outputs (lib/alloc.ts). A kernel called without `out` needs
// fresh output memory, and fresh memory costs a page fault per 4 KiB plus the OS zeroing it: 3 ms for gae's two
// 4 MiB outputs against 0.55 ms for the kernel (PyTorch's CPU tensors avoid it because CPython frees them at once
// and malloc reuses the pages). Here an output is a block of already-faulted memory handed out as an external
// ArrayBuffer; when V8 collects the ArrayBuffer, Node runs our finalizer on the JS thread (at the next turn of the
// event loop) and the block goes back to its free list for the next call of the same size.
//
// Bounds: blocks handed out and blocks cached count together against `limit` bytes (default 512 MiB,
// MAPORL_OUTPUT_POOL_BYTES, setOutputPool). A request that does not fit once the cached blocks of other sizes are
// unmapped gets undefined, and lib/alloc.ts falls back to a V8-managed allocation. That bound matters for a
// synchronous loop: its finalizers cannot run until it yields, so without it the outputs it dropped would pile up.
// A synchronous loop also stops getting new blocks of a size once 64 MiB of them (and at least two) went out with
// none coming back:
// they would cost the same faults as a plain allocation and stay held until the loop ends, where V8's own
// allocations are freed by the GC during the loop. Blocks of 32 MiB and more are 2 MiB-aligned mappings advised to
// transparent huge pages (as lib/alloc.ts does for plain ones; below that, compaction on a miss cost more than it
// saved here). A runtime that refuses external buffers (Electron's V8 sandbox) also gets undefined.
#include <napi.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#if defined(__linux__) || defined(__APPLE__)
#include <sys/mman.h>
#define MAPORL_POOL_MMAP 1
#endif

#include "bindings/core/args.h"

namespace maporl_js {
namespace {

constexpr size_t kPage = 4096, kHuge = (size_t)2 << 20, kHugeAdvice = (size_t)32 << 20, kStreakBytes = (size_t)64 << 20;

// Size classes: 4 per octave (x1, x1.25, x1.5, x1.75), whole pages: at most 25% slack, and repeated calls of one
// shape always meet the same class.
size_t SizeClass(size_t bytes) {
    size_t octave = kPage;
    while (octave * 2 <= bytes) octave *= 2;
    for (size_t q = 0; q <= 4; ++q) {
        const size_t c = octave + octave / 4 * q;
        if (c >= bytes) return (c + kPage - 1) / kPage * kPage;
    }
    return octave * 2;
}

struct Block {
    void * base;  // what the mapping starts at (before alignment)
    size_t mapped;
};

struct Pool {
    std::mutex mu;
    size_t limit;
    size_t cached = 0, outstanding = 0;
    double hits = 0, misses = 0, refused = 0;
    std::unordered_map<void *, Block> blocks;              // every block: data pointer -> its mapping
    std::unordered_map<size_t, std::vector<void *>> free;  // size class -> cached data pointers
    std::unordered_map<size_t, size_t> streak;             // size class -> bytes of new blocks since one came back

    Pool() {
        limit = (size_t)512 << 20;
        if (const char * env = std::getenv("MAPORL_OUTPUT_POOL_BYTES")) {
            char * end = nullptr;
            const unsigned long long v = std::strtoull(env, &end, 10);
            if (end != env && *end == '\0') limit = (size_t)v;
        }
    }
};

Pool & ThePool() {
    static Pool * pool = new Pool();  // never destroyed: finalizers may run during teardown
    return *pool;
}

void * MapBlock(size_t size, Block * b) {
#if MAPORL_POOL_MMAP
    const size_t extra = size >= kHugeAdvice ? kHuge : 0;
    void * p = mmap(nullptr, size + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    uintptr_t data = (uintptr_t)p;
    if (extra) {
        data = (data + kHuge - 1) & ~(uintptr_t)(kHuge - 1);
#if defined(MADV_HUGEPAGE)
        madvise((void *)data, size, MADV_HUGEPAGE);
#endif
    }
    b->base = p;
    b->mapped = size + extra;
    return (void *)data;
#else
    void * p = std::malloc(size);
    b->base = p;
    b->mapped = size;
    return p;
#endif
}

void UnmapBlock(const Block & b) {
#if MAPORL_POOL_MMAP
    munmap(b.base, b.mapped);
#else
    std::free(b.base);
#endif
}

// Unmaps cached blocks (any class but `keep`) until `need` more bytes fit under the limit. Caller holds the lock.
void EvictFor(Pool & pool, size_t need, size_t keep) {
    for (auto it = pool.free.begin(); it != pool.free.end() && pool.cached + pool.outstanding + need > pool.limit;
         ++it) {
        if (it->first == keep) continue;
        auto & list = it->second;
        while (!list.empty() && pool.cached + pool.outstanding + need > pool.limit) {
            void * data = list.back();
            list.pop_back();
            UnmapBlock(pool.blocks[data]);
            pool.blocks.erase(data);
            pool.cached -= it->first;
        }
    }
}

void * Acquire(size_t size) {
    Pool & pool = ThePool();
    std::lock_guard<std::mutex> lock(pool.mu);
    auto & list = pool.free[size];
    if (!list.empty()) {
        void * data = list.back();
        list.pop_back();
        pool.cached -= size;
        pool.outstanding += size;
        pool.hits += 1;
        return data;
    }
    // New blocks of a class that none came back of since kStreakBytes (and two blocks): a loop that does not yield
    // (its finalizers cannot run), and more new blocks would only fault like a plain allocation and stay held.
    size_t & streak = pool.streak[size];
    if (streak >= kStreakBytes && streak >= 2 * size) {
        pool.refused += 1;
        return nullptr;
    }
    EvictFor(pool, size, size);
    if (pool.cached + pool.outstanding + size > pool.limit) {
        pool.refused += 1;
        return nullptr;
    }
    Block b;
    void * data = MapBlock(size, &b);
    if (data == nullptr) {
        pool.refused += 1;
        return nullptr;
    }
    pool.blocks[data] = b;
    pool.outstanding += size;
    pool.misses += 1;
    streak += size;
    return data;
}

// Back to its free list, or unmapped when the limit was lowered below what is held.
void Release(void * data, size_t size) {
    Pool & pool = ThePool();
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.outstanding -= size;
    pool.streak[size] = 0;
    if (pool.cached + pool.outstanding + size > pool.limit) {
        UnmapBlock(pool.blocks[data]);
        pool.blocks.erase(data);
        return;
    }
    pool.free[size].push_back(data);
    pool.cached += size;
}

void Finalize(napi_env env, void * data, void * hint) {
    const size_t size = (size_t)(uintptr_t)hint;
    Release(data, size);
    int64_t ignored;
    napi_adjust_external_memory(env, -(int64_t)size, &ignored);
}

// outputBuffer(bytes) -> ArrayBuffer of exactly `bytes` (over a block of its size class) | undefined
Napi::Value JsOutputBuffer(const Napi::CallbackInfo & info) {
    const size_t bytes = (size_t)RequireInt(info, 0, "bytes", 1, (int64_t)1 << 46);
    const size_t size = SizeClass(bytes);
    void * data = Acquire(size);
    if (data == nullptr) return info.Env().Undefined();
    napi_value ab;
    if (napi_create_external_arraybuffer(info.Env(), data, bytes, Finalize, (void *)(uintptr_t)size, &ab) != napi_ok) {
        Release(data, size);  // e.g. napi_no_external_buffers_allowed; a pending exception is cleared below
        napi_value ignored;
        bool pending = false;
        if (napi_is_exception_pending(info.Env(), &pending) == napi_ok && pending)
            napi_get_and_clear_last_exception(info.Env(), &ignored);
        return info.Env().Undefined();
    }
    // V8 learns of the block's memory, so that outputs dropped at a fast pace bring the collection (and with it
    // their return to the pool) sooner.
    int64_t ignored;
    napi_adjust_external_memory(info.Env(), (int64_t)size, &ignored);
    return Napi::Value(info.Env(), ab);
}

Napi::Value PoolStats(Napi::Env env) {
    Pool & pool = ThePool();
    std::lock_guard<std::mutex> lock(pool.mu);
    Napi::Object o = Napi::Object::New(env);
    o.Set("limitBytes", (double)pool.limit);
    o.Set("cachedBytes", (double)pool.cached);
    o.Set("outstandingBytes", (double)pool.outstanding);
    o.Set("hits", pool.hits);
    o.Set("misses", pool.misses);
    o.Set("refused", pool.refused);
    return o;
}

Napi::Value JsOutputPoolStats(const Napi::CallbackInfo & info) { return PoolStats(info.Env()); }

// setOutputPool(limitBytes): a new limit; cached blocks over it are unmapped now (0 empties the cache and turns
// pooling off), outstanding ones when they come back.
Napi::Value JsSetOutputPool(const Napi::CallbackInfo & info) {
    const size_t limit = (size_t)RequireInt(info, 0, "limitBytes", 0, (int64_t)1 << 50);
    {
        Pool & pool = ThePool();
        std::lock_guard<std::mutex> lock(pool.mu);
        pool.limit = limit;
        EvictFor(pool, 0, 0);  // no class is 0 bytes: every cached class may go
    }
    return PoolStats(info.Env());
}

}  // namespace

void InitOutputPool(Napi::Env env, Napi::Object exports) {
    exports.Set("outputBuffer", Napi::Function::New(env, JsOutputBuffer, "outputBuffer"));
    exports.Set("outputPoolStats", Napi::Function::New(env, JsOutputPoolStats, "outputPoolStats"));
    exports.Set("setOutputPool", Napi::Function::New(env, JsSetOutputPool, "setOutputPool"));
}

}  // namespace maporl_js
