// gpt.cpp: the embedded GPT model (gpt.h): parameter layout, initialisation, forward, backward and the AdamW
// update, composed from the ops of gpt_ops.h. Backward follows the forward in reverse; residual branches add
// their gradients into the stream's. Every sum runs in a fixed order, so a training step gives the same
// parameters for any thread count.
#include "native/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include "native/core/core.h"
#include "native/model/init.h"

namespace maporl {
namespace gpt {

void check_config(const Config & c) {
    auto need = [](bool ok, const char * what, long long got) {
        if (!ok) throw_error(MAPORL_ERR_INVALID_ARG, "config.%s: got %lld", what, got);
    };
    need(c.vocab >= 2 && c.vocab <= (1 << 24), "vocab: expected an integer in [2, 2^24]", (long long)c.vocab);
    need(c.context >= 1 && c.context <= 65536, "context: expected an integer in [1, 65536]", (long long)c.context);
    need(c.layers >= 1 && c.layers <= 256, "layers: expected an integer in [1, 256]", (long long)c.layers);
    need(c.d_model >= 1 && c.d_model <= 65536, "dModel: expected an integer in [1, 65536]", (long long)c.d_model);
    need(c.heads >= 1 && c.d_model % c.heads == 0, "heads: expected a divisor of dModel", (long long)c.heads);
    need(c.mlp_ratio >= 1 && c.mlp_ratio <= 16, "mlpRatio: expected an integer in [1, 16]", (long long)c.mlp_ratio);
}

void check_forward(const Config & cfg, const int32_t * tok, int64_t B, int64_t T) {
    if (T < 1 || T > cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "T: expected 1..%lld (context), got %lld", (long long)cfg.context,
                    (long long)T);
    if (B < 1) throw_error(MAPORL_ERR_INVALID_ARG, "B: expected >= 1, got %lld", (long long)B);
    for (int64_t i = 0; i < B * T; ++i)
        if (tok[i] < 0 || tok[i] >= cfg.vocab)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld",
                        (long long)cfg.vocab, (int)tok[i], (long long)i);
}

Layout make_layout(const Config & c) {
    check_config(c);
    Layout L;
    const int64_t C = c.d_model, H = c.mlp_ratio * C;
    auto add = [&](const std::string & name, std::vector<int64_t> shape) {
        return add_tensor(L.tensors, L.total, name, std::move(shape));
    };
    L.wte = add("wte", {c.vocab, C});
    L.wpe = add("wpe", {c.context, C});
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        Layout::Block b;
        b.ln1w = add(p + "ln_1.weight", {C});
        b.ln1b = add(p + "ln_1.bias", {C});
        b.qkvw = add(p + "attn.c_attn.weight", {3 * C, C});
        b.qkvb = add(p + "attn.c_attn.bias", {3 * C});
        b.attprojw = add(p + "attn.c_proj.weight", {C, C});
        b.attprojb = add(p + "attn.c_proj.bias", {C});
        b.ln2w = add(p + "ln_2.weight", {C});
        b.ln2b = add(p + "ln_2.bias", {C});
        b.fcw = add(p + "mlp.c_fc.weight", {H, C});
        b.fcb = add(p + "mlp.c_fc.bias", {H});
        b.fcprojw = add(p + "mlp.c_proj.weight", {C, H});
        b.fcprojb = add(p + "mlp.c_proj.bias", {C});
        L.blocks.push_back(b);
    }
    L.lnfw = add("ln_f.weight", {C});
    L.lnfb = add("ln_f.bias", {C});
    L.lm_head = c.tie_embeddings ? L.wte : add("lm_head.weight", {c.vocab, C});
    L.vw = add("value_head.weight", {C});
    L.vb = add("value_head.bias", {1});
    return L;
}

template <typename F>
Model<F>::Model(const Config & c) : cfg(c), layout(make_layout(c)) {
    params.assign((size_t)layout.total, F(0));
    grads.assign((size_t)layout.total, F(0));
    m.assign((size_t)layout.total, F(0));
    v.assign((size_t)layout.total, F(0));
}

