// sampling.cpp: N-API glue for maporl_sample and maporl_sample_logprobs (sync and Async). JS:
//   sample(logits, B, V, params, device, tokens, logprobs|null, rawLogprobs|null, valid|null)
//   sampleLogprobs(logits, B, V, params, device, tokens, logprobs, rawLogprobs|null)
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

// Per-row parameter arrays for the CUDA path are staged with the logits; on the CPU they are used in place.
struct ParamArrays {
    ArrayArg temperature{nullptr, 0, true, false}, top_k{nullptr, 0, true, false}, top_p{nullptr, 0, true, false},
        min_p{nullptr, 0, true, false}, seed{nullptr, 0, true, false}, position{nullptr, 0, true, false};
};

template <typename T>
void Field(const Napi::Object & o, const char * key, napi_typedarray_type type, size_t B, T * scalar, ArrayArg * arr,
           std::vector<Napi::Value> * keep) {
    Napi::Value v = o.Get(key);
    if (v.IsTypedArray()) {
        Napi::TypedArray t = v.As<Napi::TypedArray>();
        if (t.TypedArrayType() != type || t.ElementLength() != B)
            throw Napi::RangeError::New(
                o.Env(), std::string("params.") + key + ": expected a typed array of the right type and B elements");
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
    if (!v.IsNumber())
        throw Napi::TypeError::New(o.Env(), std::string("params.") + key + ": expected a number or typed array");
    *scalar = (T)v.As<Napi::Number>().DoubleValue();
}

void ReadParams(const Napi::CallbackInfo & info, size_t i, size_t B, maporl_sample_params * p, ParamArrays * a,
                std::vector<Napi::Value> * keep) {
    if (i >= info.Length() || !info[i].IsObject()) throw Napi::TypeError::New(info.Env(), "params: expected an object");
    Napi::Object o = info[i].As<Napi::Object>();
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

ArrayArg Arg(const Napi::CallbackInfo & info, size_t i, const char * name, napi_typedarray_type type, size_t n,
             bool optional, std::vector<Napi::Value> * keep) {
    if (optional && (i >= info.Length() || info[i].IsNull() || info[i].IsUndefined()))
        return ArrayArg{nullptr, 0, false, true};
    Napi::TypedArray t = RequireTypedArray(info, i, name, {type}, n);
    if (keep) keep->push_back(t);
    return ArrayArg{DataOf(t), t.ByteLength(), false, true};
}

SampleCall Unpack(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep, bool given) {
    SampleCall c;
    const size_t n = (size_t)RequireDims(info, 1, "B", "V", &c.B, &c.V);
    c.z = Arg(info, 0, "logits", napi_float32_array, n, false, keep);
    c.z.input = true;
    c.z.output = false;
    ReadParams(info, 3, (size_t)c.B, &c.p, &c.a, keep);
    c.device = (maporl_device)RequireInt(info, 4, "device", 0, 1);
    c.given = given;
    c.tok = Arg(info, 5, "tokens", napi_int32_array, (size_t)c.B, false, keep);
    c.lp = Arg(info, 6, "logprobs", napi_float32_array, (size_t)c.B, !given, keep);
    c.raw = Arg(info, 7, "rawLogprobs", napi_float32_array, (size_t)c.B, true, keep);
    if (!given) c.valid = Arg(info, 8, "valid", napi_uint8_array, (size_t)c.B, true, keep);
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
    exports.Set("sample", Napi::Function::New(env, JsSample, "sample"));
    exports.Set("sampleAsync", Napi::Function::New(env, JsSampleAsync, "sampleAsync"));
    exports.Set("sampleLogprobs", Napi::Function::New(env, JsGiven, "sampleLogprobs"));
    exports.Set("sampleLogprobsAsync", Napi::Function::New(env, JsGivenAsync, "sampleLogprobsAsync"));
}

}  // namespace maporl_js
