// llama.cpp: the Llama family's model (llama.h): layout with transformers' tensor names, initialisation, forward,
// backward, AdamW and KV-cache decoding, composed from llama_ops.h and the GEMM of gpt_ops.h. The block is
// transformers' LlamaDecoderLayer: h = x + o_proj(attn(rope(norm_qk(q_proj(n1))), rope(norm_qk(k_proj(n1))),
// v_proj(n1))) with n1 = rmsnorm(x); out = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)) with n2 = rmsnorm(h).
// Every sum runs in a fixed order: results are the same for any thread count.
#include "native/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>

#include "native/core/bf16.h"
#include "native/core/core.h"
#include "native/core/threadpool.h"
#include "native/model/init.h"
#include "native/model/w8a8.h"

namespace maporl {
namespace llama {

using gpt::matmul_backward;
using gpt::matmul_forward;

void check_config(const Config & c) {
    auto need = [](bool ok, const char * what, double got) {
        if (!ok) throw_error(MAPORL_ERR_INVALID_ARG, "config.%s: got %g", what, got);
    };
    need(c.vocab >= 2 && c.vocab <= (1 << 24), "vocab_size: expected an integer in [2, 2^24]", (double)c.vocab);
    need(c.context >= 1 && c.context <= (1 << 20), "context: expected an integer in [1, 2^20]", (double)c.context);
    need(c.layers >= 1 && c.layers <= 1024, "num_hidden_layers: expected an integer in [1, 1024]", (double)c.layers);
    need(c.d_model >= 1 && c.d_model <= 65536, "hidden_size: expected an integer in [1, 65536]", (double)c.d_model);
    need(c.heads >= 1 && c.heads <= 4096, "num_attention_heads: expected an integer in [1, 4096]", (double)c.heads);
    need(c.kv_heads >= 1 && c.heads % c.kv_heads == 0, "num_key_value_heads: expected a divisor of num_attention_heads",
         (double)c.kv_heads);
    need(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.head_dim <= 4096,
         "head_dim: expected an even integer in [2, 4096]", (double)c.head_dim);
    need(c.intermediate >= 1 && c.intermediate <= (1 << 20), "intermediate_size: expected an integer in [1, 2^20]",
         (double)c.intermediate);
    need(c.rms_eps > 0 && std::isfinite(c.rms_eps), "rms_norm_eps: expected a finite number > 0", c.rms_eps);
    need(c.rope_theta > 1 && std::isfinite(c.rope_theta), "rope_theta: expected a finite number > 1", c.rope_theta);
    if (c.rope.type != RopeScaling::None) {
        need(c.rope.factor > 0 && std::isfinite(c.rope.factor), "rope_scaling.factor: expected a finite number > 0",
             c.rope.factor);
        if (c.rope.type == RopeScaling::Llama3) {
            need(c.rope.low_freq_factor > 0 && std::isfinite(c.rope.low_freq_factor),
                 "rope_scaling.low_freq_factor: expected a finite number > 0", c.rope.low_freq_factor);
            need(c.rope.high_freq_factor > c.rope.low_freq_factor && std::isfinite(c.rope.high_freq_factor),
                 "rope_scaling.high_freq_factor: expected a finite number > low_freq_factor", c.rope.high_freq_factor);
            need(c.rope.original_max_position >= 1,
                 "rope_scaling.original_max_position_embeddings: expected an integer >= 1",
                 (double)c.rope.original_max_position);
        }
    }
}

Layout make_layout(const Config & c) {
    check_config(c);
    Layout L;
    const int64_t C = c.d_model, QC = c.heads * c.head_dim, KC = c.kv_heads * c.head_dim, I = c.intermediate;
    auto add = [&](const std::string & name, std::vector<int64_t> shape) {
        return gpt::add_tensor(L.tensors, L.total, name, std::move(shape));
    };
    L.embed = add("model.embed_tokens.weight", {c.vocab, C});
    for (int64_t l = 0; l < c.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        Layout::Block b;
        b.in_norm = add(p + "input_layernorm.weight", {C});
        b.q = add(p + "self_attn.q_proj.weight", {QC, C});
        if (c.qkv_bias) b.qb = add(p + "self_attn.q_proj.bias", {QC});
        b.k = add(p + "self_attn.k_proj.weight", {KC, C});
        if (c.qkv_bias) b.kb = add(p + "self_attn.k_proj.bias", {KC});
        b.v = add(p + "self_attn.v_proj.weight", {KC, C});
        if (c.qkv_bias) b.vb = add(p + "self_attn.v_proj.bias", {KC});
        b.o = add(p + "self_attn.o_proj.weight", {C, QC});
        if (c.o_bias) b.ob = add(p + "self_attn.o_proj.bias", {C});
        if (c.qk_norm) {
            b.q_norm = add(p + "self_attn.q_norm.weight", {c.head_dim});
            b.k_norm = add(p + "self_attn.k_norm.weight", {c.head_dim});
        }
        b.post_norm = add(p + "post_attention_layernorm.weight", {C});
        b.gate = add(p + "mlp.gate_proj.weight", {I, C});
        b.up = add(p + "mlp.up_proj.weight", {I, C});
        b.down = add(p + "mlp.down_proj.weight", {C, I});
        L.blocks.push_back(b);
    }
    L.norm = add("model.norm.weight", {C});
    L.lm_head = c.tie_embeddings ? L.embed : add("lm_head.weight", {c.vocab, C});
    L.vw = add("value_head.weight", {C});
    L.vb = add("value_head.bias", {1});
    return L;
}

FrozenLayout frozen_layout(const Config & c, Layout & L) {
    if (c.bf16 && c.int8) throw_error(MAPORL_ERR_INVALID_ARG, "config: bf16 and int8 both set: expected one");
    FrozenLayout fz;
    fz.half_off.assign(L.tensors.size(), -1);
    fz.q8_off.assign(L.tensors.size(), -1);
    int64_t nf = 0;
    for (size_t i = 0; i < L.tensors.size(); ++i) {
        auto & t = L.tensors[i];
        if (t.shape.size() == 2 && c.int8 && t.shape[1] % kQ8Block == 0) {
            fz.q8_off[i] = fz.q8;
            fz.q8 += q8_padded_rows(t.shape[0]) * t.shape[1];
            t.offset = -1;
        } else if (t.shape.size() == 2) {
            fz.half_off[i] = fz.half;
            fz.half += t.size;
            t.offset = -1;
        } else {
            t.offset = nf;
            nf += t.size;
        }
    }
    L.total = nf;
    return fz;
}

template <typename F>
Model<F>::Model(const Config & c) : cfg(c), layout(make_layout(c)) {
    if (cfg.bf16 || cfg.int8) {
        FrozenLayout fz = frozen_layout(cfg, layout);  // (first: both set is refused there)
        if (!std::is_same<F, float>::value)
            throw_error(MAPORL_ERR_INVALID_ARG, "config.%s: a float model only", cfg.bf16 ? "bf16" : "int8");
        half_off = std::move(fz.half_off);
        q8_off = std::move(fz.q8_off);
        half.assign((size_t)fz.half, 0);
        q8.assign((size_t)fz.q8, 128);  // q = 0 (q8.h stores q + 128), the padding rows' too
        q8d.assign((size_t)(fz.q8 / kQ8Block), 0);
    }
    params.assign((size_t)layout.total, F(0));
    rope_tables(rope_cos, rope_sin, rope_inv_freq(c.head_dim, c.rope_theta, c.rope), c.context);
}

template <typename F>
void Model<F>::ensure_train_state() {
    if (const char * dt = frozen_dtype())
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "training: the base's matrices are %s and frozen: train a LoRA adapter on it, or load the model "
                    "in float32",
                    dt);
    if (grads.size() == params.size()) return;
    grads.assign(params.size(), F(0));
    m.assign(params.size(), F(0));
    v.assign(params.size(), F(0));
}

template <typename F>
void Model<F>::init(uint64_t seed) {
    std::mt19937_64 gen(seed);
    for (size_t k = 0; k < layout.tensors.size(); ++k) {
        const auto & t = layout.tensors[k];
        const bool norm = t.name.find("norm.weight") != std::string::npos;
        const bool bias = t.name.size() >= 4 && t.name.compare(t.name.size() - 4, 4, "bias") == 0;
        if (is_half((int64_t)k)) {
            uint16_t * x = h((int64_t)k);
            for (int64_t i = 0; i < t.size; ++i) x[i] = float_to_bf16((float)(0.02 * init_normal(gen)));
            continue;
        }
        if (is_q8((int64_t)k)) {  // the same normal values, quantized block by block
            const int64_t cols = t.shape[1];
            std::vector<float> row((size_t)cols);
            std::vector<int8_t> q((size_t)cols);
            std::vector<uint16_t> d((size_t)(cols / kQ8Block));
            for (int64_t r = 0; r < t.shape[0]; ++r) {
                for (int64_t i = 0; i < cols; ++i) row[(size_t)i] = (float)(0.02 * init_normal(gen));
                for (int64_t b = 0; b < cols / kQ8Block; ++b)
                    q8_quantize_block(row.data() + b * kQ8Block, q.data() + b * kQ8Block, d.data() + b);
                q8_pack_row(q8.data() + q8_off[k], q8d.data() + q8_off[k] / kQ8Block, cols, r, q.data(), d.data());
            }
            continue;
        }
        F * x = params.data() + t.offset;
        for (int64_t i = 0; i < t.size; ++i) x[i] = norm ? F(1) : bias ? F(0) : (F)(0.02 * init_normal(gen));
    }
    step = 0;
    wt_stale = true;
    if (!m.empty()) {
        std::fill(m.begin(), m.end(), F(0));
        std::fill(v.begin(), v.end(), F(0));
    }
}

namespace {
// dst[i] += src[i] (a residual connection) on the pool's threads.
template <typename F>
void add_into(F * dst, const F * src, int64_t n) {
    parallel_for(n, (int64_t)1 << 14, [dst, src](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) dst[i] += src[i];
    });
}
}  // namespace

