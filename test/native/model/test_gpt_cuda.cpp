// test_gpt_cuda.cpp: the embedded GPT on CUDA against the CPU reference. In every build: the host-side token
// bucketing of the CUDA encoder backward, and moving a model to CUDA without a device (a clear error, the model
// untouched and still usable). With a GPU (CUDA build and a visible device): every op of native/model/gpt_cuda.h against
// its CPU twin of native/model/gpt_ops.h on random inputs at shapes off the tile sizes, backwards accumulating into
// non-zero gradients; then the whole model through the C API (forward, backward + AdamW steps, KV-cache decoding)
// on both devices from the same seed. `test_gpt_cuda --bench` times a training step and KV-cache generation on CUDA
// at the size of the CPU benchmark (for scripts/device-check.sh).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/gpt_cuda.h"
#include "test/native/core/gpu_check.h"
#include "native/model/gpt_ops.h"
#include "maporl.h"

namespace {

using Vec = std::vector<float>;
namespace g = maporl::gpt;

using gpu_check::rnd;

std::vector<int32_t> rnd_tokens(size_t n, int32_t V, uint32_t seed) {
    std::mt19937 r(seed);
    std::vector<int32_t> t(n);
    for (auto & x : t) x = (int32_t)(r() % (uint32_t)V);
    return t;
}

using gpu_check::close_rel;

TEST(token_buckets_group_positions_by_id_in_order) {
    const std::vector<int32_t> tok = {3, 0, 3, 7, 0, 3, 2};
    const g::cuda::TokenBuckets tb = g::cuda::bucket_tokens(tok.data(), (int64_t)tok.size());
    CHECK((tb.ids == std::vector<int32_t>{0, 2, 3, 7}), "ids");
    CHECK((tb.offsets == std::vector<int32_t>{0, 2, 3, 6, 7}), "offsets");
    CHECK((tb.positions == std::vector<int32_t>{1, 4, 6, 0, 2, 5, 3}), "positions");
    // A larger random case: every position once, grouped under its own id, ascending within a group.
    const std::vector<int32_t> big = rnd_tokens(5000, 61, 9);
    const g::cuda::TokenBuckets b = g::cuda::bucket_tokens(big.data(), (int64_t)big.size());
    std::vector<int> seen(big.size(), 0);
    bool ok = b.offsets.size() == b.ids.size() + 1 && b.offsets.back() == (int32_t)big.size();
    for (size_t k = 0; ok && k < b.ids.size(); ++k) {
        if (k > 0 && b.ids[k] <= b.ids[k - 1]) ok = false;
        for (int32_t p = b.offsets[k]; ok && p < b.offsets[k + 1]; ++p) {
            const int32_t pos = b.positions[(size_t)p];
            if (big[(size_t)pos] != b.ids[k] || (p > b.offsets[k] && pos <= b.positions[(size_t)p - 1])) ok = false;
            ++seen[(size_t)pos];
        }
    }
    CHECK(ok && std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }), "random buckets");
}

maporl_gpt_config config_of(int64_t V, int64_t ctx, int64_t L, int64_t NH, int64_t C, int tie = 1) {
    maporl_gpt_config c = maporl_gpt_default_config();
    c.vocab = V;
    c.context = ctx;
    c.layers = L;
    c.heads = NH;
    c.d_model = C;
    c.tie_embeddings = tie;
    return c;
}

maporl_gpt * model_of(const maporl_gpt_config & c, uint64_t seed) {
    maporl_gpt * m = nullptr;
    maporl_gpt_create(&c, seed, &m);
    return m;
}

maporl_gpt * tiny_model(uint64_t seed) { return model_of(config_of(11, 16, 2, 2, 8), seed); }

