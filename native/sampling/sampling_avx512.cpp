// sampling_avx512.cpp: the sampler's row passes (sampling_vec.inc) with 16 lanes, built with the avx512 flags
// (CMakeLists.txt, binding.gyp) and dispatched at run time. Empty on other architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx512
#define MAPORL_VEC_W 16
#include "native/sampling/sampling_vec.inc"
#endif