template <typename F>
void Model<F>::forward(const int32_t * tok, int64_t B_, int64_t T_, bool head) {
    if (T_ < 1 || T_ > cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "T: expected 1..%lld (context), got %lld", (long long)cfg.context,
                    (long long)T_);
    if (B_ < 1) throw_error(MAPORL_ERR_INVALID_ARG, "B: expected >= 1, got %lld", (long long)B_);
    for (int64_t i = 0; i < B_ * T_; ++i)
        if (tok[i] < 0 || tok[i] >= cfg.vocab)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld",
                        (long long)cfg.vocab, (int)tok[i], (long long)i);
    B = B_;
    T = T_;
    const int64_t N = B * T, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd,
                  KC = NKV * hd, I = cfg.intermediate, V = cfg.vocab;
    tokens.assign(tok, tok + N);
    embedded.resize((size_t)(N * C));
    for (int64_t n = 0; n < N; ++n) embed_row(embedded.data() + n * C, tok[n]);
    acts.resize((size_t)cfg.layers);
    const F * x = embedded.data();
    auto sz = [](std::vector<F> & a, int64_t n) { a.resize((size_t)n); };
    Lora<F> * ad = lora();
    if (ad && training) ++ad->nonce;
    // The selected adapter's term for (layer, target) on top of the base projection's output.
    auto lo = [&](int64_t l, int t, F * out, const F * inp) {
        if (ad && ad->has(l, t)) ad->forward(l, t, out, inp, N, training);
    };
    for (int64_t l = 0; l < cfg.layers; ++l) {
        const auto & bl = layout.blocks[(size_t)l];
        LayerActs<F> & a = acts[(size_t)l];
        sz(a.xn1, N * C);
        sz(a.rstd1, N);
        sz(a.q, N * QC);
        sz(a.k, N * KC);
        sz(a.v, N * KC);
        sz(a.qr, N * QC);
        sz(a.kr, N * KC);
        sz(a.att, B * NH * T * T);
        sz(a.y, N * QC);
        sz(a.res2, N * C);
        sz(a.xn2, N * C);
        sz(a.rstd2, N);
        sz(a.gate, N * I);
        sz(a.up, N * I);
        sz(a.hmid, N * I);
        sz(a.res3, N * C);
        rmsnorm_forward(a.xn1.data(), a.rstd1.data(), x, p(bl.in_norm), N, C, cfg.rms_eps);
        lin(a.q.data(), a.xn1.data(), bl.q, bl.qb, N, C, QC);
        lin(a.k.data(), a.xn1.data(), bl.k, bl.kb, N, C, KC);
        lin(a.v.data(), a.xn1.data(), bl.v, bl.vb, N, C, KC);
        lo(l, kQ, a.q.data(), a.xn1.data());
        lo(l, kK, a.k.data(), a.xn1.data());
        lo(l, kV, a.v.data(), a.xn1.data());
        const F * qpre = a.q.data();
        const F * kpre = a.k.data();
        if (cfg.qk_norm) {
            sz(a.qn, N * QC);
            sz(a.kn, N * KC);
            sz(a.qrstd, N * NH);
            sz(a.krstd, N * NKV);
            rmsnorm_forward(a.qn.data(), a.qrstd.data(), a.q.data(), p(bl.q_norm), N * NH, hd, cfg.rms_eps);
            rmsnorm_forward(a.kn.data(), a.krstd.data(), a.k.data(), p(bl.k_norm), N * NKV, hd, cfg.rms_eps);
            qpre = a.qn.data();
            kpre = a.kn.data();
        }
        rope_forward(a.qr.data(), qpre, rope_cos.data(), rope_sin.data(), B, T, 0, NH, hd);
        rope_forward(a.kr.data(), kpre, rope_cos.data(), rope_sin.data(), B, T, 0, NKV, hd);
        attention_gqa_forward(a.y.data(), a.att.data(), a.qr.data(), a.kr.data(), a.v.data(), B, T, NH, NKV, hd);
        lin(a.res2.data(), a.y.data(), bl.o, bl.ob, N, QC, C);
        lo(l, kO, a.res2.data(), a.y.data());
        add_into(a.res2.data(), x, N * C);
        rmsnorm_forward(a.xn2.data(), a.rstd2.data(), a.res2.data(), p(bl.post_norm), N, C, cfg.rms_eps);
        lin(a.gate.data(), a.xn2.data(), bl.gate, -1, N, C, I);
        lin(a.up.data(), a.xn2.data(), bl.up, -1, N, C, I);
        lo(l, kGate, a.gate.data(), a.xn2.data());
        lo(l, kUp, a.up.data(), a.xn2.data());
        swiglu_forward(a.hmid.data(), a.gate.data(), a.up.data(), N * I);
        lin(a.res3.data(), a.hmid.data(), bl.down, -1, N, I, C);
        lo(l, kDown, a.res3.data(), a.hmid.data());
        add_into(a.res3.data(), a.res2.data(), N * C);
        x = a.res3.data();
    }
    sz(lnf, N * C);
    sz(lnf_rstd, N);
    rmsnorm_forward(lnf.data(), lnf_rstd.data(), x, p(layout.norm), N, C, cfg.rms_eps);
    if (head) {
        sz(logits, N * V);
        lin(logits.data(), lnf.data(), layout.lm_head, -1, N, C, V);
    } else {
        logits = std::vector<F>();
    }
    sz(values, N);
    if (ad)
        matmul_forward(values.data(), lnf.data(), ad->p(ad->layout.vw), ad->p(ad->layout.vb), N, C, 1);
    else
        matmul_forward(values.data(), lnf.data(), p(layout.vw), p(layout.vb), N, C, 1);
}

