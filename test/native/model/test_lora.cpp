// test_lora.cpp: LoRA adapters on the Llama family (native/model/lora.h). In double, every adapter parameter's
// gradient (A, B and the adapter's value head, for every target) against central finite differences of
// L = sum(logits * R) + sum(values * Rv), with and without dropout, while the base gets no gradient at all; a new
// adapter changes nothing; merging equals running the adapter; per-row adapters in one decode step equal each
// row's full forward; training an adapter leaves the base bit-identical and gives the same adapter for any thread
// count; and the C API's errors and its trainable-set switch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/model/model_check.h"
#include "native/core/core.h"
#include "native/model/llama.h"
#include "maporl.h"

namespace {

namespace L = maporl::llama;

L::Config tiny(bool qwen3) {
    L::Config c;
    c.vocab = 9;
    c.context = 8;
    c.layers = 2;
    c.d_model = 8;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 6;
    c.intermediate = 6;
    c.rms_eps = 1e-5;
    c.rope_theta = 10000;
    if (qwen3) {
        c.qk_norm = true;
        c.qkv_bias = false;
    } else {
        c.qkv_bias = true;
        c.tie_embeddings = true;
    }
    return c;
}

template <typename F>
void jitter(std::vector<F> & v, uint32_t seed, double amount) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto & x : v) x += (F)(amount * u(r));
}

// dropout > 0: the masks are held fixed across the finite-difference forwards by resetting the nonce.
void check_fd(bool qwen3, double dropout, uint32_t targets) {
    L::Model<double> m(tiny(qwen3));
    m.init(3);
    jitter(m.params, 4, 0.3);
    L::LoraConfig lc;
    lc.rank = 2;
    lc.alpha = 3;
    lc.dropout = dropout;
    lc.targets = targets;
    const int64_t id = m.lora_add(lc, 7);
    m.active = id;
    m.training = dropout > 0;
    L::Lora<double> & a = *m.adapters[(size_t)id];
    jitter(a.params, 5, 0.5);  // B away from zero, so A's gradients are not zero
    const int64_t B = 2, T = 5, V = m.cfg.vocab;
    const std::vector<int32_t> tok = {1, 5, 2, 2, 8, 0, 3, 1, 7, 4};
    std::vector<double> R((size_t)(B * T * V)), Rv((size_t)(B * T));
    jitter(R, 6, 1.0);
    jitter(Rv, 7, 1.0);
    auto loss = [&] {
        a.nonce = 0;
        m.forward(tok.data(), B, T);
        double s = 0;
        for (size_t i = 0; i < R.size(); ++i) s += m.logits[i] * R[i];
        for (size_t i = 0; i < Rv.size(); ++i) s += m.values[i] * Rv[i];
        return s;
    };
    loss();
    m.zero_grad();
    m.backward(R.data(), Rv.data());
    CHECK(m.grads.empty() && m.m.empty(), "the frozen base allocated gradients (%zu)", m.grads.size());
    const std::vector<double> g = a.grads;
    const int bad = model_check::fd_mismatches(a.params, g, loss, qwen3 ? "qwen3" : "qwen2");
    CHECK(bad == 0, "%s dropout %g targets 0x%x: %d of %zu adapter gradients off", qwen3 ? "qwen3" : "qwen2", dropout,
          targets, bad, a.params.size());
}

TEST(adapter_gradients_match_finite_differences_and_the_base_gets_none) {
    check_fd(false, 0.0, 127);
    check_fd(true, 0.0, 127);
    check_fd(true, 0.0, MAPORL_LORA_Q_PROJ | MAPORL_LORA_V_PROJ);  // PEFT's classic q/v only
}

TEST(dropout_gradients_match_finite_differences_under_the_same_masks) {
    check_fd(false, 0.4, 127);
    check_fd(true, 0.25, MAPORL_LORA_O_PROJ | MAPORL_LORA_DOWN_PROJ | MAPORL_LORA_K_PROJ);
}