template <typename F>
void Model<F>::init(uint64_t seed) {
    std::mt19937_64 gen(seed);
    const double resid_scale = 1.0 / std::sqrt(2.0 * (double)cfg.layers);
    for (size_t t = 0; t < layout.tensors.size(); ++t) {
        const auto & ten = layout.tensors[t];
        const std::string & n = ten.name;
        F * x = params.data() + ten.offset;
        const bool bias = n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0;
        const bool ln = n.find("ln_") != std::string::npos;
        if (ln && !bias) {
            for (int64_t i = 0; i < ten.size; ++i) x[i] = F(1);
            continue;
        }
        if (bias) {
            for (int64_t i = 0; i < ten.size; ++i) x[i] = F(0);
            continue;
        }
        const double sd = 0.02 * (n.find("c_proj.weight") != std::string::npos ? resid_scale : 1.0);
        for (int64_t i = 0; i < ten.size; ++i) x[i] = (F)(sd * init_normal(gen));
    }
    step = 0;
    wt_stale = true;
    std::fill(m.begin(), m.end(), F(0));
    std::fill(v.begin(), v.end(), F(0));
}

template <typename F>
void Model<F>::forward(const int32_t * tok, int64_t B_, int64_t T_) {
    check_forward(cfg, tok, B_, T_);
    B = B_;
    T = T_;
    const int64_t N = B * T, C = cfg.d_model, H = cfg.mlp_ratio * C, NH = cfg.heads, V = cfg.vocab;
    tokens.assign(tok, tok + N);
    Acts<F> & a = acts;
    a.layers.resize((size_t)cfg.layers);
    a.encoded.resize((size_t)(N * C));
    encoder_forward(a.encoded.data(), tok, p(layout.wte), p(layout.wpe), B, T, C);
    const F * resid = a.encoded.data();
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        LayerActs<F> & x = a.layers[(size_t)l];
        x.ln1.resize((size_t)(N * C));
        x.ln1m.resize((size_t)N);
        x.ln1r.resize((size_t)N);
        x.qkv.resize((size_t)(N * 3 * C));
        x.att.resize((size_t)(B * NH * T * T));
        x.atty.resize((size_t)(N * C));
        x.attproj.resize((size_t)(N * C));
        x.res2.resize((size_t)(N * C));
        x.ln2.resize((size_t)(N * C));
        x.ln2m.resize((size_t)N);
        x.ln2r.resize((size_t)N);
        x.fch.resize((size_t)(N * H));
        x.fchg.resize((size_t)(N * H));
        x.fcproj.resize((size_t)(N * C));
        x.res3.resize((size_t)(N * C));
        layernorm_forward(x.ln1.data(), x.ln1m.data(), x.ln1r.data(), resid, p(bl.ln1w), p(bl.ln1b), N, C);
        matmul_forward(x.qkv.data(), x.ln1.data(), p(bl.qkvw), p(bl.qkvb), N, C, 3 * C);
        attention_forward(x.atty.data(), x.att.data(), x.qkv.data(), B, T, C, NH);
        matmul_forward(x.attproj.data(), x.atty.data(), p(bl.attprojw), p(bl.attprojb), N, C, C);
        residual_forward(x.res2.data(), resid, x.attproj.data(), N * C);
        layernorm_forward(x.ln2.data(), x.ln2m.data(), x.ln2r.data(), x.res2.data(), p(bl.ln2w), p(bl.ln2b), N, C);
        matmul_forward(x.fch.data(), x.ln2.data(), p(bl.fcw), p(bl.fcb), N, C, H);
        gelu_forward(x.fchg.data(), x.fch.data(), N * H);
        matmul_forward(x.fcproj.data(), x.fchg.data(), p(bl.fcprojw), p(bl.fcprojb), N, H, C);
        residual_forward(x.res3.data(), x.res2.data(), x.fcproj.data(), N * C);
        resid = x.res3.data();
    }
    a.lnf.resize((size_t)(N * C));
    a.lnfm.resize((size_t)N);
    a.lnfr.resize((size_t)N);
    layernorm_forward(a.lnf.data(), a.lnfm.data(), a.lnfr.data(), resid, p(layout.lnfw), p(layout.lnfb), N, C);
    logits.resize((size_t)(N * V));
    matmul_forward(logits.data(), a.lnf.data(), p(layout.lm_head), (const F *)nullptr, N, C, V);
    values.resize((size_t)N);
    matmul_forward(values.data(), a.lnf.data(), p(layout.vw), p(layout.vb), N, C, 1);
}

