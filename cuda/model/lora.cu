// lora.cu: the two elementwise steps of a LoRA term on the device (native/model/llama_cuda.h), composed with the GEMM by
// llama_device.h: u *= scale (the adapter's alpha / r on x A^T) and out rows += d rows where the row's mask is set
// (a decode step whose rows run different adapters). CPU twins: llama_device_host.h.
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

__global__ void scale_kernel(float * x, float s, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void add_rows_kernel(float * out, const float * d, const int32_t * mask, int64_t N, int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x)
        if (mask[i / C]) out[i] = out[i] + d[i];
}

}  // namespace

void scale(float * x, float s, int64_t n) {
    if (n <= 0) return;
    scale_kernel<<<grid_for(n, 256), 256>>>(x, s, n);
    MAPORL_CUDA_LAUNCHED("lora scale");
}

void add_rows(float * out, const float * d, const int32_t * mask, int64_t N, int64_t C) {
    if (N * C <= 0) return;
    add_rows_kernel<<<grid_for(N * C, 256), 256>>>(out, d, mask, N, C);
    MAPORL_CUDA_LAUNCHED("lora add_rows");
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
