// llama_device.h: the Llama model of llama.h on a device, written once over an op table D and driven through the
// DeviceModel interface (model_api.cpp, model_scores.cpp). cuda/model/llama.cu instantiates it with the CUDA ops
// (llama_cuda.h, gpt_cuda.h); llama_device_host.h instantiates it with the CPU ops and CPU emulations of the
// device-only kernels, so that the composition (the order of the ops, the buffers, the caches, the gradients) is
// checked against llama::Model on any machine (test_llama_device.cpp, and through the C entry points with
// maporl_llama_emulate_device), and the CUDA kernels one by one where a GPU is (test_llama_cuda.cpp).
// Parameters, gradients and AdamW moments live on the device in llama.h's layout (the same offsets, so get / set
// copy whole vectors); tokens, logits and their gradients cross to the host, in row chunks for the LM head (a
// vocabulary of 151,936 never needs [B, T, V] at once). The base in float32, or frozen in bfloat16 or int8
// (llama_device_weights.h: the CPU model's storage, uploaded as it is). LoRA adapters (lora.h) stay owned by the
// host model (`host`): their parameters and AdamW moments live there (a few MB), a device copy of each adapter's
// A, B and value head is refreshed when the host's changes (Lora::version), the adapter's gradients accumulate on
// the device and come back for the optimizer step (pull_adapter_grads). The selected adapter (host->active) trains
// with the base frozen; a decode step runs each row's adapter (host->row_adapter), every adapter's term over the
// batch, added to its own rows.
//
// D provides static functions on device pointers (every backward ADDS into its gradients, as the CPU ops):
//   alloc(bytes) / release(p) / to_device(dst, src, bytes) / to_host(dst, src, bytes) / zero(p, bytes)
//   rmsnorm_forward, rmsnorm_scratch, rmsnorm_backward(..., scratch), rope_forward, rope_backward, swiglu_forward,
//   swiglu_backward, attention_gqa_forward, attention_gqa_backward(..., scratch) (the shapes of llama_cuda.h),
//   matmul_forward / matmul_backward (gpt_ops.h's), add(out, a, b, n),
//   embedding_forward(out, tokens, wte, N, C), embedding_backward(dwte, dout, host_tokens, N, C),
//   rope_rows(x, cos, sin, pos, N, H, dim): row n rotated in place at position pos[n],
//   kv_store(kc, vc, k, v, rb, rt, N, NKV, max_len, hd): row n's keys / values into cache row rb[n], slot rt[n],
//   attention_rows(out, q, kc, vc, rb, rt, N, NH, NKV, max_len, hd, scratch): row n over slots 0 .. rt[n],
//   adamw(params, grads, m, v, n, h, t, scale), global_norm(x, n) (double),
//   scale(x, s, n): x *= s; add_rows(out, d, mask, N, C): out rows += d rows where mask[n] != 0.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "native/core/core.h"
#include "native/model/llama.h"
#include "native/model/llama_device_memory.h"
#include "native/model/llama_device_weights.h"

