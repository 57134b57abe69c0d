// sampling.cu: CUDA maporl_sample / maporl_sample_logprobs, one block per row. Same rules as the CPU
// (native/sampling.cpp): the total order (logit, then lower index), top-k, the top-p prefix (mass ranked before
// < p * total), min-p, and Gumbel-max with philox.h's noise, which is the same float on both (det_log uses only
// correctly rounded __f*_rn operations), so the same (row, parameters, seed, position) gives the same token as
// on the CPU. The thresholds are found without sorting: top-k and top-p by bisection over the 32-bit
// order-preserving key of the logit (count or mass of the keys above), ties at the threshold taken in index
// order by a block-wide ordered scan.
// NOTE(determinism): a top-p or min-p boundary decided within float rounding of the mass can go the other way
// than on the CPU (exp differs in the last bits); away from such boundaries the tokens are identical.
// With B < 64 the vocabulary is split across blocks instead (sampling_split.cu), so that B = 1 still fills the GPU.
// NOTE(perf): each bisection step rereads the row (from L2). Correctness first; not yet run on a GPU.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../native/philox.h"
#include "../native/sampling.h"
#include "common.cuh"
#include "sampling_common.cuh"

namespace maporl {
namespace {

using namespace sampling_cuda;

__global__ void sample_kernel(const float * __restrict__ logits, int64_t V, maporl_sample_params P,
                              const int32_t * __restrict__ given, int32_t * tok, float * lp, float * raw, uint8_t * valid) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    __shared__ long long shl[32];
    __shared__ int shw[32];
    const int64_t b = blockIdx.x;
    const float * z = logits + b * V;
    const RowP r = row_params(P, b);
    const int32_t g = given ? given[b] : -1;
    const int tid = threadIdx.x, bd = blockDim.x;

    float m = -INFINITY;
    int bad = 0;
    for (int64_t i = tid; i < V; i += bd) {
        const float v = z[i];
        if (isnan(v) || v == INFINITY) bad = 1;
        m = fmaxf(m, v);
    }
    bad = __syncthreads_or(bad);
    m = block_max<float>(m, shf);
    if (bad || m == -INFINITY) {
        if (tid == 0) {
            if (tok && !given) tok[b] = -1;
            if (lp) lp[b] = NAN;
            if (raw) raw[b] = NAN;
            if (valid) valid[b] = 0;
        }
        return;
    }
    long long am = LLONG_MAX;
    double sraw = 0.0;
    for (int64_t i = tid; i < V; i += bd) {
        if (z[i] == m && am == LLONG_MAX) am = i;
        sraw += (double)expf(z[i] - m);
    }
    am = block_min(am, shl);
    sraw = block_sum(sraw, shd);
    const double lse_raw = (double)m + log(sraw);
    auto finish = [&](int32_t t, float lpv) {
        if (tid == 0) {
            if (tok && !given) tok[b] = t;
            if (lp) lp[b] = lpv;
            if (raw) raw[b] = (float)((double)z[t] - lse_raw);
            if (valid) valid[b] = 1;
        }
    };
    if (r.T == 0.0f) {
        const int32_t t = g >= 0 ? g : (int32_t)am;
        finish(t, t == am ? 0.0f : -INFINITY);
        return;
    }
    const float T = r.T, M = T == 1.0f ? m : m / T;
    auto x_of = [&](int64_t i) { return T == 1.0f ? z[i] : z[i] / T; };
    auto e_of = [&](int64_t i) { return expf(x_of(i) - M); };
    const bool has_k = r.k > 0 && r.k < V, has_p = r.p > 0.0f && r.p < 1.0f, has_min = r.minp > 0.0f;

    // top-k: the smallest key t with fewer than k finite keys above it; ties at t in index order.
    bool k_on = false;
    uint32_t tk = 0;
    int64_t ik = V;
    if (has_k) {
        long long finite = 0;
        for (int64_t i = tid; i < V; i += bd) finite += z[i] > -INFINITY;
        finite = block_sum(finite, shl);
        if (finite > r.k) {
            k_on = true;
            uint32_t lo = 0, hi = 0xFFFFFFFFu;
            while (lo < hi) {
                const uint32_t mid = lo + (hi - lo) / 2;
                long long c = 0;
                for (int64_t i = tid; i < V; i += bd) c += z[i] > -INFINITY && okey(z[i]) > mid;
                c = block_sum(c, shl);
                if (c < r.k) hi = mid;
                else lo = mid + 1;
            }
            tk = lo;
            long long gt = 0;
            for (int64_t i = tid; i < V; i += bd) gt += z[i] > -INFINITY && okey(z[i]) > tk;
            gt = block_sum(gt, shl);
            ik = nth_index(0, V, (int64_t)r.k - gt, [&](int64_t i) { return z[i] > -INFINITY && okey(z[i]) == tk; }, shw);
        }
    }
    auto in_k = [&](int64_t i) {
        if (!(z[i] > -INFINITY)) return false;
        if (!k_on) return true;
        const uint32_t q = okey(z[i]);
        return q > tk || (q == tk && i <= ik);
    };

