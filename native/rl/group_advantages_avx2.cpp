// group_advantages_avx2.cpp: the group advantage kernels (group_advantages_vec.inc) with 8 lanes, built with the avx2
// flags (see CMakeLists.txt and binding.gyp) and dispatched at run time by group_advantages.cpp. Empty on other
// architectures.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAPORL_ISA avx2
#define MAPORL_VEC_W 8
#include "native/rl/group_advantages_vec.inc"
#endif