template <typename F>
void Model<F>::lin(F * out, const F * inp, int64_t w, int64_t bias, int64_t N, int64_t Cin, int64_t OC) {
    const F * b = bias >= 0 ? p(bias) : (const F *)nullptr;
    if constexpr (std::is_same<F, float>::value) {
        if (is_half(w)) return gpt::matmul_forward_bf16(out, inp, h(w), b, N, Cin, OC);
        if (is_q8(w)) return gpt::matmul_forward_w8a8(out, inp, q8q(w), q8s(w), b, N, Cin, OC);
    }
    matmul_forward(out, inp, p(w), b, N, Cin, OC);
}

template <typename F>
void Model<F>::lin_back(F * dinp, F * dw, F * db, const F * dout, const F * inp, int64_t w, int64_t N, int64_t Cin,
                        int64_t OC, bool set_dinp) {
    if constexpr (std::is_same<F, float>::value)
        if (is_frozen(w)) {
            if (dw || db)
                throw_error(MAPORL_ERR_INTERNAL, "llama: a gradient asked of the frozen %s tensor %s",
                            is_q8(w) ? "int8" : "bfloat16", layout.tensors[(size_t)w].name.c_str());
            if (is_q8(w)) return gpt::matmul_backward_input_q8(dinp, dout, q8q(w), q8s(w), N, Cin, OC, set_dinp);
            return gpt::matmul_backward_input_bf16(dinp, dout, h(w), N, Cin, OC, set_dinp);
        }
    matmul_backward(dinp, dw, db, dout, inp, p(w), N, Cin, OC, set_dinp);
}

