// lora.cpp: LoRA adapters (lora.h): layout with PEFT's tensor names, PEFT's initialisation, the adapter term's
// forward and backward through the GEMM of gpt_ops.h, the decoder's row-wise term, and merging into the base.
// Dropout masks are a hash of (seed, step, layer, target, element): the same for any thread count, and recomputed in
// the backward instead of stored.
#include "native/model/lora.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "native/core/core.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace llama {

const char * const kLoraTargetNames[kLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                     "gate_proj", "up_proj", "down_proj"};

namespace {
uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
}  // namespace

template <typename F>
Lora<F>::Lora(const LoraConfig & c, int64_t layers, const std::array<int64_t, kLoraTargets> & in_dims,
              const std::array<int64_t, kLoraTargets> & out_dims, const F * value_w, F value_b, int64_t d_model,
              uint64_t seed_)
    : cfg(c), seed(seed_), in(in_dims), out(out_dims) {
    if (!(c.rank >= 1 && c.rank <= 4096))
        throw_error(MAPORL_ERR_INVALID_ARG, "lora.rank: expected an integer in [1, 4096], got %lld", (long long)c.rank);
    if (!(c.alpha > 0 && std::isfinite(c.alpha)))
        throw_error(MAPORL_ERR_INVALID_ARG, "lora.alpha: expected a finite number > 0, got %g", c.alpha);
    if (!(c.dropout >= 0 && c.dropout < 1))
        throw_error(MAPORL_ERR_INVALID_ARG, "lora.dropout: expected a number in [0, 1), got %g", c.dropout);
    if (c.targets == 0 || (c.targets >> kLoraTargets) != 0)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "lora.target_modules: expected a non-empty set of bits 0..%d (q_proj .. down_proj), got 0x%x",
                    kLoraTargets - 1, c.targets);
    scale = (F)(c.rslora ? c.alpha / std::sqrt((double)c.rank) : c.alpha / (double)c.rank);
    auto add = [&](const std::string & name, std::vector<int64_t> shape) {
        return gpt::add_tensor(layout.tensors, layout.total, name, std::move(shape));
    };
    layout.A.resize((size_t)layers);
    layout.B.resize((size_t)layers);
    for (int64_t l = 0; l < layers; ++l) {
        for (int t = 0; t < kLoraTargets; ++t) {
            layout.A[(size_t)l][(size_t)t] = layout.B[(size_t)l][(size_t)t] = -1;
            if (!(c.targets & (1u << t))) continue;
            const std::string p = "base_model.model.model.layers." + std::to_string(l) +
                (t < kGate ? ".self_attn." : ".mlp.") + kLoraTargetNames[t];
            layout.A[(size_t)l][(size_t)t] = add(p + ".lora_A.weight", {c.rank, in[(size_t)t]});
            layout.B[(size_t)l][(size_t)t] = add(p + ".lora_B.weight", {out[(size_t)t], c.rank});
        }
    }
    layout.vw = add("value_head.weight", {d_model});
    layout.vb = add("value_head.bias", {1});
    params.assign((size_t)layout.total, F(0));
    // PEFT: kaiming_uniform_(A, a = sqrt(5)): bound = sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(in); B = 0.
    std::mt19937_64 gen(seed_);
    for (size_t l = 0; l < layout.A.size(); ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            const int64_t a = layout.A[l][(size_t)t];
            if (a < 0) continue;
            const double bound = 1.0 / std::sqrt((double)in[(size_t)t]);
            F * x = p(a);
            for (int64_t i = 0; i < layout.tensors[(size_t)a].size; ++i)
                x[i] = (F)(bound * (2.0 * ((double)(gen() >> 11) / 9007199254740992.0) - 1.0));
        }
    if (value_w) std::copy(value_w, value_w + d_model, p(layout.vw));
    *p(layout.vb) = value_b;
    us.resize((size_t)layers);
}

template <typename F>
void Lora<F>::ensure_train_state() {
    if (grads.size() == params.size()) return;
    grads.assign(params.size(), F(0));
    m.assign(params.size(), F(0));
    v.assign(params.size(), F(0));
}

template <typename F>
bool Lora<F>::keep(int64_t layer, int t, int64_t i) const {
    const uint64_t k = mix64(mix64(seed ^ (uint64_t)step * 0x9e3779b97f4a7c15ull) ^ (uint64_t)nonce) ^
        ((uint64_t)(layer * kLoraTargets + t) << 40);
    const uint64_t h = mix64(k ^ (uint64_t)i);
    return (double)(h >> 11) / 9007199254740992.0 >= cfg.dropout;
}

