// logits.cpp: the CPU logits kernels, maporl_logprobs and maporl_fused_policy_loss, and their C entry points.
// Per valid token (a row of logits): pass A (row_stats: lse, entropy, logp) reads the row once, the policy
// loss of that one token gives dlogp (the same segment loop as maporl_policy_loss), and pass C (row_grad)
// reads the row again, now from cache, and writes the gradient. GSPO needs every log-prob of a sequence
// before any gradient, so it runs pass A over all rows first. Targets and the mask are checked before any
// output is written, so an error leaves an in-place logits buffer untouched.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "native/core/core.h"
#include "native/core/isa.h"
#include "native/rl/logits_row.h"
#include "native/rl/policy_loss.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace {

template <typename F>
RowStats row_stats(const F * z, int64_t V, int32_t y, F temp, bool entropy, F * e = nullptr, F * ms = nullptr) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa == Isa::Avx512) return avx512::row_stats_f32(z, V, y, temp, entropy, e, ms);
        if (isa == Isa::Avx2) return avx2::row_stats_f32(z, V, y, temp, entropy, e, ms);
    }
    return row_stats_t<ScalarLoad<F>, F>(z, V, y, temp, entropy, e, ms);
}

template <typename F>
void row_grad_e(const F * z, F * e, const F * ms, int64_t V, int32_t y, F temp, F lse, F H, F gl, F ge, F * g) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa == Isa::Avx512) return avx512::row_grad_e_f32(z, e, ms, V, y, temp, lse, H, gl, ge, g);
        if (isa == Isa::Avx2) return avx2::row_grad_e_f32(z, e, ms, V, y, temp, lse, H, gl, ge, g);
    }
    row_grad_e_t<ScalarLoad<F>, F>(z, e, ms, V, y, temp, lse, H, gl, ge, g);
}

template <typename F>
void row_grad(const F * z, int64_t V, int32_t y, F temp, F lse, F H, F gl, F ge, F * g) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa == Isa::Avx512) return avx512::row_grad_f32(z, V, y, temp, lse, H, gl, ge, g);
        if (isa == Isa::Avx2) return avx2::row_grad_f32(z, V, y, temp, lse, H, gl, ge, g);
    }
    row_grad_t<ScalarLoad<F>, F>(z, V, y, temp, lse, H, gl, ge, g);
}

void require_temperature(double temp) {
    if (!(temp > 0.0 && std::isfinite(temp)))
        throw_error(MAPORL_ERR_INVALID_ARG, "temperature: expected a finite number > 0, got %g", temp);
}

// First index n (of those with a valid mask, or all when mask is null) whose target is outside [0, V).
void require_targets(const int32_t * targets, const void * mask, maporl_mask_type mt, int64_t N, int64_t V) {
    for (int64_t n = 0; n < N; ++n) {
        if (mask) {
            const bool on = mt == MAPORL_MASK_U8 ? static_cast<const uint8_t *>(mask)[n] == 1
                                                 : static_cast<const float *>(mask)[n] == 1.0f;
            if (!on) continue;
        }
        if (targets[n] < 0 || targets[n] >= V)
            throw_error(MAPORL_ERR_INVALID_ARG, "targets: expected token ids in [0, %lld) (V), got %d at index %lld",
                        (long long)V, (int)targets[n], (long long)n);
    }
}

// A row of bfloat16 logits widened exactly (the vector widen where there is one).
void widen_row(const uint16_t * src, float * dst, int64_t V) {
    const Isa isa = active_isa();
    if (isa == Isa::Avx512) return avx512::widen_bf16(src, dst, V);
    if (isa == Isa::Avx2) return avx2::widen_bf16(src, dst, V);
    for (int64_t i = 0; i < V; ++i) dst[i] = bf16_to_float(src[i]);
}
void widen_row(const uint16_t * src, double * dst, int64_t V) {
    for (int64_t i = 0; i < V; ++i) dst[i] = (double)bf16_to_float(src[i]);
}

// Logits row n as F: the row itself, or, for bfloat16 logits, the row widened into `buf` (exact: a bfloat16 is
// the upper half of a float32), once per row: `at` remembers which row buf holds.
template <typename F>
struct RowSource {
    const F * f;
    const uint16_t * bf16;
    int64_t V;
    const F * row(int64_t n, std::vector<F> & buf, int64_t & at) const {
        if (bf16 == nullptr) return f + n * V;
        if (at != n) {
            buf.resize((size_t)V);
            widen_row(bf16 + n * V, buf.data(), V);
            at = n;
        }
        return buf.data();
    }
};

