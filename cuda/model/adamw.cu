// adamw.cu: CUDA AdamW step (decoupled weight decay, bias correction; native/model/gpt_cuda.h, CPU reference
// native/model/adamw.cpp) and the global gradient norm for clipping: per-block partial sums of squares in double over a
// fixed grid, then one block adds the partials in index order, so the norm is the same on every run.
#include <cmath>

#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr int kNormBlocks = 512;
constexpr int kThreads = 256;

__global__ void adamw_kernel(float * params, const float * grads, float * m, float * v, int64_t n, float lr, float b1,
                             float b2, float eps, float wd, float ic1, float ic2, float grad_scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = grads[i] * grad_scale;
        const float mi = b1 * m[i] + (1.0f - b1) * g;
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = params[i] * (1.0f - lr * wd);
        p -= lr * (mi * ic1) / (sqrtf(vi * ic2) + eps);
        params[i] = p;
    }
}

__global__ void sumsq_partials_kernel(const float * x, int64_t n, double * partials) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double * partials, int n, double * out) {
    __shared__ double sh[32];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partials[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

}  // namespace

void adamw_update(float * params, const float * grads, float * m, float * v, int64_t n, const AdamW & h, int64_t t,
                  float grad_scale) {
    if (n <= 0) return;
    const double c1 = 1.0 - std::pow((double)h.beta1, (double)t), c2 = 1.0 - std::pow((double)h.beta2, (double)t);
    adamw_kernel<<<grid_for(n, kThreads), kThreads>>>(params, grads, m, v, n, h.lr, h.beta1, h.beta2, h.eps,
                                                      h.weight_decay, (float)(1.0 / c1), (float)(1.0 / c2), grad_scale);
    MAPORL_CUDA_LAUNCHED("adamw_update");
}

double global_norm(const float * x, int64_t n) {
    if (n <= 0) return 0.0;
    DeviceBuffer partials;
    MAPORL_CUDA_THROW(cudaMalloc(&partials.ptr, sizeof(double) * (kNormBlocks + 1)));
    double * p = partials.as<double>();
    sumsq_partials_kernel<<<kNormBlocks, kThreads>>>(x, n, p);
    MAPORL_CUDA_LAUNCHED("global_norm");
    sum_partials_kernel<<<1, kThreads>>>(p, kNormBlocks, p + kNormBlocks);
    MAPORL_CUDA_LAUNCHED("global_norm");
    double s = 0;
    MAPORL_CUDA_THROW(cudaMemcpy(&s, p + kNormBlocks, sizeof s, cudaMemcpyDeviceToHost));
    return std::sqrt(s);
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
