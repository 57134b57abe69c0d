// sampling.cu: CUDA maporl_sample / maporl_sample_logprobs, one block per row. Same rules as the CPU
// (native/sampling.cpp): the total order (logit, then lower index), top-k, the top-p prefix (mass ranked before
// < p * total), min-p, and Gumbel-max with philox.h's noise, which is the same float on both (det_log uses only
// correctly rounded __f*_rn operations), so the same (row, parameters, seed, position) gives the same token as
// on the CPU. The thresholds are found without sorting: top-k and top-p by bisection over the 32-bit
// order-preserving key of the logit (count or mass of the keys above), ties at the threshold taken in index
// order by a block-wide ordered scan.
// NOTE(determinism): a top-p or min-p boundary decided within float rounding of the mass can go the other way
// than on the CPU (exp differs in the last bits); away from such boundaries the tokens are identical.
// Rows without top-k / top-p and B < 64 split the vocabulary across blocks (split_slices), so that B = 1 still
// fills the GPU; filtered rows keep one block per row (their bisections need row-wide counts at every step).
// NOTE(perf): each bisection step rereads the row (from L2). Correctness first; not yet run on a GPU.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../native/philox.h"
#include "../native/sampling.h"
#include "common.cuh"

namespace maporl {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t okey(float z) {
    const uint32_t b = __float_as_uint(z);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ long long block_min(long long v, long long * sh) {
    for (int d = 16; d > 0; d >>= 1) v = min(v, __shfl_down_sync(kFull, v, d));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    long long s = LLONG_MAX;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s = min(s, sh[w]);
    return s;
}

// Index of the m-th (1-based) element satisfying pred, in index order; V if there are fewer.
template <class Pred>
__device__ int64_t nth_index(int64_t V, int64_t m, Pred pred, int * shw) {
    __shared__ long long found, seen;
    if (threadIdx.x == 0) { found = V; seen = 0; }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t base = 0; base < V; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const bool f = i < V && pred(i);
        const unsigned ballot = __ballot_sync(kFull, f);
        if (lane == 0) shw[warp] = __popc(ballot);
        __syncthreads();
        long long off = seen, total = 0;
        for (int w = 0; w < nw; ++w) {
            if (w < warp) off += shw[w];
            total += shw[w];
        }
        const long long rank = off + __popc(ballot & ((1u << lane) - 1u));
        if (f && rank == m - 1) found = i;
        __syncthreads();
        if (threadIdx.x == 0) seen += total;
        __syncthreads();
        if (found != V) break;
    }
    return found;
}

struct RowP {
    float T;
    int32_t k;
    float p, minp;
    uint64_t seed;
    int64_t pos;
};

__device__ RowP row_params(const maporl_sample_params & P, int64_t b) {
    RowP r;
    r.T = P.temperature ? P.temperature[b] : P.temperature_all;
    r.k = P.top_k ? P.top_k[b] : P.top_k_all;
    r.p = P.top_p ? P.top_p[b] : P.top_p_all;
    r.minp = P.min_p ? P.min_p[b] : P.min_p_all;
    r.seed = P.seed ? P.seed[b] : P.seed_all;
    r.pos = P.position ? P.position[b] : P.position_all;
    return r;
}

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
            ik = nth_index(V, (int64_t)r.k - gt, [&](int64_t i) { return z[i] > -INFINITY && okey(z[i]) == tk; }, shw);
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
        ip = nth_index(V, keep, [&](int64_t i) { return in_k(i) && okey(z[i]) == tp; }, shw);
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

// ---- the vocabulary split (rows without top-k / top-p, when B is small) ------------------------------------
// A row's vocabulary is cut into S contiguous slices, one block each, so that B = 1 still fills the GPU. Pass 1
// (per slice): max, first argmax, NaN / +Inf, sum of exp(z - slice max). Pass 2 (per slice, with the row max from
// pass 1's partials): the support's mass at the temperature (min-p applied) and the slice's Gumbel race winner.
// Pass 3 (per row): combines. The keys are the one-block kernel's, the winner the largest key with the lowest
// index, so the tokens are the same; the sums differ only in their order (log-probs to float rounding).
struct SlicePart {
    float max;
    int bad;
    long long argmax;
    double sraw;  // sum over the slice of exp(z - max)
    double s;     // support mass at the temperature, relative to the row's M
    float key;
    long long best;
    int given_in;
};


// The row's max and NaN / +Inf flag from its slices' pass-1 parts.
__device__ float row_max_of(const SlicePart * q, int S, int * bad) {
    float m = -INFINITY;
    for (int k = 0; k < S; ++k) {
        m = fmaxf(m, q[k].max);
        *bad |= q[k].bad;
    }
    return m;
}

__global__ void split_pass1_kernel(const float * __restrict__ logits, int64_t V, int S, SlicePart * parts) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    __shared__ long long shl[32];
    const int64_t b = blockIdx.y, sl = blockIdx.x, len = (V + S - 1) / S, i0 = sl * len, i1 = min(V, i0 + len);
    const float * z = logits + b * V;
    float m = -INFINITY;
    int bad = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const float v = z[i];
        if (isnan(v) || v == INFINITY) bad = 1;
        m = fmaxf(m, v);
    }
    bad = __syncthreads_or(bad);
    m = block_max<float>(m, shf);
    long long am = LLONG_MAX;
    double sr = 0.0;
    if (!bad && m > -INFINITY)
        for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
            if (z[i] == m && am == LLONG_MAX) am = i;
            sr += (double)expf(z[i] - m);
        }
    am = block_min(am, shl);
    sr = block_sum(sr, shd);
    if (threadIdx.x == 0) {
        SlicePart & o = parts[b * S + sl];
        o.max = m;
        o.bad = bad;
        o.argmax = am;
        o.sraw = sr;
    }
}