template <typename F>
void logprobs_rows(const RowSource<F> & src, const int32_t * targets, int64_t N, int64_t V, F temperature, F * logp,
                   F * entropy) {
    require_temperature((double)temperature);
    if (N > 0 && V < 1) throw_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when N > 0, got %lld", (long long)V);
    require_targets(targets, nullptr, MAPORL_MASK_U8, N, V);
    parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
        std::vector<F> buf;
        int64_t at = -1;
        for (int64_t n = n0; n < n1; ++n) {
            const RowStats r = row_stats<F>(src.row(n, buf, at), V, targets[n], temperature, entropy != nullptr);
            logp[n] = (F)r.logp;
            if (entropy) entropy[n] = (F)r.entropy;
        }
    });
}

}  // namespace

template <typename F>
void logprobs_cpu(const F * logits, const int32_t * targets, int64_t N, int64_t V, F temperature, F * logp,
                  F * entropy) {
    logprobs_rows<F>(RowSource<F>{logits, nullptr, V}, targets, N, V, temperature, logp, entropy);
}
template void logprobs_cpu<float>(const float *, const int32_t *, int64_t, int64_t, float, float *, float *);
template void logprobs_cpu<double>(const double *, const int32_t *, int64_t, int64_t, double, double *, double *);

void logprobs_cpu_bf16(const uint16_t * logits, const int32_t * targets, int64_t N, int64_t V, float temperature,
                       float * logp, float * entropy) {
    logprobs_rows<float>(RowSource<float>{nullptr, logits, V}, targets, N, V, temperature, logp, entropy);
}

template <typename F>
void logits_backward_cpu(const F * logits, const int32_t * targets, int64_t N, int64_t V, F temperature,
                         const F * grad_logp, const F * grad_entropy, F * grad_logits) {
    require_temperature((double)temperature);
    if (N > 0 && V < 1) throw_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when N > 0, got %lld", (long long)V);
    require_targets(targets, nullptr, MAPORL_MASK_U8, N, V);
    parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            const F * z = logits + n * V;
            F * g = grad_logits + n * V;
            const F gl = grad_logp[n], ge = grad_entropy ? grad_entropy[n] : F(0);
            if (gl == F(0) && ge == F(0)) {  // a masked token (or one the loss does not reach)
                std::memset((void *)g, 0, sizeof(F) * (size_t)V);
                continue;
            }
            const RowStats r = row_stats<F>(z, V, targets[n], temperature, ge != F(0));
            row_grad<F>(z, V, targets[n], temperature, (F)r.lse, (F)r.entropy, gl / temperature, ge / temperature, g);
        }
    });
}
template void logits_backward_cpu<float>(const float *, const int32_t *, int64_t, int64_t, float, const float *,
                                         const float *, float *);
template void logits_backward_cpu<double>(const double *, const int32_t *, int64_t, int64_t, double, const double *,
                                          const double *, double *);

