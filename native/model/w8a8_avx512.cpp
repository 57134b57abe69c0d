// w8a8_avx512.cpp: the W8A8 kernels (w8a8_vec.inc) with 16 lanes and VNNI's vpdpbusd (enabled inside the .inc for
// these functions only), built with the avx512 flags and dispatched by w8a8.cpp where the CPU has AVX512-VNNI.
// Empty on other architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx512
#define MAPORL_VEC_W 16
#include "native/model/w8a8_vec.inc"
#endif
