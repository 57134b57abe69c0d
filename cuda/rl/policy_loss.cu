// policy_loss.cu: CUDA policy loss and value loss. Same three steps as the CPU (native/rl/policy_loss.cpp):
//   1. plan_kernel, one block per row: valid tokens, the first bad mask value, gspo's sequence mean (double);
//   2. the host computes the aggregation weights from the counts (agg_weight, shared with the CPU);
//   3. token_kernel, grid-stride over tokens: the shared per-token formulas (native/rl/policy_loss_math.h), the
//      gradients, and per-block partial sums (double) that the host adds in block order. The grid size is
//      fixed, so the statistics are deterministic. The CPU path is the reference (test_policy_loss.cpp).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "native/rl/policy_loss.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 512;  // fixed: the partial sums, and so the statistics, do not depend on the device
enum { kPg, kKl, kEnt, kClip, kLower, kNkl, kKlv, kEntv, kRatio, kTokens, kMax, kStats };

template <typename M>
__device__ __forceinline__ float mval(const void * m, int64_t i) {
    return (float)static_cast<const M *>(m)[i];
}
__device__ __forceinline__ float mask_at(const void * m, int mt, int64_t i) {
    return mt == MAPORL_MASK_U8 ? mval<uint8_t>(m, i) : mval<float>(m, i);
}

__global__ void plan_kernel(const void * __restrict__ mask, int mt, const float * __restrict__ lp,
                            const float * __restrict__ old, int gspo, int64_t T, double * __restrict__ len,
                            double * __restrict__ seq, unsigned long long * __restrict__ bad) {
    __shared__ double sh[32];
    const int64_t b = blockIdx.x;
    double n = 0, d = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        const int64_t i = b * T + t;
        const float m = mask_at(mask, mt, i);
        if (m == 1.0f) {
            n += 1;
            if (gspo) d += (double)lp[i] - (double)old[i];
        } else if (m != 0.0f) {
            atomicMin(bad, (unsigned long long)i);
        }
    }
    n = block_sum(n, sh);
    d = block_sum(d, sh);
    if (threadIdx.x == 0) {
        len[b] = n;
        seq[b] = n > 0 ? d / n : 0.0;
    }
}

__global__ void token_kernel(PolicyLossArgs<float> a, LossCfg c, const double * __restrict__ w,
                             const double * __restrict__ wa, const double * __restrict__ seq,
                             double * __restrict__ partials) {
    __shared__ double sh[32];
    const int64_t n = a.B * a.T;
    double acc[kStats] = {};
    acc[kMax] = -INFINITY;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / a.T;
        const bool valid = mask_at(a.mask, a.mask_type, i) == 1.0f;
        if (!valid) {
            if (a.grad_logp) a.grad_logp[i] = 0.0f;
            if (a.grad_entropy) a.grad_entropy[i] = 0.0f;
            continue;
        }
        const float lp = a.logp[i];
        const float old = a.old_logp ? a.old_logp[i] : lp;
        const float adv = a.adv_per_seq ? a.advantages[b] : a.advantages[i];
        const float ref = c.kl != MAPORL_KL_NONE ? a.ref_logp[i] : 0.0f;
        const TokenTerms<ScalarOps<float>> t = token_terms<ScalarOps<float>>(c, lp, old, adv, (float)seq[b], ref);
        // w: the policy term's weight, wa: the KL and entropy terms' (they differ for GSPO only; the CPU's rule).
        const float wb = (float)w[b], wab = (float)wa[b];
        if (a.grad_logp)
            a.grad_logp[i] = wb == wab ? wb * (t.dpg + c.kl_coef * t.dkl) : wb * t.dpg + wab * (c.kl_coef * t.dkl);
        if (a.grad_entropy) a.grad_entropy[i] = -c.ent_coef * wab;
        const double ent = a.entropy ? (double)a.entropy[i] : 0.0;
        acc[kPg] += w[b] * t.pg;
        acc[kKl] += wa[b] * t.kl;
        acc[kEnt] += wa[b] * ent;
        acc[kClip] += t.clip ? 1.0 : 0.0;
        acc[kLower] += t.lower ? 1.0 : 0.0;
        acc[kNkl] += t.nkl;
        acc[kKlv] += t.kl;
        acc[kEntv] += ent;
        acc[kRatio] += t.ratio;
        acc[kTokens] += 1.0;
        acc[kMax] = fmax(acc[kMax], (double)t.ratio);
    }
    for (int k = 0; k < kStats; ++k) {
        const double v = k == kMax ? block_max<double>(acc[k], sh) : block_sum<double>(acc[k], sh);
        if (threadIdx.x == 0) partials[(int64_t)blockIdx.x * kStats + k] = v;
    }
}

