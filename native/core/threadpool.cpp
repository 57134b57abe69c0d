// threadpool.cpp: a fixed set of worker threads woken per parallel_for; the caller works too.
#include "native/core/threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "native/core/core.h"

namespace maporl {
namespace {

thread_local bool t_inside_pool = false;

int hardware_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : (int)std::min(n, 1024u);
}

class Pool {
public:
    ~Pool() { stop_workers(); }

    // Lock-free once set: a kernel may ask from any thread, even while another thread's parallel_for holds
    // the dispatch lock (or from inside a chunk, where taking that lock would deadlock).
    int threads() {
        const int n = published_.load(std::memory_order_acquire);
        if (n > 0) return n;
        if (t_inside_pool) return hardware_threads();
        std::lock_guard<std::mutex> lk(dispatch_);
        ensure_started();
        return threads_;
    }

    void set_threads(int n) {
        std::lock_guard<std::mutex> lk(dispatch_);
        int want = n == 0 ? hardware_threads() : n;
        if (started_ && want == threads_) return;
        stop_workers();
        threads_ = want;
        start_workers();
    }

    void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> & fn) {
        if (n <= 0) return;
        if (grain < 1) grain = 1;
        const int64_t units = (n + grain - 1) / grain;  // chunks are made of whole grains
        if (t_inside_pool || units == 1) {
            fn(0, n);
            return;
        }
        std::unique_lock<std::mutex> dispatch(dispatch_);
        ensure_started();
        if (threads_ == 1) {
            dispatch.unlock();
            fn(0, n);
            return;
        }
        job_.fn = &fn;
        job_.n = n;
        job_.grain = grain;
        job_.units = units;
        job_.threads = threads_;
        job_.next.store(0);
        job_.error = nullptr;
        {
            std::lock_guard<std::mutex> lk(wake_mu_);
            open_ = true;
            gen_pub_.store(++generation_, std::memory_order_release);
        }
        wake_cv_.notify_all();
        work_on_job();
        // The workers usually finish within microseconds of the caller: wait for them spinning briefly before
        // sleeping on the condition variable (a decode step runs ~200 jobs; a futex wake-up each cost ~10% of it).
        spin_until([&] { return active_pub_.load(std::memory_order_acquire) == 0; });
        {
            // Every chunk is claimed now; close the job so late wakers skip it, then wait for the workers
            // still running a chunk. After this no worker touches job_.
            std::unique_lock<std::mutex> lk(wake_mu_);
            open_ = false;
            idle_cv_.wait(lk, [&] { return active_ == 0; });
        }
        job_.fn = nullptr;
        std::exception_ptr err = job_.error;
        dispatch.unlock();
        if (err) std::rethrow_exception(err);
    }

private:
    struct Job {
        const std::function<void(int64_t, int64_t)> * fn = nullptr;
        int64_t n = 0, grain = 1, units = 0, threads = 1;
        std::atomic<int64_t> next{0};
        std::exception_ptr error;
        std::mutex error_mu;
    };

    void ensure_started() {
        if (!started_) {
            threads_ = hardware_threads();
            start_workers();
        }
    }