    // top-p over the top-k set: the smallest key t whose mass above is < target; ties in index order.
    bool p_on = false;
    uint32_t tp = 0;
    int64_t ip = V;
    if (has_p) {
        double total = 0.0;
        const bool renorm = has_k && P.filter_order == MAPORL_FILTER_TOP_K_FIRST;
        for (int64_t i = tid; i < V; i += bd)
            if (renorm ? in_k(i) : z[i] > -INFINITY) total += (double)e_of(i);
        total = block_sum(total, shd);
        const double target = (double)r.p * total;
        p_on = true;
        uint32_t lo = 0, hi = 0xFFFFFFFFu;
        while (lo < hi) {
            const uint32_t mid = lo + (hi - lo) / 2;
            double f = 0.0;
            for (int64_t i = tid; i < V; i += bd)
                if (in_k(i) && okey(z[i]) > mid) f += (double)e_of(i);
            f = block_sum(f, shd);
            if (f < target) hi = mid;
            else lo = mid + 1;
        }
        tp = lo;
        double f = 0.0;
        long long ties = 0;
        float et = 0.0f;
        for (int64_t i = tid; i < V; i += bd) {
            if (!in_k(i)) continue;
            const uint32_t q = okey(z[i]);
            if (q > tp) f += (double)e_of(i);
            else if (q == tp) { ++ties; et = e_of(i); }
        }
        f = block_sum(f, shd);
        ties = block_sum(ties, shl);
        et = block_max<float>(et, shf);  // every tie has the same logit, so the same e
        long long keep = 0;
        for (double before = f; keep < ties && before < target; ++keep) before += (double)et;
        if (keep < 1) keep = 1;
        ip = nth_index(0, V, keep, [&](int64_t i) { return in_k(i) && okey(z[i]) == tp; }, shw);
    }

    // Support, its mass, and the Gumbel race (ties to the lower index).
    double S = 0.0;
    float best_key = -INFINITY;
    long long best = LLONG_MAX;
    int given_in = 0;
    for (int64_t i = tid; i < V; i += bd) {
        if (!in_k(i)) continue;
        if (p_on) {
            const uint32_t q = okey(z[i]);
            if (!(q > tp || (q == tp && i <= ip))) continue;
        }
        const float e = e_of(i);
        if (has_min && e < r.minp) continue;
        S += (double)e;
        if (i == g) given_in = 1;
        if (g < 0) {
            const float key = MAPORL_FADD(x_of(i), gumbel(r.seed, r.pos, i));
            if (best == LLONG_MAX || key > best_key) {  // strided ascending: the first of equal keys is the lowest index
                best_key = key;
                best = i;
            }
        }
    }
    S = block_sum(S, shd);
    given_in = __syncthreads_or(given_in);
    if (g >= 0) {
        finish(g, given_in ? (float)((double)x_of(g) - (double)M - log(S)) : -INFINITY);
        return;
    }
    const float bk = block_max<float>(best_key, shf);
    best = block_min(best_key == bk ? best : LLONG_MAX, shl);
    finish((int32_t)best, (float)((double)x_of(best) - (double)M - log(S)));
}

template <typename T>
maporl_status copy_row_params(const T * dev, int64_t B, std::vector<T> & host, const T ** view) {
    if (!dev) return MAPORL_OK;
    host.resize((size_t)B);
    MAPORL_CUDA_CALL(cudaMemcpy(host.data(), dev, sizeof(T) * (size_t)B, cudaMemcpyDeviceToHost));
    *view = host.data();
    return MAPORL_OK;
}

}  // namespace

maporl_status sample_cuda(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p, const int32_t * given,
                          int32_t * tokens, float * logprobs, float * raw_logprobs, uint8_t * valid) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("sample"));
    if (B > 0 && V < 1) return set_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when B > 0, got %lld", (long long)V);
    // The per-row parameters (and given tokens) are device arrays: check a host copy, as the CPU does.
    maporl_sample_params h = p;
    std::vector<float> t, tp, mp;
    std::vector<int32_t> k, gv;
    std::vector<uint64_t> sd;
    std::vector<int64_t> ps;
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.temperature, B, t, &h.temperature));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.top_k, B, k, &h.top_k));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.top_p, B, tp, &h.top_p));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.min_p, B, mp, &h.min_p));
    try {
        check_sample_params(h, B);
    } catch (const Error & e) {
        return set_error(e.status, "%s", e.message.c_str());
    }
    if (given) {
        const int32_t * gh = nullptr;
        MAPORL_RETURN_IF_ERROR(copy_row_params(given, B, gv, &gh));
        for (int64_t b = 0; b < B; ++b)
            if (gh[b] < 0 || gh[b] >= V)
                return set_error(MAPORL_ERR_INVALID_ARG, "tokens: expected token ids in [0, %lld) (V), got %d at index %lld",
                                 (long long)V, (int)gh[b], (long long)b);
    }
    if (B == 0) return MAPORL_OK;
    if (const int S = sample_split_slices(h, B, V))
        return sample_split_cuda(logits, B, V, S, p, h, given, tokens, logprobs, raw_logprobs, valid);
    sample_kernel<<<(unsigned)B, kThreads>>>(logits, V, p, given, tokens, logprobs, raw_logprobs, valid);
    MAPORL_CUDA_CALL(cudaGetLastError());
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

}  // namespace maporl