__global__ void split_pass2_kernel(const float * __restrict__ logits, int64_t V, int S, maporl_sample_params P,
                                   const int32_t * __restrict__ given, SlicePart * parts) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    __shared__ long long shl[32];
    const int64_t b = blockIdx.y, sl = blockIdx.x, len = (V + S - 1) / S, i0 = sl * len, i1 = min(V, i0 + len);
    const float * z = logits + b * V;
    int bad = 0;
    const float m = row_max_of(parts + b * S, S, &bad);
    const RowP r = row_params(P, b);
    if (bad || m == -INFINITY || r.T == 0.0f) return;  // invalid or greedy: pass 3 needs pass 1 only
    const int32_t g = given ? given[b] : -1;
    const float T = r.T, M = T == 1.0f ? m : m / T;
    const bool has_min = r.minp > 0.0f;
    double s = 0.0;
    float best_key = -INFINITY;
    long long best = LLONG_MAX;
    int given_in = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        if (!(z[i] > -INFINITY)) continue;
        const float x = T == 1.0f ? z[i] : z[i] / T;
        const float e = expf(x - M);
        if (has_min && e < r.minp) continue;
        s += (double)e;
        if (i == g) given_in = 1;
        if (g < 0) {
            const float key = MAPORL_FADD(x, gumbel(r.seed, r.pos, i));
            if (best == LLONG_MAX || key > best_key) {
                best_key = key;
                best = i;
            }
        }
    }
    s = block_sum(s, shd);
    given_in = __syncthreads_or(given_in);
    const float bk = block_max<float>(best_key, shf);
    best = block_min(best_key == bk ? best : LLONG_MAX, shl);
    if (threadIdx.x == 0) {
        SlicePart & o = parts[b * S + sl];
        o.s = s;
        o.key = bk;
        o.best = best;
        o.given_in = given_in;
    }
}