    void start_workers() {
        uint64_t gen;
        {
            std::lock_guard<std::mutex> lk(wake_mu_);
            stopping_ = false;
            gen = generation_;
        }
        // The starting generation is taken here, not in the new thread: a stop issued before the thread first
        // runs must still be seen (the predicate also checks stopping_).
        for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, gen] { worker_loop(gen); });
        started_ = true;
        published_.store(threads_, std::memory_order_release);
    }

    void stop_workers() {
        {
            std::lock_guard<std::mutex> lk(wake_mu_);
            stopping_ = true;
            gen_pub_.store(++generation_, std::memory_order_release);
        }
        wake_cv_.notify_all();
        for (auto & w : workers_) w.join();
        workers_.clear();
        started_ = false;
    }

    // Guided chunks: each claim takes a share of the grains left (1 / (2 x threads) of them, at least one), so the
    // first chunks are large (few claims) and the last ones a grain: the threads finish within about one grain of
    // each other. (Fixed chunks, 4 per thread, left one thread idle for half a chunk on average at the end of every
    // job: 1/16 of a job on two threads; a decode step runs ~120 jobs, and the copy probe read ~20% low.)
    void work_on_job() {
        const bool was_inside = t_inside_pool;
        t_inside_pool = true;
        const int64_t units = job_.units, share = 2 * job_.threads;
        for (;;) {
            int64_t g0 = job_.next.load(std::memory_order_relaxed), g1;
            do {
                if (g0 >= units) break;
                g1 = g0 + std::max<int64_t>(1, (units - g0) / share);
            } while (!job_.next.compare_exchange_weak(g0, g1, std::memory_order_relaxed));
            if (g0 >= units) break;
            int64_t b = g0 * job_.grain, e = std::min(job_.n, g1 * job_.grain);
            try {
                (*job_.fn)(b, e);
            } catch (...) {
                std::lock_guard<std::mutex> lk(job_.error_mu);
                if (!job_.error) job_.error = std::current_exception();
            }
        }
        t_inside_pool = was_inside;
    }

    // Spins up to kSpinMicros for done() before the caller blocks on a condition variable (the next job of a
    // kernel sequence usually comes within microseconds). Only a shortcut: the locked waits decide.
    template <class Done>
    static void spin_until(Done done) {
        constexpr int64_t kSpinMicros = 50;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if ((i & 63) == 63 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(kSpinMicros))
                return;
        }
    }

    void worker_loop(uint64_t seen) {
        for (;;) {
            spin_until([&] { return gen_pub_.load(std::memory_order_acquire) != seen; });
            {
                std::unique_lock<std::mutex> lk(wake_mu_);
                wake_cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
                seen = generation_;
                if (stopping_) return;
                if (!open_) continue;  // woke after the job closed
                active_pub_.store(++active_, std::memory_order_release);
            }
            work_on_job();
            {
                std::lock_guard<std::mutex> lk(wake_mu_);
                active_pub_.store(--active_, std::memory_order_release);
                if (active_ == 0) idle_cv_.notify_all();
            }
        }
    }

    std::mutex dispatch_;  // one parallel_for (or resize) at a time
    std::mutex wake_mu_;
    std::condition_variable wake_cv_;
    std::condition_variable idle_cv_;
    uint64_t generation_ = 0;
    std::atomic<uint64_t> gen_pub_{0};  // generation_ and active_ as published for the lock-free spins
    std::atomic<int> active_pub_{0};
    bool open_ = false;  // a job is accepting workers (guarded by wake_mu_)
    int active_ = 0;     // workers inside work_on_job (guarded by wake_mu_)
    bool stopping_ = false;
    bool started_ = false;
    int threads_ = 1;
    std::atomic<int> published_{0};  // threads_ once the workers run, for threads()
    std::vector<std::thread> workers_;
    Job job_;
};

Pool & pool() {
    static Pool * p = new Pool();  // never destroyed: workers may outlive static destruction order
    return *p;
}

}  // namespace

int pool_threads() { return pool().threads(); }

void pool_set_threads(int n) {
    if (n < 0 || n > 1024)
        throw_error(MAPORL_ERR_INVALID_ARG, "threads: expected an integer in [0, 1024] (0 = hardware threads), got %d",
                    n);
    pool().set_threads(n);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> & fn) {
    pool().run(n, grain, fn);
}

}  // namespace maporl

extern "C" {

maporl_status maporl_set_threads(int n) {
    return maporl::guarded([&] {
        maporl::pool_set_threads(n);
        return MAPORL_OK;
    });
}

int maporl_get_threads(void) {
    try {
        return maporl::pool_threads();
    } catch (...) { return 1; }
}

}  // extern "C"
