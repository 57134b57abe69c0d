// staging.cpp: per-thread device staging buffers (see staging.h).
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

struct Slot {
    void * ptr = nullptr;
    size_t bytes = 0;
};

struct Slots {
    std::vector<Slot> slots;
    ~Slots() {
        for (auto & s : slots) maporl_device_free(s.ptr);
    }
};

thread_local Slots t_slots;

}  // namespace

maporl_status RunStaged(const std::vector<StagedArg> & args,
                        const std::function<maporl_status(const std::vector<void *> &)> & fn) {
    auto & slots = t_slots.slots;
    if (slots.size() < args.size()) slots.resize(args.size());
    std::vector<void *> dev(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
        Slot & s = slots[i];
        if (s.bytes < args[i].bytes || s.ptr == nullptr) {
            maporl_device_free(s.ptr);
            s.ptr = nullptr;
            s.bytes = 0;
            maporl_status st = maporl_device_malloc(args[i].bytes, &s.ptr);
            if (st != MAPORL_OK) return st;
            s.bytes = args[i].bytes;
        }
        dev[i] = s.ptr;
        if (args[i].input) {
            maporl_status st = maporl_memcpy_to_device(s.ptr, args[i].host, args[i].bytes);
            if (st != MAPORL_OK) return st;
        }
    }
    maporl_status st = fn(dev);
    if (st != MAPORL_OK) return st;
    for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i].output) continue;
        st = maporl_memcpy_to_host(args[i].host, dev[i], args[i].bytes);
        if (st != MAPORL_OK) return st;
    }
    return MAPORL_OK;
}

maporl_status RunOn(maporl_device device, const std::vector<ArrayArg> & args,
                    const std::function<maporl_status(const std::vector<void *> &)> & fn) {
    std::vector<void *> ptrs(args.size(), nullptr);
    if (device == MAPORL_DEVICE_CPU) {
        for (size_t i = 0; i < args.size(); ++i) ptrs[i] = args[i].host;
        return fn(ptrs);
    }
    std::vector<StagedArg> staged;
    std::vector<int> at(args.size(), -1);
    for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i].host) continue;
        at[i] = (int)staged.size();
        staged.push_back({args[i].host, args[i].bytes, args[i].input, args[i].output});
    }
    return RunStaged(staged, [&](const std::vector<void *> & d) {
        for (size_t i = 0; i < args.size(); ++i) ptrs[i] = at[i] < 0 ? nullptr : d[(size_t)at[i]];
        return fn(ptrs);
    });
}

}  // namespace maporl_js
