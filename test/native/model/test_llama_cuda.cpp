// test_llama_cuda.cpp: the Llama family's layers on CUDA (native/model/llama_cuda.h) against their CPU twins of
// llama_ops.h, where a GPU is visible (CUDA build and a device; elsewhere the binary says how many it left out):
// RMSNorm, rotate-half RoPE (llama3-scaled tables, a position offset, in place), SwiGLU, and GQA / MQA causal
// attention, forward and backward, at shapes off the warp and tile sizes, every backward accumulating into
// non-zero gradients (the contract is +=); the decoder's row ops and the embedding against their emulation
// (native/model/llama_device_host.h); and the whole model on the device (cuda_model_create) against llama::Model
// for every variant: forward, gradients, AdamW steps, prefill and per-row decoding, and LoRA adapters (training,
// a decode step with a different adapter per row).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/core/gpu_check.h"
#include "native/model/llama_ops.h"
#include "maporl.h"

#ifdef MAPORL_WITH_CUDA
#include <memory>

#include "native/model/llama_cuda.h"
#include "native/model/llama_device_host.h"
#include "test/native/model/llama_variants.h"
#include "test/native/model/row_ops_check.h"
#endif

namespace {

#ifdef MAPORL_WITH_CUDA

namespace L = maporl::llama;
using Vec = std::vector<float>;
using gpu_check::close_rel;
using gpu_check::D;
using gpu_check::rnd;

GPU_TEST(cuda_rmsnorm_matches_cpu) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 7}, {130, 576}, {77, 33}};
    for (auto [N, C] : shapes) {
        const Vec x = rnd((size_t)(N * C), 1, 2.0f), w = rnd((size_t)C, 2), d = rnd((size_t)(N * C), 3);
        Vec out((size_t)(N * C)), rstd((size_t)N), dx = rnd((size_t)(N * C), 4), dw = rnd((size_t)C, 5);
        D<float> X(x), W(w), Dd(d), O(N * C), R(N), DX(dx), DW(dw), S(L::cuda::rmsnorm_scratch(N, C));
        L::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
        L::cuda::rmsnorm_forward(O.p, R.p, X.p, W.p, N, C, 1e-6);
        CHECK(close_rel(O.host(), out, 2e-6, "rmsnorm out") && close_rel(R.host(), rstd, 2e-6, "rmsnorm rstd"),
              "N=%lld C=%lld", (long long)N, (long long)C);
        L::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), N, C);
        L::cuda::rmsnorm_backward(DX.p, DW.p, Dd.p, X.p, W.p, R.p, N, C, S.p);
        CHECK(close_rel(DX.host(), dx, 1e-5, "rmsnorm dx") && close_rel(DW.host(), dw, 1e-5, "rmsnorm dw"),
              "N=%lld C=%lld", (long long)N, (long long)C);
    }
}

GPU_TEST(cuda_rope_matches_cpu) {
    L::RopeScaling s;
    s.type = L::RopeScaling::Llama3;
    s.factor = 8;
    s.low_freq_factor = 1;
    s.high_freq_factor = 4;
    s.original_max_position = 16;
    const int64_t B = 2, T = 19, H = 3, dim = 64, pos0 = 5, P = 64;
    std::vector<float> cos, sin;
    L::rope_tables(cos, sin, L::rope_inv_freq(dim, 500000.0, s), P);
    const Vec x = rnd((size_t)(B * T * H * dim), 1), d = rnd((size_t)(B * T * H * dim), 2);
    Vec out((size_t)(B * T * H * dim)), dx = rnd((size_t)(B * T * H * dim), 3);
    D<float> X(x), Cs(cos), Sn(sin), O(B * T * H * dim), Dd(d), DX(dx);
    L::rope_forward(out.data(), x.data(), cos.data(), sin.data(), B, T, pos0, H, dim);
    L::cuda::rope_forward(O.p, X.p, Cs.p, Sn.p, B, T, pos0, H, dim);
    CHECK(close_rel(O.host(), out, 1e-6, "rope out"), "forward");
    L::cuda::rope_forward(X.p, X.p, Cs.p, Sn.p, B, T, pos0, H, dim);  // in place
    CHECK(close_rel(X.host(), out, 1e-6, "rope in place"), "in place");
    L::rope_backward(dx.data(), d.data(), cos.data(), sin.data(), B, T, pos0, H, dim);
    L::cuda::rope_backward(DX.p, Dd.p, Cs.p, Sn.p, B, T, pos0, H, dim);
    CHECK(close_rel(DX.host(), dx, 1e-6, "rope dx"), "backward");
}