namespace maporl {
namespace llama {

// What the C entry points drive on a Llama model that lives on a device. Shapes and errors as llama::Model's.
struct DeviceModel {
    virtual ~DeviceModel() = default;
    // which: 0 params, 1 m, 2 v, 3 grads; n must be the parameter count.
    virtual void upload(int which, const float * host, int64_t n) = 0;
    virtual void download(int which, float * host, int64_t n) const = 0;
    // tokens [B, T] (host); logits [B, T, V] (head only) and values [B, T] to the host when not null.
    virtual void forward(const int32_t * tokens, int64_t B, int64_t T, bool head, float * logits, float * values) = 0;
    // out [rows, V] (host) = the logits of rows n0 .. n0 + rows of the last forward.
    virtual void head_rows(float * out, int64_t n0, int64_t rows) = 0;
    // A backward: begin, the LM head's gradient of any row chunks (dlogits on the host), then the rest of the model
    // (dvalues [B*T] on the host or null). backward() is all three over every row.
    virtual void backward_begin() = 0;
    virtual void head_backward_rows(const float * dlogits, int64_t n0, int64_t rows) = 0;
    virtual void backward_hidden(const float * dvalues) = 0;
    virtual void backward(const float * dlogits, const float * dvalues) = 0;
    virtual void zero_grad() = 0;
    // Global-norm clip (max_norm <= 0: none) and one AdamW step with step counter t >= 1; the norm before clipping.
    virtual double update(const gpt::AdamW & h, double max_norm, int64_t t) = 0;
    virtual void cache_reset(int64_t batch, int64_t max_len) = 0;
    // Row b at position pos[b]; logits [batch, V] and values [batch] to the host when not null.
    virtual void decode_rows(const int32_t * tokens, const int64_t * pos, float * logits, float * values) = 0;
    virtual void prefill(const int32_t * tokens, const int64_t * lens, int64_t P) = 0;
    // The selected adapter's gradients accumulated on the device, into the host adapter's grads (for its step).
    virtual void pull_adapter_grads() = 0;
    // A frozen base's matrices (bf16 / int8: llama.h's frozen_layout), from the host model's arrays.
    virtual void upload_frozen(const uint16_t * half, int64_t nh, const uint8_t * q8, int64_t nq, const uint16_t * q8d,
                               int64_t nd) = 0;
    // Host adapter slot id was removed: its device copy (parameters, gradients, kept activations) is freed.
    virtual void lora_removed(int64_t id) = 0;
    // The bytes held on the device now, by kind (llama_device_memory.h).
    virtual DeviceBytes memory() const = 0;
};

template <class D>
struct DeviceLlama : DeviceModel {
    using Buf = DevBuf<D>;
    using IBuf = DevBuf<D, int32_t>;
    Config cfg;
    Layout layout;
    DeviceWeights<D> W;   // the frozen matrices of a bfloat16 / int8 base (and the products of every matrix)
    Model<float> * host;  // the adapters' owner (null: none)
    // grads: allocated by the first backward or update of the base (or an upload of them); m, v: by the first update
    // (or an upload). Generation and LoRA training (the base frozen) never allocate them.
    Buf params, grads, m, v, cos, sin;

    // The device copy of host adapter slot i: its params (refreshed on a new version), gradients, and the last
    // training forward's u = scale x A^T per (layer, target).
    struct Mirror {
        const Lora<float> * src = nullptr;
        uint64_t version = ~(uint64_t)0;
        Buf params, grads;
        std::vector<std::array<Buf, kLoraTargets>> us;
    };
    std::vector<Mirror> mirrors;
    int64_t fwd_adapter = -1;  // the adapter the last forward ran (its backward must run the same)
    Buf lora_tmp, lora_du;
    IBuf row_mask;

    int64_t B = 0, T = 0;  // the last forward's shape (0: none to go back through)
    std::vector<int32_t> host_tokens;
    IBuf tokens;
    Buf embedded, lnf, lnf_rstd, values, head_out;
    struct Acts {
        Buf xn1, rstd1, q, k, qn, kn, qrstd, krstd, qr, kr, v, att, y, res2, xn2, rstd2, gate, up, hmid, res3;
    };
    std::vector<Acts> acts;
    // When the layers' probabilities do not all fit (an allocation of one fails), the forward keeps one buffer for
    // every layer's in turn and the backward recomputes each layer's attention forward before its backward (the
    // same kernels and inputs: the same bits). att_recompute_n: the smallest B x heads x T^2 that failed (0: none);
    // a forward at least that large recomputes from the start, a smaller one tries every layer's buffer again.
    Buf att_shared;
    bool att_recompute = false;
    int64_t att_recompute_n = 0;
    Buf dlnf, dres, dh, dgate, dup, dxn, dy, dqr, dkr, dv, dqn, dkn, dq, dk, scratch, dvalues, dlogits;
    bool dlnf_open = false;

    int64_t cache_batch = 0, cache_len = 0;
    Buf kcache, vcache;  // [L, batch, NKV, max_len, head_dim]
    Buf sx, sxn, srs, sq, sk, sv, sy, sproj, sgate, sup, shmid, sscores;
    IBuf srb, srt, stok;