__global__ void value_kernel(const float * __restrict__ v, const float * __restrict__ old, const float * __restrict__ R,
                             const void * __restrict__ mask, int mt, int64_t B, int64_t T, float clip,
                             const double * __restrict__ w, float * __restrict__ grad, double * __restrict__ partials) {
    __shared__ double sh[32];
    const int64_t n = B * T;
    double loss = 0, nc = 0, vs = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (mask_at(mask, mt, i) != 1.0f) {
            if (grad) grad[i] = 0.0f;
            continue;
        }
        const float wb = (float)w[i / T], x = v[i], r = R[i];
        const float l1 = (x - r) * (x - r);
        float li = l1, g = (x - r) * wb;
        if (clip > 0.0f) {
            const float lo = old[i] - clip, hi = old[i] + clip;
            const float vc = x < lo ? lo : (x > hi ? hi : x);
            const float l2 = (vc - r) * (vc - r);
            if (l2 > l1) {
                li = l2;
                g = 0.0f;
                nc += 1;
            }
        }
        loss += w[i / T] * 0.5 * (double)li;
        vs += x;
        if (grad) grad[i] = g;
    }
    loss = block_sum(loss, sh);
    nc = block_sum(nc, sh);
    vs = block_sum(vs, sh);
    if (threadIdx.x == 0) {
        partials[blockIdx.x * 3 + 0] = loss;
        partials[blockIdx.x * 3 + 1] = nc;
        partials[blockIdx.x * 3 + 2] = vs;
    }
}

int grid_for(int64_t n) {
    const int64_t g = (n + kThreads - 1) / kThreads;
    return (int)(g < kBlocks ? (g > 0 ? g : 1) : kBlocks);
}

// Steps 1 and 2: counts on the device, weights on the host; w_dev receives [2B] doubles (the policy term's weights,
// then the KL / entropy terms'), seq_dev [B].
maporl_status plan_cuda(const PolicyLossArgs<float> & a, bool with_seq, RowPlan & p, DeviceBuffer & w_dev,
                        DeviceBuffer & seq_dev) {
    const int64_t B = a.B;
    DeviceBuffer len_dev, bad_dev;
    MAPORL_RETURN_IF_ERROR(len_dev.alloc(sizeof(double) * (size_t)B));
    MAPORL_RETURN_IF_ERROR(seq_dev.alloc(sizeof(double) * (size_t)B));
    MAPORL_RETURN_IF_ERROR(w_dev.alloc(sizeof(double) * (size_t)(2 * B)));
    MAPORL_RETURN_IF_ERROR(bad_dev.alloc(sizeof(unsigned long long)));
    const unsigned long long none = ~0ull;
    MAPORL_CUDA_CALL(cudaMemcpy(bad_dev.ptr, &none, sizeof none, cudaMemcpyHostToDevice));
    const bool gspo = with_seq && a.params.type == MAPORL_LOSS_GSPO;
    MAPORL_RETURN_IF_ERROR(check_grid(B, "policy_loss: rows (B)"));
    if (B > 0) {
        plan_kernel<<<(unsigned)B, kThreads>>>(a.mask, (int)a.mask_type, a.logp, a.old_logp, gspo ? 1 : 0, a.T,
                                               len_dev.as<double>(), seq_dev.as<double>(),
                                               bad_dev.as<unsigned long long>());
        MAPORL_CUDA_CALL(cudaGetLastError());
    }
    unsigned long long bad = 0;
    MAPORL_CUDA_CALL(cudaMemcpy(&bad, bad_dev.ptr, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad != none) {
        const size_t msz = a.mask_type == MAPORL_MASK_U8 ? 1 : 4;
        float mv = 0;
        uint8_t mb = 0;
        if (msz == 1)
            MAPORL_CUDA_CALL(cudaMemcpy(&mb, static_cast<const char *>(a.mask) + bad, 1, cudaMemcpyDeviceToHost));
        else
            MAPORL_CUDA_CALL(cudaMemcpy(&mv, static_cast<const char *>(a.mask) + 4 * bad, 4, cudaMemcpyDeviceToHost));
        return set_error(
            MAPORL_ERR_INVALID_ARG, "mask: expected 0 or 1 at every position, got %g at index %llu (row %llu, t %llu)",
            msz == 1 ? (double)mb : (double)mv, bad, bad / (unsigned long long)a.T, bad % (unsigned long long)a.T);
    }
    p.len.assign((size_t)B, 0.0);
    if (B > 0)
        MAPORL_CUDA_CALL(cudaMemcpy(p.len.data(), len_dev.ptr, sizeof(double) * (size_t)B, cudaMemcpyDeviceToHost));
    for (int64_t b = 0; b < B; ++b) {
        p.tokens += p.len[b];
        p.seqs += p.len[b] > 0 ? 1 : 0;
    }
    plan_weights(a.params, a.T, p);
    if (B > 0) {
        MAPORL_CUDA_CALL(cudaMemcpy(w_dev.ptr, p.w.data(), sizeof(double) * (size_t)B, cudaMemcpyHostToDevice));
        MAPORL_CUDA_CALL(
            cudaMemcpy(w_dev.as<double>() + B, p.wa.data(), sizeof(double) * (size_t)B, cudaMemcpyHostToDevice));
    }
    return MAPORL_OK;
}

}  // namespace