GPU_TEST(cuda_swiglu_matches_cpu) {
    for (int64_t n : {1, 1000, 65537}) {
        const Vec g = rnd((size_t)n, 1, 6.0f), u = rnd((size_t)n, 2), d = rnd((size_t)n, 3);
        Vec out((size_t)n), dg = rnd((size_t)n, 4), du = rnd((size_t)n, 5);
        D<float> G(g), U(u), Dd(d), O(n), DG(dg), DU(du);
        L::swiglu_forward(out.data(), g.data(), u.data(), n);
        L::cuda::swiglu_forward(O.p, G.p, U.p, n);
        CHECK(close_rel(O.host(), out, 2e-6, "swiglu out"), "n=%lld", (long long)n);
        L::swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), n);
        L::cuda::swiglu_backward(DG.p, DU.p, Dd.p, G.p, U.p, n);
        CHECK(close_rel(DG.host(), dg, 2e-6, "swiglu dgate") && close_rel(DU.host(), du, 2e-6, "swiglu dup"), "n=%lld",
              (long long)n);
    }
}

GPU_TEST(cuda_gqa_attention_matches_cpu) {
    struct S {
        int64_t B, T, NH, NKV, hs;
    };
    for (const S & c : {S{2, 37, 4, 2, 16}, S{1, 70, 9, 3, 64}, S{3, 5, 4, 1, 8}, S{1, 33, 2, 2, 40}}) {
        const int64_t NQ = c.B * c.T * c.NH * c.hs, NK = c.B * c.T * c.NKV * c.hs, NA = c.B * c.NH * c.T * c.T;
        const Vec q = rnd((size_t)NQ, 1), k = rnd((size_t)NK, 2), v = rnd((size_t)NK, 3), d = rnd((size_t)NQ, 4);
        Vec out((size_t)NQ), att((size_t)NA), dq = rnd((size_t)NQ, 5), dk = rnd((size_t)NK, 6), dv = rnd((size_t)NK, 7);
        D<float> Q(q), K(k), Vd(v), Dd(d), O(NQ), A(NA), DQ(dq), DK(dk), DV(dv), Sc(NA);
        L::attention_gqa_forward(out.data(), att.data(), q.data(), k.data(), v.data(), c.B, c.T, c.NH, c.NKV, c.hs);
        L::cuda::attention_gqa_forward(O.p, A.p, Q.p, K.p, Vd.p, c.B, c.T, c.NH, c.NKV, c.hs);
        CHECK(close_rel(O.host(), out, 1e-5, "gqa out") && close_rel(A.host(), att, 1e-5, "gqa att"),
              "T=%lld NH=%lld NKV=%lld", (long long)c.T, (long long)c.NH, (long long)c.NKV);
        L::attention_gqa_backward(dq.data(), dk.data(), dv.data(), d.data(), q.data(), k.data(), v.data(), att.data(),
                                  c.B, c.T, c.NH, c.NKV, c.hs);
        L::cuda::attention_gqa_backward(DQ.p, DK.p, DV.p, Dd.p, Q.p, K.p, Vd.p, A.p, c.B, c.T, c.NH, c.NKV, c.hs, Sc.p);
        CHECK(close_rel(DQ.host(), dq, 2e-5, "gqa dq") && close_rel(DK.host(), dk, 2e-5, "gqa dk") &&
                  close_rel(DV.host(), dv, 2e-5, "gqa dv"),
              "T=%lld NH=%lld NKV=%lld", (long long)c.T, (long long)c.NH, (long long)c.NKV);
    }
}