    explicit DeviceLlama(const Config & c, Model<float> * host_model = nullptr)
        : cfg(c), layout(make_layout(c)), W(cfg, layout), host(host_model) {
        params.zeroed(layout.total);
        std::vector<float> hc, hs;
        rope_tables(hc, hs, rope_inv_freq(c.head_dim, c.rope_theta, c.rope), c.context);
        D::to_device(cos.need((int64_t)hc.size()), hc.data(), (int64_t)(hc.size() * sizeof(float)));
        D::to_device(sin.need((int64_t)hs.size()), hs.data(), (int64_t)(hs.size() * sizeof(float)));
    }
    // The adapter in slot id, its device copy current.
    Mirror & mirror(int64_t id) {
        const Lora<float> * a = host->adapters[(size_t)id].get();
        if ((int64_t)mirrors.size() <= id) mirrors.resize((size_t)id + 1);
        Mirror & mr = mirrors[(size_t)id];
        if (mr.src != a) {  // a new adapter in the slot (or the first use)
            mr.src = a;
            mr.version = ~(uint64_t)0;
            mr.grads.zeroed(a->layout.total);
            mr.us = std::vector<std::array<Buf, kLoraTargets>>((size_t)cfg.layers);
        }
        if (mr.version != a->version) {
            D::to_device(mr.params.need(a->layout.total), a->params.data(), a->layout.total * (int64_t)sizeof(float));
            mr.version = a->version;
        }
        return mr;
    }
    Lora<float> * selected() const { return host ? host->lora() : nullptr; }
    static float * at(const Buf & b, const Lora<float> & a, int64_t t) {
        return b.p + a.layout.tensors[(size_t)t].offset;
    }
    // out [N, OC] += the adapter's term for (layer l, target t) on inp [N, Cin]; with keep, u is kept for the backward.
    void lora_term(Mirror & mr, const Lora<float> & a, int64_t l, int t, float * out, const float * inp, int64_t N,
                   bool keep, const int32_t * mask = nullptr) {
        const int64_t Cin = a.in_dim(t), OC = a.out_dim(t), r = a.cfg.rank;
        Buf & ub = keep ? mr.us[(size_t)l][(size_t)t] : lora_du;
        float * u = ub.need(N * r);
        D::matmul_forward(u, inp, at(mr.params, a, a.layout.A[(size_t)l][(size_t)t]), nullptr, N, Cin, r);
        D::scale(u, a.scale, N * r);
        float * d = lora_tmp.need(N * OC);
        D::matmul_forward(d, u, at(mr.params, a, a.layout.B[(size_t)l][(size_t)t]), nullptr, N, r, OC);
        if (mask)
            D::add_rows(out, d, mask, N, OC);
        else
            D::add(out, out, d, N * OC);
    }
    // dinp [N, Cin] += the term's input gradient; the adapter's A and B gradients += (from the kept u).
    void lora_term_back(Mirror & mr, const Lora<float> & a, int64_t l, int t, float * dinp, const float * dout,
                        const float * inp, int64_t N) {
        const int64_t Cin = a.in_dim(t), OC = a.out_dim(t), r = a.cfg.rank, ia = a.layout.A[(size_t)l][(size_t)t],
                      ib = a.layout.B[(size_t)l][(size_t)t];
        float * du = lora_du.zeroed(N * r);
        D::matmul_backward(du, at(mr.grads, a, ib), nullptr, dout, mr.us[(size_t)l][(size_t)t].p, at(mr.params, a, ib),
                           N, r, OC);
        D::scale(du, a.scale, N * r);
        D::matmul_backward(dinp, at(mr.grads, a, ia), nullptr, du, inp, at(mr.params, a, ia), N, Cin, r);
    }
    void pull_adapter_grads() override {
        Lora<float> * a = selected();
        if (!a) throw_error(MAPORL_ERR_INVALID_ARG, "pull_adapter_grads: no adapter is selected");
        a->ensure_train_state();
        Mirror & mr = mirror(host->active);
        D::to_host(a->grads.data(), mr.grads.p, a->layout.total * (int64_t)sizeof(float));
    }
    float * p(int64_t t) const { return params.p + layout.tensors[(size_t)t].offset; }
    // A matrix's float values, or null for a frozen one (W holds it).
    const float * fp(int64_t t) const { return layout.tensors[(size_t)t].offset >= 0 ? p(t) : nullptr; }
    // out = inp @ W_t^T (+ tensor b's bias, b >= 0) for base matrix t, and its backward (dw, db: null when frozen).
    void lin(float * out, const float * inp, int64_t t, int64_t b, int64_t N, int64_t Cin, int64_t OC) {
        W.lin(out, inp, t, fp(t), bias(b), N, Cin, OC);
    }
    void lin_back(float * dinp, float * dw, float * db, const float * dout, const float * inp, int64_t t, int64_t N,
                  int64_t Cin, int64_t OC) {
        W.lin_back(dinp, dw, db, dout, inp, t, fp(t), N, Cin, OC);
    }
    void upload_frozen(const uint16_t * h16, int64_t nh, const uint8_t * pq, int64_t nq, const uint16_t * pd,
                       int64_t nd) override {
        W.upload(h16, nh, pq, nq, pd, nd);
    }
    // The base trains (no adapter selected): refused for a frozen base, naming the way out (as the CPU model does).
    void require_trainable_base(const char * what) const {
        if (W.frozen())
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "%s: the base's matrices are %s and frozen: train a LoRA adapter on it, or load the model in "
                        "float32",
                        what, W.dtype());
    }
    float * g(int64_t t) const { return grads.p + layout.tensors[(size_t)t].offset; }
    const float * bias(int64_t t) const { return t >= 0 ? p(t) : nullptr; }
    float * gbias(int64_t t) const { return t >= 0 ? g(t) : nullptr; }

