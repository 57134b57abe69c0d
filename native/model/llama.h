// llama.h: the Llama model family (llama.cpp): the decoder of Hugging Face's LlamaForCausalLM and of the models
// built like it: Mistral (as Llama), Qwen2 (q/k/v biases) and Qwen3 (per-head RMSNorm on q and k, an explicit
// head_dim). Token embedding, L pre-RMSNorm blocks (GQA causal attention with rotary embeddings, SwiGLU MLP), a
// final RMSNorm, the LM head (tied to the embedding or not) and, as in the GPT family, a scalar value head on the
// final hidden state. Tensors carry transformers' names, so a checkpoint's tensors map one to one. Parameters are
// one float (or double) allocation; gradients and AdamW moments are allocated on the first training call, so a
// model that only generates holds its weights once (the float SIMD GEMM reads them in place; other builds keep
// transposed copies for the decoder).
#pragma once

#include <stdint.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "native/core/q8.h"
#include "native/model/gpt.h"
#include "native/model/llama_ops.h"
#include "native/model/lora.h"

namespace maporl {
namespace llama {

struct Config {
    int64_t vocab = 0, context = 0, layers = 0, d_model = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
    double rms_eps = 1e-6, rope_theta = 10000.0;
    RopeScaling rope;
    bool qkv_bias = false;  // q/k/v projections have biases (Qwen2; Llama's attention_bias)
    bool o_bias = false;    // the output projection has a bias (Llama's attention_bias)
    bool qk_norm = false;   // RMSNorm over each head of q and k before the rotation (Qwen3)
    bool tie_embeddings = false;
    // The matrices (embedding, projections, LM head) stored as bfloat16 and frozen (a base under LoRA adapters, or a
    // model that only generates and scores): half the memory; the kernels widen them exactly. Float models only.
    bool bf16 = false;
    // The matrices stored as int8 (q8.h: Q8_0 blocks of 32 with a half scale, about 1.06 bytes a weight) and frozen,
    // as with bf16; a matrix whose rows are not a multiple of 32 long stays bfloat16. Float models only.
    bool int8 = false;
};

// Throws Error(MAPORL_ERR_INVALID_ARG) naming the field when the config is unusable.
void check_config(const Config & c);

using Tensor = gpt::Layout::Tensor;
struct Layout {
    std::vector<Tensor> tensors;
    int64_t total = 0;
    int64_t embed, norm, lm_head, vw, vb;
    struct Block {
        int64_t in_norm, q, k, v, o, qb = -1, kb = -1, vb = -1, ob = -1, q_norm = -1, k_norm = -1, post_norm, gate, up,
                                     down;
    };
    std::vector<Block> blocks;
};
Layout make_layout(const Config & c);

// A frozen base's storage (c.bf16 or c.int8): the matrices move out of the float parameters, to int8 (q8.h's packed
// layout; rows a multiple of 32 long) or bfloat16; the other tensors are packed again. Rewrites L's offsets (-1 for a
// matrix) and total (the float tensors'); per tensor, its offset in the bfloat16 values or the packed int8 values
// (its scales' is that / 32), or -1; and the two counts. Both bf16 and int8 set is an error naming them. The CPU
// model and the device model hold the same layout.
struct FrozenLayout {
    std::vector<int64_t> half_off, q8_off;
    int64_t half = 0, q8 = 0;
};
FrozenLayout frozen_layout(const Config & c, Layout & L);

// prefill's arguments (a cache of cache_batch rows and cache_len positions; prompts tok [cache_batch, P] of lengths
// lens): named errors for no cache, P < 0, a length past P or the cache, a prompt token outside the vocabulary;
// returns the longest length. Shared by llama::Model and the device model (llama_device.h).
int64_t check_prefill(const int32_t * tok, const int64_t * lens, int64_t P, int64_t cache_batch, int64_t cache_len,
                      int64_t vocab);

template <typename F>
struct LayerActs {
    std::vector<F> xn1, rstd1, q, k, qn, kn, qrstd, krstd, qr, kr, v, att, y, res2, xn2, rstd2, gate, up, hmid, res3;
};

template <typename F>
struct Model {
    Config cfg;
    Layout layout;
    std::vector<F> params, grads, m, v;  // grads, m, v: empty until the first training call (ensure_train_state)
    int64_t step = 0;
    std::vector<F> rope_cos, rope_sin;  // [context, head_dim / 2]

