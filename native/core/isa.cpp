// isa.cpp: CPU feature detection and the SIMD level override (maporl_simd / maporl_set_simd).
#include "native/core/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "native/core/core.h"

namespace maporl {
namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_X86_KERNELS 1
#else
#define MAPORL_X86_KERNELS 0
#endif

Isa detect() {
#if MAPORL_X86_KERNELS
    __builtin_cpu_init();
    // Every extension the per-ISA units are built with (CMakeLists.txt, binding.gyp): the compiler may use any of
    // them anywhere in those units (vec.h's vfixed_add needs AVX-512DQ), and Xeon Phi has AVX-512F without DQ/BW/VL.
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
    return Isa::Scalar;
}

bool parse(const char * s, Isa * out) {
    if (std::strcmp(s, "scalar") == 0) {
        *out = Isa::Scalar;
        return true;
    }
    if (std::strcmp(s, "avx2") == 0) {
        *out = Isa::Avx2;
        return true;
    }
    if (std::strcmp(s, "avx512") == 0) {
        *out = Isa::Avx512;
        return true;
    }
    return false;
}

std::atomic<int> g_override{-1};  // -1: not read yet; else an Isa value

}  // namespace

Isa cpu_isa() {
    static const Isa isa = detect();
    return isa;
}

Isa active_isa() {
    int o = g_override.load(std::memory_order_relaxed);
    if (o < 0) {
        Isa lvl = cpu_isa();
        const char * env = std::getenv("MAPORL_SIMD");
        Isa want;
        if (env != nullptr && parse(env, &want) && (int)want < (int)lvl) lvl = want;
        int expected = -1;
        g_override.compare_exchange_strong(expected, (int)lvl);
        o = g_override.load();
    }
    return (Isa)o;
}

bool cpu_has_avx512_vnni() {
#if MAPORL_X86_KERNELS
    static const bool has = cpu_isa() == Isa::Avx512 && __builtin_cpu_supports("avx512vnni");
    return has;
#else
    return false;
#endif
}

const char * isa_name(Isa isa) {
    switch (isa) {
        case Isa::Avx512:
            return "avx512";
        case Isa::Avx2:
            return "avx2";
        default:
            return "scalar";
    }
}

}  // namespace maporl

extern "C" {

const char * maporl_simd(void) { return maporl::isa_name(maporl::active_isa()); }

maporl_status maporl_set_simd(const char * level) {
    using namespace maporl;
    return guarded([&] {
        if (level == nullptr)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "level: expected \"scalar\", \"avx2\", \"avx512\" or \"best\", got NULL");
        Isa want;
        if (std::strcmp(level, "best") == 0)
            want = cpu_isa();
        else if (!parse(level, &want))
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "level: expected \"scalar\", \"avx2\", \"avx512\" or \"best\", got \"%.32s\"", level);
        if ((int)want > (int)cpu_isa())
            throw_error(MAPORL_ERR_INVALID_ARG, "level: \"%s\" is not supported here (best is \"%s\")", level,
                        isa_name(cpu_isa()));
        g_override.store((int)want);
        return MAPORL_OK;
    });
}

}  // extern "C"