TEST(set_device_without_a_gpu_is_a_clear_error_and_leaves_the_model_alone) {
    maporl_gpt * m = tiny_model(5);
    CHECK(m != nullptr, "create");
    CHECK(maporl_gpt_set_device(m, (maporl_device)7) == MAPORL_ERR_INVALID_ARG, "bad device value");
    CHECK(std::strstr(maporl_last_error(), "device") != nullptr, "names the parameter: %s", maporl_last_error());
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count > 0) {
        std::printf("  (a GPU is visible: the move itself is tested by cuda_model_trains_and_decodes_like_cpu)\n");
        maporl_gpt_free(m);
        return;
    }
    const std::vector<int32_t> tok = rnd_tokens(2 * 5, 11, 1);
    Vec before(2 * 5 * 11), after(2 * 5 * 11);
    CHECK(maporl_gpt_forward(m, tok.data(), 2, 5, before.data(), nullptr) == MAPORL_OK, "%s", maporl_last_error());
    CHECK(maporl_gpt_set_device(m, MAPORL_DEVICE_CUDA) == MAPORL_ERR_NO_DEVICE, "expected NO_DEVICE");
    CHECK(std::strstr(maporl_last_error(), "cuda") != nullptr || std::strstr(maporl_last_error(), "CUDA") != nullptr,
          "message: %s", maporl_last_error());
    maporl_device d = MAPORL_DEVICE_CUDA;
    CHECK(maporl_gpt_get_device(m, &d) == MAPORL_OK && d == MAPORL_DEVICE_CPU, "still on the CPU");
    CHECK(maporl_gpt_set_device(m, MAPORL_DEVICE_CPU) == MAPORL_OK, "CPU to CPU is a no-op");
    CHECK(maporl_gpt_forward(m, tok.data(), 2, 5, after.data(), nullptr) == MAPORL_OK, "%s", maporl_last_error());
    CHECK(before == after, "the model is unchanged");
    maporl_gpt_free(m);
}

using gpu_check::devices;
using gpu_check::median_ms;

#ifdef MAPORL_WITH_CUDA

using gpu_check::D;

GPU_TEST(cuda_elementwise_ops_match_cpu) {
    for (int64_t n : {1, 1000, 65537}) {
        const Vec a = rnd((size_t)n, 1, 3.0f), b = rnd((size_t)n, 2), d = rnd((size_t)n, 3);
        Vec out((size_t)n), da = rnd((size_t)n, 4), db = rnd((size_t)n, 5), dg = rnd((size_t)n, 6);
        D<float> A(a), Bd(b), Dd(d), O(n), DA(da), DB(db), DG(dg);
        g::residual_forward(out.data(), a.data(), b.data(), n);
        g::cuda::residual_forward(O.p, A.p, Bd.p, n);
        CHECK(close_rel(O.host(), out, 1e-7, "residual_forward"), "n=%lld", (long long)n);
        g::residual_backward(da.data(), db.data(), d.data(), n);
        g::cuda::residual_backward(DA.p, DB.p, Dd.p, n);
        CHECK(close_rel(DA.host(), da, 1e-7, "residual da") && close_rel(DB.host(), db, 1e-7, "residual db"), "n=%lld",
              (long long)n);
        g::gelu_forward(out.data(), a.data(), n);
        g::cuda::gelu_forward(O.p, A.p, n);
        CHECK(close_rel(O.host(), out, 2e-6, "gelu_forward"), "n=%lld", (long long)n);
        g::gelu_backward(dg.data(), a.data(), d.data(), n);
        g::cuda::gelu_backward(DG.p, A.p, Dd.p, n);
        CHECK(close_rel(DG.host(), dg, 2e-6, "gelu_backward"), "n=%lld", (long long)n);
    }
}

GPU_TEST(cuda_adamw_and_global_norm_match_cpu) {
    const int64_t n = 100003;
    Vec p = rnd((size_t)n, 1), gr = rnd((size_t)n, 2, 0.1f), m = rnd((size_t)n, 3, 0.01f),
        v = rnd((size_t)n, 4, 0.001f);
    for (auto & x : v) x = std::fabs(x);
    D<float> P(p), G(gr), M(m), Vd(v);
    const g::AdamW h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int64_t t = 1; t <= 3; ++t) {
        g::adamw_update(p.data(), gr.data(), m.data(), v.data(), n, h, t, 0.5f);
        g::cuda::adamw_update(P.p, G.p, M.p, Vd.p, n, h, t, 0.5f);
    }
    CHECK(close_rel(P.host(), p, 1e-6, "adamw params") && close_rel(M.host(), m, 1e-6, "adamw m") &&
              close_rel(Vd.host(), v, 1e-6, "adamw v"),
          "adamw");
    double s = 0;
    for (float x : gr) s += (double)x * x;
    const double norm = g::cuda::global_norm(G.p, n);
    CHECK(std::fabs(norm - std::sqrt(s)) <= 1e-12 * std::sqrt(s) + 1e-300, "global norm %.17g vs %.17g", norm,
          std::sqrt(s));
    CHECK(g::cuda::global_norm(G.p, n) == norm, "global norm repeats exactly");
}

