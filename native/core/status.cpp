// status.cpp: per-thread last-error messages, status names, version and SIMD level.
#include <cstdio>
#include <cstring>

#include "native/core/core.h"

namespace {
thread_local char g_last_error[1024] = "";
}

namespace maporl {

static void vformat_error(const char * fmt, va_list ap) { std::vsnprintf(g_last_error, sizeof g_last_error, fmt, ap); }

maporl_status set_error(maporl_status status, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vformat_error(fmt, ap);
    va_end(ap);
    return status;
}

void clear_error() { g_last_error[0] = '\0'; }

void throw_error(maporl_status status, const char * fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw Error{status, buf};
}

}  // namespace maporl

extern "C" {

const char * maporl_last_error(void) { return g_last_error; }

const char * maporl_status_name(maporl_status status) {
    switch (status) {
        case MAPORL_OK:
            return "MAPORL_OK";
        case MAPORL_ERR_INVALID_ARG:
            return "MAPORL_ERR_INVALID_ARG";
        case MAPORL_ERR_OUT_OF_MEMORY:
            return "MAPORL_ERR_OUT_OF_MEMORY";
        case MAPORL_ERR_NO_DEVICE:
            return "MAPORL_ERR_NO_DEVICE";
        case MAPORL_ERR_CUDA:
            return "MAPORL_ERR_CUDA";
        case MAPORL_ERR_ABORTED:
            return "MAPORL_ERR_ABORTED";
        case MAPORL_ERR_INTERNAL:
            return "MAPORL_ERR_INTERNAL";
    }
    return "MAPORL_ERR_UNKNOWN";
}

#define MAPORL_STR2(x) #x
#define MAPORL_STR(x) MAPORL_STR2(x)
const char * maporl_version(void) {
    return MAPORL_STR(MAPORL_VERSION_MAJOR) "." MAPORL_STR(MAPORL_VERSION_MINOR) "." MAPORL_STR(MAPORL_VERSION_PATCH);
}

}  // extern "C"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace maporl {
void release_free_memory() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}
}  // namespace maporl
