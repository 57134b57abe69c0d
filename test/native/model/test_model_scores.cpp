// test_model_scores.cpp: training through log-probs with the LM head in row chunks (native/model/model_scores.cpp,
// llama::Model::head_rows / head_backward_rows, logits_backward_cpu). In double: the gradient of
// L = sum_n w_n logp_n + u_n H_n + Rv_n values_n, taken chunk by chunk (chunks of 1, 3 and all rows, temperatures 1
// and 0.7), against central finite differences of L computed from the full logits with float64 loops written here;
// and through the C API in float: maporl_gpt_score's log-probs and entropies against the full forward's logits,
// and its backward against maporl_gpt_backward with the logits' gradient written out here, for both families.
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
#include "native/rl/policy_loss.h"
#include "maporl.h"

namespace {

namespace L = maporl::llama;

// log softmax(z / temp)[y] and the entropy of softmax(z / temp), in double.
void row_ref(const double * z, int64_t V, int32_t y, double temp, double * lp, double * H) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z[v] / temp);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] / temp - mx);
    const double lse = mx + std::log(s);
    *lp = z[y] / temp - lse;
    double h = 0;
    for (int64_t v = 0; v < V; ++v) {
        const double q = z[v] / temp - lse;
        h -= std::exp(q) * q;
    }
    *H = h;
}

L::Config tiny() {
    L::Config c;
    c.vocab = 11;
    c.context = 8;
    c.layers = 2;
    c.d_model = 8;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 4;
    c.intermediate = 6;
    c.rms_eps = 1e-5;
    c.rope_theta = 10000;
    c.qkv_bias = true;
    return c;
}

TEST(chunked_head_gradient_matches_finite_differences) {
    for (const bool tied : {false, true}) {
        L::Config c = tiny();
        c.tie_embeddings = tied;
        L::Model<double> m(c);
        m.init(5);
        std::mt19937 r(6);
        std::uniform_real_distribution<double> u(-1, 1);
        for (auto & x : m.params) x = 1.5 * (x + 0.3 * u(r));
        const int64_t B = 2, T = 5, N = B * T, V = c.vocab;
        const std::vector<int32_t> tok = {1, 5, 2, 2, 8, 0, 3, 10, 7, 4}, y = {5, 2, 2, 8, 9, 3, 10, 7, 4, 4};
        std::vector<double> w((size_t)N), uu((size_t)N), Rv((size_t)N);
        for (auto & x : w) x = u(r);
        for (auto & x : uu) x = u(r);
        for (auto & x : Rv) x = u(r);
        w[3] = 0;  // a token the loss does not reach
        uu[3] = 0;
        for (const double temp : {1.0, 0.7}) {
            auto loss = [&] {
                m.forward(tok.data(), B, T);  // full logits
                double s = 0;
                for (int64_t n = 0; n < N; ++n) {
                    double lp, H;
                    row_ref(m.logits.data() + n * V, V, y[(size_t)n], temp, &lp, &H);
                    s += w[(size_t)n] * lp + uu[(size_t)n] * H + Rv[(size_t)n] * m.values[(size_t)n];
                }
                return s;
            };
            for (const int64_t chunk : {(int64_t)1, (int64_t)3, N}) {
                m.forward(tok.data(), B, T, /*head=*/false);
                CHECK(m.logits.empty(), "head = false still computed logits");
                m.zero_grad();
                std::vector<double> dlnf((size_t)(N * c.d_model), 0.0), z;
                for (int64_t n0 = 0; n0 < N; n0 += chunk) {
                    const int64_t rows = std::min(chunk, N - n0);
                    z.assign((size_t)(rows * V), 0.0);
                    m.head_rows(z.data(), n0, rows);
                    maporl::logits_backward_cpu<double>(z.data(), y.data() + n0, rows, V, temp, w.data() + n0,
                                                        uu.data() + n0, z.data());
                    m.head_backward_rows(dlnf.data(), z.data(), n0, rows);
                }
                m.backward_hidden(dlnf, Rv.data());
                const std::vector<double> g = m.grads;
                char label[64];
                std::snprintf(label, sizeof label, "tied %d temp %g chunk %lld", (int)tied, temp, (long long)chunk);
                const int bad = model_check::fd_mismatches(m.params, g, loss, label);
                CHECK(bad == 0, "tied %d temp %g chunk %lld: %d of %zu gradients off", (int)tied, temp,
                      (long long)chunk, bad, m.params.size());
            }
        }
    }
}