GPU_TEST(cuda_encoder_matches_cpu) {
    const int64_t B = 3, T = 37, C = 70, V = 29;
    const std::vector<int32_t> tok = rnd_tokens((size_t)(B * T), (int32_t)V, 7);
    const Vec wte = rnd((size_t)(V * C), 1), wpe = rnd((size_t)(T * C), 2), dout = rnd((size_t)(B * T * C), 3);
    Vec out((size_t)(B * T * C)), dwte = rnd((size_t)(V * C), 4), dwpe = rnd((size_t)(T * C), 5);
    D<int32_t> TK(tok);
    D<float> WTE(wte), WPE(wpe), DO(dout), O(B * T * C), DWTE(dwte), DWPE(dwpe);
    g::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    g::cuda::encoder_forward(O.p, TK.p, WTE.p, WPE.p, B, T, C);
    CHECK(close_rel(O.host(), out, 1e-7, "encoder_forward"), "forward");
    g::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    const g::cuda::TokenBuckets tb = g::cuda::bucket_tokens(tok.data(), B * T);
    D<int32_t> IDS(tb.ids), OFF(tb.offsets), POS(tb.positions);
    g::cuda::encoder_backward(DWTE.p, DWPE.p, DO.p, IDS.p, OFF.p, POS.p, (int64_t)tb.ids.size(), B, T, C);
    CHECK(close_rel(DWTE.host(), dwte, 1e-6, "dwte") && close_rel(DWPE.host(), dwpe, 1e-6, "dwpe"), "backward");
}

GPU_TEST(cuda_layernorm_matches_cpu) {
    for (auto [N, C] : std::initializer_list<std::pair<int64_t, int64_t>>{{1, 8}, {130, 70}, {300, 256}}) {
        const Vec x = rnd((size_t)(N * C), 1, 2.0f), w = rnd((size_t)C, 2), b = rnd((size_t)C, 3),
                  dout = rnd((size_t)(N * C), 4);
        Vec out((size_t)(N * C)), mean((size_t)N), rstd((size_t)N), dx = rnd((size_t)(N * C), 5),
                                                                    dw = rnd((size_t)C, 6), db = rnd((size_t)C, 7);
        D<float> X(x), W(w), Bb(b), DO(dout), O(N * C), ME(N), RS(N), DX(dx), DW(dw), DB(db),
            S(g::cuda::layernorm_scratch(N, C));
        g::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        g::cuda::layernorm_forward(O.p, ME.p, RS.p, X.p, W.p, Bb.p, N, C);
        CHECK(close_rel(O.host(), out, 1e-5, "layernorm out") && close_rel(ME.host(), mean, 1e-5, "mean") &&
                  close_rel(RS.host(), rstd, 1e-5, "rstd"),
              "forward N=%lld C=%lld", (long long)N, (long long)C);
        g::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
        g::cuda::layernorm_backward(DX.p, DW.p, DB.p, DO.p, X.p, W.p, ME.p, RS.p, N, C, S.p);
        CHECK(close_rel(DX.host(), dx, 1e-5, "dx") && close_rel(DW.host(), dw, 1e-5, "dw") &&
                  close_rel(DB.host(), db, 1e-5, "db"),
              "backward N=%lld C=%lld", (long long)N, (long long)C);
    }
}

GPU_TEST(cuda_matmul_matches_cpu) {
    struct S {
        int64_t N, C, OC;
        bool bias;
    };
    for (const S s :
         {S{1, 8, 1, true}, S{7, 13, 5, false}, S{130, 70, 193, true}, S{256, 128, 384, true}, S{33, 512, 64, false}}) {
        const Vec x = rnd((size_t)(s.N * s.C), 1), w = rnd((size_t)(s.OC * s.C), 2), b = rnd((size_t)s.OC, 3),
                  dout = rnd((size_t)(s.N * s.OC), 4);
        Vec out((size_t)(s.N * s.OC)), dx = rnd((size_t)(s.N * s.C), 5), dw = rnd((size_t)(s.OC * s.C), 6),
                                       db = rnd((size_t)s.OC, 7);
        D<float> X(x), W(w), Bb(b), DO(dout), O(s.N * s.OC), DX(dx), DW(dw), DB(db);
        g::matmul_forward(out.data(), x.data(), w.data(), s.bias ? b.data() : nullptr, s.N, s.C, s.OC);
        g::cuda::matmul_forward(O.p, X.p, W.p, s.bias ? Bb.p : nullptr, s.N, s.C, s.OC);
        CHECK(close_rel(O.host(), out, 1e-5, "matmul out"), "N=%lld C=%lld OC=%lld", (long long)s.N, (long long)s.C,
              (long long)s.OC);
        g::matmul_backward(dx.data(), dw.data(), s.bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), s.N,
                           s.C, s.OC);
        g::cuda::matmul_backward(DX.p, DW.p, s.bias ? DB.p : nullptr, DO.p, X.p, W.p, s.N, s.C, s.OC);
        CHECK(close_rel(DX.host(), dx, 1e-5, "dinp") && close_rel(DW.host(), dw, 1e-5, "dweight") &&
                  close_rel(DB.host(), db, 1e-5, "dbias"),
              "backward N=%lld C=%lld OC=%lld", (long long)s.N, (long long)s.C, (long long)s.OC);
    }
}

