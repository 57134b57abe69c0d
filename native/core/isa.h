// isa.h: which SIMD code path the CPU kernels take. Kernels with vector paths are compiled once per level
// in their own translation units (<stem>_avx512.cpp, <stem>_avx2.cpp, built with those -m flags) and
// dispatched here at run time, so shipped binaries need no -march=native. The level can be lowered with
// maporl_set_simd() or the MAPORL_SIMD environment variable (read once), e.g. to test every path.
#pragma once

namespace maporl {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Best level supported by this CPU and this build.
Isa cpu_isa();
// Level the kernels use now: cpu_isa() unless lowered.
Isa active_isa();
const char * isa_name(Isa isa);
// Whether the CPU has AVX512-VNNI (the int8 dot products of w8a8_avx512.cpp; only used at the AVX-512 level).
bool cpu_has_avx512_vnni();

}  // namespace maporl
