// rope.cu: CUDA rotary position embeddings in Hugging Face's rotate-half convention (native/model/llama_cuda.h; CPU
// reference native/model/rope.cpp), with the cos / sin tables of rope_tables on the device (the scalings are in the
// tables). One thread per (row, head, pair i < dim / 2): it reads both halves before writing, so in place works.
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

// sign +1: the forward rotation; -1: its inverse (the backward of an orthogonal map).
__global__ void rope_kernel(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T,
                            int64_t pos0, int64_t H, int64_t dim, float sign, bool add) {
    const int64_t half = dim / 2, n = B * T * H * half;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, bth = e / half, t = (bth / H) % T;
        const float c = cos[(pos0 + t) * half + i], s = sign * sin[(pos0 + t) * half + i];
        const float * x = inp + bth * dim;
        const float a = x[i], b = x[i + half];
        float * o = out + bth * dim;
        const float ra = a * c - b * s, rb = b * c + a * s;
        if (add) {
            o[i] += ra;
            o[i + half] += rb;
        } else {
            o[i] = ra;
            o[i + half] = rb;
        }
    }
}

// rope_rows: row n (H heads) at its own position pos[n], in place.
__global__ void rope_rows_kernel(float * x, const float * cos, const float * sin, const int32_t * pos, int64_t N,
                                 int64_t H, int64_t dim) {
    const int64_t half = dim / 2, n = N * H * half;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, nh = e / half, at = (int64_t)pos[nh / H] * half + i;
        const float c = cos[at], s = sin[at];
        float * o = x + nh * dim;
        const float a = o[i], b = o[i + half];
        o[i] = a * c - b * s;
        o[i + half] = b * c + a * s;
    }
}

}  // namespace

void rope_rows(float * x, const float * cos, const float * sin, const int32_t * pos, int64_t N, int64_t H,
               int64_t dim) {
    if (N * H <= 0 || dim < 2) return;
    rope_rows_kernel<<<grid_for(N * H * (dim / 2), 256), 256>>>(x, cos, sin, pos, N, H, dim);
    MAPORL_CUDA_LAUNCHED("rope_rows");
}

void rope_forward(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T,
                  int64_t pos0, int64_t H, int64_t dim) {
    if (B * T * H <= 0 || dim < 2) return;
    rope_kernel<<<grid_for(B * T * H * (dim / 2), 256), 256>>>(out, inp, cos, sin, B, T, pos0, H, dim, 1.0f, false);
    MAPORL_CUDA_LAUNCHED("rope_forward");
}

void rope_backward(float * dinp, const float * dout, const float * cos, const float * sin, int64_t B, int64_t T,
                   int64_t pos0, int64_t H, int64_t dim) {
    if (B * T * H <= 0 || dim < 2) return;
    rope_kernel<<<grid_for(B * T * H * (dim / 2), 256), 256>>>(dinp, dout, cos, sin, B, T, pos0, H, dim, -1.0f, true);
    MAPORL_CUDA_LAUNCHED("rope_backward");
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
