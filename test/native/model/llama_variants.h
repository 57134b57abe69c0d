// llama_variants.h: the tiny Llama-family configurations the model tests share (test_llama, test_llama_device,
// test_llama_cuda): Llama with GQA, a tied head and llama3 rope scaling; Llama with attention biases; Qwen2's q/k/v
// biases with linear scaling; Qwen3's q/k norms with a head_dim unrelated to hidden_size (MQA); and the float
// decoder setup (widened, perturbed) of the decoding tests.
#pragma once

#include <stdint.h>

#include <random>
#include <vector>

#include "native/model/llama.h"

namespace llama_variants {

namespace L = maporl::llama;

struct Variant {
    const char * name;
    L::Config c;
};

inline std::vector<Variant> variants() {
    std::vector<Variant> out;
    L::Config base;
    base.vocab = 9;
    base.context = 8;
    base.layers = 2;
    base.d_model = 8;
    base.heads = 2;
    base.kv_heads = 1;
    base.head_dim = 6;
    base.intermediate = 6;
    base.rms_eps = 1e-5;
    base.rope_theta = 10000;
    L::Config a = base;  // Llama: GQA (MQA here), tied head, llama3 scaling with all three frequency bands
    a.tie_embeddings = true;
    a.rope.type = L::RopeScaling::Llama3;
    a.rope.factor = 4;
    a.rope.low_freq_factor = 1;
    a.rope.high_freq_factor = 4;
    a.rope.original_max_position = 16;
    out.push_back({"llama-gqa-tied-llama3", a});
    L::Config b = base;  // Llama with attention_bias
    b.heads = 2;
    b.kv_heads = 2;
    b.head_dim = 4;
    b.qkv_bias = true;
    b.o_bias = true;
    out.push_back({"llama-attention-bias", b});
    L::Config q2 = base;  // Qwen2: q/k/v biases, linear scaling
    q2.heads = 4;
    q2.kv_heads = 2;
    q2.head_dim = 2;
    q2.qkv_bias = true;
    q2.rope.type = L::RopeScaling::Linear;
    q2.rope.factor = 2;
    out.push_back({"qwen2-bias-linear", q2});
    L::Config q3 = base;  // Qwen3: per-head q/k RMSNorm, head_dim * heads != hidden
    q3.qk_norm = true;
    q3.heads = 2;
    q3.kv_heads = 1;
    q3.head_dim = 6;
    q3.rope_theta = 1e6;
    out.push_back({"qwen3-qk-norm", q3});
    return out;
}

// A float model of the variant widened to 16 (context 12, vocab 13), initialised from `seed` and perturbed (norms
// and biases away from 1 and 0).
inline L::Config decoder_config(const Variant & var) {
    L::Config c = var.c;
    c.context = 12;
    c.d_model = 16;
    c.intermediate = 24;
    c.vocab = 13;
    return c;
}
inline void perturb(L::Model<float> & m, uint64_t seed) {
    m.init(seed);
    std::mt19937 r((uint32_t)seed + 1);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (auto & x : m.params) x += 0.2f * u(r);
}

}  // namespace llama_variants
