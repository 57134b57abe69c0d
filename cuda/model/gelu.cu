// gelu.cu: CUDA GELU, tanh approximation (GPT-2), forward and backward (native/model/gpt_cuda.h; CPU reference
// native/model/gelu.cpp). Elementwise; tanhf is within 2 ulp of the CPU's libm tanh.
#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr float kS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;

__global__ void gelu_forward_kernel(float * out, const float * inp, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(kS * (x + kA * x * x * x)));
    }
}

__global__ void gelu_backward_kernel(float * dinp, const float * inp, const float * dout, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        const float th = tanhf(kS * (x + kA * x * x * x));
        const float local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kS * (1.0f + 3.0f * kA * x * x);
        dinp[i] += local * dout[i];
    }
}

}  // namespace

void gelu_forward(float * out, const float * inp, int64_t n) {
    if (n <= 0) return;
    gelu_forward_kernel<<<grid_for(n, 256), 256>>>(out, inp, n);
    MAPORL_CUDA_LAUNCHED("gelu_forward");
}

void gelu_backward(float * dinp, const float * inp, const float * dout, int64_t n) {
    if (n <= 0) return;
    gelu_backward_kernel<<<grid_for(n, 256), 256>>>(dinp, inp, dout, n);
    MAPORL_CUDA_LAUNCHED("gelu_backward");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