GPU_TEST(cuda_decoder_row_ops_match_their_emulation) {
    using E = maporl::llama::HostDevice;
    using namespace row_ops_check;
    const int64_t C = 32, V = 11;
    const Case c;
    const std::vector<int32_t> tok = {3, 10, 0, 3, 7};
    D<int32_t> TK(tok);
    // The rotation within 1e-6 (rope.cu keeps contraction), the store bit for bit of the GPU's own keys.
    const Result r = check_rope_rows_and_kv_store(
        c,
        [](Vec & x, const Vec & cs, const Vec & sn, const IVec & pos, int64_t N, int64_t H, int64_t hd) {
            D<float> X(x), Cs(cs), Sn(sn);
            D<int32_t> P(pos);
            L::cuda::rope_rows(X.p, Cs.p, Sn.p, P.p, N, H, hd);
            x = X.host();
        },
        [](Vec & kc, Vec & vc, const Vec & k, const Vec & v, const IVec & rb, const IVec & rt, int64_t N, int64_t NKV,
           int64_t max_len, int64_t hd) {
            D<float> KC(kc), VC(vc), K(k), Vv(v);
            D<int32_t> RB(rb), RT(rt);
            L::cuda::kv_store(KC.p, VC.p, K.p, Vv.p, RB.p, RT.p, N, NKV, max_len, hd);
            kc = KC.host();
            vc = VC.host();
        },
        "cuda");
    std::printf("  rope_rows: %lld of %zu rotated keys differ from the emulation's in their last bits (contraction)\n",
                (long long)r.keys_differ, r.kd.size());
    // Attention over the GPU's own rotated queries and cache, on both sides.
    const int64_t N = c.N, NH = c.NH, NKV = c.NKV, hd = c.hd, max_len = c.max_len;
    Vec oute((size_t)(N * NH * hd)), se((size_t)(N * NH * max_len));
    D<float> Q(r.qd), KC(r.kcd), VC(r.vcd), O(N * NH * hd), S(N * NH * max_len);
    D<int32_t> RB(c.rb), RT(c.rt);
    E::attention_rows(oute.data(), r.qd.data(), r.kcd.data(), r.vcd.data(), c.rb.data(), c.rt.data(), N, NH, NKV,
                      max_len, hd, se.data());
    L::cuda::attention_rows(O.p, Q.p, KC.p, VC.p, RB.p, RT.p, N, NH, NKV, max_len, hd, S.p);
    CHECK(close_rel(O.host(), oute, 1e-5, "attention_rows"), "attention_rows");
    const Vec wte = rnd((size_t)(V * C), 6), d = rnd((size_t)(N * C), 7);
    Vec emb((size_t)(N * C)), dw = rnd((size_t)(V * C), 8);
    D<float> W(wte), E1(N * C), Dd(d), DW(dw);
    E::embedding_forward(emb.data(), tok.data(), wte.data(), N, C);
    L::cuda::embedding_forward(E1.p, TK.p, W.p, N, C);
    CHECK(E1.host() == emb, "embedding_forward");
    E::embedding_backward(dw.data(), d.data(), tok.data(), N, C);
    L::cuda::embedding_backward(DW.p, Dd.p, tok.data(), N, C);
    CHECK(DW.host() == dw, "embedding_backward (the CPU model's order: the same bits)");
}