TEST(a_new_adapter_changes_nothing_and_merging_equals_running_it) {
    L::Model<double> m(tiny(true));
    m.init(2);
    jitter(m.params, 3, 0.2);
    const int64_t B = 2, T = 6;
    const std::vector<int32_t> tok = {1, 5, 2, 2, 8, 0, 3, 1, 7, 4, 4, 6};
    m.forward(tok.data(), B, T);
    const std::vector<double> base_logits = m.logits, base_values = m.values;
    L::LoraConfig lc;
    lc.rank = 3;
    lc.alpha = 5;
    lc.rslora = true;
    const int64_t id = m.lora_add(lc, 9);
    m.active = id;
    m.forward(tok.data(), B, T);
    CHECK(m.logits == base_logits && m.values == base_values,
          "a fresh adapter (B = 0, the base's value head) changed the outputs");
    CHECK(std::fabs((double)m.adapters[0]->scale - 5.0 / std::sqrt(3.0)) < 1e-15, "rsLoRA scale %g",
          (double)m.adapters[0]->scale);
    jitter(m.adapters[(size_t)id]->params, 4, 0.3);
    m.forward(tok.data(), B, T);
    const std::vector<double> lora_logits = m.logits, lora_values = m.values;
    double moved = 0;
    for (size_t i = 0; i < lora_logits.size(); ++i) moved = std::max(moved, std::fabs(lora_logits[i] - base_logits[i]));
    CHECK(moved > 1e-3, "the jittered adapter did not move the logits (%g)", moved);
    m.lora_merge(id);
    CHECK(m.active == -1 && !m.adapters[(size_t)id], "merge removes the adapter and selects the base");
    m.forward(tok.data(), B, T);
    double worst = 0;
    for (size_t i = 0; i < lora_logits.size(); ++i) worst = std::max(worst, std::fabs(m.logits[i] - lora_logits[i]));
    for (size_t i = 0; i < lora_values.size(); ++i) worst = std::max(worst, std::fabs(m.values[i] - lora_values[i]));
    CHECK(worst < 1e-12, "merged base differs from base + adapter by %g", worst);
}

TEST(per_row_adapters_in_one_decode_step_equal_each_rows_forward) {
    L::Config c = tiny(false);
    c.context = 12;
    c.d_model = 16;
    c.intermediate = 24;
    c.vocab = 13;
    L::Model<float> m(c);
    m.init(5);
    L::LoraConfig lc;
    lc.rank = 4;
    lc.alpha = 8;
    const int64_t a0 = m.lora_add(lc, 1), a1 = m.lora_add(lc, 2);
    jitter(m.adapters[(size_t)a0]->params, 3, 0.4f);
    jitter(m.adapters[(size_t)a1]->params, 4, 0.4f);
    const std::vector<int64_t> rows = {a1, -1, a0, a1};
    // One decode step runs each row through its own adapter; the full forward runs a row through its adapter.
    const float worst = model_check::cached_decode_vs_forward(m, 4, 9, c.vocab, 2, false, [&](int64_t b) {
        if (b < 0)
            m.row_adapter = rows;
        else
            m.active = rows[(size_t)b];
    });
    CHECK(worst < 1e-5f, "per-row adapter decoding differs from each row's forward by %g", worst);
}

// Cross-entropy on a fixed batch through an adapter: the loss falls, the base stays bit-identical, and 1 and 3
// threads give the same adapter to the bit (dropout on: the masks are thread-count invariant too).
TEST(training_an_adapter_learns_keeps_the_base_and_is_thread_count_invariant) {
    L::Config c = tiny(true);
    c.vocab = 16;
    c.context = 16;
    c.d_model = 16;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 4;
    c.intermediate = 32;
    const int64_t B = 4, T = 12, V = c.vocab, N = B * T;
    std::vector<int32_t> tok((size_t)(N + B));
    std::mt19937 r(11);
    for (auto & x : tok) x = (int32_t)(r() % (uint32_t)V);
    std::vector<float> base0;
    auto train = [&](int threads, int steps, std::vector<float> * curve, bool * base_kept) {
        maporl_set_threads(threads);
        L::Model<float> m(c);
        m.init(1);
        jitter(m.params, 2, 0.5f);  // a frozen head of normal(0, 0.02) rows could not move the logits far enough
        base0 = m.params;
        L::LoraConfig lc;
        lc.rank = 8;
        lc.alpha = 16;
        lc.dropout = 0.1;
        m.active = m.lora_add(lc, 3);
        m.training = true;
        std::vector<int32_t> in((size_t)N), tgt((size_t)N);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                in[(size_t)(b * T + t)] = tok[(size_t)(b * (T + 1) + t)];
                tgt[(size_t)(b * T + t)] = tok[(size_t)(b * (T + 1) + t + 1)];
            }
        std::vector<float> dl((size_t)(N * V));
        for (int s = 0; s < steps; ++s) {
            m.forward(in.data(), B, T);
            const double loss = model_check::cross_entropy(m.logits.data(), tgt.data(), N, V, dl.data());
            if (curve) curve->push_back((float)loss);
            m.zero_grad();
            m.backward(dl.data(), nullptr);
            m.update(maporl::gpt::AdamW{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f}, 1.0);
        }
        maporl_set_threads(0);
        if (base_kept) *base_kept = m.params == base0 && m.grads.empty();
        return m.adapters[0]->params;
    };
    std::vector<float> curve;
    bool kept = false;
    const std::vector<float> p1 = train(1, 120, &curve, &kept);
    const std::vector<float> p3 = train(3, 120, nullptr, nullptr);
    CHECK(kept, "training the adapter changed the base or allocated its gradients");
    CHECK(p1 == p3, "adapter parameters after 120 steps differ between 1 and 3 threads");
    std::printf("  LoRA cross-entropy: step 0 %.4f, 60 %.4f, 119 %.4f (chance %.4f)\n", curve[0], curve[60],
                curve.back(), std::log((double)V));
    CHECK(curve[0] > 2.2f && curve.back() < 0.6f * curve[0], "loss %g -> %g: the adapter did not learn", curve[0],
          curve.back());
}