// maporl_gpt_score / _backward on a handle against the full-logits calls of the same handle.
void check_api(maporl_gpt * g, int64_t V, const char * what) {
    const int64_t B = 2, T = 6, N = B * T;
    std::vector<int32_t> tok((size_t)N), y((size_t)N);
    for (int64_t n = 0; n < N; ++n) {
        tok[(size_t)n] = (int32_t)((n * 7 + 3) % V);
        y[(size_t)n] = (int32_t)((n * 5 + 1) % V);
    }
    std::mt19937 r(9);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> gl((size_t)N), ge((size_t)N), dv((size_t)N);
    for (auto & x : gl) x = u(r);
    for (auto & x : ge) x = u(r);
    for (auto & x : dv) x = u(r);
    const float temp = 0.8f;
    int64_t P = 0;
    maporl_gpt_param_count(g, &P);
    // The reference: full logits, log-probs in double, the logits' gradient written out in double.
    std::vector<float> logits((size_t)(N * V)), values((size_t)N);
    CHECK(maporl_gpt_forward(g, tok.data(), B, T, logits.data(), values.data()) == MAPORL_OK, "%s: forward", what);
    std::vector<float> dlogits((size_t)(N * V));
    std::vector<double> lp_ref((size_t)N), H_ref((size_t)N);
    for (int64_t n = 0; n < N; ++n) {
        std::vector<double> z(logits.begin() + n * V, logits.begin() + (n + 1) * V);
        row_ref(z.data(), V, y[(size_t)n], temp, &lp_ref[(size_t)n], &H_ref[(size_t)n]);
        const double lse = z[(size_t)y[(size_t)n]] / temp - lp_ref[(size_t)n];
        for (int64_t v = 0; v < V; ++v) {
            const double q = z[(size_t)v] / temp - lse, p = std::exp(q);
            // d logp / dz_v = (1[v = y] - p_v) / T; d H / dz_v = -p_v (q_v + H) / T.
            dlogits[(size_t)(n * V + v)] =
                (float)((gl[(size_t)n] * ((v == y[(size_t)n]) - p) - ge[(size_t)n] * p * (q + H_ref[(size_t)n])) /
                        temp);
        }
    }
    CHECK(maporl_gpt_zero_grad(g) == MAPORL_OK, "%s: zero_grad", what);
    CHECK(maporl_gpt_backward(g, dlogits.data(), dv.data()) == MAPORL_OK, "%s: backward", what);
    std::vector<float> g_ref((size_t)P), g_got((size_t)P);
    // Gradients are not readable through the C API: compare through one SGD-like AdamW step instead? No: read them as
    // the update of a zero-moment step with lr 1, beta 0 (m = g, v = g^2, step = -sign(g)) is too coarse, so compare
    // the parameters after a plain step with beta1 = beta2 = 0 and eps large: p -= lr * g / (|g| + eps) ~ lr * g / eps.
    std::vector<float> p0((size_t)P);
    maporl_gpt_get(g, 0, p0.data(), P);
    const maporl_adamw_params h{1e-3f, 0.0f, 0.0f, 1e3f, 0.0f};
    CHECK(maporl_gpt_step(g, &h, 0.0, nullptr) == MAPORL_OK, "%s: step", what);
    maporl_gpt_get(g, 0, g_ref.data(), P);
    maporl_gpt_set(g, 0, p0.data(), P);
    std::vector<float> lp((size_t)N), H((size_t)N), val((size_t)N);
    CHECK(maporl_gpt_score(g, tok.data(), y.data(), B, T, temp, 5, lp.data(), H.data(), val.data()) == MAPORL_OK,
          "%s: score", what);
    double e_lp = 0, e_H = 0, e_v = 0;
    for (int64_t n = 0; n < N; ++n) {
        e_lp = std::max(e_lp, std::fabs(lp[(size_t)n] - lp_ref[(size_t)n]));
        e_H = std::max(e_H, std::fabs(H[(size_t)n] - H_ref[(size_t)n]));
        e_v = std::max(e_v, (double)std::fabs(val[(size_t)n] - values[(size_t)n]));
    }
    CHECK(e_lp < 2e-5 && e_H < 2e-5 && e_v == 0, "%s: score: |dlogp| %g |dH| %g |dvalues| %g", what, e_lp, e_H, e_v);
    CHECK(maporl_gpt_zero_grad(g) == MAPORL_OK, "%s: zero_grad", what);
    CHECK(maporl_gpt_score_backward(g, gl.data(), ge.data(), dv.data()) == MAPORL_OK, "%s: score_backward", what);
    CHECK(maporl_gpt_score_backward(g, gl.data(), ge.data(), dv.data()) == MAPORL_ERR_INVALID_ARG,
          "%s: a second backward of one score is refused", what);
    CHECK(maporl_gpt_step(g, &h, 0.0, nullptr) == MAPORL_OK, "%s: step", what);
    maporl_gpt_get(g, 0, g_got.data(), P);
    // (p0 - p) * eps / lr = g / (1 + |g| / eps): the gradients, within float rounding of the steps.
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < P; ++i) {
        const double a = ((double)p0[(size_t)i] - g_ref[(size_t)i]) * 1e6,
                     b = ((double)p0[(size_t)i] - g_got[(size_t)i]) * 1e6;
        worst = std::max(worst, std::fabs(a - b));
        scale = std::max(scale, std::fabs(a));
    }
    CHECK(scale > 1e-3 && worst <= 2e-3 * scale, "%s: score_backward vs backward: worst %g of %g", what, worst, scale);
    // Bad input is named and leaves no half state.
    std::vector<int32_t> bad = y;
    bad[4] = (int32_t)V;
    CHECK(maporl_gpt_score(g, tok.data(), bad.data(), B, T, temp, 0, lp.data(), nullptr, nullptr) ==
              MAPORL_ERR_INVALID_ARG,
          "%s: target out of range", what);
    CHECK(maporl_gpt_score_backward(g, gl.data(), nullptr, nullptr) == MAPORL_ERR_INVALID_ARG,
          "%s: backward after a failed score", what);
    CHECK(
        maporl_gpt_score(g, tok.data(), y.data(), B, T, 0.0f, 0, lp.data(), nullptr, nullptr) == MAPORL_ERR_INVALID_ARG,
        "%s: temperature 0", what);
}

