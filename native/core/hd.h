// hd.h: MAPORL_HD marks small inline functions shared by the CPU code and the CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define MAPORL_HD __host__ __device__ __forceinline__
#else
#define MAPORL_HD inline
#endif
