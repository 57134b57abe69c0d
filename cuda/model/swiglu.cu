// swiglu.cu: CUDA SwiGLU forward / backward (native/model/llama_cuda.h; CPU reference native/model/swiglu.cpp):
// out = silu(gate) * up, one thread per element (grid-stride).
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

__global__ void swiglu_forward_kernel(float * out, const float * gate, const float * up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        out[i] = g * s * up[i];
    }
}

// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
__global__ void swiglu_backward_kernel(float * dgate, float * dup, const float * dout, const float * gate, const float * up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i], s = 1.0f / (1.0f + expf(-g)), d = dout[i];
        dgate[i] += d * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] += d * g * s;
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