TEST(the_c_api_scores_as_the_full_logits) {
    maporl_llama_config c = maporl_llama_default_config();
    c.vocab = 37;
    c.context = 16;
    c.layers = 2;
    c.d_model = 16;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 4;
    c.intermediate = 24;
    c.qk_norm = 1;
    maporl_gpt * g = nullptr;
    CHECK(maporl_llama_create(&c, 3, &g) == MAPORL_OK, "llama_create");
    check_api(g, c.vocab, "llama");
    maporl_gpt_free(g);
    maporl_gpt_config gc = maporl_gpt_default_config();
    gc.vocab = 29;
    gc.context = 16;
    gc.layers = 1;
    gc.heads = 2;
    gc.d_model = 8;
    CHECK(maporl_gpt_create(&gc, 4, &g) == MAPORL_OK, "gpt_create");
    check_api(g, gc.vocab, "gpt");
    maporl_gpt_free(g);
}

// A training score whose logits fit the budget (maporl_gpt_set_score_keep) keeps them, and its backward reuses them:
// the same log-probs and parameters after a step, bit for bit, as recomputing, in chunks of 5 rows and of all. Which
// path ran is seen by changing the LM head between the score and the backward (a probe, not a use): the kept
// logits are the old head's, a recomputation the new one's. The budget is exact (N x V x 4 bytes keeps, one byte less
// recomputes), a score outside training keeps nothing, and a bad budget is named.
TEST(a_training_score_keeps_its_logits_within_the_budget) {
    maporl_llama_config c = maporl_llama_default_config();
    c.vocab = 37;
    c.context = 16;
    c.layers = 2;
    c.d_model = 16;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 4;
    c.intermediate = 24;
    c.tie_embeddings = 0;
    const int64_t B = 2, T = 6, N = B * T, V = c.vocab, whole = N * V * (int64_t)sizeof(float);
    std::vector<int32_t> tok((size_t)N), y((size_t)N);
    for (int64_t n = 0; n < N; ++n) {
        tok[(size_t)n] = (int32_t)((n * 7 + 3) % V);
        y[(size_t)n] = (int32_t)((n * 5 + 1) % V);
    }
    std::vector<float> gl((size_t)N, -1.0f / (float)N), ge((size_t)N, 0.01f);
    const maporl_adamw_params h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
    // One training step (score, backward, AdamW) from seed 3; `poke` (if set) changes the head in between.
    struct Run {
        std::vector<float> lp, params;
    };
    auto run = [&](int64_t keep, int training, int64_t chunk, bool poke) {
        maporl_gpt * g = nullptr;
        CHECK(maporl_llama_create(&c, 3, &g) == MAPORL_OK, "llama_create");
        int64_t P = 0;
        maporl_gpt_param_count(g, &P);
        CHECK(maporl_gpt_set_score_keep(g, keep) == MAPORL_OK, "set_score_keep %lld", (long long)keep);
        maporl_gpt_set_training(g, training);
        Run r{std::vector<float>((size_t)N), std::vector<float>((size_t)P)};
        CHECK(maporl_gpt_score(g, tok.data(), y.data(), B, T, 1.0f, chunk, r.lp.data(), nullptr, nullptr) == MAPORL_OK,
              "score");
        if (poke) {  // lm_head.weight scaled by 2
            int64_t count = 0, off = -1, dims[2] = {0, 0};
            maporl_gpt_tensor_count(g, &count);
            for (int64_t i = 0; i < count; ++i) {
                char name[64];
                int64_t o = 0;
                CHECK(maporl_gpt_tensor_info(g, i, name, dims, &o) == MAPORL_OK, "tensor_info");
                if (std::strcmp(name, "lm_head.weight") == 0) off = o;
            }
            CHECK(off >= 0, "no lm_head.weight");
            std::vector<float> all((size_t)P);
            maporl_gpt_get(g, 0, all.data(), P);
            for (int64_t i = 0; i < V * c.d_model; ++i) all[(size_t)(off + i)] *= 2.0f;
            maporl_gpt_set(g, 0, all.data(), P);
        }
        CHECK(maporl_gpt_zero_grad(g) == MAPORL_OK, "zero_grad");
        CHECK(maporl_gpt_score_backward(g, gl.data(), ge.data(), nullptr) == MAPORL_OK, "score_backward");
        CHECK(maporl_gpt_step(g, &h, 0.0, nullptr) == MAPORL_OK, "step");
        maporl_gpt_get(g, 0, r.params.data(), P);
        maporl_gpt_free(g);
        return r;
    };
    for (const int64_t chunk : {(int64_t)5, (int64_t)0}) {
        const Run kept = run(whole, 1, chunk, false), recomputed = run(0, 1, chunk, false);
        CHECK(kept.lp == recomputed.lp, "chunk %lld: the log-probs differ with the logits kept", (long long)chunk);
        CHECK(kept.params == recomputed.params, "chunk %lld: the step differs with the logits kept", (long long)chunk);
        // The probe: a changed head shows in the step only when the backward recomputes.
        const Run kept_poked = run(whole, 1, chunk, true), short_poked = run(whole - 1, 1, chunk, true),
                  idle_poked = run(whole, 0, chunk, true);
        const Run short_recomputed = run(whole - 1, 1, chunk, false);
        CHECK(short_recomputed.params == recomputed.params, "chunk %lld: a budget one byte short changes the step",
              (long long)chunk);
        auto differs = [](const Run & a, const Run & b) { return a.params != b.params; };
        CHECK(differs(kept_poked, short_poked),
              "chunk %lld: the logits at the budget were not kept (the backward recomputed them)", (long long)chunk);
        CHECK(!differs(short_poked, idle_poked), "chunk %lld: a score outside training kept its logits",
              (long long)chunk);
    }
    maporl_gpt * g = nullptr;
    CHECK(maporl_llama_create(&c, 3, &g) == MAPORL_OK, "llama_create");
    CHECK(maporl_gpt_set_score_keep(g, -1) == MAPORL_ERR_INVALID_ARG, "a negative budget is refused");
    CHECK(std::strstr(maporl_last_error(), "bytes") != nullptr, "the error names bytes: %s", maporl_last_error());
    CHECK(maporl_gpt_set_score_keep(g, ((int64_t)1 << 40) + 1) == MAPORL_ERR_INVALID_ARG,
          "a budget past 2^40 is refused");
    CHECK(maporl_gpt_set_score_keep(nullptr, 0) == MAPORL_ERR_INVALID_ARG, "a NULL model is refused");
    maporl_gpt_free(g);
}

}  // namespace

int main() { return check::run_all("test_model_scores"); }
