// group_advantages.cpp: N-API glue for maporl_group_advantages and maporl_broadcast_rows.
// JS (lib/native.ts types each call's object): groupAdvantages({scores, groups, weights|null, N, baseline,
//     scaleByStd, stdUnbiased, eps, singletonZero, nanExclude, whiten (0 off, 1 verl, 2 OpenRLHF), device, out}) and
//     groupAdvantagesAsync(same) -> Promise<void>; broadcastRows({values, mask, N, T, device, out}).
#include <napi.h>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kGroupAdvantagesFields[] = {
    "scores", "groups",        "weights",    "N",      "baseline", "scaleByStd", "stdUnbiased",
    "eps",    "singletonZero", "nanExclude", "whiten", "device",   "out"};
constexpr CallSpec kGroupAdvantages{"groupAdvantages", kGroupAdvantagesFields, 13, false};
constexpr const char * kBroadcastRowsFields[] = {"values", "mask", "N", "T", "device", "out"};
constexpr CallSpec kBroadcastRows{"broadcastRows", kBroadcastRowsFields, 6, false};

struct GroupCall {
    const float * scores;
    const int32_t * groups;
    const float * weights;
    int64_t N;
    maporl_group_params p;
    maporl_device device;
    float * out;

    maporl_status run() const {
        if (device == MAPORL_DEVICE_CPU)
            return maporl_group_advantages(MAPORL_DEVICE_CPU, scores, groups, weights, N, p, out);
        const size_t b = 4 * (size_t)N;
        std::vector<StagedArg> args = {
            {(void *)scores, b, true, false}, {(void *)groups, b, true, false}, {out, b, false, true}};
        if (weights) args.push_back({(void *)weights, b, true, false});
        return RunStaged(args, [&](const std::vector<void *> & d) {
            return maporl_group_advantages(MAPORL_DEVICE_CUDA, (const float *)d[0], (const int32_t *)d[1],
                                           weights ? (const float *)d[3] : nullptr, N, p, (float *)d[2]);
        });
    }
};

GroupCall Unpack(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kGroupAdvantages);
    const int64_t N = RequireInt(f, "N", 0, (int64_t)1 << 40);
    Napi::TypedArray s = RequireTypedArray(f, "scores", {napi_float32_array}, (size_t)N);
    Napi::TypedArray g = RequireTypedArray(f, "groups", {napi_int32_array}, (size_t)N);
    Napi::TypedArray o = RequireTypedArray(f, "out", {napi_float32_array}, (size_t)N);
    GroupCall c;
    c.scores = (const float *)DataOf(s);
    c.groups = (const int32_t *)DataOf(g);
    c.weights = nullptr;
    if (keep) *keep = {s, g, o};
    if (f.Has("weights")) {
        Napi::TypedArray w = RequireTypedArray(f, "weights", {napi_float32_array}, (size_t)N);
        c.weights = (const float *)DataOf(w);
        if (keep) keep->push_back(w);
    }
    c.N = N;
    c.p = maporl_group_default_params();
    c.p.baseline = (maporl_group_baseline)RequireInt(f, "baseline", 0, 3);
    c.p.scale_by_std = RequireBool(f, "scaleByStd");
    c.p.std_unbiased = RequireBool(f, "stdUnbiased");
    c.p.eps = (float)RequireNumber(f, "eps");
    c.p.singleton_zero = RequireBool(f, "singletonZero");
    c.p.nan_exclude = RequireBool(f, "nanExclude");
    c.p.whiten = (int)RequireInt(f, "whiten", 0, 2);
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.out = (float *)DataOf(o);
    return c;
}

Napi::Value JsGroupAdvantages(const Napi::CallbackInfo & info) { return RunCall(info, "groupAdvantages", Unpack); }
Napi::Value JsGroupAdvantagesAsync(const Napi::CallbackInfo & info) {
    return QueueCall(info, "groupAdvantages", Unpack);
}

Napi::Value JsBroadcastRows(const Napi::CallbackInfo & info) {
    const Fields f(info, kBroadcastRows);
    int64_t N, T;
    RequireDims(f, "N", "T", &N, &T);
    Napi::TypedArray v = RequireTypedArray(f, "values", {napi_float32_array}, (size_t)N);
    Napi::TypedArray m = RequireTypedArray(f, "mask", {napi_uint8_array, napi_float32_array}, (size_t)(N * T));
    const maporl_device device = (maporl_device)RequireInt(f, "device", 0, 1);
    Napi::TypedArray o = RequireTypedArray(f, "out", {napi_float32_array}, (size_t)(N * T));
    const maporl_mask_type mt = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    maporl_status st;
    if (device == MAPORL_DEVICE_CPU) {
        st =
            maporl_broadcast_rows(MAPORL_DEVICE_CPU, (const float *)DataOf(v), DataOf(m), mt, N, T, (float *)DataOf(o));
    } else {
        st = RunStaged({{DataOf(v), v.ByteLength(), true, false},
                        {DataOf(m), m.ByteLength(), true, false},
                        {DataOf(o), o.ByteLength(), false, true}},
                       [&](const std::vector<void *> & d) {
                           return maporl_broadcast_rows(MAPORL_DEVICE_CUDA, (const float *)d[0], d[1], mt, N, T,
                                                        (float *)d[2]);
                       });
    }
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "broadcastRows");
    return info.Env().Undefined();
}

}  // namespace

void InitGroupAdvantages(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kGroupAdvantages, JsGroupAdvantages, JsGroupAdvantagesAsync);
    ExportCall(env, exports, kBroadcastRows, JsBroadcastRows);
}

}  // namespace maporl_js
