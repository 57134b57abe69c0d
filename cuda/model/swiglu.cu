// swiglu.cu: CUDA SwiGLU forward / backward (native/model/llama_cuda.h; CPU reference native/model/swiglu.cpp):
// out = silu(gate) * up, one thread per element (grid-stride).
#include "native/core/det_exp.h"
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

// The CPU's float sigmoid (swiglu.cpp): e = exp(-|g|) by det_exp_nonpos (the same IEEE steps as the CPU's), then
// (g >= 0 ? 1 : e) / (1 + e), so a device SwiGLU gives the CPU's bits (division and FMA are correctly rounded on
// both; nvcc contracts no multiply-add here since det_exp uses explicit __fmaf_rn).
__device__ __forceinline__ float sigmoid_f(float g) {
    const float e = det_exp_nonpos(-fabsf(g));
    return __fdiv_rn(g >= 0.0f ? 1.0f : e, __fadd_rn(1.0f, e));
}

__global__ void swiglu_forward_kernel(float * out, const float * gate, const float * up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i], s = sigmoid_f(g);
        out[i] = __fmul_rn(__fmul_rn(g, s), up[i]);
    }
}

// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
__global__ void swiglu_backward_kernel(float * dgate, float * dup, const float * dout, const float * gate,
                                       const float * up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i], s = sigmoid_f(g), d = dout[i];
        const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s))));
        dgate[i] = __fadd_rn(dgate[i], __fmul_rn(__fmul_rn(d, up[i]), dsilu));
        dup[i] = __fadd_rn(dup[i], __fmul_rn(d, __fmul_rn(g, s)));
    }
}

}  // namespace

void swiglu_forward(float * out, const float * gate, const float * up, int64_t n) {
    if (n <= 0) return;
    swiglu_forward_kernel<<<grid_for(n, 256), 256>>>(out, gate, up, n);
    MAPORL_CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward(float * dgate, float * dup, const float * dout, const float * gate, const float * up, int64_t n) {
    if (n <= 0) return;
    swiglu_backward_kernel<<<grid_for(n, 256), 256>>>(dgate, dup, dout, gate, up, n);
    MAPORL_CUDA_LAUNCHED("swiglu_backward");
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