    Buf & which_buf(int which, int64_t n) {
        if (n != layout.total)
            throw_error(MAPORL_ERR_INVALID_ARG, "count: expected %lld (the parameter count), got %lld",
                        (long long)layout.total, (long long)n);
        if (which < 0 || which > 3) throw_error(MAPORL_ERR_INVALID_ARG, "which: expected 0..3, got %d", which);
        Buf * bs[4] = {&params, &m, &v, &grads};
        return *bs[which];
    }
    void upload(int which, const float * host, int64_t n) override {
        Buf & b = which_buf(which, n);
        D::to_device(b.need(n), host, n * (int64_t)sizeof(float));
    }
    // Gradients or moments never allocated are zeros (the CPU model's state before its first training call).
    void download(int which, float * host, int64_t n) const override {
        const Buf & b = const_cast<DeviceLlama *>(this)->which_buf(which, n);
        if (b.cap < n)
            std::fill(host, host + n, 0.0f);
        else
            D::to_host(host, b.p, n * (int64_t)sizeof(float));
    }
    bool base_grads() const { return grads.cap >= layout.total; }
    void ensure_grads() {
        require_trainable_base("training");
        if (!base_grads()) grads.zeroed(layout.total);
    }
    // Host adapter slot id left: its mirror's device memory goes with it (a later adapter in the slot starts afresh).
    void lora_removed(int64_t id) override {
        if (id >= 0 && (size_t)id < mirrors.size()) {
            Mirror & mr = mirrors[(size_t)id];
            mr.params.free();
            mr.grads.free();
            std::vector<std::array<Buf, kLoraTargets>>().swap(mr.us);
            mr.src = nullptr;
            mr.version = ~(uint64_t)0;
        }
        if (fwd_adapter == id) B = T = 0, fwd_adapter = -1;
    }
    DeviceBytes memory() const override;

