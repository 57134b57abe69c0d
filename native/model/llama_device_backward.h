// llama_device_backward.h: DeviceLlama's backward (llama_device.h, which includes this file): the LM head's gradient
// in row chunks, then the blocks in reverse, as llama::Model's backward adds them; every buffer it needs is allocated
// by backward_begin before any gradient is added (all or nothing under an out-of-memory error).
#pragma once

#include "native/model/llama_device.h"

namespace maporl {
namespace llama {

template <class D>
void DeviceLlama<D>::backward_begin() {
    require_forward("backward");
    if ((host ? host->active : -1) != fwd_adapter)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "backward: the selected adapter changed since the forward (run the forward again)");
    // Everything the backward allocates is allocated here, before any gradient is added: an out-of-memory error
    // leaves the gradients as they were, and the whole backward can be retried (all or nothing).
    reserve_backward();
    dlnf.zeroed(B * T * cfg.d_model);
    dlnf_open = true;
}

template <class D>
void DeviceLlama<D>::reserve_backward() {
    const int64_t N = B * T, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd,
                  KC = NKV * hd, I = cfg.intermediate;
    if (fwd_adapter < 0)
        ensure_grads();
    else {
        const Lora<float> & a = *host->adapters[(size_t)fwd_adapter];
        mirror(fwd_adapter);
        lora_du.need(N * a.cfg.rank);
    }
    dlnf.need(N * C);
    dres.need(N * C);
    dxn.need(N * C);
    dh.need(N * I);
    dgate.need(N * I);
    dup.need(N * I);
    dy.need(N * QC);
    dqr.need(N * QC);
    dqn.need(N * QC);
    dkr.need(N * KC);
    dv.need(N * KC);
    dkn.need(N * KC);
    if (cfg.qk_norm) dq.need(N * QC), dk.need(N * KC);
    dvalues.need(N);
    scratch.need(std::max(
        {B * NH * T * T, D::rmsnorm_scratch(N, C), D::rmsnorm_scratch(N * NH, hd), D::rmsnorm_scratch(N * NKV, hd)}));
}

template <class D>
void DeviceLlama<D>::head_backward_rows(const float * dlog, int64_t n0, int64_t rows) {
    require_rows("head_backward_rows", n0, rows);
    if (!dlnf_open) throw_error(MAPORL_ERR_INVALID_ARG, "head_backward_rows: call backward_begin first");
    const int64_t C = cfg.d_model, V = cfg.vocab;
    D::to_device(dlogits.need(rows * V), dlog, rows * V * (int64_t)sizeof(float));
    lin_back(dlnf.p + n0 * C, fwd_adapter >= 0 ? nullptr : g(layout.lm_head), nullptr, dlogits.p, lnf.p + n0 * C,
             layout.lm_head, rows, C, V);
}

template <class D>
void DeviceLlama<D>::backward(const float * dlog, const float * dval) {
    backward_begin();
    if (dlog) head_backward_rows(dlog, 0, B * T);
    backward_hidden(dval);
}

template <class D>
void DeviceLlama<D>::backward_hidden(const float * dval) {
    require_forward("backward");
    if (!dlnf_open) throw_error(MAPORL_ERR_INVALID_ARG, "backward: call backward_begin first");
    dlnf_open = false;
    const int64_t N = B * T, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd,
                  KC = NKV * hd, I = cfg.intermediate;
    // (reserve_backward allocated every buffer below: nothing here runs out of memory between gradient additions)
    // With an adapter, the base is frozen: no gradient for its tensors (the input gradients still flow).
    Lora<float> * ad = fwd_adapter >= 0 ? selected() : nullptr;
    Mirror * mr = ad ? &mirror(fwd_adapter) : nullptr;
    auto g = [&](int64_t t) { return ad ? (float *)nullptr : grads.p + layout.tensors[(size_t)t].offset; };
    auto gbias = [&](int64_t t) { return t >= 0 ? g(t) : (float *)nullptr; };
    auto lo = [&](int64_t l, int t, float * dinp, const float * dout, const float * inp) {
        if (ad && ad->has(l, t)) lora_term_back(*mr, *ad, l, t, dinp, dout, inp, N);
    };
    if (dval) {
        D::to_device(dvalues.need(N), dval, N * (int64_t)sizeof(float));
        if (ad)
            D::matmul_backward(dlnf.p, at(mr->grads, *ad, ad->layout.vw), at(mr->grads, *ad, ad->layout.vb), dvalues.p,
                               lnf.p, at(mr->params, *ad, ad->layout.vw), N, C, 1);
        else
            D::matmul_backward(dlnf.p, g(layout.vw), g(layout.vb), dvalues.p, lnf.p, p(layout.vw), N, C, 1);
    }
    D::rmsnorm_backward(dres.zeroed(N * C), g(layout.norm), dlnf.p, acts.back().res3.p, p(layout.norm), lnf_rstd.p, N,
                        C, scratch.p);
    for (int64_t l = cfg.layers - 1; l >= 0; --l) {
        const auto & bl = layout.blocks[(size_t)l];
        Acts & a = acts[(size_t)l];
        const float * xin = l == 0 ? embedded.p : acts[(size_t)(l - 1)].res3.p;
        // res3 = res2 + down(swiglu(gate, up)): dres is the gradient of both.
        lin_back(dh.zeroed(N * I), g(bl.down), nullptr, dres.p, a.hmid.p, bl.down, N, I, C);
        lo(l, kDown, dh.p, dres.p, a.hmid.p);
        D::swiglu_backward(dgate.zeroed(N * I), dup.zeroed(N * I), dh.p, a.gate.p, a.up.p, N * I);
        lin_back(dxn.zeroed(N * C), g(bl.gate), nullptr, dgate.p, a.xn2.p, bl.gate, N, C, I);
        lin_back(dxn.p, g(bl.up), nullptr, dup.p, a.xn2.p, bl.up, N, C, I);
        lo(l, kGate, dxn.p, dgate.p, a.xn2.p);
        lo(l, kUp, dxn.p, dup.p, a.xn2.p);
        D::rmsnorm_backward(dres.p, g(bl.post_norm), dxn.p, a.res2.p, p(bl.post_norm), a.rstd2.p, N, C, scratch.p);
        // res2 = x + o_proj(y).
        lin_back(dy.zeroed(N * QC), g(bl.o), gbias(bl.ob), dres.p, a.y.p, bl.o, N, QC, C);
        lo(l, kO, dy.p, dres.p, a.y.p);
        const float * probs = a.att.p;
        if (att_recompute) {  // this layer's probabilities again (a.y gets the bits it had; already read above)
            if (l < cfg.layers - 1)
                D::attention_gqa_forward(a.y.p, att_shared.p, a.qr.p, a.kr.p, a.v.p, B, T, NH, NKV, hd);
            probs = att_shared.p;
        }
        D::attention_gqa_backward(dqr.zeroed(N * QC), dkr.zeroed(N * KC), dv.zeroed(N * KC), dy.p, a.qr.p, a.kr.p,
                                  a.v.p, probs, B, T, NH, NKV, hd, scratch.p);
        D::rope_backward(dqn.zeroed(N * QC), dqr.p, cos.p, sin.p, B, T, 0, NH, hd);
        D::rope_backward(dkn.zeroed(N * KC), dkr.p, cos.p, sin.p, B, T, 0, NKV, hd);
        float *dqp = dqn.p, *dkp = dkn.p;
        if (cfg.qk_norm) {
            D::rmsnorm_backward(dq.zeroed(N * QC), g(bl.q_norm), dqn.p, a.q.p, p(bl.q_norm), a.qrstd.p, N * NH, hd,
                                scratch.p);
            D::rmsnorm_backward(dk.zeroed(N * KC), g(bl.k_norm), dkn.p, a.k.p, p(bl.k_norm), a.krstd.p, N * NKV, hd,
                                scratch.p);
            dqp = dq.p;
            dkp = dk.p;
        }
        lin_back(dxn.zeroed(N * C), g(bl.q), gbias(bl.qb), dqp, a.xn1.p, bl.q, N, C, QC);
        lin_back(dxn.p, g(bl.k), gbias(bl.kb), dkp, a.xn1.p, bl.k, N, C, KC);
        lin_back(dxn.p, g(bl.v), gbias(bl.vb), dv.p, a.xn1.p, bl.v, N, C, KC);
        lo(l, kQ, dxn.p, dqp, a.xn1.p);
        lo(l, kK, dxn.p, dkp, a.xn1.p);
        lo(l, kV, dxn.p, dv.p, a.xn1.p);
        D::rmsnorm_backward(dres.p, g(bl.in_norm), dxn.p, xin, p(bl.in_norm), a.rstd1.p, N, C, scratch.p);
    }
    if (!ad) D::embedding_backward(g(layout.embed), dres.p, host_tokens.data(), N, C);  // (the embedding is frozen too)
}

}  // namespace llama
}  // namespace maporl