template <typename F>
void fused_policy_loss_cpu(const FusedArgs<F> & fa, maporl_policy_loss_stats * stats) {
    const int64_t B = fa.loss.B, T = fa.loss.T, N = B * T, V = fa.V;
    const F temp = fa.temperature;
    require_temperature((double)temp);
    if (N > 0 && V < 1) throw_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when B*T > 0, got %lld", (long long)V);
    const maporl_policy_loss_params & P = fa.loss.params;
    const bool want_entropy = P.entropy_coef != 0.0f || fa.entropy_out != nullptr;
    // Scratch for what the caller did not ask for ([N] each; never [N, V]).
    std::vector<F> logp_s, ent_s, glp_s, gent_s, lse((size_t)N), H;
    PolicyLossArgs<F> a = fa.loss;
    a.logp = fa.logp_out ? fa.logp_out : (logp_s.resize((size_t)N), logp_s.data());
    F * ent = want_entropy ? (fa.entropy_out ? fa.entropy_out : (ent_s.resize((size_t)N), ent_s.data())) : nullptr;
    a.entropy = ent;  // when computed, also for the stats (entropy_mean) without an entropy bonus
    F * glp = fa.grad_logp_out ? fa.grad_logp_out : (glp_s.resize((size_t)N), glp_s.data());
    a.grad_logp = glp;
    F * gent = nullptr;
    if (P.entropy_coef != 0.0f) gent = (gent_s.resize((size_t)N), gent_s.data());
    a.grad_entropy = gent;
    const LossCfg c = loss_cfg(P, a.ref_logp != nullptr, a.entropy != nullptr, a.old_logp != nullptr);
    RowPlan p = plan_rows(a, false);  // checks the mask before anything is written
    require_targets(fa.targets, a.mask, a.mask_type, N, V);

    auto valid = [&](int64_t n) {
        return a.mask_type == MAPORL_MASK_U8 ? static_cast<const uint8_t *>(a.mask)[n] == 1
                                             : static_cast<const float *>(a.mask)[n] == 1.0f;
    };
    // Per-thread scratch for one row: e = exp(x - running max) and the chunk maxima (row_stats_t), so that the
    // gradient pass needs no second exp per element and reads only cache-resident data (non-GSPO path); and the
    // widened row of bfloat16 logits.
    struct Scratch {
        std::vector<F> e, ms, z;
        int64_t z_at = -1;
        bool keep_e;
    };
    const RowSource<F> src{fa.logits, fa.logits_bf16, V};
    auto pass_a = [&](int64_t n, Scratch & sc) {
        F * lp = const_cast<F *>(a.logp);
        if (!valid(n)) {
            lp[n] = F(0);
            if (ent) ent[n] = F(0);
            lse[n] = F(0);
            return;
        }
        const RowStats r = row_stats<F>(src.row(n, sc.z, sc.z_at), V, fa.targets[n], temp, want_entropy,
                                        sc.keep_e ? sc.e.data() : nullptr, sc.keep_e ? sc.ms.data() : nullptr);
        lp[n] = (F)r.logp;
        lse[n] = (F)r.lse;
        if (ent) ent[n] = (F)r.entropy;
    };
    std::vector<PgSums> sums((size_t)N);
    std::vector<int64_t> row_of((size_t)N);
    auto seg_and_pass_c = [&](int64_t n, Scratch & sc) {
        const int64_t b = n / T, t = n % T;
        row_of[n] = b;
        run_segment(c, row_segment(a, b, t, t + 1, p.seq[b], p.w[b], p.wa[b]), sums[n]);
        F * g = fa.grad_logits + n * V;
        if (!valid(n)) {
            std::memset((void *)g, 0, sizeof(F) * (size_t)V);
            return;
        }
        const F gl = glp[n] / temp, ge = gent ? gent[n] / temp : F(0), h = ent ? ent[n] : F(0);
        const F * z = src.row(n, sc.z, sc.z_at);
        if (sc.keep_e)
            row_grad_e<F>(z, sc.e.data(), sc.ms.data(), V, fa.targets[n], temp, lse[n], h, gl, ge, g);
        else
            row_grad<F>(z, V, fa.targets[n], temp, lse[n], h, gl, ge, g);
    };
    if (P.type == MAPORL_LOSS_GSPO) {
        parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
            Scratch sc{{}, {}, {}, -1, false};
            for (int64_t n = n0; n < n1; ++n) pass_a(n, sc);
        });
        p = plan_rows(a, true);
        parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
            Scratch sc{{}, {}, {}, -1, false};
            for (int64_t n = n0; n < n1; ++n) seg_and_pass_c(n, sc);
        });
    } else {
        parallel_for(N, 1, [&](int64_t n0, int64_t n1) {
            Scratch sc{std::vector<F>((size_t)V), std::vector<F>((size_t)(V / 8 + 64)), {}, -1, true};
            for (int64_t n = n0; n < n1; ++n) {
                pass_a(n, sc);
                seg_and_pass_c(n, sc);
            }
        });
    }
    finish_stats(c, p, sums, row_of, stats);
}
template void fused_policy_loss_cpu<float>(const FusedArgs<float> &, maporl_policy_loss_stats *);
template void fused_policy_loss_cpu<double>(const FusedArgs<double> &, maporl_policy_loss_stats *);

