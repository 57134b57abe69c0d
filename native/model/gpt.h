// gpt.h: the embedded GPT policy's model (gpt.cpp): a decoder-only transformer with token and position
// embeddings, L pre-LayerNorm blocks (causal multi-head attention, GELU MLP), a final LayerNorm, the LM head
// (tied to the token embedding or not) and a scalar value head on the final hidden state. Parameters, gradients
// and AdamW moments are each one allocation; activations are kept per layer for the backward. F is float (the
// model) or double (the finite-difference reference). Layers are the ops of gpt_ops.h.
#pragma once

#include <stdint.h>

#include <map>

#include <string>
#include <memory>
#include <utility>
#include <vector>

#include "native/model/gpt_ops.h"

namespace maporl {
namespace gpt {

// An allocator whose value-less construct default-initialises (for float: leaves the memory as it is). A KV cache
// sized with it by resize() is not zero-filled: its pages are taken only as positions are written (decoding reads a
// position only after writing it), so a request that may reach 8,000 positions and stops at 50 costs 50.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
        using other = DefaultInitAllocator<U>;
    };
    DefaultInitAllocator() = default;
    template <typename U>
    DefaultInitAllocator(const DefaultInitAllocator<U> &) noexcept {}
    template <typename U>
    void construct(U * p) noexcept {
        ::new ((void *)p) U;
    }
    template <typename U, typename... A>
    void construct(U * p, A &&... a) {
        ::new ((void *)p) U(std::forward<A>(a)...);
    }
};
template <typename T>
using CacheVec = std::vector<T, DefaultInitAllocator<T>>;

struct Config {
    int64_t vocab = 0, context = 0, layers = 0, heads = 0, d_model = 0;
    int64_t mlp_ratio = 4;
    bool tie_embeddings = true;
};

// Throws Error(MAPORL_ERR_INVALID_ARG) naming the field when the config is unusable.
void check_config(const Config & c);
// Throws naming the argument unless 1 <= T <= context, B >= 1 and every token id lies in [0, vocab).
void check_forward(const Config & c, const int32_t * tokens, int64_t B, int64_t T);

// Offsets of every parameter tensor in the flat parameter array, in a fixed order (that order is the checkpoint's).
struct Layout {
    struct Tensor {
        std::string name;
        std::vector<int64_t> shape;
        int64_t offset, size;
    };
    std::vector<Tensor> tensors;
    int64_t total = 0;
    // Indices into `tensors` (per layer for the block tensors).
    int64_t wte, wpe, lnfw, lnfb, lm_head, vw, vb;
    struct Block {
        int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    };
    std::vector<Block> blocks;
};

// Appends tensor `name` of `shape` to a flat parameter array of `total` elements (total grows); returns its index.
// The layouts of both families and of LoRA adapters are built with it.
inline int64_t add_tensor(std::vector<Layout::Tensor> & tensors, int64_t & total, const std::string & name,
                          std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensors.push_back({name, std::move(shape), total, n});
    total += n;
    return (int64_t)tensors.size() - 1;
}
Layout make_layout(const Config & c);

// Activations of one layer, kept for the backward.
template <typename F>
struct LayerActs {
    std::vector<F> ln1, ln1m, ln1r, qkv, att, atty, attproj, res2, ln2, ln2m, ln2r, fch, fchg, fcproj, res3;
};

template <typename F>
struct Acts {
    std::vector<F> encoded, lnf, lnfm, lnfr;
    std::vector<LayerActs<F>> layers;
};

template <typename F>
struct Model {
    Config cfg;
    Layout layout;
    std::vector<F> params, grads, m, v;
    int64_t step = 0;

    // Activations of the last forward (B, T).
    int64_t B = 0, T = 0;
    std::vector<int32_t> tokens;
    Acts<F> acts;
    std::vector<F> logits, values;  // [B, T, V], [B, T]

    explicit Model(const Config & c);
    F * p(int64_t tensor) { return params.data() + layout.tensors[(size_t)tensor].offset; }
    F * g(int64_t tensor) { return grads.data() + layout.tensors[(size_t)tensor].offset; }

    // GPT-2 style init: normal(0, 0.02), residual projections scaled by 1/sqrt(2L), LayerNorm weight 1, biases 0.
    void init(uint64_t seed);
    // tokens [B, T] in [0, vocab), T <= context. Fills logits and values.
    void forward(const int32_t * tokens, int64_t B, int64_t T);
    // Adds d loss / d params (into grads) from dlogits [B, T, V] and dvalues [B, T] (either may be null).
    void backward(const F * dlogits, const F * dvalues);
    void zero_grad();
    void ensure_train_state() {}  // gradients and moments exist from the start (llama::Model allocates them late)
    // Global gradient-norm clip (max_norm <= 0: none), then one AdamW step; returns the norm before clipping.
    double update(const AdamW & h, double max_norm);

    // Incremental decoding with a key/value cache for `batch` rows and up to `max_len` positions. decode() runs the
    // tokens of position `pos` (the same position for every row; positions 0..pos-1 must have been decoded)
    // and writes step_logits [batch, V] and step_values [batch]; the result equals the full forward's at that
    // position (to float rounding). With `logits` / `values` false that head is not run (a prompt position whose
    // next token no row samples needs only the keys and values it caches); its step_ array is then stale.
    void cache_reset(int64_t batch, int64_t max_len);
    // Frees the cache (its memory goes back; decode then needs cache_reset again).
    void cache_release() {
        CacheVec<F>().swap(kcache);
        CacheVec<F>().swap(vcache);
        cache_batch = 0;
        cache_len = 0;
    }
    // Exchanges the cache with stored slot `slot` (created empty when absent, dropped when it ends up empty): several
    // generation batches keep their own caches and take turns, one decode step at a time.
    void cache_swap(int64_t slot) {
        CacheSlot & s = cache_slots[slot];
        std::swap(kcache, s.k);
        std::swap(vcache, s.v);
        std::swap(cache_batch, s.batch);
        std::swap(cache_len, s.len);
        if (s.batch == 0 && s.k.empty() && s.v.empty()) cache_slots.erase(slot);
    }
    void decode(const int32_t * tokens, int64_t pos, bool logits = true, bool values = true);
    // The decoder multiplies by transposed copies of the weights ([C, OC], built on first use); init(), update()
    // and weights_changed() (call it after writing `params` directly) make them stale.
    void weights_changed() { wt_stale = true; }
    std::vector<F> wt_cache;
    std::vector<int64_t> wt_off;  // per tensor: offset in wt_cache, or -1
    bool wt_stale = true;
    const F * wt(int64_t tensor);
    CacheVec<F> kcache, vcache;  // [L, batch, NH, max_len, hs]; not zeroed (DefaultInitAllocator)
    struct CacheSlot {
        CacheVec<F> k, v;
        int64_t batch = 0, len = 0;
    };
    std::map<int64_t, CacheSlot> cache_slots;  // caches set aside by cache_swap
    int64_t cache_batch = 0, cache_len = 0;
    std::vector<F> step_logits, step_values;
};

}  // namespace gpt
}  // namespace maporl