TEST(c_api_switches_the_trainable_set_and_names_bad_arguments) {
    maporl_llama_config c = maporl_llama_default_config();
    c.vocab = 11;
    c.context = 8;
    c.layers = 2;
    c.d_model = 8;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 4;
    c.intermediate = 12;
    maporl_gpt * g = nullptr;
    CHECK(maporl_llama_create(&c, 1, &g) == MAPORL_OK, "create");
    int64_t base_n = 0, n = 0, id = -5;
    maporl_gpt_param_count(g, &base_n);
    maporl_lora_config lc = maporl_lora_default_config();
    lc.rank = 2;
    lc.target_modules = MAPORL_LORA_Q_PROJ | MAPORL_LORA_V_PROJ;
    CHECK(maporl_lora_add(g, &lc, 1, &id) == MAPORL_OK && id == 0, "add");
    CHECK(maporl_lora_select(g, id) == MAPORL_OK, "select");
    maporl_gpt_param_count(g, &n);
    // q: 2 x 8 + 8 x 2; v: 2 x 8 + 4 x 2; per layer, two layers; the value head 8 + 1.
    CHECK(n == 2 * (32 + 24) + 9, "adapter parameter count %lld", (long long)n);
    char name[64];
    int64_t dims[2];
    maporl_gpt_tensor_info(g, 1, name, dims, nullptr);
    CHECK(std::strcmp(name, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight") == 0 && dims[0] == 8 &&
              dims[1] == 2,
          "PEFT name %s [%lld, %lld]", name, (long long)dims[0], (long long)dims[1]);
    CHECK(maporl_lora_select(g, -1) == MAPORL_OK, "select base");
    maporl_gpt_param_count(g, &n);
    CHECK(n == base_n, "the base's count back");
    lc.rank = 0;
    CHECK(maporl_lora_add(g, &lc, 1, &id) == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "lora.rank"),
          "rank 0: %s", maporl_last_error());
    lc.rank = 2;
    lc.dropout = 1.0;
    CHECK(maporl_lora_add(g, &lc, 1, &id) == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "lora.dropout"),
          "dropout 1: %s", maporl_last_error());
    lc.dropout = NAN;
    CHECK(maporl_lora_add(g, &lc, 1, &id) == MAPORL_ERR_INVALID_ARG, "dropout NaN");
    lc.dropout = 0;
    lc.target_modules = 0;
    CHECK(
        maporl_lora_add(g, &lc, 1, &id) == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "target_modules"),
        "no targets");
    CHECK(maporl_lora_remove(g, 0) == MAPORL_OK, "remove");
    CHECK(maporl_lora_select(g, 0) == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "live adapter"),
          "select removed: %s", maporl_last_error());
    CHECK(maporl_lora_merge(g, 7) == MAPORL_ERR_INVALID_ARG, "merge unknown");
    CHECK(maporl_lora_cache_rows(g, nullptr, 1) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "cache_reset"),
          "rows before reset");
    maporl_gpt_free(g);
    maporl_gpt_config gc = maporl_gpt_default_config();
    gc.vocab = 8;
    gc.context = 4;
    gc.layers = 1;
    gc.heads = 1;
    gc.d_model = 4;
    CHECK(maporl_gpt_create(&gc, 1, &g) == MAPORL_OK, "gpt");
    lc.target_modules = MAPORL_LORA_ALL;
    CHECK(maporl_lora_add(g, &lc, 1, &id) == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "Llama-family"),
          "gpt: %s", maporl_last_error());
    maporl_gpt_free(g);
}

}  // namespace

int main() { return check::run_all("test_lora"); }
