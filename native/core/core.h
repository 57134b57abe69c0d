// core.h: internal helpers of the core (error reporting, the try/catch wrapper of every C entry point,
// argument checks). Not part of the public interface; never include from bindings/.
#pragma once

#include <cstring>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "maporl.h"

namespace maporl {

// Sets the calling thread's last-error message and returns `status`.
maporl_status set_error(maporl_status status, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void clear_error();

// Thrown inside the core and turned into a status at the C boundary by MAPORL_API_BODY.
struct Error {
    maporl_status status;
    std::string message;
};

[[noreturn]] void throw_error(maporl_status status, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Runs `body` (returning maporl_status) and converts every exception into a status + message.
template <typename F>
maporl_status guarded(F && body) noexcept {
    try {
        clear_error();
        return body();
    } catch (const Error & e) { return set_error(e.status, "%s", e.message.c_str()); } catch (const std::bad_alloc &) {
        return set_error(MAPORL_ERR_OUT_OF_MEMORY, "out of host memory");
    } catch (const std::exception & e) {
        return set_error(MAPORL_ERR_INTERNAL, "internal error: %s", e.what());
    } catch (...) { return set_error(MAPORL_ERR_INTERNAL, "internal error: unknown exception"); }
}

// ---- argument checks (throw Error with a message naming the parameter) -----------------------------

inline void require_ptr(const void * p, const char * name, int64_t count) {
    if (p == nullptr && count > 0)
        throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected a non-NULL pointer to %lld elements, got NULL", name,
                    (long long)count);
}

inline void require_dims(int64_t B, int64_t T, const char * bname, const char * tname) {
    if (B < 0) throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected >= 0, got %lld", bname, (long long)B);
    if (T < 0) throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected >= 0, got %lld", tname, (long long)T);
    if (T > 0 && B > INT64_MAX / T)
        throw_error(MAPORL_ERR_INVALID_ARG, "shape: %s*%s overflows (got %lld x %lld)", bname, tname, (long long)B,
                    (long long)T);
}

inline void require_unit_interval(float x, const char * name) {
    if (!(x >= 0.0f && x <= 1.0f))  // NaN fails too
        throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected a finite number in [0, 1], got %g", name, (double)x);
}

// The integer an enum argument holds, read without loading it as the enum: a C caller may pass any int, and a
// load of an enum lvalue outside its range is undefined behaviour in C++ (UBSan's -fsanitize=enum). Validate an
// enum argument by enum_int, through a reference, before any other use of it.
template <typename E>
int enum_int(const E & e) {
    static_assert(sizeof(E) == sizeof(int), "a C enum");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

inline void require_device(const maporl_device & d) {
    const int v = enum_int(d);
    if (v != MAPORL_DEVICE_CPU && v != MAPORL_DEVICE_CUDA)
        throw_error(MAPORL_ERR_INVALID_ARG, "device: expected MAPORL_DEVICE_CPU (0) or MAPORL_DEVICE_CUDA (1), got %d",
                    v);
}

inline void require_mask_type(const maporl_mask_type & t) {
    const int v = enum_int(t);
    if (v != MAPORL_MASK_U8 && v != MAPORL_MASK_F32)
        throw_error(MAPORL_ERR_INVALID_ARG, "mask_type: expected MAPORL_MASK_U8 (0) or MAPORL_MASK_F32 (1), got %d", v);
}

}  // namespace maporl

namespace maporl {
// Hands the allocator's free memory back to the system (glibc: malloc_trim; elsewhere nothing). The model calls run
// on whichever worker thread Node gives them, and glibc keeps a heap per thread, each holding on to the large
// temporaries (transposed weights, logit chunks) its calls freed: without this, peak memory grows with the number
// of threads that ever ran a call, not with the model.
void release_free_memory();
}  // namespace maporl