maporl_status policy_loss_cuda(const PolicyLossArgs<float> & a, maporl_policy_loss_stats * st) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("policy_loss"));
    LossCfg c;
    try {
        c = loss_cfg(a.params, a.ref_logp != nullptr, a.entropy != nullptr, a.old_logp != nullptr);
    } catch (const Error & e) { return set_error(e.status, "%s", e.message.c_str()); }
    RowPlan p;
    DeviceBuffer w_dev, seq_dev, part_dev;
    MAPORL_RETURN_IF_ERROR(plan_cuda(a, true, p, w_dev, seq_dev));
    const int64_t n = a.B * a.T;
    const int grid = grid_for(n);
    MAPORL_RETURN_IF_ERROR(part_dev.alloc(sizeof(double) * kStats * (size_t)grid));
    token_kernel<<<grid, kThreads>>>(a, c, w_dev.as<double>(), w_dev.as<double>() + a.B, seq_dev.as<double>(),
                                     part_dev.as<double>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    std::vector<double> part((size_t)grid * kStats);
    MAPORL_CUDA_CALL(cudaMemcpy(part.data(), part_dev.ptr, sizeof(double) * part.size(), cudaMemcpyDeviceToHost));
    if (!st) return MAPORL_OK;
    double s[kStats] = {};
    s[kMax] = -INFINITY;
    for (int g = 0; g < grid; ++g)
        for (int k = 0; k < kStats; ++k) {
            const double v = part[(size_t)g * kStats + k];
            if (k == kMax)
                s[k] = v > s[k] ? v : s[k];
            else
                s[k] += v;
        }
    const double tok = s[kTokens], inv = tok > 0 ? 1.0 / tok : 0.0;
    st->pg_loss = s[kPg];
    st->kl_loss = s[kKl];
    st->entropy_loss = s[kEnt];
    st->loss = s[kPg] + (double)c.kl_coef * s[kKl] - (double)c.ent_coef * s[kEnt];
    st->clip_frac = s[kClip] * inv;
    st->clip_frac_lower = s[kLower] * inv;
    st->approx_kl = s[kNkl] * inv;
    st->kl_mean = s[kKlv] * inv;
    st->entropy_mean = s[kEntv] * inv;
    st->ratio_mean = s[kRatio] * inv;
    st->ratio_max = s[kMax];
    st->tokens = tok;
    st->sequences = p.seqs;
    return MAPORL_OK;
}

maporl_status value_loss_cuda(const float * values, const float * old_values, const float * returns, const void * mask,
                              maporl_mask_type mask_type, int64_t B, int64_t T, float clip, maporl_loss_agg agg,
                              double normalizer, float * grad, maporl_value_loss_stats * st) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("value_loss"));
    maporl_policy_loss_params pp = maporl_policy_loss_default_params();
    pp.agg = agg;
    pp.normalizer = normalizer;
    try {
        loss_cfg(pp, false, false, true);
    } catch (const Error & e) { return set_error(e.status, "%s", e.message.c_str()); }
    PolicyLossArgs<float> a{values, nullptr, values, 0, mask, mask_type, nullptr, nullptr, B, T, pp, nullptr, nullptr};
    RowPlan p;
    DeviceBuffer w_dev, seq_dev, part_dev;
    MAPORL_RETURN_IF_ERROR(plan_cuda(a, false, p, w_dev, seq_dev));
    const int grid = grid_for(B * T);
    MAPORL_RETURN_IF_ERROR(part_dev.alloc(sizeof(double) * 3 * (size_t)grid));
    value_kernel<<<grid, kThreads>>>(values, old_values, returns, mask, (int)mask_type, B, T, clip, w_dev.as<double>(),
                                     grad, part_dev.as<double>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    std::vector<double> part((size_t)grid * 3);
    MAPORL_CUDA_CALL(cudaMemcpy(part.data(), part_dev.ptr, sizeof(double) * part.size(), cudaMemcpyDeviceToHost));
    if (!st) return MAPORL_OK;
    double L = 0, C = 0, S = 0;
    for (int g = 0; g < grid; ++g) {
        L += part[(size_t)g * 3];
        C += part[(size_t)g * 3 + 1];
        S += part[(size_t)g * 3 + 2];
    }
    const double inv = p.tokens > 0 ? 1.0 / p.tokens : 0.0;
    st->loss = L;
    st->clip_frac = C * inv;
    st->value_mean = S * inv;
    st->tokens = p.tokens;
    return MAPORL_OK;
}

}  // namespace maporl
