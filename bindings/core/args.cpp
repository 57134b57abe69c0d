// args.cpp: argument checks and the status -> MaporlError conversion shared by all bindings.
#include "bindings/core/args.h"

#include <cmath>
#include <string>

namespace maporl_js {

const char * TypedArrayTypeName(napi_typedarray_type t) {
    switch (t) {
        case napi_int8_array:
            return "Int8Array";
        case napi_uint8_array:
            return "Uint8Array";
        case napi_uint8_clamped_array:
            return "Uint8ClampedArray";
        case napi_int16_array:
            return "Int16Array";
        case napi_uint16_array:
            return "Uint16Array";
        case napi_int32_array:
            return "Int32Array";
        case napi_uint32_array:
            return "Uint32Array";
        case napi_float32_array:
            return "Float32Array";
        case napi_float64_array:
            return "Float64Array";
        case napi_bigint64_array:
            return "BigInt64Array";
        case napi_biguint64_array:
            return "BigUint64Array";
        default:
            return "TypedArray";
    }
}

static std::string TypesList(std::initializer_list<napi_typedarray_type> types) {
    std::string s;
    for (auto t : types) {
        if (!s.empty()) s += " or ";
        s += TypedArrayTypeName(t);
    }
    return s;
}

// Only a view of 0 elements can be on a detached buffer. A SharedArrayBuffer cannot be detached (and
// napi_is_detached_arraybuffer refuses it, which is why the status is not thrown here).
static bool IsDetached(napi_env env, const Napi::TypedArray & a) {
    napi_value buffer = nullptr;
    if (napi_get_typedarray_info(env, a, nullptr, nullptr, nullptr, &buffer, nullptr) != napi_ok) return false;
    bool detached = false;
    return napi_is_detached_arraybuffer(env, buffer, &detached) == napi_ok && detached;
}

void * DataOf(const Napi::TypedArray & a) {
    void * data = nullptr;
    const napi_status st = napi_get_typedarray_info(a.Env(), a, nullptr, nullptr, &data, nullptr, nullptr);
    NAPI_THROW_IF_FAILED(a.Env(), st, nullptr);
    return data;
}

Napi::TypedArray RequireTypedArray(const Napi::CallbackInfo & info, size_t i, const char * name,
                                   std::initializer_list<napi_typedarray_type> types, size_t length) {
    Napi::Env env = info.Env();
    if (i >= info.Length() || !info[i].IsTypedArray())
        throw Napi::TypeError::New(env,
                                   std::string(name) + ": expected " + TypesList(types) + ", got " +
                                       (i >= info.Length() ? "nothing" : "another type"));
    Napi::TypedArray a = info[i].As<Napi::TypedArray>();
    bool ok = false;
    for (auto t : types) ok = ok || a.TypedArrayType() == t;
    if (!ok)
        throw Napi::TypeError::New(
            env,
            std::string(name) + ": expected " + TypesList(types) + ", got " + TypedArrayTypeName(a.TypedArrayType()));
    if (a.ElementLength() == 0 && length != 0 && IsDetached(env, a))
        throw Napi::TypeError::New(env, std::string(name) + ": expected an attached buffer, got a detached one");
    if (a.ElementLength() != length)
        throw Napi::RangeError::New(env,
                                    std::string(name) + ": expected " + std::to_string(length) + " elements, got " +
                                        std::to_string(a.ElementLength()));
    return a;
}

double RequireNumber(const Napi::CallbackInfo & info, size_t i, const char * name) {
    if (i >= info.Length() || !info[i].IsNumber())
        throw Napi::TypeError::New(info.Env(), std::string(name) + ": expected a number");
    return info[i].As<Napi::Number>().DoubleValue();
}

int64_t RequireInt(const Napi::CallbackInfo & info, size_t i, const char * name, int64_t lo, int64_t hi) {
    double d = RequireNumber(info, i, name);
    if (!(d >= (double)lo && d <= (double)hi) || std::floor(d) != d)
        throw Napi::RangeError::New(info.Env(),
                                    std::string(name) + ": expected an integer in [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "], got " + std::to_string(d));
    return (int64_t)d;
}

int64_t RequireDims(const Napi::CallbackInfo & info, size_t i, const char * a, const char * b, int64_t * a_out,
                    int64_t * b_out) {
    const int64_t limit = (int64_t)1 << 40;
    const int64_t x = RequireInt(info, i, a, 0, limit), y = RequireInt(info, i + 1, b, 0, limit);
    if (y > 0 && x > limit / y)
        throw Napi::RangeError::New(info.Env(), std::string("shape: ") + a + "*" + b + " is too large");
    *a_out = x;
    *b_out = y;
    return x * y;
}

bool RequireBool(const Napi::CallbackInfo & info, size_t i, const char * name) {
    if (i >= info.Length() || !info[i].IsBoolean())
        throw Napi::TypeError::New(info.Env(), std::string(name) + ": expected a boolean");
    return info[i].As<Napi::Boolean>().Value();
}

Napi::Value MakeStatusError(Napi::Env env, maporl_status status, const std::string & message) {
    AddonData * data = env.GetInstanceData<AddonData>();
    Napi::String msg = Napi::String::New(env, message);
    Napi::String code = Napi::String::New(env, maporl_status_name(status));
    if (data != nullptr && !data->error_ctor.IsEmpty()) return data->error_ctor.New({msg, code});
    Napi::Error e = Napi::Error::New(env, message);
    e.Set("code", code);
    return e.Value();
}

void ThrowStatus(Napi::Env env, maporl_status status, const char * where) {
    std::string message = std::string(where) + ": " + maporl_last_error();
    throw Napi::Error(env, MakeStatusError(env, status, message));
}

}  // namespace maporl_js
