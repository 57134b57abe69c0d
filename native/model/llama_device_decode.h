// llama_device_decode.h: DeviceLlama's KV-cache decoding (llama_device.h, which includes this file): the cache, a
// decode step with each row at its own position (and its own LoRA adapter), and the chunked prefill, as the CPU
// model's llama_decode.cpp does them: keys cached after the q/k norm and the rotation, values as projected, per
// layer in [batch, NKV, max_len, head_dim].
#pragma once

#include "native/model/llama_device.h"

namespace maporl {
namespace llama {

template <class D>
DeviceBytes DeviceLlama<D>::memory() const {
    auto sum = [](const auto &... bufs) { return ((bufs.cap * (int64_t)sizeof(*bufs.p)) + ... + (int64_t)0); };
    DeviceBytes b;
    b.weights = sum(params, cos, sin) + W.bytes();
    b.gradients = sum(grads);
    b.moments = sum(m, v);
    for (const Mirror & mr : mirrors) {
        b.adapters += sum(mr.params);
        b.gradients += sum(mr.grads);
        for (const auto & us : mr.us)
            for (const Buf & u : us) b.activations += sum(u);
    }
    for (const Acts & a : acts)
        b.activations += sum(a.xn1, a.rstd1, a.q, a.k, a.qn, a.kn, a.qrstd, a.krstd, a.qr, a.kr, a.v, a.att, a.y,
                             a.res2, a.xn2, a.rstd2, a.gate, a.up, a.hmid, a.res3);
    b.activations += sum(lora_tmp, lora_du, row_mask, tokens, embedded, lnf, lnf_rstd, values, head_out, dlnf, dres, dh,
                         dgate, dup, dxn, dy, dqr, dkr, dv, dqn, dkn, dq, dk, scratch, dvalues, dlogits, att_shared, sx,
                         sxn, srs, sq, sk, sv, sy, sproj, sgate, sup, shmid, sscores, srb, srt, stok) +
        W.scratch_bytes();
    b.cache = sum(kcache, vcache);
    return b;
}

template <class D>
void DeviceLlama<D>::cache_reset(int64_t batch, int64_t max_len) {
    if (batch < 1) throw_error(MAPORL_ERR_INVALID_ARG, "batch: expected >= 1, got %lld", (long long)batch);
    if (max_len < 1 || max_len > cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "max_len: expected 1..%lld (context), got %lld", (long long)cfg.context,
                    (long long)max_len);
    const int64_t n = cfg.layers * batch * cfg.kv_heads * max_len * cfg.head_dim;
    cache_batch = cache_len = 0;
    kcache.zeroed(n);
    vcache.zeroed(n);
    cache_batch = batch;
    cache_len = max_len;
}

template <class D>
void DeviceLlama<D>::decode_rows(const int32_t * tok, const int64_t * pos, float * logits_out, float * values_out) {
    const int64_t Bc = cache_batch, C = cfg.d_model, V = cfg.vocab;
    if (Bc == 0) throw_error(MAPORL_ERR_INVALID_ARG, "decode: call cache_reset first");
    for (int64_t b = 0; b < Bc; ++b)
        if (pos[b] < 0 || pos[b] >= cache_len)
            throw_error(MAPORL_ERR_INVALID_ARG, "pos: expected 0..%lld, got %lld at row %lld",
                        (long long)(cache_len - 1), (long long)pos[b], (long long)b);
    check_tokens(tok, Bc);
    std::vector<int32_t> rb((size_t)Bc), rt((size_t)Bc);
    for (int64_t b = 0; b < Bc; ++b) rb[(size_t)b] = (int32_t)b, rt[(size_t)b] = (int32_t)pos[b];
    step_rows(tok, rb, rt);
    if (!logits_out && !values_out) return;
    D::rmsnorm_forward(sxn.need(Bc * C), srs.need(Bc), sx.p, p(layout.norm), Bc, C, cfg.rms_eps);
    if (logits_out) {
        lin(head_out.need(Bc * V), sxn.p, layout.lm_head, -1, Bc, C, V);
        D::to_host(logits_out, head_out.p, Bc * V * (int64_t)sizeof(float));
    }
    if (values_out) {
        D::matmul_forward(sy.need(Bc), sxn.p, p(layout.vw), p(layout.vb), Bc, C, 1);
        for (int64_t b = 0; b < Bc; ++b) {  // an adapter's rows: its own value head
            const int64_t id = row_adapter(b);
            if (id < 0) continue;
            Mirror & mr = mirror(id);
            const Lora<float> & a = *host->adapters[(size_t)id];
            D::matmul_forward(sy.p + b, sxn.p + b * C, at(mr.params, a, a.layout.vw), at(mr.params, a, a.layout.vb), 1,
                              C, 1);
        }
        D::to_host(values_out, sy.p, Bc * (int64_t)sizeof(float));
    }
}

template <class D>
void DeviceLlama<D>::prefill(const int32_t * tok, const int64_t * lens, int64_t P) {
    const int64_t Bc = cache_batch;
    const int64_t longest = check_prefill(tok, lens, P, cache_batch, cache_len, cfg.vocab);
    // Chunks of about kPrefillRows (row, position) pairs, as the CPU model's.
    const int64_t span = std::max<int64_t>(1, Model<float>::kPrefillRows / Bc);
    for (int64_t t0 = 0; t0 < longest; t0 += span) {
        std::vector<int32_t> rb, rt, ids;
        for (int64_t b = 0; b < Bc; ++b)
            for (int64_t t = t0; t < std::min(t0 + span, lens[b]); ++t)
                rb.push_back((int32_t)b), rt.push_back((int32_t)t), ids.push_back(tok[b * P + t]);
        step_rows(ids.data(), rb, rt);
    }
}

template <class D>
void DeviceLlama<D>::step_rows(const int32_t * tok, const std::vector<int32_t> & rb, const std::vector<int32_t> & rt) {
    const int64_t N = (int64_t)rb.size(), C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim,
                  QC = NH * hd, KC = NKV * hd, I = cfg.intermediate, per_layer = cache_batch * NKV * cache_len * hd;
    if (N == 0) return;
    D::to_device(srb.need(N), rb.data(), N * (int64_t)sizeof(int32_t));
    D::to_device(srt.need(N), rt.data(), N * (int64_t)sizeof(int32_t));
    D::to_device(stok.need(N), tok, N * (int64_t)sizeof(int32_t));
    float * x = sx.need(N * C);
    W.embed(x, stok.p, fp(layout.embed), N, C);
    W.reserve(N, std::max({C, QC, I}));
    // The adapters of the rows (host->row_adapter of their cache row), each with its rows' mask.
    std::vector<std::pair<int64_t, std::vector<int32_t>>> groups;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t id = row_adapter(rb[(size_t)n]);
        if (id < 0) continue;
        auto it = std::find_if(groups.begin(), groups.end(), [id](const auto & gr) { return gr.first == id; });
        if (it == groups.end()) it = groups.insert(groups.end(), {id, std::vector<int32_t>((size_t)N, 0)});
        it->second[(size_t)n] = 1;
    }
    int32_t * masks = row_mask.need(std::max<int64_t>(1, (int64_t)groups.size() * N));
    for (size_t gi = 0; gi < groups.size(); ++gi)
        D::to_device(masks + gi * N, groups[gi].second.data(), N * (int64_t)sizeof(int32_t));
    auto lo = [&](int64_t l, int t, float * out, const float * inp) {
        for (size_t gi = 0; gi < groups.size(); ++gi) {
            const Lora<float> & a = *host->adapters[(size_t)groups[gi].first];
            if (a.has(l, t)) lora_term(mirror(groups[gi].first), a, l, t, out, inp, N, false, masks + gi * N);
        }
    };
    float *xn = sxn.need(N * C), *rs = srs.need(N * NH), *q = sq.need(N * QC), *k = sk.need(N * KC),
          *vv = sv.need(N * KC), *y = sy.need(N * QC), *proj = sproj.need(N * C), *gate = sgate.need(N * I),
          *up = sup.need(N * I), *hmid = shmid.need(N * I), *sc = sscores.need(N * NH * cache_len);
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        D::rmsnorm_forward(xn, rs, x, p(bl.in_norm), N, C, cfg.rms_eps);
        lin(q, xn, bl.q, bl.qb, N, C, QC);
        lin(k, xn, bl.k, bl.kb, N, C, KC);
        lin(vv, xn, bl.v, bl.vb, N, C, KC);
        lo(l, kQ, q, xn);
        lo(l, kK, k, xn);
        lo(l, kV, vv, xn);
        if (cfg.qk_norm) {
            D::rmsnorm_forward(q, rs, q, p(bl.q_norm), N * NH, hd, cfg.rms_eps);
            D::rmsnorm_forward(k, rs, k, p(bl.k_norm), N * NKV, hd, cfg.rms_eps);
        }
        D::rope_rows(q, cos.p, sin.p, srt.p, N, NH, hd);
        D::rope_rows(k, cos.p, sin.p, srt.p, N, NKV, hd);
        float *kc = kcache.p + l * per_layer, *vc = vcache.p + l * per_layer;
        D::kv_store(kc, vc, k, vv, srb.p, srt.p, N, NKV, cache_len, hd);
        D::attention_rows(y, q, kc, vc, srb.p, srt.p, N, NH, NKV, cache_len, hd, sc);
        lin(proj, y, bl.o, bl.ob, N, QC, C);
        lo(l, kO, proj, y);
        D::add(x, proj, x, N * C);
        D::rmsnorm_forward(xn, rs, x, p(bl.post_norm), N, C, cfg.rms_eps);
        lin(gate, xn, bl.gate, -1, N, C, I);
        lin(up, xn, bl.up, -1, N, C, I);
        lo(l, kGate, gate, xn);
        lo(l, kUp, up, xn);
        D::swiglu_forward(hmid, gate, up, N * I);
        lin(proj, hmid, bl.down, -1, N, I, C);
        lo(l, kDown, proj, hmid);
        D::add(x, proj, x, N * C);
    }
}

}  // namespace llama
}  // namespace maporl
