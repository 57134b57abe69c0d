// sampling_split.cu: the CUDA sampling kernels (sampling.cu checks the arguments). Each row's vocabulary is cut into
// S contiguous slices, one block each: S = 1 from 64 rows up, more for small batches so that B = 1 still fills the
// GPU. The tokens do not depend on S (nor on the batch):
//   pass 1 (per slice): max, first argmax, NaN / +Inf, finite count, sum of exp(z - slice max);
//   top-k / top-p (rows that have them): the thresholds by radix selection (native/sampling/sampling_radix.h), four rounds
//     of 8 bits; each round every slice adds its histogram of the candidate keys' next digit into the row's
//     (integer counts, fixed-point masses: integer atomics give the same sums in any order), then one thread per
//     row picks the digit; the threshold's ties are counted per slice and the kept ones located in index order;
//   pass 2 (per slice): the support's mass at the temperature (filters and min-p applied) and the slice's Gumbel
//     race winner; pass 3 (per row): combines.
// The race's winner is the largest key with the lowest index, whichever slice holds it; the top-p mass is summed in
// fixed point (units of 2^-44 at V = 151,936), exactly, so the thresholds are the same for any S. Every weight that
// decides the support (top-p's masses, min-p's e >= min_p) is det_exp_nonpos (native/core/det_exp.h), the CPU's
// arithmetic, and the CPU sums top-p's masses in the same fixed point: the support is the CPU's. Not yet run on a
// GPU; test_sampling compares it with the CPU where one is visible (B = 1, 4, 64 and more, rows with top-p
// boundaries placed on the masses' rounding), and test_sampling_radix checks the selection itself on the CPU, with
// the CPU sampler's support.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "native/core/det_exp.h"
#include "native/core/philox.h"
#include "native/sampling/sampling.h"
#include "native/sampling/sampling_radix.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;


__device__ long long block_min(long long v, long long * sh) {
    for (int d = 16; d > 0; d >>= 1) v = min(v, __shfl_down_sync(kFull, v, d));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    long long s = LLONG_MAX;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s = min(s, sh[w]);
    return s;
}

// Index of the m-th (1-based) element of [i0, i1) satisfying pred, in index order; i1 if there are fewer.
template <class Pred>
__device__ int64_t nth_index(int64_t i0, int64_t i1, int64_t m, Pred pred, int * shw) {
    __shared__ long long found, seen;
    if (threadIdx.x == 0) {
        found = i1;
        seen = 0;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t base = i0; base < i1; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const bool f = i < i1 && pred(i);
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
        if (found != i1) break;
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

struct SlicePart {
    float max;
    int bad;
    long long argmax;
    double sraw;  // sum over the slice of exp(z - max)
    long long finite;
    unsigned long long ties;  // elements of the current selection's set with the threshold key
    double s;                 // support mass at the temperature, relative to the row's M
    float key;
    long long best;
    int given_in;
};

// One row's state through the filter kernels (zeroed first).
struct SplitRow {
    float m, M;
    int k_on, p_on;
    RadixSel ksel, psel;
    long long ik, ip;  // the last index kept at the threshold key (sampling.cu's ik / ip)
    unsigned long long total;
    double target;
    int tie_slice;
    unsigned long long tie_rank;
    unsigned long long hist[kRadixBins];
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

__device__ float x_at(const float * z, int64_t i, float T) { return T == 1.0f ? z[i] : z[i] / T; }

// The filters of a row whose selections are done (`rows` null: no filters).
__device__ bool in_k(const float * z, int64_t i, const SplitRow * r) {
    if (!(z[i] > -INFINITY)) return false;
    if (!r || !r->k_on) return true;
    const uint32_t q = radix_key(z[i]);
    return q > r->ksel.prefix || (q == r->ksel.prefix && i <= r->ik);
}
__device__ bool in_kp(const float * z, int64_t i, const SplitRow * r) {
    if (!in_k(z, i, r)) return false;
    if (!r || !r->p_on) return true;
    const uint32_t q = radix_key(z[i]);
    return q > r->psel.prefix || (q == r->psel.prefix && i <= r->ip);
}

struct Slice {
    int64_t b, sl, i0, i1;
};
__device__ Slice slice_of(int64_t V, int S) {  // grid (B, S): x the row (up to 2^31 - 1), y the slice
    const int64_t len = (V + S - 1) / S, i0 = (int64_t)blockIdx.y * len;
    return {(int64_t)blockIdx.x, (int64_t)blockIdx.y, i0, min(V, i0 + len)};
}

__global__ void split_pass1_kernel(const float * __restrict__ logits, int64_t V, int S, SlicePart * parts) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    __shared__ long long shl[32];
    const Slice c = slice_of(V, S);
    const float * z = logits + c.b * V;
    float m = -INFINITY;
    int bad = 0;
    long long finite = 0;
    for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x) {
        const float v = z[i];
        if (isnan(v) || v == INFINITY) bad = 1;
        finite += v > -INFINITY;
        m = fmaxf(m, v);
    }
    bad = __syncthreads_or(bad);
    m = block_max<float>(m, shf);
    finite = block_sum(finite, shl);
    long long am = LLONG_MAX;
    double sr = 0.0;
    if (!bad && m > -INFINITY)
        for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x) {
            if (z[i] == m && am == LLONG_MAX) am = i;
            sr += (double)expf(z[i] - m);
        }
    am = block_min(am, shl);
    sr = block_sum(sr, shd);
    if (threadIdx.x == 0) {
        SlicePart & o = parts[c.b * S + c.sl];
        o.max = m;
        o.bad = bad;
        o.argmax = am;
        o.sraw = sr;
        o.finite = finite;
    }
}

