// swiglu_avx512.cpp: the SIMD SwiGLU (swiglu_vec.inc) with 16 lanes, built with the avx512 flags (CMakeLists.txt,
// binding.gyp) and dispatched at run time by swiglu.cpp. Empty on other architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx512
#define MAPORL_VEC_W 16
#include "native/model/swiglu_vec.inc"
#endif
