// args.cpp: argument checks and the status -> MaporlError conversion shared by all bindings.
#include "bindings/core/args.h"

#include <cmath>
#include <cstring>
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

// The name a message gives: built only when a check fails (a field's is "call: field").
struct Label {
    const Fields * f;
    const char * name;
    std::string str() const { return f ? f->Where(name) : std::string(name); }
};

// The checks, on a value and the name to give in a message.
static Napi::TypedArray CheckTypedArray(Napi::Env env, const Napi::Value & v, const Label & name,
                                        std::initializer_list<napi_typedarray_type> types, size_t length) {
    if (!v.IsTypedArray())
        throw Napi::TypeError::New(
            env,
            name.str() + ": expected " + TypesList(types) + ", got " + (v.IsUndefined() ? "nothing" : "another type"));
    Napi::TypedArray a = v.As<Napi::TypedArray>();
    bool ok = false;
    for (auto t : types) ok = ok || a.TypedArrayType() == t;
    if (!ok)
        throw Napi::TypeError::New(
            env, name.str() + ": expected " + TypesList(types) + ", got " + TypedArrayTypeName(a.TypedArrayType()));
    if (a.ElementLength() == 0 && length != 0 && IsDetached(env, a))
        throw Napi::TypeError::New(env, name.str() + ": expected an attached buffer, got a detached one");
    if (a.ElementLength() != length)
        throw Napi::RangeError::New(env,
                                    name.str() + ": expected " + std::to_string(length) + " elements, got " +
                                        std::to_string(a.ElementLength()));
    return a;
}

static double CheckNumber(Napi::Env env, const Napi::Value & v, const Label & name) {
    if (!v.IsNumber()) throw Napi::TypeError::New(env, name.str() + ": expected a number");
    return v.As<Napi::Number>().DoubleValue();
}

static int64_t CheckInt(Napi::Env env, double d, const Label & name, int64_t lo, int64_t hi) {
    if (!(d >= (double)lo && d <= (double)hi) || std::floor(d) != d)
        throw Napi::RangeError::New(env,
                                    name.str() + ": expected an integer in [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "], got " + std::to_string(d));
    return (int64_t)d;
}

static int64_t CheckDims(Napi::Env env, int64_t x, int64_t y, const char * a, const char * b) {
    const int64_t limit = (int64_t)1 << 40;
    if (y > 0 && x > limit / y)
        throw Napi::RangeError::New(env, std::string("shape: ") + a + "*" + b + " is too large");
    return x * y;
}

static bool CheckBool(Napi::Env env, const Napi::Value & v, const Label & name) {
    if (!v.IsBoolean()) throw Napi::TypeError::New(env, name.str() + ": expected a boolean");
    return v.As<Napi::Boolean>().Value();
}

// info[i], or undefined past the arguments given.
static Napi::Value Arg(const Napi::CallbackInfo & info, size_t i) {
    return i < info.Length() ? info[i] : info.Env().Undefined();
}

double RequireNumber(const Napi::CallbackInfo & info, size_t i, const char * name) {
    return CheckNumber(info.Env(), Arg(info, i), {nullptr, name});
}

int64_t RequireInt(const Napi::CallbackInfo & info, size_t i, const char * name, int64_t lo, int64_t hi) {
    return CheckInt(info.Env(), RequireNumber(info, i, name), {nullptr, name}, lo, hi);
}

bool RequireBool(const Napi::CallbackInfo & info, size_t i, const char * name) {
    return CheckBool(info.Env(), Arg(info, i), {nullptr, name});
}

Napi::Value Fields::Get(const char * name) const {
    if (!info_) return obj_.Get(name);
    // The names are the same string literals as the spec's (one translation unit: one address), so the pointer
    // comparison finds them; strcmp is the fallback.
    size_t i = 0;
    while (i < spec_->count && spec_->fields[i] != name) ++i;
    if (i == spec_->count)
        for (i = 0; i < spec_->count && std::strcmp(spec_->fields[i], name) != 0;) ++i;
    if (i < spec_->count) {
        const size_t at = i + (spec_->handle ? 1 : 0);
        return at < info_->Length() ? (*info_)[at] : info_->Env().Undefined();
    }
    throw Napi::Error::New(Env(), Where(name) + ": not a field of the call (an addon defect)");
}

bool Fields::Has(const char * name) const {
    const Napi::Value v = Get(name);
    return !v.IsNull() && !v.IsUndefined();
}

std::string Fields::Where(const char * name) const {
    return std::string(call_) + ": " + (parent_ ? std::string(parent_) + "." : std::string()) + name;
}

Fields Fields::Object(const char * name) const {
    const Napi::Value v = Get(name);
    if (!v.IsObject() || v.IsArray() || v.IsTypedArray())
        throw Napi::TypeError::New(Env(), Where(name) + ": expected an object");
    return Fields(v.As<Napi::Object>(), call_, name);
}

Napi::TypedArray RequireTypedArray(const Fields & f, const char * name,
                                   std::initializer_list<napi_typedarray_type> types, size_t length) {
    return CheckTypedArray(f.Env(), f.Get(name), Label{&f, name}, types, length);
}

double RequireNumber(const Fields & f, const char * name) { return CheckNumber(f.Env(), f.Get(name), Label{&f, name}); }

int64_t RequireInt(const Fields & f, const char * name, int64_t lo, int64_t hi) {
    return CheckInt(f.Env(), RequireNumber(f, name), Label{&f, name}, lo, hi);
}

int64_t RequireDims(const Fields & f, const char * a, const char * b, int64_t * a_out, int64_t * b_out) {
    const int64_t limit = (int64_t)1 << 40;
    *a_out = RequireInt(f, a, 0, limit);
    *b_out = RequireInt(f, b, 0, limit);
    return CheckDims(f.Env(), *a_out, *b_out, a, b);
}

float * OptionalF32(const Fields & f, const char * name, size_t n, std::vector<Napi::Value> * keep) {
    if (!f.Has(name)) return nullptr;
    Napi::TypedArray a = RequireTypedArray(f, name, {napi_float32_array}, n);
    if (keep) keep->push_back(a);
    return (float *)DataOf(a);
}

bool RequireBool(const Fields & f, const char * name) { return CheckBool(f.Env(), f.Get(name), Label{&f, name}); }

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

void ExportCall(Napi::Env env, Napi::Object exports, const CallSpec & spec, Napi::Function::Callback sync,
                Napi::Function::Callback async) {
    if (!exports.Has("calls")) exports.Set("calls", Napi::Object::New(env));
    Napi::Object calls = exports.Get("calls").As<Napi::Object>();
    Napi::Object entry = Napi::Object::New(env);
    Napi::Array fields = Napi::Array::New(env, spec.count);
    for (size_t i = 0; i < spec.count; ++i) fields.Set((uint32_t)i, Napi::String::New(env, spec.fields[i]));
    entry.Set("fields", fields);
    entry.Set("handle", Napi::Boolean::New(env, spec.handle));
    if (sync != nullptr) {
        exports.Set(spec.name, Napi::Function::New(env, sync, spec.name));
        calls.Set(spec.name, entry);
    }
    if (async != nullptr) {
        const std::string name = std::string(spec.name) + "Async";
        exports.Set(name, Napi::Function::New(env, async, name));
        calls.Set(name, entry);
    }
}

}  // namespace maporl_js
