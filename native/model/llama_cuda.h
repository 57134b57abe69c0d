// llama_cuda.h: the Llama family's layers on CUDA (cuda/model/rmsnorm.cu, rope.cu, swiglu.cu, attention_gqa.cu), on
// device pointers, with the shapes and the contract of their CPU twins in llama_ops.h: every backward ADDS into its
// gradient outputs, and every reduction runs in a fixed order (no float atomics), so results repeat run to run.
// The CPU ops are the reference (test/native/model/test_llama_cuda.cpp, run where a GPU is visible). Plain C++
// declarations (no CUDA types); compiled only in the CUDA build. The whole Llama model does not run on CUDA yet:
// these are its layers, checked one by one.
#pragma once

#include <stdint.h>

namespace maporl {
namespace llama {
namespace cuda {

// out = x * rsqrt(mean(x^2) + eps) * weight per row of C; rstd [N] saved. One warp per row.
void rmsnorm_forward(float * out, float * rstd, const float * inp, const float * weight, int64_t N, int64_t C, double eps);
// scratch: rmsnorm_scratch(N, C) floats (per-chunk partials of dweight).
int64_t rmsnorm_scratch(int64_t N, int64_t C);
void rmsnorm_backward(float * dinp, float * dweight, const float * dout, const float * inp, const float * weight, const float * rstd,
                      int64_t N, int64_t C, float * scratch);

// Rotate-half RoPE on x [B, T, H, dim] at positions pos0 + t, with the [positions, dim / 2] cos / sin tables on the
// device. In place is allowed.
void rope_forward(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T, int64_t pos0, int64_t H,
                  int64_t dim);
void rope_backward(float * dinp, const float * dout, const float * cos, const float * sin, int64_t B, int64_t T, int64_t pos0,
                   int64_t H, int64_t dim);

void swiglu_forward(float * out, const float * gate, const float * up, int64_t n);
void swiglu_backward(float * dgate, float * dup, const float * dout, const float * gate, const float * up, int64_t n);

// Causal GQA attention: q [B, T, NH*hs], k / v [B, T, NKV*hs], out [B, T, NH*hs], att [B, NH, T, T] (probabilities).
void attention_gqa_forward(float * out, float * att, const float * q, const float * k, const float * v, int64_t B, int64_t T,
                           int64_t NH, int64_t NKV, int64_t hs);
// scratch: B * NH * T * T floats (the pre-softmax gradient).
void attention_gqa_backward(float * dq, float * dk, float * dv, const float * dout, const float * q, const float * k, const float * v,
                            const float * att, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, float * scratch);

}  // namespace cuda
}  // namespace llama
}  // namespace maporl
