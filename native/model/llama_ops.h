// llama_ops.h: the forward / backward pairs of the Llama-family layers (llama.cpp composes them with the GEMM of
// gpt_ops.h): RMSNorm (rmsnorm.cpp), rotary position embeddings in Hugging Face's rotate-half convention with the
// linear and llama3 frequency scalings (rope.cpp), the SwiGLU gate (swiglu.cpp), and causal attention with grouped
// key/value heads (GQA / MQA; attention.cpp). Conventions as gpt_ops.h: flat row-major arrays, every backward ADDS
// into its gradient outputs, work split over the shared pool in blocks independent of the thread count, every
// reduction in a fixed order (bit-identical results for any number of threads). F is float or double.
#pragma once

#include <stdint.h>

#include <vector>

namespace maporl {
namespace llama {

// RMSNorm over the last dimension: out = x / sqrt(mean(x^2) + eps) * weight (statistics in double); rstd [N] is
// saved for the backward. In place (out == inp) is allowed.
template <typename F>
void rmsnorm_forward(F * out, F * rstd, const F * inp, const F * weight, int64_t N, int64_t C, double eps);
// dinp += d/dx, dweight += sum_n dout * x * rstd (per-64-row partials added in block order; dweight null: frozen).
template <typename F>
void rmsnorm_backward(F * dinp, F * dweight, const F * dout, const F * inp, const F * weight, const F * rstd, int64_t N,
                      int64_t C);

// Rotary frequencies: inv_freq[i] = theta^(-2i / dim) for i < dim / 2, then scaled as transformers'
// ROPE_INIT_FUNCTIONS do: "linear" divides every frequency by `factor`; "llama3" divides the low frequencies (wave
// length above original_max / low_freq_factor) by `factor`, keeps the high ones (below original_max /
// high_freq_factor) and interpolates between. Computed in double.
struct RopeScaling {
    enum Type { None, Linear, Llama3 } type = None;
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int64_t original_max_position = 8192;
};
std::vector<double> rope_inv_freq(int64_t dim, double theta, const RopeScaling & s);
// cos / sin tables [positions, dim / 2] (angle pos * inv_freq[i], in double, rounded once to F).
template <typename F>
void rope_tables(std::vector<F> & cos, std::vector<F> & sin, const std::vector<double> & inv_freq, int64_t positions);
// Rotate-half RoPE on x [B, T, H, dim] (row (b, t) at position pos0 + t): for i < dim / 2, with c, s the table's
// entries: out[i] = x[i] c - x[i + dim/2] s, out[i + dim/2] = x[i + dim/2] c + x[i] s. In place is allowed.
template <typename F>
void rope_forward(F * out, const F * inp, const F * cos, const F * sin, int64_t B, int64_t T, int64_t pos0, int64_t H,
                  int64_t dim);
// dinp += the inverse rotation of dout.
template <typename F>
void rope_backward(F * dinp, const F * dout, const F * cos, const F * sin, int64_t B, int64_t T, int64_t pos0,
                   int64_t H, int64_t dim);

// SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
template <typename F>
void swiglu_forward(F * out, const F * gate, const F * up, int64_t n);
// dgate += dout * up * silu'(gate), dup += dout * silu(gate).
template <typename F>
void swiglu_backward(F * dgate, F * dup, const F * dout, const F * gate, const F * up, int64_t n);

// Causal attention with NH query heads over NKV key/value heads (NH % NKV == 0; query head h reads kv head
// h / (NH / NKV)), head size hs, scale 1/sqrt(hs). q [B, T, NH*hs], k and v [B, T, NKV*hs], out [B, T, NH*hs];
// att [B, NH, T, T] keeps the probabilities (row t uses columns 0..t, the rest 0) for the backward.
template <typename F>
void attention_gqa_forward(F * out, F * att, const F * q, const F * k, const F * v, int64_t B, int64_t T, int64_t NH,
                           int64_t NKV, int64_t hs);
// dq, dk, dv += the gradients from dout. Split over (batch, kv head) groups, the group's query heads in order.
template <typename F>
void attention_gqa_backward(F * dq, F * dk, F * dv, const F * dout, const F * q, const F * k, const F * v,
                            const F * att, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs);

}  // namespace llama
}  // namespace maporl
