// args.h: argument unpacking for the N-API functions. The TypeScript layer validates first and gives the
// user-facing messages; these checks are the last line that keeps a wrong call from reaching native code
// (a wrong type is a TypeError, a wrong length or range a RangeError, never a crash).
#pragma once

#include <napi.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "maporl.h"

namespace maporl_js {

const char * TypedArrayTypeName(napi_typedarray_type t);

// The typed array at info[i]: one of `types`, attached, with exactly `length` elements.
Napi::TypedArray RequireTypedArray(const Napi::CallbackInfo & info, size_t i, const char * name,
                                   std::initializer_list<napi_typedarray_type> types, size_t length);

double RequireNumber(const Napi::CallbackInfo & info, size_t i, const char * name);
// A safe integer in [lo, hi].
int64_t RequireInt(const Napi::CallbackInfo & info, size_t i, const char * name, int64_t lo, int64_t hi);
// Two dimensions at info[i], info[i + 1], each in [0, 2^40], whose product stays under 2^40; returns the product.
int64_t RequireDims(const Napi::CallbackInfo & info, size_t i, const char * a, const char * b, int64_t * a_out,
                    int64_t * b_out);
bool RequireBool(const Napi::CallbackInfo & info, size_t i, const char * name);

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
