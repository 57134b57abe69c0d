// llama_decode.cpp: KV-cache decoding of the Llama family (llama.h). A prompt is prefilled (every position but its
// last, all rows and positions through the GEMM in chunks), then each row decodes its own position per step;
// keys are cached after the q/k norm and the rotation, values as projected, per layer in [batch, NKV, max_len,
// head_dim]. Decode steps of up to kRowsGemv rows run their matmuls as dot products over the weights' rows (read
// once per step: single-stream decoding is bound by the weights' bytes); larger ones the GEMM. Every product of a
// row is the same bits whatever the other rows, so a request gives the same tokens alone as in a batch of up to
// kRowsGemv (prefill included). Each row may run a different LoRA adapter (row_adapter): the base projections run over the
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
        throw_error(MAPORL_ERR_INVALID_ARG, "max_len: expected 1..%lld (context), got %lld", (long long)cfg.context,
                    (long long)max_len);
    const size_t n = (size_t)(cfg.layers * batch * cfg.kv_heads * max_len * cfg.head_dim);
    kcache.clear();  // (no zero-fill: a position is read only after it is written)
    kcache.resize(n);
    vcache.clear();
    vcache.resize(n);
    cache_batch = batch;
    cache_len = max_len;
    row_adapter.assign((size_t)batch, active);
}

template <typename F>
void Model<F>::decode(const int32_t * tok, int64_t pos, bool logits, bool values) {
    std::vector<int64_t> at((size_t)std::max<int64_t>(cache_batch, 1), pos);
    decode_rows(tok, at.data(), logits, values);
}

template <typename F>
void Model<F>::decode_rows(const int32_t * tok, const int64_t * pos, bool logits, bool values) {
    const int64_t Bc = cache_batch, C = cfg.d_model, V = cfg.vocab;
    if (Bc == 0) throw_error(MAPORL_ERR_INVALID_ARG, "decode: call cache_reset first");
    for (int64_t b = 0; b < Bc; ++b) {
        if (pos[b] < 0 || pos[b] >= cache_len)
            throw_error(MAPORL_ERR_INVALID_ARG, "pos: expected 0..%lld, got %lld at row %lld",
                        (long long)(cache_len - 1), (long long)pos[b], (long long)b);
        if (tok[b] < 0 || tok[b] >= V)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld", (long long)V,
                        (int)tok[b], (long long)b);
    }
    std::vector<int64_t> rows((size_t)Bc);
    for (int64_t b = 0; b < Bc; ++b) rows[(size_t)b] = b;
    std::vector<F> x((size_t)(Bc * C));
    for (int64_t b = 0; b < Bc; ++b) embed_row(x.data() + b * C, tok[b]);
    step_rows(x, rows.data(), pos, Bc, true);
    if (!logits && !values) return;
    std::vector<F> xn((size_t)(Bc * C)), rs((size_t)Bc);
    rmsnorm_forward(xn.data(), rs.data(), x.data(), p(layout.norm), Bc, C, cfg.rms_eps);
    if (logits) {
        step_logits.resize((size_t)(Bc * V));
        matmul_forward_wt_or(step_logits.data(), xn.data(), layout.lm_head, -1, Bc, C, V);
    }
    if (!values) return;
    step_values.resize((size_t)Bc);
    gpt::matmul_forward(step_values.data(), xn.data(), p(layout.vw), p(layout.vb), Bc, C, 1);
    for (int64_t b = 0; b < Bc; ++b) {  // an adapter's rows: its own value head
        const int64_t id = row_adapter[(size_t)b];
        if (id < 0) continue;
        const Lora<F> * a = adapters[(size_t)id].get();
        gpt::matmul_forward(step_values.data() + b, xn.data() + b * C, a->p(a->layout.vw), a->p(a->layout.vb), 1, C, 1);
    }
}

int64_t check_prefill(const int32_t * tok, const int64_t * lens, int64_t P, int64_t cache_batch, int64_t cache_len,
                      int64_t vocab) {
    if (cache_batch == 0) throw_error(MAPORL_ERR_INVALID_ARG, "prefill: call cache_reset first");
    if (P < 0) throw_error(MAPORL_ERR_INVALID_ARG, "prefill: P: expected >= 0, got %lld", (long long)P);
    int64_t longest = 0;
    for (int64_t b = 0; b < cache_batch; ++b) {
        if (lens[b] < 0 || lens[b] > P || lens[b] > cache_len)
            throw_error(MAPORL_ERR_INVALID_ARG, "prefill: lens: expected 0..%lld at row %lld, got %lld",
                        (long long)std::min(P, cache_len), (long long)b, (long long)lens[b]);
        for (int64_t t = 0; t < lens[b]; ++t)
            if (tok[b * P + t] < 0 || tok[b * P + t] >= vocab)
                throw_error(MAPORL_ERR_INVALID_ARG,
                            "prefill: tokens: expected ids in [0, %lld), got %d at row %lld position %lld",
                            (long long)vocab, (int)tok[b * P + t], (long long)b, (long long)t);
        longest = std::max(longest, lens[b]);
    }
    return longest;
}

