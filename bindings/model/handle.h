// handle.h: the model handle of the N-API glue (bindings/model/gpt.cpp makes it; lora.cpp uses it too).
#pragma once

#include <napi.h>

#include "maporl.h"

namespace maporl_js {

// The handle keeps the model alive while an async call runs on it: gptFree during one only marks it (new calls
// are refused at once) and the model is freed when the last call in flight completes, never under it. One call at
// a time per model: any call (but the read-only ParamCount / Tensors / GetDevice) while an async one runs is
// refused (NativePolicy serialises its calls, so it never meets this). The model's native memory (weights,
// gradients, two AdamW moments: 16 bytes per parameter) is reported to V8 as external memory, so that garbage
// collection sees what undisposed models hold.
struct Handle {
    maporl_gpt * gpt = nullptr;
    int pending = 0;       // async calls in flight (main thread only)
    bool freed = false;    // gptFree was called
    int64_t external = 0;  // bytes reported to V8
    void Release(Napi::Env env) {
        maporl_gpt_free(gpt);
        gpt = nullptr;
        if (external) Napi::MemoryManagement::AdjustExternalMemory(env, -external);
        external = 0;
    }
};

inline Handle * Get(const Napi::CallbackInfo & info, size_t i = 0, bool read_only = false) {
    if (i >= info.Length() || !info[i].IsExternal())
        throw Napi::TypeError::New(info.Env(), "gpt: expected a model handle");
    Handle * h = info[i].As<Napi::External<Handle>>().Data();
    if (!h->gpt || h->freed) throw Napi::Error::New(info.Env(), "gpt: the model was freed");
    if (h->pending > 0 && !read_only)
        throw Napi::Error::New(
            info.Env(),
            "gpt: the model is busy with an async call; calls on one model must not overlap (await it first)");
    return h;
}

}  // namespace maporl_js
