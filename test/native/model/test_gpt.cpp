// test_gpt.cpp: the whole embedded GPT (native/model/gpt.h) in double against central finite differences of
// L = sum(logits * R) + sum(values * Rv) for every parameter of a tiny model (tied and untied heads); and a
// float model that memorises a fixed batch with the fused policy-loss kernel as its cross-entropy
// (REINFORCE with advantage 1 is -mean log p), identically for 1 and 3 threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/model/model_check.h"
#include "native/model/gpt.h"
#include "maporl.h"

namespace {

namespace g = maporl::gpt;

TEST(every_parameter_gradient_matches_finite_differences) {
    for (bool tie : {true, false}) {
        g::Config c;
        c.vocab = 7;
        c.context = 5;
        c.layers = 2;
        c.heads = 2;
        c.d_model = 4;
        c.mlp_ratio = 2;
        c.tie_embeddings = tie;
        g::Model<double> m(c);
        m.init(3);
        std::mt19937 r(4);
        std::uniform_real_distribution<double> u(-1, 1);
        for (auto & x : m.params) x += 0.3 * u(r);  // away from the init's symmetric LayerNorm weights
        const int64_t B = 2, T = 4;
        const std::vector<int32_t> tok = {1, 5, 2, 2, 6, 0, 3, 1};
        std::vector<double> R((size_t)(B * T * c.vocab)), Rv((size_t)(B * T));
        for (auto & x : R) x = u(r);
        for (auto & x : Rv) x = u(r);
        auto loss = [&] {
            m.forward(tok.data(), B, T);
            double s = 0;
            for (size_t i = 0; i < R.size(); ++i) s += m.logits[i] * R[i];
            for (size_t i = 0; i < Rv.size(); ++i) s += m.values[i] * Rv[i];
            return s;
        };
        loss();
        m.zero_grad();
        m.backward(R.data(), Rv.data());
        const std::vector<double> g = m.grads;
        const int bad = model_check::fd_mismatches(m.params, g, loss, tie ? "tied" : "untied");
        CHECK(bad == 0, "tie=%d: %d of %zu parameter gradients off", (int)tie, bad, m.params.size());
    }
}

std::vector<float> train(int threads, int steps, std::vector<double> * curve) {
    maporl_set_threads(threads);
    g::Config c;
    c.vocab = 12;
    c.context = 16;
    c.layers = 2;
    c.heads = 2;
    c.d_model = 32;
    g::Model<float> m(c);
    m.init(7);
    const int64_t B = 4, T = 16, N = B * T, V = c.vocab;
    std::vector<int32_t> tok((size_t)N), next((size_t)N);
    std::mt19937 r(9);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t <= T; ++t) {
            const int32_t v = (int32_t)((b * 5 + t * 3 + (r() % 2)) % V);
            if (t < T) tok[(size_t)(b * T + t)] = v;
            if (t > 0) next[(size_t)(b * T + t - 1)] = v;
        }
    std::vector<float> adv((size_t)N, 1.0f), grad((size_t)(N * V)), lp((size_t)N);
    std::vector<uint8_t> mask((size_t)N, 1);
    maporl_policy_loss_params p = maporl_policy_loss_default_params();
    p.type = MAPORL_LOSS_REINFORCE;
    p.agg = MAPORL_AGG_TOKEN_MEAN;
    const g::AdamW h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
    for (int s = 0; s < steps; ++s) {
        m.forward(tok.data(), B, T);
        maporl_policy_loss_stats st;
        maporl_fused_policy_loss(MAPORL_DEVICE_CPU, m.logits.data(), next.data(), nullptr, adv.data(), 0, mask.data(),
                                 MAPORL_MASK_U8, nullptr, B, T, V, 1.0f, p, grad.data(), lp.data(), nullptr, nullptr,
                                 &st);
        if (curve) curve->push_back(st.loss);
        m.zero_grad();
        m.backward(grad.data(), nullptr);
        m.update(h, 1.0);
    }
    maporl_set_threads(0);
    return m.params;
}