template <typename F>
void Model<F>::embed_row(F * dst, int32_t id) {
    const int64_t C = cfg.d_model;
    if (is_half(layout.embed)) {
        const uint16_t * src = h(layout.embed) + (int64_t)id * C;
        for (int64_t c = 0; c < C; ++c) dst[c] = (F)bf16_to_float(src[c]);
        return;
    }
    if (is_q8(layout.embed)) {
        if constexpr (std::is_same<F, float>::value) q8_unpack_row(dst, q8q(layout.embed), q8s(layout.embed), C, id);
        return;
    }
    std::memcpy(dst, p(layout.embed) + (int64_t)id * C, sizeof(F) * (size_t)C);
}

template <typename F>
void Model<F>::head_rows(F * out, int64_t n0, int64_t rows) {
    if (n0 < 0 || rows < 0 || n0 + rows > B * T)
        throw_error(MAPORL_ERR_INVALID_ARG, "head_rows: rows %lld..%lld of %lld", (long long)n0, (long long)(n0 + rows),
                    (long long)(B * T));
    lin_many(out, lnf.data() + n0 * cfg.d_model, layout.lm_head, -1, rows, cfg.d_model, cfg.vocab);
}

template <typename F>
void Model<F>::head_backward_rows(F * dlnf, const F * dlogits, int64_t n0, int64_t rows) {
    if (n0 < 0 || rows < 0 || n0 + rows > B * T)
        throw_error(MAPORL_ERR_INVALID_ARG, "head_backward_rows: rows %lld..%lld of %lld", (long long)n0,
                    (long long)(n0 + rows), (long long)(B * T));
    Lora<F> * ad = lora();
    if (!ad) ensure_train_state();
    const int64_t C = cfg.d_model;
    lin_back(dlnf + n0 * C, ad ? (F *)nullptr : g(layout.lm_head), (F *)nullptr, dlogits, lnf.data() + n0 * C,
             layout.lm_head, rows, C, cfg.vocab);
}