// The CUDA instantiation's bytes by kind are device_plan's (llama_device_memory.h), for LoRA training and for the base's.
GPU_TEST(cuda_llama_model_memory_is_the_plan) {
    using namespace llama_variants;
    for (const Variant & var : variants())
        for (bool lora : {true, false}) {
            const L::Config c = decoder_config(var);
            L::Model<float> host(c);
            perturb(host, 3);
            L::DevicePlan w;
            w.B = 2, w.T = 7, w.backward = true, w.head_rows = 5;
            const int64_t N = w.B * w.T, V = c.vocab;
            w.norm_scratch =
                std::max({L::cuda::rmsnorm_scratch(N, c.d_model), L::cuda::rmsnorm_scratch(N * c.heads, c.head_dim),
                          L::cuda::rmsnorm_scratch(N * c.kv_heads, c.head_dim)});
            if (lora) {
                L::LoraConfig a;
                a.rank = 3;
                host.active = host.lora_add(a, 9);
                w.lora_rank = a.rank, w.lora_targets = a.targets;
            } else {
                w.train_base = true;
            }
            std::unique_ptr<L::DeviceModel> dev(L::cuda_model_create(c, &host));
            dev->upload(0, host.params.data(), host.layout.total);
            std::vector<int32_t> tok((size_t)N);
            for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((3 * i + 1) % V);
            const Vec dlog = rnd((size_t)(N * V), 5), dval = rnd((size_t)N, 6);
            Vec z((size_t)(5 * V));
            dev->forward(tok.data(), w.B, w.T, false, nullptr, nullptr);
            dev->backward_begin();
            for (int64_t n0 = 0; n0 < N; n0 += 5) {
                dev->head_rows(z.data(), n0, std::min<int64_t>(5, N - n0));
                dev->head_backward_rows(dlog.data() + n0 * V, n0, std::min<int64_t>(5, N - n0));
            }
            dev->backward_hidden(dval.data());
            if (!lora) dev->update(maporl::gpt::AdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f}, 1.0, 1);
            const L::DeviceBytes got = dev->memory(), want = L::device_plan(c, L::make_layout(c), w);
            CHECK(got.weights == want.weights && got.adapters == want.adapters && got.gradients == want.gradients &&
                      got.moments == want.moments && got.activations == want.activations && got.cache == want.cache,
                  "%s lora=%d: bytes by kind: activations %lld / %lld, gradients %lld / %lld, total %lld / %lld",
                  var.name, (int)lora, (long long)got.activations, (long long)want.activations,
                  (long long)got.gradients, (long long)want.gradients, (long long)got.total(), (long long)want.total());
        }
}

GPU_TEST(cuda_llama_model_matches_the_cpu_model) {
    using namespace llama_variants;
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c);
        perturb(host, 11);
        std::unique_ptr<L::DeviceModel> dev(L::cuda_model_create(c, nullptr));
        dev->upload(0, host.params.data(), host.layout.total);
        const int64_t B = 2, T = 9, N = B * T, V = c.vocab, P = host.layout.total;
        std::vector<int32_t> tok((size_t)N);
        for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((7 * i + 3) % V);
        const Vec dlogits = rnd((size_t)(N * V), 1), dvalues = rnd((size_t)N, 2);
        const maporl::gpt::AdamW h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f};
        for (int step = 1; step <= 2; ++step) {
            host.forward(tok.data(), B, T);
            Vec logits((size_t)(N * V)), values((size_t)N), got((size_t)P);
            dev->forward(tok.data(), B, T, true, logits.data(), values.data());
            CHECK(close_rel(logits, host.logits, 1e-4, "logits") && close_rel(values, host.values, 1e-4, "values"),
                  "%s step %d forward", var.name, step);
            host.zero_grad();
            host.backward(dlogits.data(), dvalues.data());
            dev->zero_grad();
            dev->backward(dlogits.data(), dvalues.data());
            dev->download(3, got.data(), P);
            CHECK(close_rel(got, host.grads, 1e-3, "grads"), "%s step %d gradients", var.name, step);
            const double hn = host.update(h, 0.5), dn = dev->update(h, 0.5, host.step);
            CHECK(std::fabs(hn - dn) <= 1e-4 * hn, "%s step %d: norm %g vs %g", var.name, step, hn, dn);
            dev->download(0, got.data(), P);
            CHECK(close_rel(got, host.params, 1e-4, "params"), "%s step %d AdamW", var.name, step);
        }
        const std::vector<int32_t> flat = {3, 0, 0, 1, 4, 1, 9, 2, 6};
        const std::vector<int64_t> lens = {0, 2, 3};
        std::vector<int64_t> pos = lens;
        std::vector<int32_t> cur = {3, 5, 5};
        host.cache_reset(3, c.context);
        dev->cache_reset(3, c.context);
        host.prefill(flat.data(), lens.data(), 3);
        dev->prefill(flat.data(), lens.data(), 3);
        for (int s = 0; s < 4; ++s) {
            host.decode_rows(cur.data(), pos.data());
            Vec logits((size_t)(3 * V)), values(3);
            dev->decode_rows(cur.data(), pos.data(), logits.data(), values.data());
            CHECK(close_rel(logits, host.step_logits, 1e-4, "decode logits") &&
                      close_rel(values, host.step_values, 1e-4, "decode values"),
                  "%s decode step %d", var.name, s);
            for (int64_t b = 0; b < 3; ++b) cur[(size_t)b] = (int32_t)((cur[(size_t)b] + 4) % V), ++pos[(size_t)b];
        }
    }
}

