// peak_flops_avx2.cpp: the FMA loop of peak_flops_vec.inc with 8 lanes, built with the avx2 flags (CMakeLists.txt,
// binding.gyp) and dispatched at run time by peak_flops.cpp. Empty on other architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx2
#define MAPORL_VEC_W 8
#include "native/core/peak_flops_vec.inc"
#endif