template <typename F>
void Model<F>::prefill(const int32_t * tok, const int64_t * lens, int64_t P) {
    const int64_t Bc = cache_batch, C = cfg.d_model;
    const int64_t longest = check_prefill(tok, lens, P, cache_batch, cache_len, cfg.vocab);
    // Chunks of about kPrefillRows rows (every row's positions t0 .. t1): activations stay bounded for long prompts.
    const int64_t span = std::max<int64_t>(1, kPrefillRows / Bc);
    for (int64_t t0 = 0; t0 < longest; t0 += span) {
        std::vector<int64_t> rb, rt;
        for (int64_t b = 0; b < Bc; ++b)
            for (int64_t t = t0; t < std::min(t0 + span, lens[b]); ++t) rb.push_back(b), rt.push_back(t);
        const int64_t N = (int64_t)rb.size();
        std::vector<F> x((size_t)(N * C));
        for (int64_t n = 0; n < N; ++n) embed_row(x.data() + n * C, tok[rb[(size_t)n] * P + rt[(size_t)n]]);
        step_rows(x, rb.data(), rt.data(), N, false);
    }
}

template <typename F>
void Model<F>::step_rows(std::vector<F> & x, const int64_t * rb, const int64_t * rt, int64_t N, bool decode_rule) {
    const int64_t C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd, KC = NKV * hd,
                  I = cfg.intermediate, group = NH / NKV;
    int64_t longest = 0;
    for (int64_t n = 0; n < N; ++n) longest = std::max(longest, rt[n] + 1);
    std::vector<F> xn((size_t)(N * C)), rs((size_t)(N * NH)), q((size_t)(N * QC)), k((size_t)(N * KC)),
        vv((size_t)(N * KC)), y((size_t)(N * QC)), proj((size_t)(N * C)), gate((size_t)(N * I)), up((size_t)(N * I)),
        hmid((size_t)(N * I)), sc((size_t)longest);
    // The rows of each adapter in use (row_adapter of their cache row); the base rows get no term.
    std::vector<std::pair<const Lora<F> *, std::vector<int64_t>>> groups;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t id = row_adapter[(size_t)rb[n]];
        if (id < 0) continue;
        const Lora<F> * a = adapters[(size_t)id].get();
        auto it = std::find_if(groups.begin(), groups.end(), [a](const auto & gr) { return gr.first == a; });
        if (it == groups.end())
            groups.push_back({a, {n}});
        else
            it->second.push_back(n);
    }
    auto lo = [&](int64_t l, int t, F * out, const F * inp) {
        for (const auto & gr : groups)
            if (gr.first->has(l, t)) gr.first->forward_rows(l, t, out, inp, gr.second);
    };
    // Each row's products are the same bits whatever the other rows: the GEMV and the packed GEMM compute every
    // output alone, so a request decodes (or is prefilled) as it would alone.
    // Weights that read the same input (q, k, v; gate, up) decode as one GEMV job.
    auto mm = [&](std::initializer_list<Proj> projs, const F * inp, int64_t Cin) {
        if (decode_rule) return matmul_forward_wt_or(projs, inp, N, Cin);
        for (const Proj & pr : projs) lin(pr.out, inp, pr.w, pr.bias, N, Cin, pr.OC);
    };
    const F scale = F(1) / (F)std::sqrt((double)hd);
    [[maybe_unused]] const auto rows = gpt::attention_rows();
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        rmsnorm_forward(xn.data(), rs.data(), x.data(), p(bl.in_norm), N, C, cfg.rms_eps);
        mm({{q.data(), bl.q, bl.qb, QC}, {k.data(), bl.k, bl.kb, KC}, {vv.data(), bl.v, bl.vb, KC}}, xn.data(), C);
        lo(l, kQ, q.data(), xn.data());
        lo(l, kK, k.data(), xn.data());
        lo(l, kV, vv.data(), xn.data());
        if (cfg.qk_norm) {
            rmsnorm_forward(q.data(), rs.data(), q.data(), p(bl.q_norm), N * NH, hd, cfg.rms_eps);
            rmsnorm_forward(k.data(), rs.data(), k.data(), p(bl.k_norm), N * NKV, hd, cfg.rms_eps);
        }
        for (int64_t n = 0; n < N; ++n) {  // each row at its own position; then its keys and values into the cache
            rope_forward(q.data() + n * QC, q.data() + n * QC, rope_cos.data(), rope_sin.data(), 1, 1, rt[n], NH, hd);
            rope_forward(k.data() + n * KC, k.data() + n * KC, rope_cos.data(), rope_sin.data(), 1, 1, rt[n], NKV, hd);
            for (int64_t kh = 0; kh < NKV; ++kh) {
                const size_t base = (size_t)((((l * cache_batch + rb[n]) * NKV + kh) * cache_len + rt[n]) * hd);
                std::memcpy(kcache.data() + base, k.data() + n * KC + kh * hd, sizeof(F) * (size_t)hd);
                std::memcpy(vcache.data() + base, vv.data() + n * KC + kh * hd, sizeof(F) * (size_t)hd);
            }
        }
        for (int64_t n = 0; n < N; ++n) {
            const int64_t pos = rt[n];
            for (int64_t h = 0; h < NH; ++h) {
                const size_t base = (size_t)((((l * cache_batch + rb[n]) * NKV + h / group) * cache_len) * hd);
                const F * kc = kcache.data() + base;
                const F * vc = vcache.data() + base;
                const F * qr = q.data() + n * QC + h * hd;
                F * o = y.data() + n * QC + h * hd;
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
        mm({{proj.data(), bl.o, bl.ob, C}}, y.data(), QC);
        lo(l, kO, proj.data(), y.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] = proj[i] + x[i];
        rmsnorm_forward(xn.data(), rs.data(), x.data(), p(bl.post_norm), N, C, cfg.rms_eps);
        mm({{gate.data(), bl.gate, -1, I}, {up.data(), bl.up, -1, I}}, xn.data(), C);
        lo(l, kGate, gate.data(), xn.data());
        lo(l, kUp, up.data(), xn.data());
        swiglu_forward(hmid.data(), gate.data(), up.data(), N * I);
        mm({{proj.data(), bl.down, -1, C}}, hmid.data(), I);
        lo(l, kDown, proj.data(), hmid.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] = proj[i] + x[i];
    }
}