GPU_TEST(cuda_llama_lora_adapters_match_the_cpu_model) {
    using namespace llama_variants;
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c), twin(c);
        perturb(host, 21);
        perturb(twin, 21);
        std::unique_ptr<L::DeviceModel> dev(L::cuda_model_create(c, &twin));
        dev->upload(0, twin.params.data(), twin.layout.total);
        L::LoraConfig a;
        a.rank = 3;
        a.alpha = 6;
        for (L::Model<float> * m : {&host, &twin}) {
            m->lora_add(a, 5);
            m->lora_add(a, 6);
            for (auto & ad : m->adapters) {
                for (size_t i = 0; i < ad->params.size(); ++i) ad->params[i] += 0.3f * std::sin((float)i);
                ad->weights_changed();
            }
            m->active = 0;
        }
        const int64_t B = 2, T = 7, N = B * T, V = c.vocab;
        std::vector<int32_t> tok((size_t)N);
        for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((5 * i + 2) % V);
        const Vec dlogits = rnd((size_t)(N * V), 1), dvalues = rnd((size_t)N, 2);
        host.forward(tok.data(), B, T);
        Vec logits((size_t)(N * V)), values((size_t)N);
        dev->forward(tok.data(), B, T, true, logits.data(), values.data());
        CHECK(
            close_rel(logits, host.logits, 1e-4, "lora logits") && close_rel(values, host.values, 1e-4, "lora values"),
            "%s forward", var.name);
        host.zero_grad();
        host.backward(dlogits.data(), dvalues.data());
        dev->zero_grad();
        dev->backward(dlogits.data(), dvalues.data());
        dev->pull_adapter_grads();
        CHECK(close_rel(twin.adapters[0]->grads, host.adapters[0]->grads, 1e-3, "lora grads"), "%s adapter gradients",
              var.name);
        host.active = twin.active = -1;
        host.cache_reset(3, c.context);
        dev->cache_reset(3, c.context);
        host.row_adapter = twin.row_adapter = {0, -1, 1};
        std::vector<int64_t> pos = {0, 0, 0};
        std::vector<int32_t> cur = {3, 5, 7};
        for (int s = 0; s < 3; ++s) {
            host.decode_rows(cur.data(), pos.data());
            dev->decode_rows(cur.data(), pos.data(), logits.data(), values.data());
            CHECK(close_rel(Vec(logits.begin(), logits.begin() + 3 * V), host.step_logits, 1e-4, "lora decode"),
                  "%s decode step %d", var.name, s);
            for (auto & p : pos) ++p;
        }
    }
}

