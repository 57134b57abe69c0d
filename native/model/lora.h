// lora.h: LoRA adapters on a Llama-family model (llama.h), as PEFT's LoraLayer: a targeted projection
// y = x W^T + b becomes y + scale * dropout(x) A^T B^T with A [r, in], B [out, r], scale = alpha / r (alpha /
// sqrt(r) with rsLoRA). A starts Kaiming-uniform (PEFT's init: U(-1/sqrt(in), 1/sqrt(in))), B zero, so a new adapter
// changes nothing. Each adapter also owns a value head on the final hidden state (MAPoRL's value adapters: a critic
// is an adapter whose value head is trained). Many adapters share one base model: the base is frozen while one is
// selected (no gradients or moments for it exist), and the base with no adapter selected is the reference model.
// Tensor names are PEFT's saved names (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight), so an
// adapter_model.safetensors maps one to one.
#pragma once

#include <stdint.h>

#include <array>
#include <string>
#include <vector>

#include "native/model/gpt.h"

namespace maporl {
namespace llama {

// The projections an adapter may target, in the order of the bit flags of maporl.h (MAPORL_LORA_Q_PROJ = 1 ...).
constexpr int kLoraTargets = 7;
enum LoraTarget { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
extern const char * const kLoraTargetNames[kLoraTargets];  // "q_proj", "k_proj", ..., "down_proj"

struct LoraConfig {
    int64_t rank = 8;
    double alpha = 8;
    uint32_t targets = (1u << kLoraTargets) - 1;  // bit i: kLoraTargetNames[i]
    double dropout = 0;                           // applied in training forwards only
    bool rslora = false;                          // scale alpha / sqrt(rank) (PEFT's use_rslora)
};

template <typename F>
struct Lora {
    LoraConfig cfg;
    F scale = F(1);
    struct Layout {
        std::vector<gpt::Layout::Tensor> tensors;
        int64_t total = 0;
        std::vector<std::array<int64_t, kLoraTargets>> A, B;  // [layer][target]: tensor index, -1 if not targeted
        int64_t vw = -1, vb = -1;
    } layout;
    std::vector<F> params, grads, m, v;  // grads, m, v: empty until the first training call
    int64_t step = 0;
    uint64_t seed = 0;  // the dropout masks' seed
    // The last forward's activations: us = scale * dropout(x) A^T [N, rank] per (layer, target); `dropped`: dropout
    // was applied (the masks, a hash of (seed, step, nonce, layer, target, element), are recomputed in the backward).
    // nonce counts the training forwards since the last update (micro-batches of one step draw different masks, and a
    // run resumed at a step boundary draws the same ones).
    std::vector<std::array<std::vector<F>, kLoraTargets>> us;
    bool dropped = false;
    int64_t nonce = 0;

    // Throws Error(MAPORL_ERR_INVALID_ARG) naming the field for a bad config. Dims: the base's (d_model, q/kv widths,
    // intermediate) per target; `value_w`, `value_b`: the base's value head, copied as the adapter's initial one.
    Lora(const LoraConfig & c, int64_t layers, const std::array<int64_t, kLoraTargets> & in_dims,
         const std::array<int64_t, kLoraTargets> & out_dims, const F * value_w, F value_b, int64_t d_model,
         uint64_t seed);
    F * p(int64_t tensor) { return params.data() + layout.tensors[(size_t)tensor].offset; }
    F * g(int64_t tensor) { return grads.data() + layout.tensors[(size_t)tensor].offset; }
    const F * p(int64_t tensor) const { return params.data() + layout.tensors[(size_t)tensor].offset; }
    bool has(int64_t layer, int t) const { return layout.A[(size_t)layer][(size_t)t] >= 0; }
    void ensure_train_state();
    // Every write of params (set, set_tensor, an update) counts here: a device model's copy of the adapter
    // (llama_device.h) is refreshed when it differs.
    uint64_t version = 0;
    void weights_changed() { ++version; }
    int64_t in_dim(int t) const { return in[(size_t)t]; }
    int64_t out_dim(int t) const { return out[(size_t)t]; }

    // out [N, OC] += the adapter's term for (layer, target) on inp [N, Cin]; keeps us for the backward. `train`
    // applies dropout (when configured) with masks from (seed, step, layer, target, element).
    void forward(int64_t layer, int t, F * out, const F * inp, int64_t N, bool train);
    // grads of A and B += from dout [N, OC]; dinp [N, Cin] += the LoRA path's input gradient.
    void backward(int64_t layer, int t, F * dinp, const F * dout, const F * inp, int64_t N);
    // Decoding: out rows += the term for the rows of inp listed in `rows` (no state kept, no dropout).
    // out [batch, OC] and inp [batch, Cin] as the decoder's arrays.
    void forward_rows(int64_t layer, int t, F * out, const F * inp, const std::vector<int64_t> & rows) const;
    // Folds the adapter into the base weight of (layer, target): W [OC, Cin] += scale * B A (double sums).
    void merge_into(int64_t layer, int t, F * W) const;

private:
    std::array<int64_t, kLoraTargets> in{}, out{};
    bool keep(int64_t layer, int t, int64_t i) const;
};

}  // namespace llama
}  // namespace maporl