template <typename F>
void Model<F>::backward(const F * dlogits, const F * dvalues) {
    if (B == 0) throw_error(MAPORL_ERR_INVALID_ARG, "backward: no forward to go back through");
    const int64_t N = B * T, C = cfg.d_model, H = cfg.mlp_ratio * C, NH = cfg.heads, V = cfg.vocab;
    Acts<F> & a = acts;
    std::vector<F> dlnf((size_t)(N * C), F(0)), dres((size_t)(N * C), F(0));
    if (dlogits)
        matmul_backward(dlnf.data(), g(layout.lm_head), (F *)nullptr, dlogits, a.lnf.data(), p(layout.lm_head), N, C,
                        V);
    if (dvalues) matmul_backward(dlnf.data(), g(layout.vw), g(layout.vb), dvalues, a.lnf.data(), p(layout.vw), N, C, 1);
    const F * last = cfg.layers > 0 ? a.layers.back().res3.data() : a.encoded.data();
    layernorm_backward(dres.data(), g(layout.lnfw), g(layout.lnfb), dlnf.data(), last, p(layout.lnfw), a.lnfm.data(),
                       a.lnfr.data(), N, C);
    std::vector<F> dtmp((size_t)(N * H)), dfch((size_t)(N * H)), dln((size_t)(N * C)), datty((size_t)(N * C)),
        dqkv((size_t)(N * 3 * C));
    for (int64_t l = cfg.layers - 1; l >= 0; --l) {
        const auto & bl = layout.blocks[(size_t)l];
        LayerActs<F> & x = a.layers[(size_t)l];
        const F * resid = l == 0 ? a.encoded.data() : a.layers[(size_t)(l - 1)].res3.data();
        // res3 = res2 + fcproj: dres is the gradient of both.
        std::fill(dtmp.begin(), dtmp.end(), F(0));
        matmul_backward(dtmp.data(), g(bl.fcprojw), g(bl.fcprojb), dres.data(), x.fchg.data(), p(bl.fcprojw), N, H, C);
        std::fill(dfch.begin(), dfch.end(), F(0));
        gelu_backward(dfch.data(), x.fch.data(), dtmp.data(), N * H);
        std::fill(dln.begin(), dln.end(), F(0));
        matmul_backward(dln.data(), g(bl.fcw), g(bl.fcb), dfch.data(), x.ln2.data(), p(bl.fcw), N, C, H);
        layernorm_backward(dres.data(), g(bl.ln2w), g(bl.ln2b), dln.data(), x.res2.data(), p(bl.ln2w), x.ln2m.data(),
                           x.ln2r.data(), N, C);
        // res2 = resid + attproj.
        std::fill(datty.begin(), datty.end(), F(0));
        matmul_backward(datty.data(), g(bl.attprojw), g(bl.attprojb), dres.data(), x.atty.data(), p(bl.attprojw), N, C,
                        C);
        std::fill(dqkv.begin(), dqkv.end(), F(0));
        attention_backward(dqkv.data(), datty.data(), x.qkv.data(), x.att.data(), B, T, C, NH);
        std::fill(dln.begin(), dln.end(), F(0));
        matmul_backward(dln.data(), g(bl.qkvw), g(bl.qkvb), dqkv.data(), x.ln1.data(), p(bl.qkvw), N, C, 3 * C);
        layernorm_backward(dres.data(), g(bl.ln1w), g(bl.ln1b), dln.data(), resid, p(bl.ln1w), x.ln1m.data(),
                           x.ln1r.data(), N, C);
    }
    encoder_backward(g(layout.wte), g(layout.wpe), dres.data(), tokens.data(), B, T, C);
}