    void forward(const int32_t * tok, int64_t B_, int64_t T_, bool head, float * logits_out,
                 float * values_out) override {
        if (T_ < 1 || T_ > cfg.context)
            throw_error(MAPORL_ERR_INVALID_ARG, "T: expected 1..%lld (context), got %lld", (long long)cfg.context,
                        (long long)T_);
        if (B_ < 1) throw_error(MAPORL_ERR_INVALID_ARG, "B: expected >= 1, got %lld", (long long)B_);
        check_tokens(tok, B_ * T_);
        B = T = 0;  // (a failure below leaves no forward to go back through)
        const int64_t N = B_ * T_, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd,
                      KC = NKV * hd, I = cfg.intermediate;
        Lora<float> * ad = selected();
        if (ad && host->training && ad->cfg.dropout > 0)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "lora.dropout: training with dropout runs on the CPU in this version (the adapter has %g; use "
                        "0 on the device)",
                        ad->cfg.dropout);
        Mirror * mr = ad ? &mirror(host->active) : nullptr;
        auto lo = [&](int64_t l, int t, float * out, const float * inp) {
            if (ad && ad->has(l, t)) lora_term(*mr, *ad, l, t, out, inp, N, true);
        };
        host_tokens.assign(tok, tok + N);
        D::to_device(tokens.need(N), tok, N * (int64_t)sizeof(int32_t));
        W.embed(embedded.need(N * C), tokens.p, fp(layout.embed), N, C);
        W.reserve(N, std::max({C, QC, I}));
        acts.resize((size_t)cfg.layers);
        const int64_t np = B_ * cfg.heads * T_ * T_;
        att_recompute = att_recompute_n > 0 && np >= att_recompute_n;
        if (att_recompute)
            for (Acts & a : acts) a.att.free();
        else
            att_shared.free();
        const float * x = embedded.p;
        for (int64_t l = 0; l < cfg.layers; ++l) {
            const auto & bl = layout.blocks[(size_t)l];
            Acts & a = acts[(size_t)l];
            D::rmsnorm_forward(a.xn1.need(N * C), a.rstd1.need(N), x, p(bl.in_norm), N, C, cfg.rms_eps);
            lin(a.q.need(N * QC), a.xn1.p, bl.q, bl.qb, N, C, QC);
            lin(a.k.need(N * KC), a.xn1.p, bl.k, bl.kb, N, C, KC);
            lin(a.v.need(N * KC), a.xn1.p, bl.v, bl.vb, N, C, KC);
            lo(l, kQ, a.q.p, a.xn1.p);
            lo(l, kK, a.k.p, a.xn1.p);
            lo(l, kV, a.v.p, a.xn1.p);
            const float *qpre = a.q.p, *kpre = a.k.p;
            if (cfg.qk_norm) {
                D::rmsnorm_forward(a.qn.need(N * QC), a.qrstd.need(N * NH), a.q.p, p(bl.q_norm), N * NH, hd,
                                   cfg.rms_eps);
                D::rmsnorm_forward(a.kn.need(N * KC), a.krstd.need(N * NKV), a.k.p, p(bl.k_norm), N * NKV, hd,
                                   cfg.rms_eps);
                qpre = a.qn.p;
                kpre = a.kn.p;
            }
            D::rope_forward(a.qr.need(N * QC), qpre, cos.p, sin.p, B_, T_, 0, NH, hd);
            D::rope_forward(a.kr.need(N * KC), kpre, cos.p, sin.p, B_, T_, 0, NKV, hd);
            D::attention_gqa_forward(a.y.need(N * QC), att_probs(a, B_, T_), a.qr.p, a.kr.p, a.v.p, B_, T_, NH, NKV,
                                     hd);
            lin(a.res2.need(N * C), a.y.p, bl.o, bl.ob, N, QC, C);
            lo(l, kO, a.res2.p, a.y.p);
            D::add(a.res2.p, a.res2.p, x, N * C);
            D::rmsnorm_forward(a.xn2.need(N * C), a.rstd2.need(N), a.res2.p, p(bl.post_norm), N, C, cfg.rms_eps);
            lin(a.gate.need(N * I), a.xn2.p, bl.gate, -1, N, C, I);
            lin(a.up.need(N * I), a.xn2.p, bl.up, -1, N, C, I);
            lo(l, kGate, a.gate.p, a.xn2.p);
            lo(l, kUp, a.up.p, a.xn2.p);
            D::swiglu_forward(a.hmid.need(N * I), a.gate.p, a.up.p, N * I);
            lin(a.res3.need(N * C), a.hmid.p, bl.down, -1, N, I, C);
            lo(l, kDown, a.res3.p, a.hmid.p);
            D::add(a.res3.p, a.res3.p, a.res2.p, N * C);
            x = a.res3.p;
        }
        D::rmsnorm_forward(lnf.need(N * C), lnf_rstd.need(N), x, p(layout.norm), N, C, cfg.rms_eps);
        if (ad)
            D::matmul_forward(values.need(N), lnf.p, at(mr->params, *ad, ad->layout.vw),
                              at(mr->params, *ad, ad->layout.vb), N, C, 1);
        else
            D::matmul_forward(values.need(N), lnf.p, p(layout.vw), p(layout.vb), N, C, 1);
        B = B_;
        T = T_;
        fwd_adapter = ad ? host->active : -1;
        if (values_out) D::to_host(values_out, values.p, N * (int64_t)sizeof(float));
        if (head && logits_out) head_rows(logits_out, 0, N);
    }

