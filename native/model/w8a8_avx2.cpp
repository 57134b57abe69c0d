// w8a8_avx2.cpp: the W8A8 kernels (w8a8_vec.inc) with 8 lanes and AVX2's vpmaddubsw, built with the avx2 flags and
// dispatched by w8a8.cpp (also on an AVX-512 CPU without VNNI). Empty on other architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx2
#define MAPORL_VEC_W 8
#include "native/model/w8a8_vec.inc"
#endif