template <typename F>
void Model<F>::zero_grad() {
    std::fill(grads.begin(), grads.end(), F(0));
}

template <typename F>
double Model<F>::update(const AdamW & h, double max_norm) {
    double s = 0;
    for (F x : grads) s += (double)x * (double)x;
    const double norm = std::sqrt(s);
    const double scale = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    ++step;
    adamw_update(params.data(), grads.data(), m.data(), v.data(), layout.total, h, step, (F)scale);
    wt_stale = true;
    return norm;
}

template <typename F>
const F * Model<F>::wt(int64_t tensor) {
    if (wt_stale) {
        // Every 2-D weight the decoder multiplies by: the blocks' four and the LM head (the value head is [1, C],
        // its own transpose).
        std::vector<int64_t> ids;
        for (const auto & bl : layout.blocks) ids.insert(ids.end(), {bl.qkvw, bl.attprojw, bl.fcw, bl.fcprojw});
        ids.push_back(layout.lm_head);
        wt_off.assign(layout.tensors.size(), -1);
        int64_t n = 0;
        for (int64_t id : ids) {
            if (wt_off[(size_t)id] >= 0) continue;
            wt_off[(size_t)id] = n;
            n += layout.tensors[(size_t)id].size;
        }
        wt_cache.resize((size_t)n);
        for (size_t id = 0; id < wt_off.size(); ++id)
            if (wt_off[id] >= 0) {
                const auto & t = layout.tensors[id];
                transpose_weight(wt_cache.data() + wt_off[id], params.data() + t.offset, t.shape[1], t.shape[0]);
            }
        wt_stale = false;
    }
    const int64_t o = wt_off[(size_t)tensor];
    if (o < 0) throw_error(MAPORL_ERR_INTERNAL, "gpt: no transposed copy of tensor %lld", (long long)tensor);
    return wt_cache.data() + o;
}

template <typename F>
void Model<F>::cache_reset(int64_t batch, int64_t max_len) {
    if (batch < 1) throw_error(MAPORL_ERR_INVALID_ARG, "batch: expected >= 1, got %lld", (long long)batch);
    if (max_len < 1 || max_len > cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "max_len: expected 1..%lld (context), got %lld", (long long)cfg.context,
                    (long long)max_len);
    cache_batch = batch;
    cache_len = max_len;
    const size_t n = (size_t)(cfg.layers * batch * max_len * cfg.d_model);
    kcache.clear();  // (no zero-fill: a position is read only after it is written)
    kcache.resize(n);
    vcache.clear();
    vcache.resize(n);
}

