// llama_decode.cpp: KV-cache decoding of the Llama family (llama.h). Every row of the batch decodes position `pos`
// (ragged prompts are read while longer ones still are, as NativePolicy.generate does); keys are cached after
// the q/k norm and the rotation, values as projected, per layer in [batch, NKV, max_len, head_dim]. Batches of up
// to kRowsGemv rows run their matmuls as dot products over the weights' rows (read once per step: single-stream
// decoding is bound by the weights' bytes); larger ones read transposed weight copies (each built on first use,
// dropped after any update). Each row may run a different LoRA adapter (row_adapter): the base projections run over the
// whole batch, each adapter's terms over its rows. A decoded position equals the full forward's within float
// rounding (test_llama: 1e-5).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "native/core/core.h"
#include "native/model/llama.h"

namespace maporl {
namespace llama {

template <typename F>
const F * Model<F>::wt(int64_t tensor) {
    if (wt_stale) {  // every copy is dropped after an update (or a write), and rebuilt one tensor at a time on use
        wt_cache.assign(layout.tensors.size(), std::vector<F>());
        wt_stale = false;
    }
    std::vector<F> & c = wt_cache[(size_t)tensor];
    if (c.empty()) {
        const auto & t = layout.tensors[(size_t)tensor];
        if (t.shape.size() != 2) throw_error(MAPORL_ERR_INTERNAL, "llama: tensor %s is not a matrix", t.name.c_str());
        c.resize((size_t)t.size);
        gpt::transpose_weight(c.data(), params.data() + t.offset, t.shape[1], t.shape[0]);
    }
    return c.data();
}

template <typename F>
void Model<F>::cache_reset(int64_t batch, int64_t max_len) {
    if (batch < 1) throw_error(MAPORL_ERR_INVALID_ARG, "batch: expected >= 1, got %lld", (long long)batch);
    if (max_len < 1 || max_len > cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "max_len: expected 1..%lld (context), got %lld", (long long)cfg.context, (long long)max_len);
    const size_t n = (size_t)(cfg.layers * batch * cfg.kv_heads * max_len * cfg.head_dim);
    kcache.assign(n, F(0));
    vcache.assign(n, F(0));
    cache_batch = batch;
    cache_len = max_len;
    row_adapter.assign((size_t)batch, active);
}

template <typename F>
void Model<F>::decode(const int32_t * tok, int64_t pos, bool logits, bool values) {
    const int64_t Bc = cache_batch, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd, KC = NKV * hd,
                  I = cfg.intermediate, V = cfg.vocab, group = NH / NKV;
    if (Bc == 0) throw_error(MAPORL_ERR_INVALID_ARG, "decode: call cache_reset first");
    if (pos < 0 || pos >= cache_len) throw_error(MAPORL_ERR_INVALID_ARG, "pos: expected 0..%lld, got %lld", (long long)(cache_len - 1), (long long)pos);
    for (int64_t b = 0; b < Bc; ++b)
        if (tok[b] < 0 || tok[b] >= V)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld", (long long)V, (int)tok[b], (long long)b);
    std::vector<F> x((size_t)(Bc * C)), xn((size_t)(Bc * C)), rs((size_t)(Bc * NH)), q((size_t)(Bc * QC)), k((size_t)(Bc * KC)),
        vv((size_t)(Bc * KC)), y((size_t)(Bc * QC)), proj((size_t)(Bc * C)), gate((size_t)(Bc * I)), up((size_t)(Bc * I)),
        hmid((size_t)(Bc * I)), sc((size_t)(pos + 1));
    for (int64_t b = 0; b < Bc; ++b) std::memcpy(x.data() + b * C, p(layout.embed) + (int64_t)tok[b] * C, sizeof(F) * (size_t)C);
    // The rows of each adapter in use (row_adapter); the base rows get no term.
    std::vector<std::pair<const Lora<F> *, std::vector<int64_t>>> groups;
    for (int64_t b = 0; b < Bc; ++b) {
        const int64_t id = row_adapter[(size_t)b];
        if (id < 0) continue;
        const Lora<F> * a = adapters[(size_t)id].get();
        auto it = std::find_if(groups.begin(), groups.end(), [a](const auto & gr) { return gr.first == a; });
        if (it == groups.end()) groups.push_back({a, {b}});
        else it->second.push_back(b);
    }
    auto lo = [&](int64_t l, int t, F * out, const F * inp) {
        for (const auto & gr : groups)
            if (gr.first->has(l, t)) gr.first->forward_rows(l, t, out, inp, gr.second);
    };
    const F scale = F(1) / (F)std::sqrt((double)hd);
    [[maybe_unused]] const auto rows = gpt::attention_rows();
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        rmsnorm_forward(xn.data(), rs.data(), x.data(), p(bl.in_norm), Bc, C, cfg.rms_eps);
        matmul_forward_wt_or(q.data(), xn.data(), bl.q, bl.qb, Bc, C, QC);
        matmul_forward_wt_or(k.data(), xn.data(), bl.k, bl.kb, Bc, C, KC);
        matmul_forward_wt_or(vv.data(), xn.data(), bl.v, bl.vb, Bc, C, KC);
        lo(l, kQ, q.data(), xn.data());
        lo(l, kK, k.data(), xn.data());
        lo(l, kV, vv.data(), xn.data());
        if (cfg.qk_norm) {
            rmsnorm_forward(q.data(), rs.data(), q.data(), p(bl.q_norm), Bc * NH, hd, cfg.rms_eps);
            rmsnorm_forward(k.data(), rs.data(), k.data(), p(bl.k_norm), Bc * NKV, hd, cfg.rms_eps);
        }
        rope_forward(q.data(), q.data(), rope_cos.data(), rope_sin.data(), Bc, 1, pos, NH, hd);
        rope_forward(k.data(), k.data(), rope_cos.data(), rope_sin.data(), Bc, 1, pos, NKV, hd);
        for (int64_t b = 0; b < Bc; ++b) {
            for (int64_t kh = 0; kh < NKV; ++kh) {
                const size_t base = (size_t)((((l * Bc + b) * NKV + kh) * cache_len + pos) * hd);
                std::memcpy(kcache.data() + base, k.data() + b * KC + kh * hd, sizeof(F) * (size_t)hd);
                std::memcpy(vcache.data() + base, vv.data() + b * KC + kh * hd, sizeof(F) * (size_t)hd);
            }
            for (int64_t h = 0; h < NH; ++h) {
                const size_t base = (size_t)((((l * Bc + b) * NKV + h / group) * cache_len) * hd);
                const F * kc = kcache.data() + base;
                const F * vc = vcache.data() + base;
                const F * qr = q.data() + b * QC + h * hd;
                F * o = y.data() + b * QC + h * hd;
                if constexpr (std::is_same<F, float>::value) {
                    if (rows.forward) {
                        rows.forward(qr, kc, hd, vc, hd, pos + 1, hd, scale, sc.data(), o);
                        continue;
                    }
                }
                // The same arithmetic, in the same order, as attention_gqa_forward's row `pos`.
                F mx = -INFINITY;
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    F s = F(0);
                    for (int64_t i = 0; i < hd; ++i) s += qr[i] * kc[t2 * hd + i];
                    s *= scale;
                    sc[(size_t)t2] = s;
                    mx = s > mx ? s : mx;
                }
                F sum = F(0);
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    sc[(size_t)t2] = (F)std::exp((double)(sc[(size_t)t2] - mx));
                    sum += sc[(size_t)t2];
                }
                const F inv = F(1) / sum;
                for (int64_t i = 0; i < hd; ++i) o[i] = F(0);
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    const F w = sc[(size_t)t2] * inv;
                    for (int64_t i = 0; i < hd; ++i) o[i] += w * vc[t2 * hd + i];
                }
            }
        }
        matmul_forward_wt_or(proj.data(), y.data(), bl.o, bl.ob, Bc, QC, C);
        lo(l, kO, proj.data(), y.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] = proj[i] + x[i];
        rmsnorm_forward(xn.data(), rs.data(), x.data(), p(bl.post_norm), Bc, C, cfg.rms_eps);
        matmul_forward_wt_or(gate.data(), xn.data(), bl.gate, -1, Bc, C, I);
        matmul_forward_wt_or(up.data(), xn.data(), bl.up, -1, Bc, C, I);
        lo(l, kGate, gate.data(), xn.data());
        lo(l, kUp, up.data(), xn.data());
        swiglu_forward(hmid.data(), gate.data(), up.data(), Bc * I);
        matmul_forward_wt_or(proj.data(), hmid.data(), bl.down, -1, Bc, I, C);
        lo(l, kDown, proj.data(), hmid.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] = proj[i] + x[i];
    }
    if (!logits && !values) return;
    rmsnorm_forward(xn.data(), rs.data(), x.data(), p(layout.norm), Bc, C, cfg.rms_eps);
    if (logits) {
        step_logits.resize((size_t)(Bc * V));
        matmul_forward_wt_or(step_logits.data(), xn.data(), layout.lm_head, -1, Bc, C, V);
    }
    if (!values) return;
    step_values.resize((size_t)Bc);
    gpt::matmul_forward(step_values.data(), xn.data(), p(layout.vw), p(layout.vb), Bc, C, 1);
    for (const auto & gr : groups)  // an adapter's rows: its own value head
        for (int64_t b : gr.second)
            gpt::matmul_forward(step_values.data() + b, xn.data() + b * C, gr.first->p(gr.first->layout.vw), gr.first->p(gr.first->layout.vb), 1, C, 1);
}

template <typename F>
void Model<F>::matmul_forward_wt_or(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC) {
    const F * b = bias >= 0 ? p(bias) : (const F *)nullptr;
    // A few rows (single-stream and small-batch decoding): dot products over the weight's own rows, read once per
    // step; more rows: the GEMM, which reuses each weight across rows (the packed one reads the weight in place;
    // the others, a transposed copy kept until the weights change).
    if (N <= kRowsGemv) gpt::matmul_forward_rows(out, inp, p(w), b, N, Cin, OC);
    else if (gpt::matmul_packs<F>()) gpt::matmul_forward(out, inp, p(w), b, N, Cin, OC);
    else gpt::matmul_forward_wt(out, inp, wt(w), b, N, Cin, OC);
}

// The decoder's members (llama.cpp instantiates the rest of the class).
#define MAPORL_INSTANTIATE(F)                                                                                     \
    template const F * Model<F>::wt(int64_t);                                                                     \
    template void Model<F>::cache_reset(int64_t, int64_t);                                                        \
    template void Model<F>::decode(const int32_t *, int64_t, bool, bool);                                                     \
    template void Model<F>::matmul_forward_wt_or(F *, const F *, int64_t, int64_t, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