// One thread per row: which selections run (valid rows with a temperature, as sampling.cu decides k_on / has_p).
__global__ void split_init_kernel(int64_t B, int64_t V, int S, maporl_sample_params P, const SlicePart * parts,
                                  SplitRow * rows) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int bad = 0;
    const float m = row_max_of(parts + b * S, S, &bad);
    long long finite = 0;
    for (int k = 0; k < S; ++k) finite += parts[b * S + k].finite;
    const RowP r = row_params(P, b);
    SplitRow & o = rows[b];
    const bool live = !bad && m > -INFINITY && !sample_greedy(r.T, m);
    o.m = m;
    o.M = r.T == 1.0f ? m : m / r.T;
    o.k_on = live && r.k > 0 && r.k < V && finite > r.k;
    o.p_on = live && r.p > 0.0f && r.p < 1.0f;
    o.ik = o.ip = LLONG_MAX;
}

// One round's histogram: Which 0 = top-k (count of finite keys), 1 = top-p (fixed-point mass over the top-k set).
template <int Which>
__global__ void split_hist_kernel(const float * __restrict__ logits, int64_t V, int S, maporl_sample_params P,
                                  int round, double scale, SplitRow * rows) {
    __shared__ unsigned long long h[kRadixBins];
    const Slice c = slice_of(V, S);
    SplitRow * r = rows + c.b;
    if (Which == 0 ? !r->k_on : !r->p_on) return;  // the same for the whole block
    for (int t = threadIdx.x; t < kRadixBins; t += blockDim.x) h[t] = 0;
    __syncthreads();
    const float * z = logits + c.b * V;
    const uint32_t prefix = Which == 0 ? r->ksel.prefix : r->psel.prefix, mask = radix_fixed_mask(round);
    const float T = row_params(P, c.b).T;
    for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x) {
        if (Which == 0 ? !(z[i] > -INFINITY) : !in_k(z, i, r)) continue;
        const uint32_t key = radix_key(z[i]);
        if ((key & mask) != prefix) continue;
        atomicAdd(&h[radix_digit(key, round)],
                  Which == 0 ? 1ull : radix_fixed(det_exp_nonpos(x_at(z, i, T) - r->M), scale));
    }
    __syncthreads();
    for (int t = threadIdx.x; t < kRadixBins; t += blockDim.x)
        if (h[t]) atomicAdd(&r->hist[t], h[t]);
}

