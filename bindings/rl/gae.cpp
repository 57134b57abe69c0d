// gae.cpp: N-API glue for the reverse scans, maporl_gae and maporl_reinforce_returns. JS: gae(rewards, values, mask, B, T, gamma, lambda, whiten, device,
// advantagesOut, returnsOut) and gaeAsync(...same) -> Promise<void>. Outputs are allocated by the caller.
#include <napi.h>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

struct GaeCall {
    const float * rewards;
    const float * values;
    const void * mask;
    maporl_mask_type mask_type;
    size_t mask_bytes;
    int64_t B, T;
    maporl_gae_params params;
    maporl_device device;
    float * adv;
    float * ret;

    maporl_status run() const {
        if (device == MAPORL_DEVICE_CPU)
            return maporl_gae(MAPORL_DEVICE_CPU, rewards, values, mask, mask_type, B, T, params, adv, ret);
        const size_t fbytes = sizeof(float) * (size_t)(B * T);
        return RunStaged({{(void *)rewards, fbytes, true, false},
                          {(void *)values, fbytes, true, false},
                          {(void *)mask, mask_bytes, true, false},
                          {adv, fbytes, false, true},
                          {ret, fbytes, false, true}},
                         [&](const std::vector<void *> & d) {
                             return maporl_gae(MAPORL_DEVICE_CUDA, (const float *)d[0], (const float *)d[1], d[2],
                                               mask_type, B, T, params, (float *)d[3], (float *)d[4]);
                         });
    }
};

GaeCall Unpack(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    int64_t B, T;
    const size_t n = (size_t)RequireDims(info, 3, "B", "T", &B, &T);
    Napi::TypedArray r = RequireTypedArray(info, 0, "rewards", {napi_float32_array}, n);
    Napi::TypedArray v = RequireTypedArray(info, 1, "values", {napi_float32_array}, n);
    Napi::TypedArray m = RequireTypedArray(info, 2, "mask", {napi_uint8_array, napi_float32_array}, n);
    Napi::TypedArray a = RequireTypedArray(info, 9, "advantages", {napi_float32_array}, n);
    Napi::TypedArray R = RequireTypedArray(info, 10, "returns", {napi_float32_array}, n);
    GaeCall c;
    c.rewards = (const float *)DataOf(r);
    c.values = (const float *)DataOf(v);
    c.mask = DataOf(m);
    c.mask_type = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    c.mask_bytes = m.ByteLength();
    c.B = B;
    c.T = T;
    c.params = maporl_gae_default_params();
    c.params.gamma = (float)RequireNumber(info, 5, "gamma");
    c.params.lambda = (float)RequireNumber(info, 6, "lambda");
    c.params.whiten = RequireBool(info, 7, "whiten") ? 1 : 0;
    c.device = (maporl_device)RequireInt(info, 8, "device", 0, 1);
    c.adv = (float *)DataOf(a);
    c.ret = (float *)DataOf(R);
    if (keep) *keep = {r, v, m, a, R};
    return c;
}

Napi::Value JsGae(const Napi::CallbackInfo & info) { return RunCall(info, "gae", Unpack); }
Napi::Value JsGaeAsync(const Napi::CallbackInfo & info) { return QueueCall(info, "gae", Unpack); }

// reinforceReturns(rewards, mask, B, T, gamma, whiten, device, returnsOut, advantagesOut) [+ Async]
struct ReturnsCall {
    const float * rewards;
    const void * mask;
    maporl_mask_type mask_type;
    size_t mask_bytes;
    int64_t B, T;
    maporl_returns_params params;
    maporl_device device;
    float * G;
    float * A;

    maporl_status run() const {
        if (device == MAPORL_DEVICE_CPU)
            return maporl_reinforce_returns(MAPORL_DEVICE_CPU, rewards, mask, mask_type, B, T, params, G, A);
        const size_t fbytes = sizeof(float) * (size_t)(B * T);
        return RunStaged({{(void *)rewards, fbytes, true, false},
                          {(void *)mask, mask_bytes, true, false},
                          {G, fbytes, false, true},
                          {A, fbytes, false, true}},
                         [&](const std::vector<void *> & d) {
                             return maporl_reinforce_returns(MAPORL_DEVICE_CUDA, (const float *)d[0], d[1], mask_type,
                                                             B, T, params, (float *)d[2], (float *)d[3]);
                         });
    }
};

ReturnsCall UnpackReturns(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    int64_t B, T;
    const size_t n = (size_t)RequireDims(info, 2, "B", "T", &B, &T);
    Napi::TypedArray r = RequireTypedArray(info, 0, "rewards", {napi_float32_array}, n);
    Napi::TypedArray m = RequireTypedArray(info, 1, "mask", {napi_uint8_array, napi_float32_array}, n);
    Napi::TypedArray G = RequireTypedArray(info, 7, "returns", {napi_float32_array}, n);
    Napi::TypedArray A = RequireTypedArray(info, 8, "advantages", {napi_float32_array}, n);
    ReturnsCall c;
    c.rewards = (const float *)DataOf(r);
    c.mask = DataOf(m);
    c.mask_type = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    c.mask_bytes = m.ByteLength();
    c.B = B;
    c.T = T;
    c.params = maporl_returns_default_params();
    c.params.gamma = (float)RequireNumber(info, 4, "gamma");
    c.params.whiten = RequireBool(info, 5, "whiten") ? 1 : 0;
    c.device = (maporl_device)RequireInt(info, 6, "device", 0, 1);
    c.G = (float *)DataOf(G);
    c.A = (float *)DataOf(A);
    if (keep) *keep = {r, m, G, A};
    return c;
}

Napi::Value JsReinforceReturns(const Napi::CallbackInfo & info) {
    return RunCall(info, "reinforceReturns", UnpackReturns);
}
Napi::Value JsReinforceReturnsAsync(const Napi::CallbackInfo & info) {
    return QueueCall(info, "reinforceReturns", UnpackReturns);
}

}  // namespace

void InitGae(Napi::Env env, Napi::Object exports) {
    exports.Set("reinforceReturns", Napi::Function::New(env, JsReinforceReturns, "reinforceReturns"));
    exports.Set("reinforceReturnsAsync", Napi::Function::New(env, JsReinforceReturnsAsync, "reinforceReturnsAsync"));
    exports.Set("gae", Napi::Function::New(env, JsGae, "gae"));
    exports.Set("gaeAsync", Napi::Function::New(env, JsGaeAsync, "gaeAsync"));
}

}  // namespace maporl_js
