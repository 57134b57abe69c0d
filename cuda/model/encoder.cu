// encoder.cu: CUDA token + position embedding (native/model/gpt_cuda.h; CPU reference native/model/encoder.cpp). The
// backward's scatter into dwte has no float atomics: the host groups the positions of every distinct token
// (bucket_tokens in native/model/encoder.cpp, a counting sort), and one block per distinct token sums its rows in ascending position order.
// dwpe: one thread per (t, c) sums over the batch in order.
#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

__global__ void encoder_forward_kernel(float * out, const int32_t * inp, const float * wte, const float * wpe,
                                       int64_t N, int64_t T, int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i / C, c = i % C;
        out[i] = wte[(int64_t)inp[n] * C + c] + wpe[(n % T) * C + c];
    }
}

// Block k: token ids[k]; threads stride over channels.
__global__ void encoder_backward_wte_kernel(float * dwte, const float * dout, const int32_t * ids,
                                            const int32_t * offsets, const int32_t * positions, int64_t C) {
    const int64_t k = blockIdx.x;
    const int64_t id = ids[k], p0 = offsets[k], p1 = offsets[k + 1];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int64_t p = p0; p < p1; ++p) s += dout[(int64_t)positions[p] * C + c];
        dwte[id * C + c] += s;
    }
}

__global__ void encoder_backward_wpe_kernel(float * dwpe, const float * dout, int64_t B, int64_t T, int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < T * C; i += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t b = 0; b < B; ++b) s += dout[b * T * C + i];
        dwpe[i] += s;
    }
}

}  // namespace

void encoder_forward(float * out, const int32_t * inp, const float * wte, const float * wpe, int64_t B, int64_t T,
                     int64_t C) {
    if (B * T * C <= 0) return;
    encoder_forward_kernel<<<grid_for(B * T * C, 256), 256>>>(out, inp, wte, wpe, B * T, T, C);
    MAPORL_CUDA_LAUNCHED("encoder_forward");
}

void encoder_backward(float * dwte, float * dwpe, const float * dout, const int32_t * ids, const int32_t * offsets,
                      const int32_t * positions, int64_t n_ids, int64_t B, int64_t T, int64_t C) {
    if (B * T * C <= 0) return;
    if (n_ids > 0) {
        const int threads = C < 256 ? 128 : 256;
        encoder_backward_wte_kernel<<<grid_dim(n_ids, "encoder_backward"), threads>>>(dwte, dout, ids, offsets,
                                                                                      positions, C);
        MAPORL_CUDA_LAUNCHED("encoder_backward");
    }
    encoder_backward_wpe_kernel<<<grid_for(T * C, 256), 256>>>(dwpe, dout, B, T, C);
    MAPORL_CUDA_LAUNCHED("encoder_backward");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