    // The attention probabilities kept for the backward: B x heads x T^2 floats a layer (attention_probs_bytes), or
    // one such buffer for all layers when theirs do not fit (att_recompute); out of memory for that one names it.
    float * att_probs(Acts & a, int64_t B_, int64_t T_) {
        const int64_t n = B_ * cfg.heads * T_ * T_;
        if (!att_recompute) {
            try {
                return a.att.need(n);
            } catch (const Error & e) {
                if (e.status != MAPORL_ERR_OUT_OF_MEMORY) throw;
                for (Acts & x : acts) x.att.free();  // (this forward's earlier layers: recomputed in the backward)
                att_recompute = true;
                att_recompute_n = att_recompute_n > 0 ? std::min(att_recompute_n, n) : n;
            }
        }
        try {
            return att_shared.need(n);
        } catch (const Error & e) {
            if (e.status != MAPORL_ERR_OUT_OF_MEMORY) throw;
            throw_error(MAPORL_ERR_OUT_OF_MEMORY,
                        "forward: the attention probabilities (B x heads x T^2 floats: B=%lld heads=%lld T=%lld, %lld "
                        "bytes, one layer's at a time and recomputed in the backward, as the %lld layers' together, "
                        "%lld bytes, did not fit) do not fit on the device: run fewer rows (B) or shorter sequences "
                        "(T) per call",
                        (long long)B_, (long long)cfg.heads, (long long)T_, (long long)(n * 4), (long long)cfg.layers,
                        (long long)attention_probs_bytes(cfg, B_, T_));
        }
    }
    void require_forward(const char * what) const {
        if (B == 0) throw_error(MAPORL_ERR_INVALID_ARG, "%s: no forward to go back through", what);
    }
    void require_rows(const char * what, int64_t n0, int64_t rows) const {
        require_forward(what);
        if (n0 < 0 || rows < 0 || n0 + rows > B * T)
            throw_error(MAPORL_ERR_INVALID_ARG, "%s: rows %lld..%lld of %lld", what, (long long)n0,
                        (long long)(n0 + rows), (long long)(B * T));
    }

    void head_rows(float * out, int64_t n0, int64_t rows) override {
        require_rows("head_rows", n0, rows);
        const int64_t C = cfg.d_model, V = cfg.vocab;
        lin(head_out.need(rows * V), lnf.p + n0 * C, layout.lm_head, -1, rows, C, V);
        D::to_host(out, head_out.p, rows * V * (int64_t)sizeof(float));
    }

    // The backward (llama_device_backward.h).
    void backward_begin() override;
    void reserve_backward();
    void head_backward_rows(const float * dlog, int64_t n0, int64_t rows) override;
    void backward(const float * dlog, const float * dval) override;
    void backward_hidden(const float * dval) override;

    void zero_grad() override {
        if (Lora<float> * a = selected()) {
            Mirror & mr = mirror(host->active);
            D::zero(mr.grads.p, a->layout.total * (int64_t)sizeof(float));
            return;
        }
        if (base_grads()) D::zero(grads.p, layout.total * (int64_t)sizeof(float));  // (none yet: nothing to zero)
    }

    // The base's step (an adapter's runs on the host: pull_adapter_grads, then its update there).
    double update(const gpt::AdamW & h, double max_norm, int64_t t) override {
        if (selected()) throw_error(MAPORL_ERR_INTERNAL, "update: an adapter is selected (its step runs on the host)");
        ensure_grads();  // (a frozen base: refused there)
        if (m.cap < layout.total ||
            v.cap < layout.total) {  // the moments of the first step, both allocated before either is kept
            Buf nm, nv;
            if (m.cap < layout.total) nm.zeroed(layout.total);
            if (v.cap < layout.total) nv.zeroed(layout.total);
            if (nm.p) std::swap(m.p, nm.p), std::swap(m.cap, nm.cap);
            if (nv.p) std::swap(v.p, nv.p), std::swap(v.cap, nv.cap);
        }
        const double norm = D::global_norm(grads.p, layout.total);
        const double scale = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
        D::adamw(params.p, grads.p, m.p, v.p, layout.total, h, t, (float)scale);
        return norm;
    }

    void cache_reset(int64_t batch, int64_t max_len) override;
    void decode_rows(const int32_t * tok, const int64_t * pos, float * logits_out, float * values_out) override;
    void prefill(const int32_t * tok, const int64_t * lens, int64_t P) override;

private:
    int64_t row_adapter(int64_t b) const {
        return host && (size_t)b < host->row_adapter.size() ? host->row_adapter[(size_t)b] : -1;
    }

    void check_tokens(const int32_t * tok, int64_t n) const {
        for (int64_t i = 0; i < n; ++i)
            if (tok[i] < 0 || tok[i] >= cfg.vocab)
                throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld",
                            (long long)cfg.vocab, (int)tok[i], (long long)i);
    }

    // The blocks over the rows (cache row rb[n] at position rt[n]) of tokens tok, leaving the residual stream in sx:
    // each layer writes the rows' keys and values into the cache, then every row attends over slots 0 .. rt[n].
    void step_rows(const int32_t * tok, const std::vector<int32_t> & rb, const std::vector<int32_t> & rt);
};

}  // namespace llama
}  // namespace maporl

#include "native/model/llama_device_backward.h"
#include "native/model/llama_device_decode.h"
