// embedding.cu: CUDA token embedding of the Llama family (native/model/llama_cuda.h; CPU reference: llama.cpp's
// embed_row and its backward). The forward gathers rows; the backward's scatter into the embedding's gradient has no
// float atomics: the host groups the positions of every distinct token (gpt::cuda::bucket_tokens, a counting sort)
// and one block per distinct token adds its rows in ascending position order (the CPU model's row order).
#include <cuda_fp16.h>

#include "native/core/q8.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama_cuda.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace llama {
namespace cuda {
namespace {

__global__ void embedding_forward_kernel(float * out, const int32_t * tok, const float * wte, int64_t N, int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = wte[(int64_t)tok[i / C] * C + i % C];
}

// A frozen base's embedding: bfloat16 rows widened, or int8 rows (q8.h's packed layout) as q * d, exactly (the CPU
// model's embed_row).
__global__ void embedding_forward_bf16_kernel(float * out, const int32_t * tok, const uint16_t * wte, int64_t N,
                                              int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __uint_as_float((uint32_t)wte[(int64_t)tok[i / C] * C + i % C] << 16);
}
__global__ void embedding_forward_q8_kernel(float * out, const int32_t * tok, const uint8_t * pq, const uint16_t * pd,
                                            int64_t N, int64_t C) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = tok[i / C], c = i % C;
        out[i] = (float)((int)pq[q8_packed_index(C, r, c)] - 128) *
            __half2float(__ushort_as_half(pd[q8_packed_scale_index(C, r, c)]));
    }
}

// Block k: token ids[k]; threads stride over channels.
__global__ void embedding_backward_kernel(float * dwte, const float * dout, const int32_t * ids,
                                          const int32_t * offsets, const int32_t * positions, int64_t C) {
    const int64_t k = blockIdx.x;
    const int64_t id = ids[k], p0 = offsets[k], p1 = offsets[k + 1];
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = dwte[id * C + c];
        for (int64_t p = p0; p < p1; ++p) s += dout[(int64_t)positions[p] * C + c];
        dwte[id * C + c] = s;
    }
}

}  // namespace

void embedding_forward(float * out, const int32_t * tokens, const float * wte, int64_t N, int64_t C) {
    if (N * C <= 0) return;
    embedding_forward_kernel<<<grid_for(N * C, 256), 256>>>(out, tokens, wte, N, C);
    MAPORL_CUDA_LAUNCHED("embedding_forward");
}

void embedding_forward_bf16(float * out, const int32_t * tokens, const uint16_t * wte, int64_t N, int64_t C) {
    if (N * C <= 0) return;
    embedding_forward_bf16_kernel<<<grid_for(N * C, 256), 256>>>(out, tokens, wte, N, C);
    MAPORL_CUDA_LAUNCHED("embedding_forward_bf16");
}

void embedding_forward_q8(float * out, const int32_t * tokens, const uint8_t * pq, const uint16_t * pd, int64_t N,
                          int64_t C) {
    if (N * C <= 0) return;
    embedding_forward_q8_kernel<<<grid_for(N * C, 256), 256>>>(out, tokens, pq, pd, N, C);
    MAPORL_CUDA_LAUNCHED("embedding_forward_q8");
}

void embedding_backward(float * dwte, const float * dout, const int32_t * host_tokens, int64_t N, int64_t C) {
    if (N * C <= 0) return;
    const gpt::cuda::TokenBuckets tb = gpt::cuda::bucket_tokens(host_tokens, N);
    const int64_t nid = (int64_t)tb.ids.size();
    int32_t * ids = gpt::cuda::alloc_i32(2 * nid + 1 + N);
    try {
        gpt::cuda::to_device(ids, tb.ids.data(), nid * 4);
        gpt::cuda::to_device(ids + nid, tb.offsets.data(), (nid + 1) * 4);
        gpt::cuda::to_device(ids + 2 * nid + 1, tb.positions.data(), N * 4);
        const int threads = C < 256 ? 128 : 256;
        embedding_backward_kernel<<<grid_dim(nid, "embedding_backward"), threads>>>(dwte, dout, ids, ids + nid,
                                                                                    ids + 2 * nid + 1, C);
        MAPORL_CUDA_LAUNCHED("embedding_backward");
        gpt::cuda::synchronize("embedding_backward");  // (before the buckets are freed)
    } catch (...) {
        gpt::cuda::release(ids);
        throw;
    }
    gpt::cuda::release(ids);
}

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
