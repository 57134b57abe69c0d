// gae.cpp: N-API glue for the reverse scans, maporl_gae and maporl_reinforce_returns. JS (lib/native.ts types each
// call's object): gae({rewards, values, mask, B, T, gamma, lambda, whiten, device, advantages, returns}) and
// gaeAsync(same) -> Promise<void>; reinforceReturns({rewards, mask, B, T, gamma, whiten, device, returns,
// advantages}) [+ Async]. Outputs are allocated by the caller.
#include <napi.h>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kGaeFields[] = {"rewards", "values", "mask",   "B",          "T",      "gamma",
                                       "lambda",  "whiten", "device", "advantages", "returns"};
constexpr CallSpec kGae{"gae", kGaeFields, 11, false};
constexpr const char * kReinforceReturnsFields[] = {"rewards", "mask",   "B",       "T",         "gamma",
                                                    "whiten",  "device", "returns", "advantages"};
constexpr CallSpec kReinforceReturns{"reinforceReturns", kReinforceReturnsFields, 9, false};

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
    const Fields f(info, kGae);
    int64_t B, T;
    const size_t n = (size_t)RequireDims(f, "B", "T", &B, &T);
    Napi::TypedArray r = RequireTypedArray(f, "rewards", {napi_float32_array}, n);
    Napi::TypedArray v = RequireTypedArray(f, "values", {napi_float32_array}, n);
    Napi::TypedArray m = RequireTypedArray(f, "mask", {napi_uint8_array, napi_float32_array}, n);
    Napi::TypedArray a = RequireTypedArray(f, "advantages", {napi_float32_array}, n);
    Napi::TypedArray R = RequireTypedArray(f, "returns", {napi_float32_array}, n);
    GaeCall c;
    c.rewards = (const float *)DataOf(r);
    c.values = (const float *)DataOf(v);
    c.mask = DataOf(m);
    c.mask_type = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    c.mask_bytes = m.ByteLength();
    c.B = B;
    c.T = T;
    c.params = maporl_gae_default_params();
    c.params.gamma = (float)RequireNumber(f, "gamma");
    c.params.lambda = (float)RequireNumber(f, "lambda");
    c.params.whiten = RequireBool(f, "whiten") ? 1 : 0;
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.adv = (float *)DataOf(a);
    c.ret = (float *)DataOf(R);
    if (keep) *keep = {r, v, m, a, R};
    return c;
}

Napi::Value JsGae(const Napi::CallbackInfo & info) { return RunCall(info, "gae", Unpack); }
Napi::Value JsGaeAsync(const Napi::CallbackInfo & info) { return QueueCall(info, "gae", Unpack); }

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
    const Fields f(info, kReinforceReturns);
    int64_t B, T;
    const size_t n = (size_t)RequireDims(f, "B", "T", &B, &T);
    Napi::TypedArray r = RequireTypedArray(f, "rewards", {napi_float32_array}, n);
    Napi::TypedArray m = RequireTypedArray(f, "mask", {napi_uint8_array, napi_float32_array}, n);
    Napi::TypedArray G = RequireTypedArray(f, "returns", {napi_float32_array}, n);
    Napi::TypedArray A = RequireTypedArray(f, "advantages", {napi_float32_array}, n);
    ReturnsCall c;
    c.rewards = (const float *)DataOf(r);
    c.mask = DataOf(m);
    c.mask_type = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    c.mask_bytes = m.ByteLength();
    c.B = B;
    c.T = T;
    c.params = maporl_returns_default_params();
    c.params.gamma = (float)RequireNumber(f, "gamma");
    c.params.whiten = RequireBool(f, "whiten") ? 1 : 0;
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
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
    ExportCall(env, exports, kReinforceReturns, JsReinforceReturns, JsReinforceReturnsAsync);
    ExportCall(env, exports, kGae, JsGae, JsGaeAsync);
}

}  // namespace maporl_js