GPU_TEST(cuda_attention_matches_cpu) {
    struct S {
        int64_t B, T, C, NH;
    };
    for (const S s : {S{1, 1, 8, 2}, S{2, 37, 24, 3}, S{3, 70, 128, 2}}) {  // hs 4, 8, 64 (> one warp of lanes)
        const int64_t C3 = 3 * s.C, N = s.B * s.T, A = s.B * s.NH * s.T * s.T;
        const Vec qkv = rnd((size_t)(N * C3), 1, 1.5f), dout = rnd((size_t)(N * s.C), 2);
        Vec out((size_t)(N * s.C)), att((size_t)A), dqkv = rnd((size_t)(N * C3), 3);
        D<float> Q(qkv), DO(dout), O(N * s.C), AT(A), DQ(dqkv), SC(A);
        g::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        g::cuda::attention_forward(O.p, AT.p, Q.p, s.B, s.T, s.C, s.NH);
        CHECK(close_rel(O.host(), out, 1e-5, "attention out") && close_rel(AT.host(), att, 1e-5, "att"),
              "forward B=%lld T=%lld C=%lld NH=%lld", (long long)s.B, (long long)s.T, (long long)s.C, (long long)s.NH);
        g::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
        g::cuda::attention_backward(DQ.p, DO.p, Q.p, AT.p, s.B, s.T, s.C, s.NH, SC.p);
        CHECK(close_rel(DQ.host(), dqkv, 1e-5, "dqkv"), "backward B=%lld T=%lld", (long long)s.B, (long long)s.T);
        // The KV-cache step at every position equals the full forward's row.
        const int64_t hs = s.C / s.NH;
        D<float> KC(s.B * s.NH * s.T * hs), VC(s.B * s.NH * s.T * hs), Y(s.B * s.C), SS(s.B * s.NH * s.T);
        bool ok = true;
        for (int64_t pos = 0; pos < s.T && ok; ++pos) {
            Vec step((size_t)(s.B * C3));
            for (int64_t b = 0; b < s.B; ++b)
                std::copy(qkv.begin() + (b * s.T + pos) * C3, qkv.begin() + (b * s.T + pos + 1) * C3,
                          step.begin() + b * C3);
            D<float> ST(step);
            g::cuda::attention_decode(Y.p, KC.p, VC.p, ST.p, s.B, s.T, pos, s.C, s.NH, SS.p);
            Vec want((size_t)(s.B * s.C));
            for (int64_t b = 0; b < s.B; ++b)
                std::copy(out.begin() + (b * s.T + pos) * s.C, out.begin() + (b * s.T + pos + 1) * s.C,
                          want.begin() + b * s.C);
            ok = close_rel(Y.host(), want, 1e-5, "attention_decode");
        }
        CHECK(ok, "decode B=%lld T=%lld", (long long)s.B, (long long)s.T);
    }
}