template <typename F>
void Model<F>::backward(const F * dlogits, const F * dvalues) {
    if (B == 0) throw_error(MAPORL_ERR_INVALID_ARG, "backward: no forward to go back through");
    if (dlogits && logits.size() != (size_t)(B * T * cfg.vocab))
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "backward: dlogits given, but the last forward computed no logits (head = false)");
    std::vector<F> dlnf((size_t)(B * T * cfg.d_model), F(0));
    if (dlogits) head_backward_rows(dlnf.data(), dlogits, 0, B * T);
    backward_hidden(dlnf, dvalues);
}

template <typename F>
void Model<F>::backward_hidden(std::vector<F> & dlnf, const F * dvalues) {
    if (B == 0) throw_error(MAPORL_ERR_INVALID_ARG, "backward: no forward to go back through");
    // With an adapter selected, the base is frozen: gw() is null for its tensors (the input gradients still flow).
    Lora<F> * ad = lora();
    if (ad)
        ad->ensure_train_state();
    else
        ensure_train_state();
    const int64_t N = B * T, C = cfg.d_model, NH = cfg.heads, NKV = cfg.kv_heads, hd = cfg.head_dim, QC = NH * hd,
                  KC = NKV * hd, I = cfg.intermediate;
    if (dlnf.size() != (size_t)(N * C))
        throw_error(MAPORL_ERR_INVALID_ARG, "backward: dlnf: expected %lld elements", (long long)(N * C));
    auto gw = [&](int64_t t) { return ad ? (F *)nullptr : g(t); };
    auto bias_g = [&](int64_t t) { return t >= 0 && !ad ? g(t) : (F *)nullptr; };
    auto lo = [&](int64_t l, int t, F * dinp, const F * dout, const F * inp) {
        if (ad && ad->has(l, t)) ad->backward(l, t, dinp, dout, inp, N);
    };
    std::vector<F> dres((size_t)(N * C), F(0));
    if (dvalues && ad)
        matmul_backward(dlnf.data(), ad->g(ad->layout.vw), ad->g(ad->layout.vb), dvalues, lnf.data(),
                        ad->p(ad->layout.vw), N, C, 1);
    else if (dvalues)
        matmul_backward(dlnf.data(), g(layout.vw), g(layout.vb), dvalues, lnf.data(), p(layout.vw), N, C, 1);
    const F * last = acts.back().res3.data();
    rmsnorm_backward(dres.data(), gw(layout.norm), dlnf.data(), last, p(layout.norm), lnf_rstd.data(), N, C);
    std::vector<F> dh((size_t)(N * I)), dgate((size_t)(N * I)), dup((size_t)(N * I)), dxn((size_t)(N * C)),
        dy((size_t)(N * QC)), dqr((size_t)(N * QC)), dkr((size_t)(N * KC)), dv((size_t)(N * KC)), dqn((size_t)(N * QC)),
        dkn((size_t)(N * KC)), dq, dk;
    if (cfg.qk_norm) {
        dq.resize((size_t)(N * QC));
        dk.resize((size_t)(N * KC));
    }
    // (The buffers that ops accumulate into, about 18 MB per layer at the SmolLM2 shape, are zeroed by the pool's
    // threads; the GEMMs that start a gradient set it instead, with no zeroing pass.)
    auto zero = [](std::vector<F> & a) { zero_parallel(a.data(), a.size()); };
    for (int64_t l = cfg.layers - 1; l >= 0; --l) {
        const auto & bl = layout.blocks[(size_t)l];
        LayerActs<F> & a = acts[(size_t)l];
        const F * xin = l == 0 ? embedded.data() : acts[(size_t)(l - 1)].res3.data();
        // res3 = res2 + down(swiglu(gate, up)): dres is the gradient of both.
        lin_back(dh.data(), gw(bl.down), (F *)nullptr, dres.data(), a.hmid.data(), bl.down, N, I, C, /*set_dinp=*/true);
        lo(l, kDown, dh.data(), dres.data(), a.hmid.data());
        zero(dgate);
        zero(dup);
        swiglu_backward(dgate.data(), dup.data(), dh.data(), a.gate.data(), a.up.data(), N * I);
        lin_back(dxn.data(), gw(bl.gate), (F *)nullptr, dgate.data(), a.xn2.data(), bl.gate, N, C, I,
                 /*set_dinp=*/true);
        lin_back(dxn.data(), gw(bl.up), (F *)nullptr, dup.data(), a.xn2.data(), bl.up, N, C, I);
        lo(l, kGate, dxn.data(), dgate.data(), a.xn2.data());
        lo(l, kUp, dxn.data(), dup.data(), a.xn2.data());
        rmsnorm_backward(dres.data(), gw(bl.post_norm), dxn.data(), a.res2.data(), p(bl.post_norm), a.rstd2.data(), N,
                         C);
        // res2 = x + o_proj(y).
        lin_back(dy.data(), gw(bl.o), bias_g(bl.ob), dres.data(), a.y.data(), bl.o, N, QC, C, /*set_dinp=*/true);
        lo(l, kO, dy.data(), dres.data(), a.y.data());
        zero(dqr);
        zero(dkr);
        zero(dv);
        attention_gqa_backward(dqr.data(), dkr.data(), dv.data(), dy.data(), a.qr.data(), a.kr.data(), a.v.data(),
                               a.att.data(), B, T, NH, NKV, hd);
        zero(dqn);
        zero(dkn);
        rope_backward(dqn.data(), dqr.data(), rope_cos.data(), rope_sin.data(), B, T, 0, NH, hd);
        rope_backward(dkn.data(), dkr.data(), rope_cos.data(), rope_sin.data(), B, T, 0, NKV, hd);
        std::vector<F> *dqp = &dqn, *dkp = &dkn;
        if (cfg.qk_norm) {
            zero(dq);
            zero(dk);
            rmsnorm_backward(dq.data(), gw(bl.q_norm), dqn.data(), a.q.data(), p(bl.q_norm), a.qrstd.data(), N * NH,
                             hd);
            rmsnorm_backward(dk.data(), gw(bl.k_norm), dkn.data(), a.k.data(), p(bl.k_norm), a.krstd.data(), N * NKV,
                             hd);
            dqp = &dq;
            dkp = &dk;
        }
        lin_back(dxn.data(), gw(bl.q), bias_g(bl.qb), dqp->data(), a.xn1.data(), bl.q, N, C, QC, /*set_dinp=*/true);
        lin_back(dxn.data(), gw(bl.k), bias_g(bl.kb), dkp->data(), a.xn1.data(), bl.k, N, C, KC);
        lin_back(dxn.data(), gw(bl.v), bias_g(bl.vb), dv.data(), a.xn1.data(), bl.v, N, C, KC);
        lo(l, kQ, dxn.data(), dqp->data(), a.xn1.data());
        lo(l, kK, dxn.data(), dkp->data(), a.xn1.data());
        lo(l, kV, dxn.data(), dv.data(), a.xn1.data());
        rmsnorm_backward(dres.data(), gw(bl.in_norm), dxn.data(), xin, p(bl.in_norm), a.rstd1.data(), N, C);
    }
    if (ad) return;  // (the embedding is frozen too)
    // The embedding rows of the batch's tokens, in row order (a fixed order for repeated tokens).
    F * de = g(layout.embed);
    for (int64_t n = 0; n < N; ++n) {
        F * row = de + (int64_t)tokens[(size_t)n] * C;
        for (int64_t c = 0; c < C; ++c) row[c] += dres[(size_t)(n * C + c)];
    }
}