    int64_t B = 0, T = 0;
    std::vector<int32_t> tokens;
    std::vector<F> embedded, lnf, lnf_rstd;
    std::vector<LayerActs<F>> acts;
    std::vector<F> logits, values;  // [B, T, V], [B, T]

    // LoRA adapters (lora.h) on this base: slots (null once removed). With `active` >= 0 the forward adds that
    // adapter's terms and uses its value head, the backward and update train it alone (the base frozen, holding no
    // gradients or moments); `active` -1 is the base itself. `training`: forwards apply the adapters' dropout.
    std::vector<std::unique_ptr<Lora<F>>> adapters;
    int64_t active = -1;
    bool training = false;
    Lora<F> * lora() { return active >= 0 ? adapters[(size_t)active].get() : nullptr; }
    // Adds an adapter (its value head starts as the base's); returns its slot.
    int64_t lora_add(const LoraConfig & c, uint64_t seed);
    // Removes adapter `id` (its rows in the decoder fall back to the base; the base is selected if it was).
    void lora_remove(int64_t id);
    // Folds adapter `id` into the base weights (W += scale B A) and removes it.
    void lora_merge(int64_t id);
    // The decoder's adapter per cache row (-1: the base); cache_reset sets every row to `active`.
    std::vector<int64_t> row_adapter;

    explicit Model(const Config & c);
    F * p(int64_t tensor) { return params.data() + layout.tensors[(size_t)tensor].offset; }
    // cfg.bf16: the matrices' values (params holds the other tensors; a matrix's layout offset is -1).
    std::vector<uint16_t> half;
    std::vector<int64_t> half_off;  // per tensor: offset in half, or -1 (a float tensor, in params)
    bool is_half(int64_t tensor) const { return !half_off.empty() && half_off[(size_t)tensor] >= 0; }
    // cfg.int8: the Q8 matrices in q8.h's packed layout (rows padded to a multiple of 16); q8_off per tensor: its
    // values' offset in q8 (its scales' is that / 32), or -1.
    std::vector<uint8_t> q8;
    std::vector<uint16_t> q8d;
    std::vector<int64_t> q8_off;
    bool is_q8(int64_t tensor) const { return !q8_off.empty() && q8_off[(size_t)tensor] >= 0; }
    const uint8_t * q8q(int64_t tensor) const { return q8.data() + q8_off[(size_t)tensor]; }
    const uint16_t * q8s(int64_t tensor) const { return q8d.data() + q8_off[(size_t)tensor] / kQ8Block; }
    // A frozen matrix (bfloat16 or int8): no gradient, no update.
    bool is_frozen(int64_t tensor) const { return is_half(tensor) || is_q8(tensor); }
    // "bfloat16" or "int8" for a frozen base, else null.
    const char * frozen_dtype() const { return !q8.empty() ? "int8" : !half.empty() ? "bfloat16" : nullptr; }
    const uint16_t * h(int64_t tensor) const { return half.data() + half_off[(size_t)tensor]; }
    uint16_t * h(int64_t tensor) { return half.data() + half_off[(size_t)tensor]; }
    // out = inp @ W^T (+ bias) for matrix tensor w (bias: a tensor index or -1), float, bfloat16 or int8.
    void lin(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC);
    // dinp += dout @ W (with set_dinp, dinp = dout @ W: its old values are not read); dw, db (may be null) += the
    // weight's and bias's gradients (a frozen bfloat16 or int8 W has none).
    void lin_back(F * dinp, F * dw, F * db, const F * dout, const F * inp, int64_t w, int64_t N, int64_t Cin,
                  int64_t OC, bool set_dinp = false);
    // dst [C] = the embedding row of token id.
    void embed_row(F * dst, int32_t id);
    F * g(int64_t tensor) { return grads.data() + layout.tensors[(size_t)tensor].offset; }
    void ensure_train_state();