GPU_TEST(cuda_model_trains_and_decodes_like_cpu) {
    for (int tie : {1, 0}) {
        const maporl_gpt_config c = config_of(37, 40, 2, 4, 64, tie);
        maporl_gpt *cpu = model_of(c, 11), *gpu = model_of(c, 11);
        CHECK(cpu && gpu, "create");
        CHECK(maporl_gpt_set_device(gpu, MAPORL_DEVICE_CUDA) == MAPORL_OK, "%s", maporl_last_error());
        maporl_device d;
        CHECK(maporl_gpt_get_device(gpu, &d) == MAPORL_OK && d == MAPORL_DEVICE_CUDA, "on CUDA");
        int64_t P = 0;
        maporl_gpt_param_count(cpu, &P);
        const int64_t B = 3, T = 33, V = c.vocab;
        const std::vector<int32_t> tok = rnd_tokens((size_t)(B * T), (int32_t)V, 3);
        maporl_adamw_params h = maporl_adamw_default_params();
        h.lr = 1e-3f;
        h.weight_decay = 0.01f;
        bool ok = true;
        for (int it = 0; it < 3 && ok; ++it) {
            Vec lc((size_t)(B * T * V)), lg(lc.size()), vc((size_t)(B * T)), vg(vc.size());
            maporl_gpt_forward(cpu, tok.data(), B, T, lc.data(), vc.data());
            CHECK(maporl_gpt_forward(gpu, tok.data(), B, T, lg.data(), vg.data()) == MAPORL_OK, "%s",
                  maporl_last_error());
            ok = close_rel(lg, lc, 2e-4, "model logits") && close_rel(vg, vc, 2e-4, "model values");
            const Vec dl = rnd(lc.size(), 100 + it, 0.01f), dv = rnd(vc.size(), 200 + it, 0.01f);
            maporl_gpt_zero_grad(cpu);
            maporl_gpt_zero_grad(gpu);
            maporl_gpt_backward(cpu, dl.data(), dv.data());
            CHECK(maporl_gpt_backward(gpu, dl.data(), dv.data()) == MAPORL_OK, "%s", maporl_last_error());
            double nc = 0, ng = 0;
            maporl_gpt_step(cpu, &h, 1.0, &nc);
            CHECK(maporl_gpt_step(gpu, &h, 1.0, &ng) == MAPORL_OK, "%s", maporl_last_error());
            ok = ok && std::fabs(nc - ng) <= 1e-4 * nc;
            if (!ok) std::printf("  grad norm cpu %.8g cuda %.8g\n", nc, ng);
            Vec pc((size_t)P), pg((size_t)P);
            maporl_gpt_get(cpu, 0, pc.data(), P);
            maporl_gpt_get(gpu, 0, pg.data(), P);
            ok = ok && close_rel(pg, pc, 1e-4, "params after step");
        }
        CHECK(ok, "training steps tie=%d", tie);
        // Greedy KV-cache decoding from the same parameters: logits close at every position, same tokens.
        const int64_t Bc = 4, steps = 20;
        maporl_gpt_cache_reset(cpu, Bc, steps);
        CHECK(maporl_gpt_cache_reset(gpu, Bc, steps) == MAPORL_OK, "%s", maporl_last_error());
        std::vector<int32_t> tc = rnd_tokens((size_t)Bc, (int32_t)V, 9), tg = tc;
        for (int64_t pos = 0; pos < steps && ok; ++pos) {
            Vec lc((size_t)(Bc * V)), lg(lc.size());
            maporl_gpt_decode(cpu, tc.data(), pos, lc.data(), nullptr);
            CHECK(maporl_gpt_decode(gpu, tg.data(), pos, lg.data(), nullptr) == MAPORL_OK, "%s", maporl_last_error());
            ok = close_rel(lg, lc, 2e-4, "decode logits");
            for (int64_t b = 0; b < Bc; ++b) {
                tc[(size_t)b] =
                    (int32_t)(std::max_element(lc.begin() + b * V, lc.begin() + (b + 1) * V) - (lc.begin() + b * V));
                tg[(size_t)b] =
                    (int32_t)(std::max_element(lg.begin() + b * V, lg.begin() + (b + 1) * V) - (lg.begin() + b * V));
            }
            ok = ok && tc == tg;
        }
        CHECK(ok, "decoding tie=%d", tie);
        // Back to the CPU: the parameters and moments come along.
        Vec pg((size_t)P), mg((size_t)P), p2((size_t)P), m2((size_t)P);
        maporl_gpt_get(gpu, 0, pg.data(), P);
        maporl_gpt_get(gpu, 1, mg.data(), P);
        CHECK(maporl_gpt_set_device(gpu, MAPORL_DEVICE_CPU) == MAPORL_OK, "%s", maporl_last_error());
        maporl_gpt_get(gpu, 0, p2.data(), P);
        maporl_gpt_get(gpu, 1, m2.data(), P);
        CHECK(pg == p2 && mg == m2, "round trip to the CPU");
        // Bad input on the device path is a clear error too.
        CHECK(maporl_gpt_set_device(gpu, MAPORL_DEVICE_CUDA) == MAPORL_OK, "%s", maporl_last_error());
        std::vector<int32_t> badtok = tok;
        badtok[5] = (int32_t)V;
        CHECK(maporl_gpt_forward(gpu, badtok.data(), B, T, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG &&
                  std::strstr(maporl_last_error(), "tokens") != nullptr,
              "bad token: %s", maporl_last_error());
        CHECK(maporl_gpt_backward(gpu, nullptr, nullptr) == MAPORL_ERR_INVALID_ARG,
              "backward before forward on the device");
        maporl_gpt_free(cpu);
        maporl_gpt_free(gpu);
    }
}

// The CPU benchmark's sizes (lib/bench/gpt.ts): dModel 128, 4 layers, 4 heads, context 128, vocab 64, batch 32.
void bench() {
    if (devices() == 0) {
        std::printf("BENCH gpt cuda: no CUDA device\n");
        return;
    }
    const int64_t V = 64, ctx = 128, L = 4, NH = 4, C = 128, B = 32;
    maporl_gpt * m = model_of(config_of(V, ctx, L, NH, C), 1);
    if (maporl_gpt_set_device(m, MAPORL_DEVICE_CUDA) != MAPORL_OK) {
        std::printf("BENCH gpt cuda: %s\n", maporl_last_error());
        maporl_gpt_free(m);
        return;
    }
    const std::vector<int32_t> tok = rnd_tokens((size_t)(B * ctx), (int32_t)V, 1);
    Vec logits((size_t)(B * ctx * V)), dl = rnd(logits.size(), 2, 1e-4f);
    const maporl_adamw_params h = maporl_adamw_default_params();
    for (int precision : {MAPORL_MATMUL_HIGHEST, MAPORL_MATMUL_HIGH}) {  // float32, then TF32 tensor cores
        maporl_set_matmul_precision(precision);
        const double train = median_ms(
            [&] {
                maporl_gpt_forward(m, tok.data(), B, ctx, logits.data(), nullptr);
                maporl_gpt_zero_grad(m);
                maporl_gpt_backward(m, dl.data(), nullptr);
                maporl_gpt_step(m, &h, 1.0, nullptr);
            },
            10);
        std::printf("BENCH gpt train step cuda%s B=%lld T=%lld dModel=%lld L=%lld median_ms=%.3f tokens_per_s=%.0f\n",
                    precision == MAPORL_MATMUL_HIGH ? " tf32" : "", (long long)B, (long long)ctx, (long long)C,
                    (long long)L, train, (double)(B * ctx) / (train / 1e3));
    }
    maporl_set_matmul_precision(MAPORL_MATMUL_HIGHEST);
    const int64_t prompt = 17, fresh = 64;
    Vec sl((size_t)(B * V));
    const double gen = median_ms(
        [&] {
            maporl_gpt_cache_reset(m, B, prompt + fresh);
            std::vector<int32_t> t(tok.begin(), tok.begin() + B);
            for (int64_t pos = 0; pos < prompt + fresh - 1; ++pos) {
                maporl_gpt_decode(m, t.data(), pos, sl.data(), nullptr);
                for (int64_t b = 0; b < B; ++b)
                    t[(size_t)b] = pos + 1 < prompt
                        ? tok[(size_t)((pos + 1) * B + b)]
                        : (int32_t)(std::max_element(sl.begin() + b * V, sl.begin() + (b + 1) * V) -
                                    (sl.begin() + b * V));
            }
        },
        5);
    std::printf("BENCH gpt generate cuda greedy B=%lld prompt=%lld new=%lld median_ms=%.3f new_tokens_per_s=%.0f\n",
                (long long)B, (long long)prompt, (long long)fresh, gen, (double)(B * fresh) / (gen / 1e3));
    maporl_gpt_free(m);
}

#else

TEST(cuda_build_flag_matches_the_binary) {
    CHECK(maporl_cuda_compiled() == 0, "a build without MAPORL_WITH_CUDA reports no CUDA");
}
void bench() {}

#endif

}  // namespace

int main(int argc, char ** argv) { return gpu_check::run("test_gpt_cuda", "CUDA-vs-CPU", argc, argv, bench); }