template <typename F>
void Model<F>::zero_grad() {
    if (Lora<F> * ad = lora()) {
        ad->ensure_train_state();
        zero_parallel(ad->grads.data(), ad->grads.size());
        return;
    }
    ensure_train_state();
    zero_parallel(grads.data(), grads.size());
}

namespace {
// Global-norm clip, then AdamW, on one parameter set (the base or an adapter).
template <typename F, typename S>
double clipped_adamw(S & set, const gpt::AdamW & h, double max_norm) {
    set.ensure_train_state();
    const double norm = std::sqrt(gpt::sum_squares(set.grads.data(), (int64_t)set.grads.size()));
    const double scale = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    ++set.step;
    gpt::adamw_update(set.params.data(), set.grads.data(), set.m.data(), set.v.data(), (int64_t)set.params.size(), h,
                      set.step, (F)scale);
    return norm;
}
}  // namespace

template <typename F>
double Model<F>::update(const gpt::AdamW & h, double max_norm) {
    if (Lora<F> * ad = lora()) {
        const double n = clipped_adamw<F>(*ad, h, max_norm);
        ad->nonce = 0;
        ad->weights_changed();
        return n;
    }
    const double n = clipped_adamw<F>(*this, h, max_norm);
    wt_stale = true;
    return n;
}

