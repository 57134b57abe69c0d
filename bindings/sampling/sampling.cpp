// sampling.cpp: N-API glue for maporl_sample and maporl_sample_logprobs (sync and Async). JS, one object of named
// fields each (lib/native.ts types them):
//   sample({logits, B, V, params, device, tokens, logprobs|null, rawLogprobs|null, valid|null})
//   sampleLogprobs({logits, B, V, params, device, tokens, logprobs, rawLogprobs|null})
// `params` is {temperature, topK, topP, minP, seed, position, filterOrder}: each a number (seed and position a
// BigInt) or a typed array of B values (Float32Array; Int32Array for topK; BigUint64Array for seed;
// BigInt64Array for position); lib/rl/sampling.ts validates and normalises it first.
#include <napi.h>

#include <vector>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kSampleFields[] = {"logits", "B",        "V",           "params", "device",
                                          "tokens", "logprobs", "rawLogprobs", "valid"};
constexpr CallSpec kSample{"sample", kSampleFields, 9, false};
constexpr const char * kSampleLogprobsFields[] = {"logits", "B",      "V",        "params",
                                                  "device", "tokens", "logprobs", "rawLogprobs"};
constexpr CallSpec kSampleLogprobs{"sampleLogprobs", kSampleLogprobsFields, 8, false};

// Per-row parameter arrays for the CUDA path are staged with the logits; on the CPU they are used in place.
struct ParamArrays {
    ArrayArg temperature{nullptr, 0, true, false}, top_k{nullptr, 0, true, false}, top_p{nullptr, 0, true, false},
        min_p{nullptr, 0, true, false}, seed{nullptr, 0, true, false}, position{nullptr, 0, true, false};
};

template <typename T>
void Field(const Fields & o, const char * key, napi_typedarray_type type, size_t B, T * scalar, ArrayArg * arr,
           std::vector<Napi::Value> * keep) {
    Napi::Value v = o.Get(key);
    if (v.IsTypedArray()) {
        Napi::TypedArray t = v.As<Napi::TypedArray>();
        if (t.TypedArrayType() != type || t.ElementLength() != B)
            throw Napi::RangeError::New(o.Env(),
                                        o.Where(key) + ": expected a typed array of the right type and B elements");
        arr->host = DataOf(t);
        arr->bytes = t.ByteLength();
        if (keep) keep->push_back(t);
        return;
    }
    if (v.IsBigInt()) {
        bool lossless = true;
        *scalar = (T)v.As<Napi::BigInt>().Uint64Value(&lossless);
        return;
    }
    if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), o.Where(key) + ": expected a number or typed array");
    *scalar = (T)v.As<Napi::Number>().DoubleValue();
}

void ReadParams(const Fields & o, size_t B, maporl_sample_params * p, ParamArrays * a,
                std::vector<Napi::Value> * keep) {
    *p = maporl_sample_default_params();
    Field(o, "temperature", napi_float32_array, B, &p->temperature_all, &a->temperature, keep);
    Field(o, "topK", napi_int32_array, B, &p->top_k_all, &a->top_k, keep);
    Field(o, "topP", napi_float32_array, B, &p->top_p_all, &a->top_p, keep);
    Field(o, "minP", napi_float32_array, B, &p->min_p_all, &a->min_p, keep);
    Field(o, "seed", napi_biguint64_array, B, &p->seed_all, &a->seed, keep);
    Field(o, "position", napi_bigint64_array, B, &p->position_all, &a->position, keep);
    const Napi::Value order = o.Get("filterOrder");
    p->filter_order = order.IsNumber() && order.As<Napi::Number>().Int32Value() == 1 ? MAPORL_FILTER_JOINT
                                                                                     : MAPORL_FILTER_TOP_K_FIRST;
}

struct SampleCall {
    ArrayArg z{nullptr, 0, true, false}, tok{nullptr, 0, false, true}, lp{nullptr, 0, false, true},
        raw{nullptr, 0, false, true}, valid{nullptr, 0, false, true};
    bool given = false;  // tok is an input (sampleLogprobs)
    int64_t B, V;
    maporl_sample_params p;
    ParamArrays a;
    maporl_device device;

    maporl_status run() const {
        ArrayArg t = tok;
        t.input = given;
        t.output = !given;
        return RunOn(device, {z, t, lp, raw, valid, a.temperature, a.top_k, a.top_p, a.min_p, a.seed, a.position},
                     [&](const std::vector<void *> & d) {
                         maporl_sample_params q = p;
                         q.temperature = (const float *)d[5];
                         q.top_k = (const int32_t *)d[6];
                         q.top_p = (const float *)d[7];
                         q.min_p = (const float *)d[8];
                         q.seed = (const uint64_t *)d[9];
                         q.position = (const int64_t *)d[10];
                         if (given)
                             return maporl_sample_logprobs(device, (const float *)d[0], B, V, &q, (const int32_t *)d[1],
                                                           (float *)d[2], (float *)d[3]);
                         return maporl_sample(device, (const float *)d[0], B, V, &q, (int32_t *)d[1], (float *)d[2],
                                              (float *)d[3], (uint8_t *)d[4]);
                     });
    }
};

ArrayArg Arg(const Fields & f, const char * name, napi_typedarray_type type, size_t n, bool optional,
             std::vector<Napi::Value> * keep) {
    if (optional && !f.Has(name)) return ArrayArg{nullptr, 0, false, true};
    Napi::TypedArray t = RequireTypedArray(f, name, {type}, n);
    if (keep) keep->push_back(t);
    return ArrayArg{DataOf(t), t.ByteLength(), false, true};
}

SampleCall Unpack(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep, bool given) {
    const Fields f(info, given ? kSampleLogprobs : kSample);
    SampleCall c;
    const size_t n = (size_t)RequireDims(f, "B", "V", &c.B, &c.V);
    c.z = Arg(f, "logits", napi_float32_array, n, false, keep);
    c.z.input = true;
    c.z.output = false;
    ReadParams(f.Object("params"), (size_t)c.B, &c.p, &c.a, keep);
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.given = given;
    c.tok = Arg(f, "tokens", napi_int32_array, (size_t)c.B, false, keep);
    c.lp = Arg(f, "logprobs", napi_float32_array, (size_t)c.B, !given, keep);
    c.raw = Arg(f, "rawLogprobs", napi_float32_array, (size_t)c.B, true, keep);
    if (!given) c.valid = Arg(f, "valid", napi_uint8_array, (size_t)c.B, true, keep);
    return c;
}

SampleCall UnpackSample(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    return Unpack(info, keep, false);
}
SampleCall UnpackGiven(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    return Unpack(info, keep, true);
}

Napi::Value JsSample(const Napi::CallbackInfo & i) { return RunCall(i, "sample", UnpackSample); }
Napi::Value JsSampleAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "sample", UnpackSample); }
Napi::Value JsGiven(const Napi::CallbackInfo & i) { return RunCall(i, "logprobsOfTokens", UnpackGiven); }
Napi::Value JsGivenAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "logprobsOfTokens", UnpackGiven); }

}  // namespace

void InitSampling(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kSample, JsSample, JsSampleAsync);
    ExportCall(env, exports, kSampleLogprobs, JsGiven, JsGivenAsync);
}

}  // namespace maporl_js