// One thread per row: the round's digit, then the histogram is cleared for the next round.
template <int Which>
__global__ void split_pick_kernel(int64_t B, maporl_sample_params P, int round, SplitRow * rows) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    SplitRow & r = rows[b];
    if (Which == 0 ? !r.k_on : !r.p_on) return;
    if (Which == 0)
        radix_pick_count(r.hist, (unsigned long long)row_params(P, b).k, round, r.ksel);
    else
        radix_pick_mass(r.hist, r.target, round, r.psel);
    for (int t = 0; t < kRadixBins; ++t) r.hist[t] = 0;
}

// Per slice: the selection set's elements with the threshold key.
template <int Which>
__global__ void split_ties_kernel(const float * __restrict__ logits, int64_t V, int S, SplitRow * rows,
                                  SlicePart * parts) {
    __shared__ long long shl[32];
    const Slice c = slice_of(V, S);
    const SplitRow * r = rows + c.b;
    if (Which == 0 ? !r->k_on : !r->p_on) return;
    const float * z = logits + c.b * V;
    const uint32_t t = Which == 0 ? r->ksel.prefix : r->psel.prefix;
    long long n = 0;
    for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x)
        n += (Which == 0 ? z[i] > -INFINITY : in_k(z, i, r)) && radix_key(z[i]) == t;
    n = block_sum(n, shl);
    if (threadIdx.x == 0) parts[c.b * S + c.sl].ties = (unsigned long long)n;
}

// One thread per row: how many ties are kept (top-k: k minus the keys above; top-p: radix_tie_keep) and the slice
// and rank within it of the last kept one.
template <int Which>
__global__ void split_tie_pick_kernel(int64_t B, int S, maporl_sample_params P, double scale, const SlicePart * parts,
                                      SplitRow * rows) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    SplitRow & r = rows[b];
    if (Which == 0 ? !r.k_on : !r.p_on) return;
    unsigned long long ties = 0;
    for (int k = 0; k < S; ++k) ties += parts[b * S + k].ties;
    unsigned long long m;
    if (Which == 0) {
        m = (unsigned long long)row_params(P, b).k - r.ksel.above;
    } else {
        const float T = row_params(P, b).T, zt = radix_key_value(r.psel.prefix);
        const unsigned long long et = radix_fixed(det_exp_nonpos((T == 1.0f ? zt : zt / T) - r.M), scale);
        m = min(radix_tie_keep(r.psel.above, et, ties, r.target), ties);
    }
    r.tie_slice = -1;
    for (int k = 0; k < S && m > 0; ++k) {
        if (m <= parts[b * S + k].ties) {
            r.tie_slice = k;
            r.tie_rank = m;
            break;
        }
        m -= parts[b * S + k].ties;
    }
}

// The slice holding the last kept tie finds its index (every other block returns at once).
template <int Which>
__global__ void split_tie_index_kernel(const float * __restrict__ logits, int64_t V, int S, SplitRow * rows) {
    __shared__ int shw[32];
    const Slice c = slice_of(V, S);
    SplitRow * r = rows + c.b;
    if ((Which == 0 ? !r->k_on : !r->p_on) || r->tie_slice != (int)c.sl) return;
    const float * z = logits + c.b * V;
    const uint32_t t = Which == 0 ? r->ksel.prefix : r->psel.prefix;
    const int64_t at = nth_index(
        c.i0, c.i1, (int64_t)r->tie_rank,
        [&](int64_t i) { return (Which == 0 ? z[i] > -INFINITY : in_k(z, i, r)) && radix_key(z[i]) == t; }, shw);
    if (threadIdx.x == 0) (Which == 0 ? r->ik : r->ip) = at;
}