namespace {
int64_t target_tensor(const Layout::Block & b, int t) {
    const int64_t ids[kLoraTargets] = {b.q, b.k, b.v, b.o, b.gate, b.up, b.down};
    return ids[t];
}
}  // namespace

template <typename F>
int64_t Model<F>::lora_add(const LoraConfig & c, uint64_t seed) {
    const int64_t C = cfg.d_model, QC = cfg.heads * cfg.head_dim, KC = cfg.kv_heads * cfg.head_dim,
                  I = cfg.intermediate;
    const std::array<int64_t, kLoraTargets> in = {C, C, C, QC, C, C, I}, out = {QC, KC, KC, C, I, I, C};
    adapters.emplace_back(new Lora<F>(c, cfg.layers, in, out, p(layout.vw), *p(layout.vb), C, seed));
    return (int64_t)adapters.size() - 1;
}

template <typename F>
void Model<F>::lora_merge(int64_t id) {
    if (id < 0 || id >= (int64_t)adapters.size() || !adapters[(size_t)id])
        throw_error(MAPORL_ERR_INVALID_ARG, "adapter: expected a live adapter id, got %lld", (long long)id);
    if (const char * dt = frozen_dtype())
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "merge: the base's matrices are %s; merging would round the adapter's update into them (load the "
                    "base in float32 to merge)",
                    dt);
    const Lora<F> & a = *adapters[(size_t)id];
    for (int64_t l = 0; l < cfg.layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t)
            if (a.has(l, t)) a.merge_into(l, t, p(target_tensor(layout.blocks[(size_t)l], t)));
    std::copy(a.p(a.layout.vw), a.p(a.layout.vw) + cfg.d_model,
              p(layout.vw));  // the merged model's value head is the adapter's
    *p(layout.vb) = *a.p(a.layout.vb);
    lora_remove(id);
    wt_stale = true;
}

template <typename F>
void Model<F>::lora_remove(int64_t id) {
    if (id < 0 || id >= (int64_t)adapters.size() || !adapters[(size_t)id])
        throw_error(MAPORL_ERR_INVALID_ARG, "adapter: expected a live adapter id, got %lld", (long long)id);
    adapters[(size_t)id].reset();
    if (active == id) active = -1;
    for (int64_t & r : row_adapter)
        if (r == id) r = -1;
}

// The class, except the decoder's members (llama_decode.cpp).
template struct Model<float>;
template struct Model<double>;

}  // namespace llama
}  // namespace maporl