template <typename F>
void Model<F>::decode(const int32_t * tok, int64_t pos, bool logits, bool values) {
    const int64_t Bc = cache_batch, C = cfg.d_model, H = cfg.mlp_ratio * C, NH = cfg.heads, hs = C / NH, V = cfg.vocab;
    if (Bc == 0) throw_error(MAPORL_ERR_INVALID_ARG, "decode: call cache_reset first");
    if (pos < 0 || pos >= cache_len)
        throw_error(MAPORL_ERR_INVALID_ARG, "pos: expected 0..%lld, got %lld", (long long)(cache_len - 1),
                    (long long)pos);
    for (int64_t b = 0; b < Bc; ++b)
        if (tok[b] < 0 || tok[b] >= V)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld", (long long)V,
                        (int)tok[b], (long long)b);
    std::vector<F> x((size_t)(Bc * C)), ln((size_t)(Bc * C)), qkv((size_t)(Bc * 3 * C)), y((size_t)(Bc * C)),
        proj((size_t)(Bc * C)), h((size_t)(Bc * H)), hg((size_t)(Bc * H)), mean((size_t)Bc), rstd((size_t)Bc),
        sc((size_t)(pos + 1));
    for (int64_t b = 0; b < Bc; ++b)
        for (int64_t c = 0; c < C; ++c)
            x[(size_t)(b * C + c)] = p(layout.wte)[tok[b] * C + c] + p(layout.wpe)[pos * C + c];
    const F scale = F(1) / (F)std::sqrt((double)hs);
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), p(bl.ln1w), p(bl.ln1b), Bc, C);
        matmul_forward_wt(qkv.data(), ln.data(), wt(bl.qkvw), p(bl.qkvb), Bc, C, 3 * C);
        for (int64_t b = 0; b < Bc; ++b)
            for (int64_t hh = 0; hh < NH; ++hh) {
                const size_t base = (size_t)((((l * Bc + b) * NH + hh) * cache_len) * hs);
                F * kc = kcache.data() + base;
                F * vc = vcache.data() + base;
                const F * q = qkv.data() + b * 3 * C + hh * hs;
                for (int64_t i = 0; i < hs; ++i) {
                    kc[pos * hs + i] = qkv[(size_t)(b * 3 * C + C + hh * hs + i)];
                    vc[pos * hs + i] = qkv[(size_t)(b * 3 * C + 2 * C + hh * hs + i)];
                }
                // The same arithmetic, in the same order, as attention_forward's row `pos`.
                F * o = y.data() + b * C + hh * hs;
                if constexpr (std::is_same<F, float>::value) {
                    if (const auto row = attention_rows().forward) {
                        row(q, kc, hs, vc, hs, pos + 1, hs, scale, sc.data(), o);
                        continue;
                    }
                }
                F mx = -INFINITY;
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    F d = F(0);
                    for (int64_t i = 0; i < hs; ++i) d += q[i] * kc[t2 * hs + i];
                    d *= scale;
                    sc[(size_t)t2] = d;
                    mx = d > mx ? d : mx;
                }
                F sum = F(0);
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    sc[(size_t)t2] = (F)std::exp((double)(sc[(size_t)t2] - mx));
                    sum += sc[(size_t)t2];
                }
                const F inv = F(1) / sum;
                for (int64_t i = 0; i < hs; ++i) o[i] = F(0);
                for (int64_t t2 = 0; t2 <= pos; ++t2) {
                    const F w = sc[(size_t)t2] * inv;
                    for (int64_t i = 0; i < hs; ++i) o[i] += w * vc[t2 * hs + i];
                }
            }
        matmul_forward_wt(proj.data(), y.data(), wt(bl.attprojw), p(bl.attprojb), Bc, C, C);
        for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + proj[i];
        layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), p(bl.ln2w), p(bl.ln2b), Bc, C);
        matmul_forward_wt(h.data(), ln.data(), wt(bl.fcw), p(bl.fcb), Bc, C, H);
        gelu_forward(hg.data(), h.data(), Bc * H);
        matmul_forward_wt(proj.data(), hg.data(), wt(bl.fcprojw), p(bl.fcprojb), Bc, H, C);
        for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + proj[i];
    }
    if (!logits && !values) return;
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), p(layout.lnfw), p(layout.lnfb), Bc, C);
    if (logits) {
        step_logits.resize((size_t)(Bc * V));
        matmul_forward_wt(step_logits.data(), ln.data(), wt(layout.lm_head), (const F *)nullptr, Bc, C, V);
    }
    if (values) {
        step_values.resize((size_t)Bc);
        matmul_forward(step_values.data(), ln.data(), p(layout.vw), p(layout.vb), Bc, C, 1);
    }
}

template struct Model<float>;
template struct Model<double>;

}  // namespace gpt
}  // namespace maporl