template <typename F>
void Model<F>::matmul_forward_wt_or(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin,
                                    int64_t OC) {
    matmul_forward_wt_or({{out, w, bias, OC}}, inp, N, Cin);
}

template <typename F>
void Model<F>::matmul_forward_wt_or(std::initializer_list<Proj> projs, const F * inp, int64_t N, int64_t Cin) {
    // A few rows (single-stream and small-batch decoding): dot products over the weights' own rows (float or
    // bfloat16, widened as they stream), read once per step; more rows: the GEMM, which reuses each weight across rows.
    if (N > kRowsGemv) {
        for (const Proj & pr : projs) lin_many(pr.out, inp, pr.w, pr.bias, N, Cin, pr.OC);
        return;
    }
    gpt::RowsPart<F> parts[4];
    int n = 0;
    for (const Proj & pr : projs) {
        if (n == 4) throw_error(MAPORL_ERR_INTERNAL, "llama: more than 4 weights in one GEMV");
        const bool half = std::is_same<F, float>::value && is_half(pr.w),
                   q = std::is_same<F, float>::value && is_q8(pr.w);
        parts[n++] = {half || q ? nullptr : p(pr.w),
                      half ? h(pr.w) : nullptr,
                      pr.bias >= 0 ? p(pr.bias) : (const F *)nullptr,
                      pr.out,
                      pr.OC,
                      q ? q8q(pr.w) : nullptr,
                      q ? q8s(pr.w) : nullptr};
    }
    gpt::matmul_forward_rows_parts(parts, n, inp, N, Cin);
}

template <typename F>
void Model<F>::lin_many(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC) {
    // The packed GEMM reads W in place (and widens a bfloat16 W while packing); the others run on its transposed
    // copy, kept until the weights change.
    if (is_frozen(w) || gpt::matmul_packs<F>()) return lin(out, inp, w, bias, N, Cin, OC);
    gpt::matmul_forward_wt(out, inp, wt(w), bias >= 0 ? p(bias) : (const F *)nullptr, N, Cin, OC);
}

// The decoder's members (llama.cpp instantiates the rest of the class).
#define MAPORL_INSTANTIATE(F)                                                                                  \
    template const F * Model<F>::wt(int64_t);                                                                  \
    template void Model<F>::cache_reset(int64_t, int64_t);                                                     \
    template void Model<F>::decode(const int32_t *, int64_t, bool, bool);                                      \
    template void Model<F>::decode_rows(const int32_t *, const int64_t *, bool, bool);                         \
    template void Model<F>::prefill(const int32_t *, const int64_t *, int64_t);                                \
    template void Model<F>::step_rows(std::vector<F> &, const int64_t *, const int64_t *, int64_t, bool);      \
    template void Model<F>::matmul_forward_wt_or(F *, const F *, int64_t, int64_t, int64_t, int64_t, int64_t); \
    template void Model<F>::matmul_forward_wt_or(std::initializer_list<Proj>, const F *, int64_t, int64_t);    \
    template void Model<F>::lin_many(F *, const F *, int64_t, int64_t, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
