// warp.cuh: warp-wide reductions shared by the row kernels (layernorm.cu, rmsnorm.cu, attention.cu,
// attention_gqa.cu): a butterfly over the 32 lanes in a fixed order, so every lane gets the same, repeatable value.
#pragma once

namespace maporl {
namespace cuda_warp {

__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

}  // namespace cuda_warp
}  // namespace maporl
