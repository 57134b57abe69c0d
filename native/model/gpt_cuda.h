// gpt_cuda.h: the embedded GPT on CUDA. Two levels, both plain C++ (no CUDA types), so host code and the C++
// tests can call them without nvcc:
//  - gpt::cuda::*: the forward / backward pairs of gpt_ops.h on device pointers (cuda/model/encoder.cu, layernorm.cu,
//    matmul.cu, attention.cu, gelu.cu, residual.cu, adamw.cu). Same shapes and the same contract as the CPU ops:
//    every backward ADDS into its gradient outputs, and every reduction runs in a fixed order (no atomics on
//    floats), so a CUDA result is the same from run to run. The CPU ops are the reference (test_gpt_cuda.cpp).
//  - gpt::CudaModel (cuda/model/gpt.cu): the whole model of gpt.h on the device (parameters, gradients, AdamW moments,
//    activations and the KV cache), driven by gpt_api.cpp when a model is moved to MAPORL_DEVICE_CUDA.
// Every function throws maporl::Error (MAPORL_ERR_CUDA with CUDA's message, MAPORL_ERR_NO_DEVICE without a GPU);
// in a build without CUDA (native/core/cuda_stubs.cpp) each one throws MAPORL_ERR_NO_DEVICE.
#pragma once

#include <stdint.h>

#include <vector>

#include "native/model/gpt.h"

namespace maporl {
namespace gpt {
namespace cuda {

// Throws MAPORL_ERR_NO_DEVICE naming `what` unless a device is usable; waits for the device and rethrows the
// first asynchronous kernel error (the ops launch without waiting).
void require_device(const char * what);
void synchronize(const char * what);

// Device memory owned by a plain handle (cuda/model/gpt.cu): alloc throws, release is null-safe.
float * alloc_f32(int64_t n);
int32_t * alloc_i32(int64_t n);
void release(void * p);
void to_device(void * dst, const void * src, int64_t bytes);
void to_host(void * dst, const void * src, int64_t bytes);
void fill_zero(void * dst, int64_t bytes);

// The encoder backward's scatter, without float atomics: the distinct token ids of `tokens` [N] in ascending
// order (`ids`), and for each id the positions where it occurs, ascending (`positions`, grouped by id, with
// `offsets` [ids.size() + 1]). Built on the host, where the tokens come from.
struct TokenBuckets {
    std::vector<int32_t> ids, offsets, positions;
};
TokenBuckets bucket_tokens(const int32_t * tokens, int64_t N);

void encoder_forward(float * out, const int32_t * inp, const float * wte, const float * wpe, int64_t B, int64_t T,
                     int64_t C);
// ids / offsets / positions are device copies of a TokenBuckets (n_ids = ids.size()).
void encoder_backward(float * dwte, float * dwpe, const float * dout, const int32_t * ids, const int32_t * offsets,
                      const int32_t * positions, int64_t n_ids, int64_t B, int64_t T, int64_t C);

void layernorm_forward(float * out, float * mean, float * rstd, const float * inp, const float * weight,
                       const float * bias, int64_t N, int64_t C);
// scratch: at least layernorm_scratch(N, C) floats of device memory (per-chunk partial sums of dweight, dbias).
int64_t layernorm_scratch(int64_t N, int64_t C);
void layernorm_backward(float * dinp, float * dweight, float * dbias, const float * dout, const float * inp,
                        const float * weight, const float * mean, const float * rstd, int64_t N, int64_t C,
                        float * scratch);

void matmul_forward(float * out, const float * inp, const float * weight, const float * bias, int64_t N, int64_t C,
                    int64_t OC);
void matmul_backward(float * dinp, float * dweight, float * dbias, const float * dout, const float * inp,
                     const float * weight, int64_t N, int64_t C, int64_t OC);
// A frozen base's weight [OC, C] (gpt_ops.h's CPU twins): bfloat16 (widened exactly), or int8 in q8.h's packed layout.
// The bfloat16 products and the int8 input gradient are the float GEMM on the exactly widened weight (its gradient
// is ADDED into dinp); the int8 forward is W8A8 (cuda/model/w8a8.cu: w8a8.h's arithmetic, the CPU's bits), its
// input quantized into the device scratch xq [N, C] and xd [N, C / 32].
void matmul_forward_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                         int64_t C, int64_t OC);
void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * weight, int64_t N, int64_t C,
                                int64_t OC);
void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd, int64_t N,
                              int64_t C, int64_t OC);
void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd, const float * bias,
                         int64_t N, int64_t C, int64_t OC, int8_t * xq, float * xd);

void attention_forward(float * out, float * att, const float * qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
// scratch: B * NH * T * T floats (the pre-softmax gradient).
void attention_backward(float * dqkv, const float * dout, const float * qkv, const float * att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, float * scratch);
// One decoding position against a KV cache laid out [batch, NH, max_len, hs] (one layer): writes the new key and
// value of every row at `pos` from qkv [batch, 3C], then out [batch, C] = attention of the query over 0..pos.
// scratch: batch * NH * max_len floats.
void attention_decode(float * out, float * kcache, float * vcache, const float * qkv, int64_t batch, int64_t max_len,
                      int64_t pos, int64_t C, int64_t NH, float * scratch);

void gelu_forward(float * out, const float * inp, int64_t n);
void gelu_backward(float * dinp, const float * inp, const float * dout, int64_t n);

void residual_forward(float * out, const float * a, const float * b, int64_t n);
void residual_backward(float * da, float * db, const float * dout, int64_t n);

void adamw_update(float * params, const float * grads, float * m, float * v, int64_t n, const AdamW & h, int64_t t,
                  float grad_scale);
// sqrt(sum x^2) over n floats, summed in double in a fixed order.
double global_norm(const float * x, int64_t n);

}  // namespace cuda

// The model of gpt.h on the device. Parameters live on the device; get / set copy them (and the moments).
struct CudaModel;
CudaModel * cuda_model_create(const Config & cfg);
void cuda_model_free(CudaModel * m);
// which: 0 params, 1 m, 2 v, 3 grads. n must be the parameter count.
void cuda_model_upload(CudaModel * m, int which, const float * host, int64_t n);
void cuda_model_download(const CudaModel * m, int which, float * host, int64_t n);
// Forward over host tokens [B, T] (checked by the caller); logits [B, T, V] and values [B, T] to host (either may
// be null). The activations stay on the device for the backward.
void cuda_model_forward(CudaModel * m, const int32_t * tokens, int64_t B, int64_t T, float * logits, float * values);
// Adds the parameter gradients from host dlogits / dvalues of the last forward's shape (either may be null).
void cuda_model_backward(CudaModel * m, const float * dlogits, const float * dvalues);
void cuda_model_zero_grad(CudaModel * m);
// Clip to max_norm (<= 0: none) and one AdamW step with step counter t (>= 1); returns the norm before clipping.
double cuda_model_update(CudaModel * m, const AdamW & h, double max_norm, int64_t t);
void cuda_model_cache_reset(CudaModel * m, int64_t batch, int64_t max_len);
// tokens: host [batch] at position pos; logits [batch, V], values [batch] to host.
void cuda_model_decode(CudaModel * m, const int32_t * tokens, int64_t pos, float * logits, float * values);

}  // namespace gpt
}  // namespace maporl