namespace {

// The C entry points' bodies; exactly one of logits (float32) and bf16 is set.
maporl_status logprobs_entry(const maporl_device & device, const float * logits, const uint16_t * bf16,
                             const int32_t * targets, int64_t N, int64_t V, float temperature, float * logp_out,
                             float * entropy_out) {
    require_device(device);
    require_dims(N, V, "N", "V");
    require_ptr(logits ? (const void *)logits : (const void *)bf16, "logits", N * V);
    require_ptr(targets, "targets", N);
    require_ptr(logp_out, "logp_out", N);
    if (device == MAPORL_DEVICE_CUDA) {
        require_temperature((double)temperature);
        return logprobs_cuda(logits, bf16, targets, N, V, temperature, logp_out, entropy_out);
    }
    if (bf16)
        logprobs_cpu_bf16(bf16, targets, N, V, temperature, logp_out, entropy_out);
    else
        logprobs_cpu<float>(logits, targets, N, V, temperature, logp_out, entropy_out);
    return MAPORL_OK;
}

maporl_status fused_entry(const maporl_device & device, const float * logits, const uint16_t * bf16,
                          const int32_t * targets, const float * old_logp, const float * advantages, int adv_per_seq,
                          const void * mask, const maporl_mask_type & mask_type, const float * ref_logp, int64_t B,
                          int64_t T, int64_t V, float temperature, maporl_policy_loss_params params,
                          float * grad_logits_out, float * logp_out, float * entropy_out, float * grad_logp_out,
                          maporl_policy_loss_stats * stats_out) {
    require_device(device);
    require_mask_type(mask_type);
    require_dims(B, T, "B", "T");
    const int64_t N = B * T;
    require_dims(N, V, "B*T", "V");
    require_ptr(logits ? (const void *)logits : (const void *)bf16, "logits", N * V);
    require_ptr(targets, "targets", N);
    require_ptr(advantages, "advantages", adv_per_seq ? B : N);
    require_ptr(mask, "mask", N);
    require_ptr(grad_logits_out, "grad_logits_out", N * V);
    if (bf16 != nullptr && N * V > 0) {  // a float32 gradient over 2-byte logits cannot be in place
        const char *g0 = (const char *)grad_logits_out, *g1 = g0 + 4 * N * V;
        const char *z0 = (const char *)bf16, *z1 = z0 + 2 * N * V;
        if (g0 < z1 && z0 < g1)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "grad_logits_out: expected memory that does not overlap the bfloat16 "
                        "logits (no in place for bf16), got an overlapping buffer");
    }
    FusedArgs<float> fa;
    fa.logits = logits;
    fa.logits_bf16 = bf16;
    fa.targets = targets;
    fa.loss = PolicyLossArgs<float>{
        nullptr, old_logp, advantages, adv_per_seq ? 1 : 0, mask, mask_type, ref_logp, nullptr, B, T,
        params,  nullptr,  nullptr};
    fa.V = V;
    fa.temperature = temperature;
    fa.grad_logits = grad_logits_out;
    fa.logp_out = logp_out;
    fa.entropy_out = entropy_out;
    fa.grad_logp_out = grad_logp_out;
    loss_cfg(params, ref_logp != nullptr, true, old_logp != nullptr);
    if (device == MAPORL_DEVICE_CUDA) {
        require_temperature((double)temperature);
        return fused_policy_loss_cuda(fa, stats_out);
    }
    fused_policy_loss_cpu<float>(fa, stats_out);
    return MAPORL_OK;
}

}  // namespace

}  // namespace maporl

using namespace maporl;

extern "C" {

maporl_status maporl_logprobs(maporl_device device, const float * logits, const int32_t * targets, int64_t N, int64_t V,
                              float temperature, float * logp_out, float * entropy_out) {
    using namespace maporl;
    return guarded(
        [&] { return logprobs_entry(device, logits, nullptr, targets, N, V, temperature, logp_out, entropy_out); });
}

maporl_status maporl_logprobs_bf16(maporl_device device, const uint16_t * logits, const int32_t * targets, int64_t N,
                                   int64_t V, float temperature, float * logp_out, float * entropy_out) {
    using namespace maporl;
    return guarded(
        [&] { return logprobs_entry(device, nullptr, logits, targets, N, V, temperature, logp_out, entropy_out); });
}

maporl_status maporl_fused_policy_loss(maporl_device device, const float * logits, const int32_t * targets,
                                       const float * old_logp, const float * advantages, int adv_per_seq,
                                       const void * mask, maporl_mask_type mask_type, const float * ref_logp, int64_t B,
                                       int64_t T, int64_t V, float temperature, maporl_policy_loss_params params,
                                       float * grad_logits_out, float * logp_out, float * entropy_out,
                                       float * grad_logp_out, maporl_policy_loss_stats * stats_out) {
    using namespace maporl;
    return guarded([&] {
        return fused_entry(device, logits, nullptr, targets, old_logp, advantages, adv_per_seq, mask, mask_type,
                           ref_logp, B, T, V, temperature, params, grad_logits_out, logp_out, entropy_out,
                           grad_logp_out, stats_out);
    });
}

maporl_status maporl_fused_policy_loss_bf16(maporl_device device, const uint16_t * logits, const int32_t * targets,
                                            const float * old_logp, const float * advantages, int adv_per_seq,
                                            const void * mask, maporl_mask_type mask_type, const float * ref_logp,
                                            int64_t B, int64_t T, int64_t V, float temperature,
                                            maporl_policy_loss_params params, float * grad_logits_out, float * logp_out,
                                            float * entropy_out, float * grad_logp_out,
                                            maporl_policy_loss_stats * stats_out) {
    using namespace maporl;
    return guarded([&] {
        return fused_entry(device, nullptr, logits, targets, old_logp, advantages, adv_per_seq, mask, mask_type,
                           ref_logp, B, T, V, temperature, params, grad_logits_out, logp_out, entropy_out,
                           grad_logp_out, stats_out);
    });
}

}  // extern "C"