// A frozen bfloat16 or int8 base on the device (llama_device_weights.h) against the CPU model holding the same base:
// the base's forward, and an adapter's forward and gradients. bfloat16: the float GEMM on the widened weights (1e-4,
// as float32's). int8: every W8A8 product is the CPU's bits for the same input (test_w8a8_cuda), but the inputs come
// from the device's norms and attention, and a value on the other side of a rounding step moves by a quantum of its
// block (max |x| / 127) before the weights: 1e-2 of the largest logit.
GPU_TEST(cuda_llama_frozen_base_matches_the_cpu_model) {
    using namespace llama_variants;
    for (bool int8 : {false, true})
        for (const Variant & var : variants()) {
            L::Config c = var.c;
            c.context = 12, c.d_model = 64, c.intermediate = 80, c.vocab = 13;
            (int8 ? c.int8 : c.bf16) = true;
            const double tol = int8 ? 1e-2 : 1e-4;
            L::Model<float> host(c), twin(c);
            host.init(31);
            twin.init(31);
            std::unique_ptr<L::DeviceModel> dev(L::cuda_model_create(c, &twin));
            dev->upload(0, twin.params.data(), twin.layout.total);
            dev->upload_frozen(twin.half.data(), (int64_t)twin.half.size(), twin.q8.data(), (int64_t)twin.q8.size(),
                               twin.q8d.data(), (int64_t)twin.q8d.size());
            const int64_t B = 2, T = 7, N = B * T, V = c.vocab;
            std::vector<int32_t> tok((size_t)N);
            for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((7 * i + 3) % V);
            Vec logits((size_t)(N * V)), values((size_t)N);
            host.forward(tok.data(), B, T);
            dev->forward(tok.data(), B, T, true, logits.data(), values.data());
            CHECK(close_rel(logits, host.logits, tol, "frozen logits"), "%s int8=%d: the base's forward", var.name,
                  (int)int8);
            L::LoraConfig a;
            a.rank = 4;
            for (L::Model<float> * m : {&host, &twin}) {
                m->active = m->lora_add(a, 5);
                for (size_t i = 0; i < m->adapters[0]->params.size(); ++i)
                    m->adapters[0]->params[i] += 0.2f * std::sin((float)i);
                m->adapters[0]->weights_changed();
            }
            const Vec dlogits = rnd((size_t)(N * V), 1), dvalues = rnd((size_t)N, 2);
            host.forward(tok.data(), B, T);
            dev->forward(tok.data(), B, T, true, logits.data(), values.data());
            host.zero_grad();
            host.backward(dlogits.data(), dvalues.data());
            dev->zero_grad();
            dev->backward(dlogits.data(), dvalues.data());
            dev->pull_adapter_grads();
            CHECK(close_rel(logits, host.logits, tol, "adapter logits") &&
                      close_rel(twin.adapters[0]->grads, host.adapters[0]->grads, int8 ? 3e-2 : 1e-3, "adapter grads"),
                  "%s int8=%d: an adapter on the frozen base", var.name, (int)int8);
        }
}

// `--bench` (scripts/device-check.sh): the SmolLM2-135M shape of `npx maporl bench llama` (random weights) on the
// device: a full fine-tuning step at B=4, T=256 through the scoring path's pieces (forward without the head, the
// head's logits to the host and their gradient back in 256-row chunks, the rest of the backward, AdamW), and KV-cache
// decoding at batch 1 and 8 (64 steps after a 64-token prefill), tokens/s.
void decode_bench(L::DeviceModel & dev, const char * dtype, int64_t batch, int64_t V);

