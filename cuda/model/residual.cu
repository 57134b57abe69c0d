// residual.cu: CUDA residual connection out = a + b and its backward (native/model/gpt_cuda.h; CPU reference
// native/model/residual.cpp). Elementwise, grid-stride.
#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

__global__ void residual_forward_kernel(float * out, const float * a, const float * b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float * da, float * db, const float * dout, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}

}  // namespace

void residual_forward(float * out, const float * a, const float * b, int64_t n) {
    if (n <= 0) return;
    residual_forward_kernel<<<grid_for(n, 256), 256>>>(out, a, b, n);
    MAPORL_CUDA_LAUNCHED("residual_forward");
}

void residual_backward(float * da, float * db, const float * dout, int64_t n) {
    if (n <= 0) return;
    residual_backward_kernel<<<grid_for(n, 256), 256>>>(da, db, dout, n);
    MAPORL_CUDA_LAUNCHED("residual_backward");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