    // Matrices and embeddings normal(0, 0.02) (transformers' initializer_range), norms 1, biases 0.
    void init(uint64_t seed);
    // head = false: everything but the LM head (logits left empty): the final hidden state lnf [B*T, C] and the
    // values; take the logits of any rows with head_rows. A vocabulary of 151,936 never needs [B, T, V] at once.
    void forward(const int32_t * tokens, int64_t B, int64_t T, bool head = true);
    // out [rows, V] (=) = the logits of rows n0 .. n0 + rows of the last forward: the head read in place where
    // matmul_packs, else through its transposed copy (wt: built once per update, not once per chunk).
    void head_rows(F * out, int64_t n0, int64_t rows);
    // Adds the gradients of the LM head and of lnf (into dlnf [B*T, C]) from the logits' gradient of those rows.
    void head_backward_rows(F * dlnf, const F * dlogits, int64_t n0, int64_t rows);
    void backward(const F * dlogits, const F * dvalues);
    // backward from d loss / d lnf [B*T, C] (the LM head's part already in it; it is consumed) and dvalues [B*T].
    void backward_hidden(std::vector<F> & dlnf, const F * dvalues);
    void zero_grad();
    double update(const gpt::AdamW & h, double max_norm);

    // KV-cache decoding as gpt::Model: every row at position `pos`; equals the full forward at that position. The
    // LM head (the largest matrix of a small model) and the value head run only when asked.
    void cache_reset(int64_t batch, int64_t max_len);
    // Frees the cache (its memory goes back; decode then needs cache_reset again).
    void cache_release() {
        gpt::CacheVec<F>().swap(kcache);
        gpt::CacheVec<F>().swap(vcache);
        cache_batch = 0;
        cache_len = 0;
        row_adapter.clear();
    }
    // Exchanges the cache (and its rows' adapters) with stored slot `slot` (created empty when absent, dropped when it
    // ends up empty): several generation batches keep their own caches and take turns, one decode step at a time.
    void cache_swap(int64_t slot) {
        CacheSlot & s = cache_slots[slot];
        std::swap(kcache, s.k);
        std::swap(vcache, s.v);
        std::swap(cache_batch, s.batch);
        std::swap(cache_len, s.len);
        std::swap(row_adapter, s.rows);
        if (s.batch == 0 && s.k.empty() && s.v.empty()) cache_slots.erase(slot);
    }
    void decode(const int32_t * tokens, int64_t pos, bool logits = true, bool values = true);
    // The same with row b at position pos[b] (its own rotation, cache slot and attention span).
    void decode_rows(const int32_t * tokens, const int64_t * pos, bool logits = true, bool values = true);
    // Fills the cache of row b at positions 0 .. lens[b] - 1 from tokens [batch, P] (row-major), in chunks of about
    // kPrefillRows (row, position) pairs through the GEMM; no logits. The row then decodes from position lens[b].
    static constexpr int64_t kPrefillRows = 256;
    void prefill(const int32_t * tokens, const int64_t * lens, int64_t P);
    // The blocks over N rows x [N, C] (in place), row n being cache row rb[n] at position rt[n]: keys and values
    // into the cache, attention over positions 0 .. rt[n]. decode_rule: matmuls as decode's (dot products up to
    // kRowsGemv rows, else the GEMM); otherwise always the GEMM (prefill).
    void step_rows(std::vector<F> & x, const int64_t * rb, const int64_t * rt, int64_t N, bool decode_rule);
    void weights_changed() { wt_stale = true; }
    std::vector<std::vector<F>> wt_cache;  // per tensor: its transposed copy [in, out], empty until used
    bool wt_stale = true;
    const F * wt(int64_t tensor);
    // out = inp @ W^T (+ bias) (bias: a tensor index or -1): up to kRowsGemv rows by the GEMV over W itself, more
    // by the GEMM (W in place where matmul_packs, else its transposed copy, built on first use).
    static constexpr int64_t kRowsGemv = 8;
    void matmul_forward_wt_or(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC);
    // The same for several weights that read the same input (q, k, v; gate, up): the GEMV runs them as one
    // parallel job (the same bits as one by one).
    struct Proj {
        F * out;
        int64_t w, bias, OC;
    };
    void matmul_forward_wt_or(std::initializer_list<Proj> projs, const F * inp, int64_t N, int64_t Cin);
    // lin for many rows: W in place where the GEMM packs it (or it is bfloat16), else W's transposed copy (wt).
    void lin_many(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC);
    gpt::CacheVec<F> kcache, vcache;  // [L, batch, NKV, max_len, head_dim]; not zeroed (gpt::DefaultInitAllocator)
    struct CacheSlot {
        gpt::CacheVec<F> k, v;
        int64_t batch = 0, len = 0;
        std::vector<int64_t> rows;
    };
    std::map<int64_t, CacheSlot> cache_slots;  // caches set aside by cache_swap
    int64_t cache_batch = 0, cache_len = 0;
    std::vector<F> step_logits, step_values;
};

}  // namespace llama
}  // namespace maporl