// One thread per row.
__global__ void split_pass3_kernel(const float * __restrict__ logits, int64_t B, int64_t V, int S, maporl_sample_params P,
                                   const int32_t * __restrict__ given, const SlicePart * parts, int32_t * tok, float * lp,
                                   float * raw, uint8_t * valid) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const SlicePart * q = parts + b * S;
    const float * z = logits + b * V;
    int bad = 0;
    const float m = row_max_of(q, S, &bad);
    if (bad || m == -INFINITY) {
        if (tok && !given) tok[b] = -1;
        if (lp) lp[b] = NAN;
        if (raw) raw[b] = NAN;
        if (valid) valid[b] = 0;
        return;
    }
    double sraw = 0.0;
    long long am = LLONG_MAX;
    for (int k = 0; k < S; ++k) {
        if (q[k].max == -INFINITY) continue;
        sraw += q[k].sraw * exp((double)q[k].max - (double)m);
        if (q[k].max == m && q[k].argmax < am) am = q[k].argmax;
    }
    const double lse_raw = (double)m + log(sraw);
    const RowP r = row_params(P, b);
    const int32_t g = given ? given[b] : -1;
    int32_t t;
    float lpv;
    if (r.T == 0.0f) {
        t = g >= 0 ? g : (int32_t)am;
        lpv = t == am ? 0.0f : -INFINITY;
    } else {
        const float T = r.T, M = T == 1.0f ? m : m / T;
        double S_ = 0.0;
        float bk = -INFINITY;
        long long best = LLONG_MAX;
        int gin = 0;
        for (int k = 0; k < S; ++k) {
            S_ += q[k].s;
            gin |= q[k].given_in;
            if (q[k].best != LLONG_MAX && (best == LLONG_MAX || q[k].key > bk || (q[k].key == bk && q[k].best < best))) {
                bk = q[k].key;
                best = q[k].best;
            }
        }
        t = g >= 0 ? g : (int32_t)best;
        const float x = T == 1.0f ? z[t] : z[t] / T;
        lpv = g >= 0 && !gin ? -INFINITY : (float)((double)x - (double)M - log(S_));
    }
    if (tok && !given) tok[b] = t;
    if (lp) lp[b] = lpv;
    if (raw) raw[b] = (float)((double)z[t] - lse_raw);
    if (valid) valid[b] = 1;
}

// Slices per row for the split path, or 0 to keep one block per row: only without top-k / top-p on every row
// (host copies of the per-row parameters in h), and only when the rows alone would leave most SMs idle.
int split_slices(const maporl_sample_params & h, int64_t B, int64_t V) {
    if (B == 0 || B >= 64 || V < 8192) return 0;
    for (int64_t b = 0; b < B; ++b) {
        const int32_t k = h.top_k ? h.top_k[b] : h.top_k_all;
        const float p = h.top_p ? h.top_p[b] : h.top_p_all;
        if ((k > 0 && k < V) || (p > 0.0f && p < 1.0f)) return 0;
    }
    const int64_t want = (264 + B - 1) / B;  // about two blocks per SM of an H100 / H200 in total
    return (int)std::max<int64_t>(2, std::min<int64_t>(want, V / 4096));
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
    if (const int S = split_slices(h, B, V)) {
        DeviceBuffer parts;
        MAPORL_RETURN_IF_ERROR(parts.alloc(sizeof(SlicePart) * (size_t)(B * S)));
        const dim3 grid((unsigned)S, (unsigned)B);
        split_pass1_kernel<<<grid, kThreads>>>(logits, V, S, parts.as<SlicePart>());
        MAPORL_CUDA_CALL(cudaGetLastError());
        split_pass2_kernel<<<grid, kThreads>>>(logits, V, S, p, given, parts.as<SlicePart>());
        MAPORL_CUDA_CALL(cudaGetLastError());
        split_pass3_kernel<<<(unsigned)((B + 63) / 64), 64>>>(logits, B, V, S, p, given, parts.as<SlicePart>(), tokens, logprobs,
                                                                raw_logprobs, valid);
        MAPORL_CUDA_CALL(cudaGetLastError());
        MAPORL_CUDA_CALL(cudaDeviceSynchronize());
        return MAPORL_OK;
    }
    sample_kernel<<<(unsigned)B, kThreads>>>(logits, V, p, given, tokens, logprobs, raw_logprobs, valid);
    MAPORL_CUDA_CALL(cudaGetLastError());
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

}  // namespace maporl