TEST(a_small_model_memorises_a_batch_the_same_for_any_thread_count) {
    std::vector<double> curve;
    const std::vector<float> p1 = train(1, 120, &curve);
    const std::vector<float> p3 = train(3, 120, nullptr);
    CHECK(p1 == p3, "parameters after 120 steps differ between 1 and 3 threads");
    std::printf("  cross-entropy: step 0 %.4f, 30 %.4f, 60 %.4f, 119 %.4f\n", curve[0], curve[30], curve[60],
                curve.back());
    CHECK(curve[0] > 2.2 && curve.back() < 0.5 * curve[0], "loss %g -> %g: the model did not learn", curve[0],
          curve.back());
}

// A prompt decoded without the heads leaves the cache as decoding it with them: the next logits are the same bits.
TEST(decoding_without_the_heads_caches_the_same) {
    g::Config c;
    c.vocab = 11;
    c.context = 12;
    c.layers = 2;
    c.heads = 2;
    c.d_model = 16;
    g::Model<float> with(c), without(c);
    with.init(9);
    without.init(9);
    CHECK(model_check::heads_skipped_cache_the_same(with, without, c.vocab, 6),
          "the last position's heads differ after a prompt decoded without them");
}

// KV-cache decoding equals the full forward at every position, and greedy decoding from the cache picks the
// argmax of the full forward's logits at every step.
TEST(kv_cache_decoding_equals_the_full_forward) {
    g::Config c;
    c.vocab = 11;
    c.context = 12;
    c.layers = 2;
    c.heads = 2;
    c.d_model = 16;
    g::Model<float> m(c);
    m.init(5);
    const float worst = model_check::cached_decode_vs_forward(m, 3, 10, c.vocab, 1, true, [](int64_t) {});
    CHECK(worst < 1e-5f, "cached decode differs from the full forward by %g", worst);
}