void bench() {
    if (gpu_check::devices() == 0) {
        std::printf("llama bench (CUDA): no device\n");
        return;
    }
    L::Config c;
    c.vocab = 49152;
    c.context = 512;
    c.layers = 30;
    c.d_model = 576;
    c.heads = 9;
    c.kv_heads = 3;
    c.head_dim = 64;
    c.intermediate = 1536;
    c.rms_eps = 1e-5;
    c.rope_theta = 10000;
    c.tie_embeddings = true;
    L::Model<float> host(c);
    host.init(1);
    std::unique_ptr<L::DeviceModel> dev(L::cuda_model_create(c, nullptr));
    dev->upload(0, host.params.data(), host.layout.total);
    const int64_t B = 4, T = 256, N = B * T, V = c.vocab, R = 256;
    std::vector<int32_t> tok((size_t)N);
    for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((i * 7919) % V);
    Vec z((size_t)(R * V)), dv((size_t)N, 0.0f);
    const maporl::gpt::AdamW h{1e-5f, 0.9f, 0.95f, 1e-8f, 0.0f};
    int64_t t = 0;
    const double step_ms = gpu_check::median_ms(
        [&] {
            dev->zero_grad();
            dev->forward(tok.data(), B, T, false, nullptr, nullptr);
            dev->backward_begin();
            for (int64_t n0 = 0; n0 < N; n0 += R) {
                dev->head_rows(z.data(), n0, R);
                for (float & x : z) x *= 1e-6f;  // (a stand-in gradient of the chunk's logits)
                dev->head_backward_rows(z.data(), n0, R);
            }
            dev->backward_hidden(dv.data());
            dev->update(h, 1.0, ++t);
        },
        3);
    std::printf("llama bench (CUDA, SmolLM2-135M shape): full fine-tuning step B=4 T=256 %.1f ms = %.0f tokens/s\n",
                step_ms, (double)N / step_ms * 1e3);
    for (int64_t batch : {1, 8}) decode_bench(*dev, "float32", batch, V);
    for (bool int8 : {false, true}) {  // the same model with its matrices bfloat16 / int8 (frozen: generation only)
        L::Config q = c;
        (int8 ? q.int8 : q.bf16) = true;
        L::Model<float> qh(q);
        qh.init(1);
        std::unique_ptr<L::DeviceModel> qd(L::cuda_model_create(q, nullptr));
        qd->upload(0, qh.params.data(), qh.layout.total);
        qd->upload_frozen(qh.half.data(), (int64_t)qh.half.size(), qh.q8.data(), (int64_t)qh.q8.size(), qh.q8d.data(),
                          (int64_t)qh.q8d.size());
        for (int64_t batch : {1, 8}) decode_bench(*qd, int8 ? "int8" : "bfloat16", batch, V);
    }
}

// KV-cache decoding of `dev` at `batch` rows: 64-token prompts, 64 new tokens each.
void decode_bench(L::DeviceModel & dev, const char * dtype, int64_t batch, int64_t V) {
    {
        Vec logits((size_t)(batch * V));
        std::vector<int32_t> prompt((size_t)(batch * 64)), cur((size_t)batch, 5);
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = (int32_t)((i * 31) % V);
        const std::vector<int64_t> lens((size_t)batch, 63);
        const double ms = gpu_check::median_ms(
            [&] {
                dev.cache_reset(batch, 128);
                dev.prefill(prompt.data(), lens.data(), 64);
                std::vector<int64_t> pos((size_t)batch, 63);
                for (int s = 0; s < 64; ++s) {
                    dev.decode_rows(cur.data(), pos.data(), logits.data(), nullptr);
                    for (auto & p : pos) ++p;
                }
            },
            3);
        std::printf(
            "llama bench (CUDA, SmolLM2-135M shape, %s base): generate B=%lld, 64-token prompts, 64 new: %.1f ms = "
            "%.0f tokens/s\n",
            dtype, (long long)batch, ms, (double)(batch * 64) / ms * 1e3);
    }
}

#else

void bench() {}

#endif

}  // namespace

int main(int argc, char ** argv) { return gpu_check::run("test_llama_cuda", "CUDA-vs-CPU", argc, argv, bench); }