// Per slice: the fixed-point mass top-p's total runs over (the top-k set with filter order top-k-first, else
// every finite logit), added into the row's total.
__global__ void split_total_kernel(const float * __restrict__ logits, int64_t V, int S, maporl_sample_params P,
                                   double scale, SplitRow * rows) {
    __shared__ unsigned long long sum;
    const Slice c = slice_of(V, S);
    SplitRow * r = rows + c.b;
    if (!r->p_on) return;
    if (threadIdx.x == 0) sum = 0;
    __syncthreads();
    const float * z = logits + c.b * V;
    const RowP p = row_params(P, c.b);
    const bool renorm = p.k > 0 && p.k < V && P.filter_order == MAPORL_FILTER_TOP_K_FIRST;
    unsigned long long s = 0;
    for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x)
        if (renorm ? in_k(z, i, r) : z[i] > -INFINITY) s += radix_fixed(det_exp_nonpos(x_at(z, i, p.T) - r->M), scale);
    atomicAdd(&sum, s);
    __syncthreads();
    if (threadIdx.x == 0 && sum) atomicAdd(&r->total, sum);
}

__global__ void split_target_kernel(int64_t B, maporl_sample_params P, SplitRow * rows) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B && rows[b].p_on) rows[b].target = (double)row_params(P, b).p * (double)rows[b].total;
}

__global__ void split_pass2_kernel(const float * __restrict__ logits, int64_t V, int S, maporl_sample_params P,
                                   const int32_t * __restrict__ given, const SplitRow * rows, SlicePart * parts) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    __shared__ long long shl[32];
    const Slice c = slice_of(V, S);
    const float * z = logits + c.b * V;
    int bad = 0;
    const float m = row_max_of(parts + c.b * S, S, &bad);
    const RowP r = row_params(P, c.b);
    if (bad || m == -INFINITY || sample_greedy(r.T, m)) return;  // invalid or greedy: pass 3 needs pass 1 only
    const SplitRow * f = rows ? rows + c.b : nullptr;
    const int32_t g = given ? given[c.b] : -1;
    const float T = r.T, M = T == 1.0f ? m : m / T;
    const bool has_min = r.minp > 0.0f;
    double s = 0.0;
    float best_key = -INFINITY;
    long long best = LLONG_MAX;
    int given_in = 0;
    for (int64_t i = c.i0 + threadIdx.x; i < c.i1; i += blockDim.x) {
        if (!in_kp(z, i, f)) continue;
        const float x = x_at(z, i, T);
        const float e = det_exp_nonpos(x - M);
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
        SlicePart & o = parts[c.b * S + c.sl];
        o.s = s;
        o.key = bk;
        o.best = best;
        o.given_in = given_in;
    }
}

// One thread per row.
__global__ void split_pass3_kernel(const float * __restrict__ logits, int64_t B, int64_t V, int S,
                                   maporl_sample_params P, const int32_t * __restrict__ given, const SlicePart * parts,
                                   int32_t * tok, float * lp, float * raw, uint8_t * valid) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const SlicePart * q = parts + b * S;
    const float * z = logits + b * V;
    int bad = 0;
    const float m = row_max_of(q, S, &bad);
    auto invalid = [&] {
        if (tok && !given) tok[b] = -1;
        if (lp) lp[b] = NAN;
        if (raw) raw[b] = NAN;
        if (valid) valid[b] = 0;
    };
    if (bad || m == -INFINITY) return invalid();
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
    if (sample_greedy(r.T, m)) {  // temperature 0 or below kMinTemperature, or m / T overflows (as the CPU)
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
            if (q[k].best != LLONG_MAX &&
                (best == LLONG_MAX || q[k].key > bk || (q[k].key == bk && q[k].best < best))) {
                bk = q[k].key;
                best = q[k].best;
            }
        }
        // No slice drew a winner (the row's maximum always enters the race, so this is a defect, not a draw): the row
        // is invalid, as on the CPU, instead of reading z[-1].
        if (g < 0 && best == LLONG_MAX) return invalid();
        t = g >= 0 ? g : (int32_t)best;
        lpv = g >= 0 && !gin ? -INFINITY : (float)((double)x_at(z, t, T) - (double)M - log(S_));
    }
    if (tok && !given) tok[b] = t;
    if (lp) lp[b] = lpv;
    if (raw) raw[b] = (float)((double)z[t] - lse_raw);
    if (valid) valid[b] = 1;
}

