// args.h: argument unpacking for the N-API functions. The TypeScript layer validates first and gives the
// user-facing messages; these checks are the last line that keeps a wrong call from reaching native code
// (a wrong type is a TypeError, a wrong length or range a RangeError, never a crash).
#pragma once

#include <napi.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "maporl.h"

namespace maporl_js {

const char * TypedArrayTypeName(napi_typedarray_type t);

// The plain arguments of the calls that take one value (besides a model handle): info[i] checked, named `name`.
double RequireNumber(const Napi::CallbackInfo & info, size_t i, const char * name);
// A safe integer in [lo, hi].
int64_t RequireInt(const Napi::CallbackInfo & info, size_t i, const char * name, int64_t lo, int64_t hi);
bool RequireBool(const Napi::CallbackInfo & info, size_t i, const char * name);

// A call of named arguments: its name and its fields in the order the addon receives them. Each binding file declares
// one per call and exports it with the function (ExportCall); lib/nativeCalls.ts builds from the exported lists the
// wrapper that TypeScript calls with one object, so native.gae({rewards, values, ...}) arrives here as the fields in
// this order (after the model handle when `handle`). The C++ reads them by name (Fields). Why not the object itself:
// Node-API 8 has no fast property read (about 230 ns a field on the 2-core test machine, against about 50 for an
// argument), which at 13 fields would triple a small kernel call.
struct CallSpec {
    const char * name;
    const char * const * fields;
    size_t count;
    bool handle;
};

// One call's named arguments. A missing or mistyped field is a TypeError / RangeError naming the call and the field
// ("gae: advantages: expected Float32Array, got Uint8Array"). Nested objects (a loss's params) are read as objects.
class Fields {
public:
    Fields(const Napi::CallbackInfo & info, const CallSpec & spec) : info_(&info), spec_(&spec), call_(spec.name) {}
    Napi::Env Env() const { return info_ ? info_->Env() : obj_.Env(); }
    // The field's value (undefined when absent).
    Napi::Value Get(const char * name) const;
    // Whether the field holds something other than null or undefined.
    bool Has(const char * name) const;
    // The nested object `name` (e.g. a loss's params), its fields named "name.field" in errors.
    Fields Object(const char * name) const;
    // "call: name", or "call: parent.name" in a nested object, for messages.
    std::string Where(const char * name) const;

private:
    Fields(Napi::Object obj, const char * call, const char * parent) : obj_(obj), call_(call), parent_(parent) {}
    const Napi::CallbackInfo * info_ = nullptr;  // the call's arguments (top level)
    const CallSpec * spec_ = nullptr;
    Napi::Object obj_;  // a nested object
    const char * call_;
    const char * parent_ = nullptr;  // the nested object's field name (messages say "parent.name")
};

// exports[spec.name] = sync and exports[spec.name + "Async"] = async, each when given; recorded with the field list
// in exports.calls ({name: {fields, handle}}) for lib/nativeCalls.ts.
void ExportCall(Napi::Env env, Napi::Object exports, const CallSpec & spec, Napi::Function::Callback sync,
                Napi::Function::Callback async = nullptr);

// The checks of a call's named fields. The typed array `name`: one of `types`, attached, with exactly `length`
// elements.
Napi::TypedArray RequireTypedArray(const Fields & f, const char * name,
                                   std::initializer_list<napi_typedarray_type> types, size_t length);
double RequireNumber(const Fields & f, const char * name);
// A safe integer in [lo, hi].
int64_t RequireInt(const Fields & f, const char * name, int64_t lo, int64_t hi);
// Two dimensions, each in [0, 2^40], whose product stays under 2^40; returns the product.
int64_t RequireDims(const Fields & f, const char * a, const char * b, int64_t * a_out, int64_t * b_out);
bool RequireBool(const Fields & f, const char * name);
// An optional Float32Array field of n elements: null or undefined gives nullptr; else its data, the array added to
// `keep` (the values an async call holds) when given.
float * OptionalF32(const Fields & f, const char * name, size_t n, std::vector<Napi::Value> * keep);

// The first element's address. napi_get_typedarray_info, not ArrayBuffer().Data(): the latter fails on a view
// of a SharedArrayBuffer (napi_get_arraybuffer_info takes plain ArrayBuffers only).
void * DataOf(const Napi::TypedArray & a);

// Throws the MaporlError (given to the addon at init) for a non-OK status, with maporl_last_error().
[[noreturn]] void ThrowStatus(Napi::Env env, maporl_status status, const char * where);
// The same error as a value, for rejecting promises.
Napi::Value MakeStatusError(Napi::Env env, maporl_status status, const std::string & message);

// Holds the MaporlError constructor (better-sqlite3's pattern: JS hands it over at init).
struct AddonData {
    Napi::FunctionReference error_ctor;
};

}  // namespace maporl_js
