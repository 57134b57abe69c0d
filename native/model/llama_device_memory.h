// llama_device_memory.h: the device memory of a Llama model on a device (llama_device.h), by kind, measured
// (DeviceModel::memory(): the capacities of the buffers held now) and planned (device_plan: the same sums from the
// config and the shapes, without allocating anything, so a 7B-shaped configuration can be accounted on any machine).
// test_llama_device_memory.cpp checks that the two agree on the emulated device and that their sum is every byte the
// emulated device holds. The formula is written out in docs/models.md ("Device memory").
//
// Kinds: weights (the base: float32, or frozen bfloat16 / int8 matrices with float32 norms and biases; the rotary
// tables), adapters (the device copies of LoRA adapters' parameters),
// gradients (the base's when the base trains; each adapter's), moments (AdamW's m and v: only when the base trains;
// an adapter's moments live on the host), activations (what a training forward keeps for its backward, the
// backward's buffers, the LM head's row chunk, a decode step's buffers), cache (the KV cache).
#pragma once

#include <stdint.h>

#include <algorithm>

#include "native/model/llama.h"
#include "native/model/lora.h"

namespace maporl {
namespace llama {

struct DeviceBytes {
    int64_t weights = 0, adapters = 0, gradients = 0, moments = 0, activations = 0, cache = 0;
    int64_t total() const { return weights + adapters + gradients + moments + activations + cache; }
};

// What a workload holds on the device at its peak (every buffer of llama_device.h sized for it).
struct DevicePlan {
    int64_t B = 0, T = 0;     // a training forward of B x T tokens (0: none)
    bool backward = false;    // and its backward
    bool train_base = false;  // the base trains (gradients and both moments of every parameter)
    int64_t lora_rank = 0;    // > 0: one adapter of this rank over `lora_targets` trains (the base frozen)
    uint32_t lora_targets = (1u << kLoraTargets) - 1;
    int64_t head_rows = 0;                   // the LM head's row chunk (logits and their gradient, [rows, V] each)
    int64_t cache_batch = 0, cache_len = 0;  // a KV cache (generation)
    int64_t step_rows = 0;                   // the most rows one decode / prefill step runs (<= 256 for a prefill)
    int64_t norm_scratch = 0;  // the op table's RMSNorm backward scratch in floats: the largest D::rmsnorm_scratch of
        // (N, C), (N x heads, head_dim), (N x kv_heads, head_dim) (CUDA's; 0 on the emulated device)
    bool recompute_attention = false;  // one layer's attention probabilities kept at a time (recomputed in the
                                       // backward), as the device model does when the layers' together do not fit
};

// The attention probabilities a training forward keeps: B x heads x T^2 floats per layer (the bound on T).
inline int64_t attention_probs_bytes(const Config & c, int64_t B, int64_t T) {
    return c.layers * B * c.heads * T * T * 4;
}

inline int64_t lora_params_count(const Config & c, int64_t r, uint32_t targets) {
    const int64_t C = c.d_model, QC = c.heads * c.head_dim, KC = c.kv_heads * c.head_dim, I = c.intermediate;
    const int64_t in[kLoraTargets] = {C, C, C, QC, C, C, I}, out[kLoraTargets] = {QC, KC, KC, C, I, I, C};
    int64_t n = 0;
    for (int t = 0; t < kLoraTargets; ++t)
        if (targets & (1u << t)) n += r * (in[t] + out[t]);
    return c.layers * n + C + 1;  // (+ the adapter's value head)
}

inline DeviceBytes device_plan(const Config & c, const Layout & layout, const DevicePlan & w) {
    const int64_t f = 4, P = layout.total, C = c.d_model, NH = c.heads, NKV = c.kv_heads, hd = c.head_dim, QC = NH * hd,
                  KC = NKV * hd, I = c.intermediate, L = c.layers, V = c.vocab;
    DeviceBytes b;
    b.weights = (P + 2 * c.context * (hd / 2)) * f;
    if (c.bf16 || c.int8) {  // a frozen base: P counts its float tensors; its matrices as frozen_layout stores them
        Layout fl = layout;
        const FrozenLayout fz = frozen_layout(c, fl);
        b.weights = (fl.total + 2 * c.context * (hd / 2)) * f + 2 * fz.half + fz.q8 + 2 * (fz.q8 / kQ8Block);
    }
    if (w.train_base && !c.bf16 && !c.int8)  // (a frozen base never trains: the device refuses it)
        b.gradients = P * f, b.moments = 2 * P * f;
    int64_t ntargets = 0, maxout = 0;
    if (w.lora_rank > 0) {
        const int64_t out[kLoraTargets] = {QC, KC, KC, C, I, I, C};
        for (int t = 0; t < kLoraTargets; ++t)
            if (w.lora_targets & (1u << t)) ++ntargets, maxout = std::max(maxout, out[t]);
        const int64_t n = lora_params_count(c, w.lora_rank, w.lora_targets);
        b.adapters = n * f;
        b.gradients += n * f;
    }
    const int64_t N = w.B * w.T;
    int64_t a = 0;
    if (N > 0) {
        // forward: per layer xn1 rstd1 q k v qr kr att y res2 xn2 rstd2 gate up hmid res3 (+ qn kn qrstd krstd)
        const int64_t probs = w.B * NH * w.T * w.T;
        int64_t layer = N * (4 * C + 3 * QC + 3 * KC + 3 * I + 2) + (w.recompute_attention ? 0 : probs);
        if (c.qk_norm) layer += N * (QC + KC + NH + NKV);
        a += L * layer + N * (2 * C + 2);       // + embedded, lnf, lnf_rstd, values
        if (w.recompute_attention) a += probs;  // the one probabilities buffer
        a += N;                                 // tokens (int32)
        if (w.lora_rank > 0)
            a += L * ntargets * N * w.lora_rank + N * maxout + N * w.lora_rank;  // kept u, lora_tmp, lora_du
        if (w.backward) {
            a += N *
                (3 * C + 3 * I + 3 * QC + 3 * KC + 1);  // dlnf dres dxn, dh dgate dup, dy dqr dqn, dkr dv dkn, dvalues
            if (c.qk_norm) a += N * (QC + KC);
            a += std::max(w.B * NH * w.T * w.T, w.norm_scratch);  // scratch: the attention backward's, or the norms'
        }
    }
    a += w.head_rows * V * (w.backward ? 2 : 1);  // head_out, dlogits
    if (w.step_rows > 0) {
        const int64_t n = w.step_rows;
        a += n * (3 + 2 * C + NH + 2 * QC + 2 * KC + C + 3 * I + NH * w.cache_len) +
            1;  // srb srt stok, sx sxn, srs, sq sy, sk sv, sproj,
                // gate up hmid, scores, row_mask
    }
    b.activations = a * f;
    if (c.int8) {  // the W8A8 input scratch: int8 values and float block scales of the largest input
        const int64_t mc = std::max({C, QC, I});
        int64_t xq = 0, xd = 0;
        for (const auto & in : {std::pair<int64_t, int64_t>{N, mc}, {w.step_rows, mc}, {w.head_rows, C}})
            xq = std::max(xq, in.first * in.second), xd = std::max(xd, in.first * in.second / 32);
        b.activations += xq + xd * f;
    }
    b.cache = 2 * L * w.cache_batch * NKV * w.cache_len * hd * f;
    return b;
}

}  // namespace llama
}  // namespace maporl
