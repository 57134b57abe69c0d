// gpt_ops.h: the forward / backward pairs of the embedded GPT policy's layers (one op per file stem:
// encoder.cpp, layernorm.cpp, matmul.cpp, attention.cpp, gelu.cpp, residual.cpp, adamw.cpp), in the style of a
// plain-C training loop: activations and parameters are flat row-major arrays, every backward ADDS into its
// gradient outputs (so gradients accumulate over micro-batches until the caller zeroes them), and nothing
// allocates except fixed-size scratch. F is float (the model) or double (the reference the finite-difference
// tests use). Work is split over the shared pool in blocks whose boundaries do not depend on the thread count,
// and every reduction runs in a fixed order: results are bit-identical for any number of threads.
// Shapes: B batch, T time, C channels, V vocabulary, NH heads (C % NH == 0), OC output channels, N = B*T rows.
#pragma once

#include <stdint.h>

namespace maporl {

// One query row of attention for float with SIMD (attention_vec.inc, per ISA), shared by the training forward /
// backward and the KV-cache decoder so that both compute the same floats.
#define MAPORL_ATTN_ROW_DECLS                                                                                    \
    void attention_row_f32(const float * q, const float * k, int64_t kstride, const float * v, int64_t vstride,  \
                           int64_t len, int64_t hs, float scale, float * att, float * out);                      \
    void attention_rows_f32(const float * q, int64_t qstride, const float * k, int64_t kstride, const float * v, \
                            int64_t vstride, int64_t len0, int64_t R, int64_t hs, float scale, float * att,      \
                            int64_t astride, float * out, int64_t ostride);                                      \
    void attention_row_backward_f32(const float * q, float * dq, const float * k, float * dk, int64_t kstride,   \
                                    const float * v, float * dv, int64_t vstride, const float * att,             \
                                    const float * dout, int64_t len, int64_t hs, float scale, float * datt);
namespace avx512 {
MAPORL_ATTN_ROW_DECLS
}
namespace avx2 {
MAPORL_ATTN_ROW_DECLS
}
#undef MAPORL_ATTN_ROW_DECLS

namespace gpt {

// The active ISA's attention rows for float, or nulls on the scalar level.
struct AttentionRows {
    void (*forward)(const float *, const float *, int64_t, const float *, int64_t, int64_t, int64_t, float, float *,
                    float *);
    void (*backward)(const float *, float *, const float *, float *, int64_t, const float *, float *, int64_t,
                     const float *, const float *, int64_t, int64_t, float, float *);
    // R consecutive query rows of one head at once (lengths len0 .. len0 + R - 1), each row's floats those of forward.
    void (*forward_rows)(const float *, int64_t, const float *, int64_t, const float *, int64_t, int64_t, int64_t,
                         int64_t, float, float *, int64_t, float *, int64_t);
};
// Query rows per forward_rows call in the training forward: the key and value rows are read once per block, and each
// block of W keys is transposed once for all of them (attention took 8.9% of the scoring forward's profile with 8
// rows and no transposed blocks, 6.3% with these).
constexpr int64_t kAttentionRowBlock = 32;
AttentionRows attention_rows();

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]. Token ids must lie in [0, V) (checked by the caller).
template <typename F>
void encoder_forward(F * out, const int32_t * inp, const F * wte, const F * wpe, int64_t B, int64_t T, int64_t C);
// dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:].
template <typename F>
void encoder_backward(F * dwte, F * dwpe, const F * dout, const int32_t * inp, int64_t B, int64_t T, int64_t C);

// LayerNorm over the last dimension (eps 1e-5, biased variance): out = (x - mean) * rstd * w + b; mean and rstd
// [N] are saved for the backward.
template <typename F>
void layernorm_forward(F * out, F * mean, F * rstd, const F * inp, const F * weight, const F * bias, int64_t N,
                       int64_t C);
template <typename F>
void layernorm_backward(F * dinp, F * dweight, F * dbias, const F * dout, const F * inp, const F * weight,
                        const F * mean, const F * rstd, int64_t N, int64_t C);

// out[n,o] = bias[o] + sum_c inp[n,c] * weight[o,c]  (weight [OC, C], as nn.Linear; bias may be null).
template <typename F>
void matmul_forward(F * out, const F * inp, const F * weight, const F * bias, int64_t N, int64_t C, int64_t OC);
// The same from a transposed weight wt [C, OC] (transpose_weight), for callers that reuse one weight many times
// (the KV-cache decoder); identical results.
// matmul_packs<F>(): true where matmul_forward reads the weight in place through the packed SIMD GEMM (float on
// AVX2 / AVX-512): a transposed copy then saves nothing, and callers skip it.
template <typename F>
void matmul_forward_wt(F * out, const F * inp, const F * wt, const F * bias, int64_t N, int64_t C, int64_t OC);
template <typename F>
void transpose_weight(F * wt, const F * weight, int64_t C, int64_t OC);
template <typename F>
bool matmul_packs();
// The same as matmul_forward for a few rows (decoding: N = the batch), reading `weight` [OC, C] once, row by row
// (dot products over contiguous rows: bound by the weights' bytes, no transposed copy). Float on AVX2 / AVX-512
// runs matmul_vec.inc's gemv_rows; each output is summed in a fixed order for any thread count.
template <typename F>
void matmul_forward_rows(F * out, const F * inp, const F * weight, const F * bias, int64_t N, int64_t C, int64_t OC);
// One weight of matmul_forward_rows_parts: out [N, OC] = inp @ W^T (+ bias) with W [OC, C] as F (w) or as
// bfloat16 (w16, widened exactly); exactly one of the two set.
template <typename F>
struct RowsPart {
    const F * w;
    const uint16_t * w16;
    const F * bias;
    F * out;
    int64_t OC;
    const uint8_t * w8 = nullptr;  // an int8 base's weight (q8.h's packed layout; float builds only), computed W8A8
    // (w8a8.h); its scales d8
    const uint16_t * d8 = nullptr;
};
// matmul_forward_rows for several weights that read the same input (a layer's q, k, v; its gate and up) as one
// parallel job over all their outputs: every output the same bits as alone, one hand-off between threads instead of
// one per weight.
template <typename F>
void matmul_forward_rows_parts(const RowsPart<F> * parts, int nparts, const F * inp, int64_t N, int64_t C);
// The same with a bfloat16 weight [OC, C] (a frozen base kept in its file dtype), widened exactly inside the
// kernels: the same bits as the float functions on the widened weight. Only the input's gradient exists for it.
void matmul_forward_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                         int64_t C, int64_t OC);
void matmul_forward_rows_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                              int64_t C, int64_t OC);
void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * weight, int64_t N, int64_t C,
                                int64_t OC, bool set_dinp = false);