TEST(c_api_round_trips_and_rejects_bad_input) {
    maporl_gpt_config c = maporl_gpt_default_config();
    c.vocab = 9;
    c.context = 8;
    c.layers = 1;
    c.heads = 3;
    c.d_model = 8;
    maporl_gpt * m = nullptr;
    CHECK(maporl_gpt_create(&c, 1, &m) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "config.heads") != nullptr,
          "%s", maporl_last_error());
    c.heads = 2;
    CHECK(maporl_gpt_create(&c, 1, &m) == MAPORL_OK && m != nullptr, "%s", maporl_last_error());
    int64_t n = 0, nt = 0;
    maporl_gpt_param_count(m, &n);
    maporl_gpt_tensor_count(m, &nt);
    char name[64];
    int64_t dims[2], off = -1;
    CHECK(maporl_gpt_tensor_info(m, 0, name, dims, &off) == MAPORL_OK && std::strcmp(name, "wte") == 0 &&
              dims[0] == 9 && dims[1] == 8 && off == 0,
          "tensor 0: %s [%lld, %lld] at %lld", name, (long long)dims[0], (long long)dims[1], (long long)off);
    std::vector<float> p((size_t)n), q((size_t)n);
    CHECK(maporl_gpt_get(m, 0, p.data(), n) == MAPORL_OK, "%s", maporl_last_error());
    for (auto & x : p) x *= 0.5f;
    maporl_gpt_set(m, 0, p.data(), n);
    maporl_gpt_get(m, 0, q.data(), n);
    CHECK(p == q, "parameters do not round-trip");
    CHECK(maporl_gpt_get(m, 0, p.data(), n - 1) == MAPORL_ERR_INVALID_ARG, "a wrong count is rejected");
    const int32_t bad[2] = {3, 9};
    CHECK(maporl_gpt_forward(m, bad, 1, 2, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "tokens") != nullptr,
          "%s", maporl_last_error());
    CHECK(maporl_gpt_backward(m, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG, "backward before any forward");
    maporl_adamw_params h = maporl_adamw_default_params();
    h.lr = NAN;
    CHECK(maporl_gpt_step(m, &h, 1.0, nullptr) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "params.lr") != nullptr,
          "%s", maporl_last_error());
    const int32_t one[1] = {2};
    CHECK(maporl_gpt_decode(m, one, 0, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG, "decode before cache_reset");
    CHECK(maporl_gpt_cache_reset(m, 1, 9) == MAPORL_ERR_INVALID_ARG, "max_len beyond the context");
    // Releasing the cache gives back its memory: decoding then needs a reset, and decodes the same logits.
    std::vector<float> l1(9), l2(9);
    CHECK(maporl_gpt_cache_reset(m, 1, 8) == MAPORL_OK && maporl_gpt_decode(m, one, 0, l1.data(), nullptr) == MAPORL_OK,
          "%s", maporl_last_error());
    int64_t cb = -1, cl = -1;
    CHECK(maporl_gpt_cache_release(m) == MAPORL_OK && maporl_gpt_cache_info(m, &cb, &cl, nullptr) == MAPORL_OK &&
              cb == 0 && cl == 0,
          "after release: batch %lld, max_len %lld", (long long)cb, (long long)cl);
    CHECK(maporl_gpt_decode(m, one, 0, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG,
          "decode after release, before cache_reset");
    CHECK(maporl_gpt_cache_reset(m, 1, 8) == MAPORL_OK &&
              maporl_gpt_decode(m, one, 0, l2.data(), nullptr) == MAPORL_OK && l1 == l2,
          "decoding after a release differs");
    CHECK(maporl_gpt_cache_release(nullptr) == MAPORL_ERR_INVALID_ARG, "release of NULL");
    // Two batches that take turns through cache slots decode what each decodes alone.
    {
        const int32_t a[3] = {1, 4, 7}, b[2] = {2, 8};
        std::vector<float> alone_a, alone_b, turn_a, turn_b, l(9 * 2);
        auto run = [&](const int32_t * toks, int64_t rows, int64_t pos, std::vector<float> & out) {
            CHECK(maporl_gpt_decode(m, toks, pos, l.data(), nullptr) == MAPORL_OK, "%s", maporl_last_error());
            out.insert(out.end(), l.begin(), l.begin() + rows * 9);
        };
        maporl_gpt_cache_reset(m, 1, 8);
        for (int64_t p = 0; p < 3; ++p) run(a + p, 1, p, alone_a);
        maporl_gpt_cache_reset(m, 1, 8);
        for (int64_t p = 0; p < 2; ++p) run(b + p, 1, p, alone_b);
        maporl_gpt_cache_release(m);
        CHECK(maporl_gpt_cache_swap(m, 11) == MAPORL_OK, "%s",
              maporl_last_error());  // A's slot (empty) in: A resets it
        maporl_gpt_cache_reset(m, 1, 8);
        run(a, 1, 0, turn_a);
        maporl_gpt_cache_swap(m, 11);  // A out
        maporl_gpt_cache_swap(m, -3);  // B in (new)
        maporl_gpt_cache_reset(m, 1, 5);
        run(b, 1, 0, turn_b);
        maporl_gpt_cache_swap(m, -3);
        maporl_gpt_cache_swap(m, 11);
        int64_t cb = 0, cl = 0;
        maporl_gpt_cache_info(m, &cb, &cl, nullptr);
        CHECK(cb == 1 && cl == 8, "A's cache back: batch %lld, max_len %lld", (long long)cb, (long long)cl);
        run(a + 1, 1, 1, turn_a);
        maporl_gpt_cache_swap(m, 11);
        maporl_gpt_cache_swap(m, -3);
        run(b + 1, 1, 1, turn_b);
        maporl_gpt_cache_swap(m, -3);
        maporl_gpt_cache_swap(m, 11);
        run(a + 2, 1, 2, turn_a);
        CHECK(turn_a == alone_a && turn_b == alone_b, "batches taking turns decode differently from each alone");
    }
    maporl_gpt_free(m);
    maporl_gpt_free(nullptr);
    CHECK(nt == 4 + 12 + 2, "tensor count %lld", (long long)nt);
}

}  // namespace

int main() { return check::run_all("test_gpt"); }
