// async.h: a Promise-returning AsyncWorker for kernel calls. The inputs are not copied: the worker keeps a
// reference to every TypedArray it reads or writes so none can be collected while Execute() runs on a
// libuv thread, and Execute() touches no JS value. The kernel's own parallelism is the native pool's.
// A reference cannot stop a transfer (postMessage / structuredClone with a transfer list detaches the buffer and
// hands its memory to the new owner); Node-API has no way to pin a buffer. So a call whose array was detached
// while it ran rejects with a TypeError instead of resolving with results computed from memory it no longer
// owned (see the README: arrays must stay attached until the promise settles).
#pragma once

#include <napi.h>

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/core/args.h"

namespace maporl_js {

class KernelWorker : public Napi::AsyncWorker {
public:
    // `keep` are the JS values (TypedArrays) that must stay alive; `compute` runs off the main thread.
    // `result`, when given, makes the value the promise resolves with (on the main thread, after compute).
    // `done`, when given, runs on the main thread once compute has finished, before the promise settles (a model
    // handle's count of calls in flight).
    KernelWorker(Napi::Env env, const char * where, std::vector<Napi::Value> keep,
                 std::function<maporl_status()> compute, std::function<Napi::Value(Napi::Env)> result = nullptr,
                 std::function<void(Napi::Env)> done = nullptr)
        : Napi::AsyncWorker(env, "maporl"),
          deferred_(Napi::Promise::Deferred::New(env)),
          where_(where),
          compute_(std::move(compute)),
          result_(std::move(result)),
          done_(std::move(done)) {
        for (auto & v : keep) {
            refs_.push_back(Napi::Persistent(v));
            lengths_.push_back(v.IsTypedArray() ? v.As<Napi::TypedArray>().ElementLength() : 0);
        }
    }

    Napi::Promise Promise() const { return deferred_.Promise(); }

    void Execute() override {
        try {
            status_ = compute_();
        } catch (...) { status_ = MAPORL_ERR_INTERNAL; }
        if (status_ != MAPORL_OK) message_ = std::string(where_) + ": " + maporl_last_error();
    }

    void OnOK() override {
        Napi::Env env = Env();
        Napi::HandleScope scope(env);
        Done(env);
        for (size_t i = 0; i < refs_.size(); ++i) {
            const Napi::Value v = refs_[i].Value();
            if (lengths_[i] > 0 && v.IsTypedArray() && v.As<Napi::TypedArray>().ElementLength() == 0) {
                deferred_.Reject(
                    Napi::TypeError::New(env,
                                         std::string(where_) +
                                             ": an array of this call was detached (transferred) "
                                             "while it ran; its results are discarded (arrays must stay attached until "
                                             "the promise settles)")
                        .Value());
                return;
            }
        }
        if (status_ == MAPORL_OK)
            deferred_.Resolve(result_ ? result_(env) : env.Undefined());
        else
            deferred_.Reject(MakeStatusError(env, status_, message_));
    }

    void OnError(const Napi::Error & e) override {
        Done(Env());
        deferred_.Reject(e.Value());
    }

private:
    void Done(Napi::Env env) {
        if (done_) done_(env);
        done_ = nullptr;
    }

    Napi::Promise::Deferred deferred_;
    const char * where_;
    std::function<maporl_status()> compute_;
    std::function<Napi::Value(Napi::Env)> result_;
    std::function<void(Napi::Env)> done_;
    std::vector<Napi::Reference<Napi::Value>> refs_;
    std::vector<size_t> lengths_;  // each kept TypedArray's length when queued (0 for other values)
    maporl_status status_ = MAPORL_OK;
    std::string message_;
};

// Queues compute() and returns its promise.
inline Napi::Value QueueKernel(Napi::Env env, const char * where, std::vector<Napi::Value> keep,
                               std::function<maporl_status()> compute,
                               std::function<Napi::Value(Napi::Env)> result = nullptr,
                               std::function<void(Napi::Env)> done = nullptr) {
    auto * w = new KernelWorker(env, where, std::move(keep), std::move(compute), std::move(result), std::move(done));
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
}

// Whether Call has `Napi::Value result(Napi::Env) const` (a call that returns something, e.g. loss statistics
// kept in a shared_ptr that the copies of the call share).
template <typename C, typename = void>
struct HasResult : std::false_type {};
template <typename C>
struct HasResult<C, std::void_t<decltype(std::declval<const C &>().result(std::declval<Napi::Env>()))>>
    : std::true_type {};

// The two entry points of a kernel call, from one unpacker `Call unpack(info, keep)` where Call has run() (and
// optionally result()): RunCall runs it on the calling thread, throws on failure and returns result() or
// undefined; QueueCall runs it off the main thread, keeping the arrays that unpack collected in `keep` alive,
// and returns the promise of the same value.
template <typename Call>
Napi::Value RunCall(const Napi::CallbackInfo & info, const char * where,
                    Call (*unpack)(const Napi::CallbackInfo &, std::vector<Napi::Value> *)) {
    const Call c = unpack(info, nullptr);
    const maporl_status st = c.run();
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, where);
    if constexpr (HasResult<Call>::value)
        return c.result(info.Env());
    else
        return info.Env().Undefined();
}

template <typename Call>
Napi::Value QueueCall(const Napi::CallbackInfo & info, const char * where,
                      Call (*unpack)(const Napi::CallbackInfo &, std::vector<Napi::Value> *),
                      std::function<void(Napi::Env)> done = nullptr) {
    std::vector<Napi::Value> keep;
    const Call c = unpack(info, &keep);
    if constexpr (HasResult<Call>::value)
        return QueueKernel(
            info.Env(), where, std::move(keep), [c] { return c.run(); }, [c](Napi::Env env) { return c.result(env); },
            std::move(done));
    else
        return QueueKernel(
            info.Env(), where, std::move(keep), [c] { return c.run(); }, nullptr, std::move(done));
}

}  // namespace maporl_js