// The input's gradient through an int8 base's weight [OC, C] (q8.h's packed layout; its forward is W8A8: w8a8.h):
// dinp (+)= dout @ W with W dequantized exactly (the float GEMM on row blocks of q * d), so the activations'
// rounding in the forward passes the gradient straight through.
void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd, int64_t N,
                              int64_t C, int64_t OC, bool set_dinp = false);
// dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum_n dout (dweight and dbias may be null: a frozen
// weight, as LoRA's base, gets the input's gradient only). With set_dinp, dinp = dout @ weight: its old values are
// not read (the same floats as zeroing it first, without that pass).
template <typename F>
void matmul_backward(F * dinp, F * dweight, F * dbias, const F * dout, const F * inp, const F * weight, int64_t N,
                     int64_t C, int64_t OC, bool set_dinp = false);

// Causal multi-head attention from packed qkv [B, T, 3C] (q, k, v each C = NH * hs): out [B, T, C];
// att [B, NH, T, T] keeps the softmax probabilities (row t uses columns 0..t) for the backward.
template <typename F>
void attention_forward(F * out, F * att, const F * qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
// dqkv += d loss / d qkv, from dout [B, T, C] and the forward's att.
template <typename F>
void attention_backward(F * dqkv, const F * dout, const F * qkv, const F * att, int64_t B, int64_t T, int64_t C,
                        int64_t NH);

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename F>
void gelu_forward(F * out, const F * inp, int64_t n);
template <typename F>
void gelu_backward(F * dinp, const F * inp, const F * dout, int64_t n);

// out = a + b; backward: da += dout, db += dout.
template <typename F>
void residual_forward(F * out, const F * a, const F * b, int64_t n);
template <typename F>
void residual_backward(F * da, F * db, const F * dout, int64_t n);

struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
};
// sum x^2 over x[0 .. n) in double, in a fixed order whatever the thread count (the global gradient norm's square):
// blocks of 2^16 elements, each over eight interleaved accumulators combined in order (then its tail), the blocks'
// sums added in order. On the pool's threads.
template <typename F>
double sum_squares(const F * x, int64_t n);
// One AdamW step (decoupled weight decay, bias correction with step t >= 1) over n parameters; m, v are the
// moment buffers (zero before the first step). grad_scale multiplies every gradient first (e.g. a clip factor).
template <typename F>
void adamw_update(F * params, const F * grads, F * m, F * v, int64_t n, const AdamW & h, int64_t t, F grad_scale);

}  // namespace gpt
}  // namespace maporl