// The rounds, ties and index of one selection (Which 0 = top-k, 1 = top-p) for every row that has it.
template <int Which>
void select_thresholds(const float * logits, int64_t B, int64_t V, int S, const maporl_sample_params & p, double scale,
                       SplitRow * rows, SlicePart * parts) {
    const dim3 grid((unsigned)B, (unsigned)S);
    const unsigned row_blocks = (unsigned)((B + 63) / 64);
    for (int round = 0; round < kRadixRounds; ++round) {
        split_hist_kernel<Which><<<grid, kThreads>>>(logits, V, S, p, round, scale, rows);
        split_pick_kernel<Which><<<row_blocks, 64>>>(B, p, round, rows);
    }
    split_ties_kernel<Which><<<grid, kThreads>>>(logits, V, S, rows, parts);
    split_tie_pick_kernel<Which><<<row_blocks, 64>>>(B, S, p, scale, parts, rows);
    split_tie_index_kernel<Which><<<grid, kThreads>>>(logits, V, S, rows);
}

// Slices per row: one from 64 rows up (or for a short vocabulary), else about two blocks per SM of an H100 / H200
// in total, at least 4096 logits per slice.
int slices_per_row(int64_t B, int64_t V) {
    if (B >= 64 || V < 8192) return 1;
    const int64_t want = (264 + B - 1) / B;
    return (int)std::max<int64_t>(2, std::min<int64_t>(want, V / 4096));
}

}  // namespace

maporl_status sample_split_cuda(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p,
                                const maporl_sample_params & h, const int32_t * given, int32_t * tokens,
                                float * logprobs, float * raw_logprobs, uint8_t * valid) {
    const int S = slices_per_row(B, V);
    bool any_k = false, any_p = false;
    for (int64_t b = 0; b < B; ++b) {  // h holds host copies of these two only (seeds and positions stay on the device)
        const int32_t k = h.top_k ? h.top_k[b] : h.top_k_all;
        const float tp = h.top_p ? h.top_p[b] : h.top_p_all;
        any_k = any_k || (k > 0 && k < V);
        any_p = any_p || (tp > 0.0f && tp < 1.0f);
    }
    MAPORL_RETURN_IF_ERROR(check_grid(B, "sample: rows (B)"));
    MAPORL_RETURN_IF_ERROR(check_grid(S, "sample: slices per row", kGridYZ));
    DeviceBuffer parts, rows;
    MAPORL_RETURN_IF_ERROR(parts.alloc(sizeof(SlicePart) * (size_t)(B * S)));
    const dim3 grid((unsigned)B, (unsigned)S);
    const unsigned row_blocks = (unsigned)((B + 63) / 64);
    split_pass1_kernel<<<grid, kThreads>>>(logits, V, S, parts.as<SlicePart>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    if (any_k || any_p) {
        MAPORL_RETURN_IF_ERROR(rows.alloc(sizeof(SplitRow) * (size_t)B));
        MAPORL_CUDA_CALL(cudaMemset(rows.as<void>(), 0, sizeof(SplitRow) * (size_t)B));
        const double scale = radix_scale(V);
        split_init_kernel<<<row_blocks, 64>>>(B, V, S, p, parts.as<SlicePart>(), rows.as<SplitRow>());
        if (any_k) select_thresholds<0>(logits, B, V, S, p, scale, rows.as<SplitRow>(), parts.as<SlicePart>());
        if (any_p) {
            split_total_kernel<<<grid, kThreads>>>(logits, V, S, p, scale, rows.as<SplitRow>());
            split_target_kernel<<<row_blocks, 64>>>(B, p, rows.as<SplitRow>());
            select_thresholds<1>(logits, B, V, S, p, scale, rows.as<SplitRow>(), parts.as<SlicePart>());
        }
        MAPORL_CUDA_CALL(cudaGetLastError());
    }
    split_pass2_kernel<<<grid, kThreads>>>(logits, V, S, p, given, any_k || any_p ? rows.as<SplitRow>() : nullptr,
                                           parts.as<SlicePart>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    split_pass3_kernel<<<row_blocks, 64>>>(logits, B, V, S, p, given, parts.as<SlicePart>(), tokens, logprobs,
                                           raw_logprobs, valid);
    MAPORL_CUDA_CALL(cudaGetLastError());
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

}  // namespace maporl