template <typename F>
void Lora<F>::forward(int64_t layer, int t, F * o, const F * inp, int64_t N, bool train) {
    const int64_t Cin = in[(size_t)t], OC = out[(size_t)t], r = cfg.rank;
    const F * A = p(layout.A[(size_t)layer][(size_t)t]);
    const F * Bm = p(layout.B[(size_t)layer][(size_t)t]);
    std::vector<F> & u = us[(size_t)layer][(size_t)t];
    u.resize((size_t)(N * r));
    dropped = train && cfg.dropout > 0;
    const F * x = inp;
    std::vector<F> xd;
    if (dropped) {
        xd.resize((size_t)(N * Cin));
        const F inv = F(1) / (F)(1.0 - cfg.dropout);
        parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
            for (int64_t i = n0 * Cin; i < n1 * Cin; ++i) xd[(size_t)i] = keep(layer, t, i) ? inp[i] * inv : F(0);
        });
        x = xd.data();
    }
    gpt::matmul_forward(u.data(), x, A, (const F *)nullptr, N, Cin, r);
    for (F & e : u) e *= scale;
    std::vector<F> d((size_t)(N * OC));
    gpt::matmul_forward(d.data(), u.data(), Bm, (const F *)nullptr, N, r, OC);
    for (int64_t i = 0; i < N * OC; ++i) o[i] += d[(size_t)i];
}

template <typename F>
void Lora<F>::backward(int64_t layer, int t, F * dinp, const F * dout, const F * inp, int64_t N) {
    ensure_train_state();
    const int64_t Cin = in[(size_t)t], OC = out[(size_t)t], r = cfg.rank;
    const int64_t ia = layout.A[(size_t)layer][(size_t)t], ib = layout.B[(size_t)layer][(size_t)t];
    const std::vector<F> & u = us[(size_t)layer][(size_t)t];
    if (u.size() != (size_t)(N * r)) throw_error(MAPORL_ERR_INTERNAL, "lora backward: no forward of this shape");
    // d = u B^T: dB += dout^T u, du' = dout B; u = scale * x A^T: du = scale * du', dA += du^T x, dx += du A.
    std::vector<F> du((size_t)(N * r), F(0));
    gpt::matmul_backward(du.data(), g(ib), (F *)nullptr, dout, u.data(), p(ib), N, r, OC);
    for (F & e : du) e *= scale;
    if (!dropped) {
        gpt::matmul_backward(dinp, g(ia), (F *)nullptr, du.data(), inp, p(ia), N, Cin, r);
        return;
    }
    const F inv = F(1) / (F)(1.0 - cfg.dropout);
    std::vector<F> xd((size_t)(N * Cin)), dxd((size_t)(N * Cin), F(0));
    for (int64_t i = 0; i < N * Cin; ++i) xd[(size_t)i] = keep(layer, t, i) ? inp[i] * inv : F(0);
    gpt::matmul_backward(dxd.data(), g(ia), (F *)nullptr, du.data(), xd.data(), p(ia), N, Cin, r);
    for (int64_t i = 0; i < N * Cin; ++i)
        if (keep(layer, t, i)) dinp[i] += dxd[(size_t)i] * inv;
}

template <typename F>
void Lora<F>::forward_rows(int64_t layer, int t, F * o, const F * inp, const std::vector<int64_t> & rows) const {
    if (rows.empty()) return;
    const int64_t Cin = in[(size_t)t], OC = out[(size_t)t], r = cfg.rank, R = (int64_t)rows.size();
    std::vector<F> x((size_t)(R * Cin)), u((size_t)(R * r)), d((size_t)(R * OC));
    for (int64_t i = 0; i < R; ++i)
        std::copy(inp + rows[(size_t)i] * Cin, inp + (rows[(size_t)i] + 1) * Cin, x.data() + i * Cin);
    gpt::matmul_forward_rows(u.data(), x.data(), p(layout.A[(size_t)layer][(size_t)t]), (const F *)nullptr, R, Cin, r);
    for (F & e : u) e *= scale;
    gpt::matmul_forward_rows(d.data(), u.data(), p(layout.B[(size_t)layer][(size_t)t]), (const F *)nullptr, R, r, OC);
    for (int64_t i = 0; i < R; ++i) {
        F * dst = o + rows[(size_t)i] * OC;
        for (int64_t c = 0; c < OC; ++c) dst[c] += d[(size_t)(i * OC + c)];
    }
}

template <typename F>
void Lora<F>::merge_into(int64_t layer, int t, F * W) const {
    const int64_t Cin = in[(size_t)t], OC = out[(size_t)t], r = cfg.rank;
    const F * A = p(layout.A[(size_t)layer][(size_t)t]);
    const F * Bm = p(layout.B[(size_t)layer][(size_t)t]);
    parallel_for(OC, 8, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t c = 0; c < Cin; ++c) {
                double s = 0;
                for (int64_t k = 0; k < r; ++k) s += (double)Bm[o * r + k] * (double)A[k * Cin + c];
                W[o * Cin + c] = (F)((double)W[o * Cin + c] + (double)scale * s);
            }
    });
}

template struct Lora<float>;
template struct Lora<double>;

}  // namespace llama
}  // namespace maporl
