// llama_cuda.h: the Llama family's layers on CUDA (cuda/model/rmsnorm.cu, rope.cu, swiglu.cu, attention_gqa.cu,
// embedding.cu, lora.cu), and the whole model on the device (cuda/model/llama.cu). The layers work on
// device pointers, with the shapes and the contract of their CPU twins in llama_ops.h: every backward ADDS into its
// gradient outputs, and every reduction runs in a fixed order (no float atomics), so results repeat run to run.
// The CPU ops are the reference (test/native/model/test_llama_cuda.cpp, run where a GPU is visible). Plain C++
// declarations (no CUDA types); compiled only in the CUDA build, except cuda_model_create (a stub without CUDA).
#pragma once

#include <stdint.h>

namespace maporl {
namespace llama {
namespace cuda {

// out = x * rsqrt(mean(x^2) + eps) * weight per row of C; rstd [N] saved. One warp per row.
void rmsnorm_forward(float * out, float * rstd, const float * inp, const float * weight, int64_t N, int64_t C,
                     double eps);
// scratch: rmsnorm_scratch(N, C) floats (per-chunk partials of dweight).
int64_t rmsnorm_scratch(int64_t N, int64_t C);
void rmsnorm_backward(float * dinp, float * dweight, const float * dout, const float * inp, const float * weight,
                      const float * rstd, int64_t N, int64_t C, float * scratch);

// Rotate-half RoPE on x [B, T, H, dim] at positions pos0 + t, with the [positions, dim / 2] cos / sin tables on the
// device. In place is allowed.
void rope_forward(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T,
                  int64_t pos0, int64_t H, int64_t dim);
void rope_backward(float * dinp, const float * dout, const float * cos, const float * sin, int64_t B, int64_t T,
                   int64_t pos0, int64_t H, int64_t dim);

void swiglu_forward(float * out, const float * gate, const float * up, int64_t n);
void swiglu_backward(float * dgate, float * dup, const float * dout, const float * gate, const float * up, int64_t n);

// Row strides, in floats, of the attention's operands when they are not packed: q (and dq), k and v (and dk, dv), out
// (and dout). 0 takes the packed width (NH*hs, NKV*hs, NH*hs). The embedded GPT's multi-head attention is this one
// with NKV = NH on its fused qkv rows (q, k, v at offsets 0, C, 2C of rows 3C wide: {3C, 3C, C}).
struct AttentionStrides {
    int64_t q = 0, kv = 0, out = 0;
};

// Causal GQA attention: q [B, T, NH*hs], k / v [B, T, NKV*hs], out [B, T, NH*hs], att [B, NH, T, T] (probabilities).
void attention_gqa_forward(float * out, float * att, const float * q, const float * k, const float * v, int64_t B,
                           int64_t T, int64_t NH, int64_t NKV, int64_t hs, AttentionStrides strides = {});
// Adds the gradients into dq, dk, dv. scratch: B * NH * T * T floats (the pre-softmax gradient).
void attention_gqa_backward(float * dq, float * dk, float * dv, const float * dout, const float * q, const float * k,
                            const float * v, const float * att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t hs, float * scratch, AttentionStrides strides = {});

// The decoder's ops (llama_device.h): row n of N at position pos[n] / rt[n] of cache row rb[n]. rope_rows rotates x
// [N, H, dim] in place; kv_store writes k, v [N, NKV*hd] into the layer's caches [batch, NKV, max_len, hd];
// attention_rows attends every row's NH query heads [N, NH*hs] over slots 0 .. rt[n] (scratch: N * NH * max_len).
void rope_rows(float * x, const float * cos, const float * sin, const int32_t * pos, int64_t N, int64_t H, int64_t dim);
void kv_store(float * kc, float * vc, const float * k, const float * v, const int32_t * rb, const int32_t * rt,
              int64_t N, int64_t NKV, int64_t max_len, int64_t hd);
void attention_rows(float * out, const float * q, const float * kc, const float * vc, const int32_t * rb,
                    const int32_t * rt, int64_t N, int64_t NH, int64_t NKV, int64_t max_len, int64_t hs,
                    float * scratch);

// Token embedding rows (embedding.cu): out [N, C] = wte[tokens[n]]; the backward adds dout's rows into dwte, each
// token's rows in ascending order (host_tokens: the same ids on the host, bucketed there).
void embedding_forward(float * out, const int32_t * tokens, const float * wte, int64_t N, int64_t C);
void embedding_backward(float * dwte, const float * dout, const int32_t * host_tokens, int64_t N, int64_t C);
// A frozen base's embedding rows: bfloat16 widened, or int8 in q8.h's packed layout as q * d (exactly, as the CPU's).
void embedding_forward_bf16(float * out, const int32_t * tokens, const uint16_t * wte, int64_t N, int64_t C);
void embedding_forward_q8(float * out, const int32_t * tokens, const uint8_t * pq, const uint16_t * pd, int64_t N,
                          int64_t C);

// LoRA's elementwise steps (lora.cu): x *= s; out [N, C] rows += d rows where mask[n] != 0.
void scale(float * x, float s, int64_t n);
void add_rows(float * out, const float * d, const int32_t * mask, int64_t N, int64_t C);

}  // namespace cuda

// The whole model on the device (cuda/model/llama.cu: llama_device.h's DeviceLlama over these ops). Throws
// MAPORL_ERR_NO_DEVICE without a GPU or in a build without CUDA (native/core/cuda_stubs.cpp).
// `host`: the host model whose LoRA adapters the device model runs (null: none).
struct DeviceModel;
struct Config;
template <typename F>
struct Model;
DeviceModel * cuda_model_create(const Config & c, Model<float> * host);

}  // namespace llama
}  // namespace maporl
