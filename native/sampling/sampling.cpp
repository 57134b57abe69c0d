// sampling.cpp: the CPU sampler (the reference for CUDA) and the maporl_sample / maporl_sample_logprobs C entry
// points. Per row, with x = z / temperature and M = max x:
//   1. one pass over the row: max, first argmax, NaN / +Inf check (then the row stays in cache);
//   2. raw log-sum-exp (for rawLogprobs) and, when needed, the sum of exp(x - M) at the temperature;
//   3. the support: top-k by a threshold scan (a candidate buffer of 2k + 64, compacted with nth_element: the
//      k-th best logit only rises, so most of the row is rejected by one vector compare), then top-p as the prefix
//      of the sorted candidates; top-p alone by a histogram cut (top_p_cut: one pass, then only the cut's bin
//      sorted); the min-p predicate exp(x - M) >= min_p. The support decisions use det_exp_nonpos's arithmetic at
//      every SIMD level and top-p's masses are sampling_radix.h's fixed-point integers, as in CUDA: the support,
//      and so the token, is the same on every level and device;
//   4. Gumbel-max over the support with counter-based noise (philox.h), ties to the lower index. Elements with
//      x < M - 20.5 cannot win whatever their noise and get none.
// No full sort of a row. Rows run in parallel; each row's result depends only on the row and its parameters.
#include "native/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "native/core/core.h"
#include "native/core/det_exp.h"
#include "native/core/isa.h"
#include "native/core/philox.h"
#include "native/sampling/sampling_radix.h"
#include "native/sampling/sampling_passes.h"
#include "native/core/scratch.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace {

// The scalar row passes: ScalarLoad with det_exp_nonpos for exp (the vector levels' arithmetic, lane by lane,
// and CUDA's) and radix_fixed for the fixed-point weights.
struct DetScalar : ScalarLoad<float> {
    static float exp_nonpos(float x) { return det_exp_nonpos(x); }
    typedef uint64_t Fixed;
    static void fixed_add(Fixed & acc, float e, double scale, int) { acc += radix_fixed(e, scale); }
    static uint64_t fixed_sum(Fixed f) { return f; }
    static void fixed_lanes(float e, double scale, int, uint64_t * out) { *out = radix_fixed(e, scale); }
    static void bins(float z, float lo, float inv, int nbins, int32_t * out) {
        const float t = (z - lo) * inv, top = (float)(nbins - 1);
        *out = z >= lo ? 1 + (int32_t)(t < top ? t : top) : 0;
    }
};

RowMax scalar_max(const float * z, int64_t V, float t, bool wr, bool wt, bool wa) {
    return row_max_t<DetScalar>(z, V, t, wr, wt, wa);
}
double scalar_sum_exp(const float * z, int64_t V, float t, float M, float e) {
    return row_sum_exp_t<DetScalar>(z, V, t, M, e);
}
double scalar_sum_x(const float * z, int64_t V, float t, float M) { return row_sum_x_t<DetScalar>(z, V, t, M); }
float scalar_exp_one(float x, float M) { return exp_one_t<DetScalar>(x, M); }
uint64_t scalar_fixed_mass(const float * z, int64_t V, float t, float M, int s) {
    return row_fixed_mass_t<DetScalar>(z, V, t, M, s);
}
uint64_t scalar_top_p_hist(const float * z, int64_t V, float t, float M, float lo, float inv, int nbins, int s,
                           uint64_t * hist, int32_t * up_idx, uint16_t * up_bin, int64_t * n_up) {
    return top_p_hist_t<DetScalar>(z, V, t, M, lo, inv, nbins, s, hist, up_idx, up_bin, n_up);
}
int64_t scalar_next(const float * z, int64_t f, int64_t V, float t, float thr, bool s) {
    return next_at_least_t<DetScalar>(z, f, V, t, thr, s);
}
int64_t scalar_cands(const float * z, int64_t V, float z0, int32_t * idx) {
    return cand_scan_t<DetScalar>(z, V, z0, idx);
}
// The scalar Gumbel-max over candidates: the same keys as the vector one, one element at a time.
int64_t scalar_gumbel(const float * z, const int32_t * idx, int64_t n, float temp, uint64_t seed, int64_t position) {
    int64_t best = -1;
    float best_key = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t i = idx[j];
        const float x = temp == 1.0f ? z[i] : z[i] / temp;
        const float key = MAPORL_FADD(x, gumbel(seed, position, i));
        if (best < 0 || key > best_key) {
            best = i;
            best_key = key;
        }
    }
    return best;
}

// The scalar race: the candidate list, then the race over it (the definition the vector race must match).
int64_t scalar_race(const float * z, int64_t V, float temp, float floor_x, int64_t, uint64_t seed, int64_t position,
                    int32_t * idx) {
    const int64_t n = scalar_cands(z, V, z_threshold(floor_x, temp), idx);
    return scalar_gumbel(z, idx, n, temp, seed, position);
}

Passes passes() {
    switch (active_isa()) {
        case Isa::Avx512:
            return {avx512::row_max_f32,       avx512::row_sum_exp_f32,    avx512::row_sum_x_f32,
                    avx512::exp_one_f32,       avx512::row_fixed_mass_f32, avx512::top_p_hist_f32,
                    avx512::next_at_least_f32, avx512::cand_scan_f32,      avx512::gumbel_cands_f32,
                    avx512::gumbel_row_f32};
        case Isa::Avx2:
            return {avx2::row_max_f32,        avx2::row_sum_exp_f32, avx2::row_sum_x_f32,     avx2::exp_one_f32,
                    avx2::row_fixed_mass_f32, avx2::top_p_hist_f32,  avx2::next_at_least_f32, avx2::cand_scan_f32,
                    avx2::gumbel_cands_f32,   avx2::gumbel_row_f32};
        default:
            return {scalar_max,        scalar_sum_exp, scalar_sum_x, scalar_exp_one, scalar_fixed_mass,
                    scalar_top_p_hist, scalar_next,    scalar_cands, scalar_gumbel,  scalar_race};
    }
}

// The k best finite logits by (z desc, index asc), best first.
std::vector<Cand> top_candidates(const Passes & P, const float * z, int64_t V, int64_t k) {
    std::vector<Cand> buf;
    const size_t cap = (size_t)(2 * k + 64);
    buf.reserve(cap);
    float thr = -INFINITY;
    for (int64_t i = P.next(z, 0, V, 1.0f, thr, true); i < V; i = P.next(z, i + 1, V, 1.0f, thr, true)) {
        buf.push_back({z[i], (int32_t)i});
        if (buf.size() >= cap) {
            std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), better);
            buf.resize((size_t)k);
            // Everything kept ranks at or above buf[k-1]; a later element enters only if strictly greater
            // (an equal one has a higher index, so it ranks below).
            thr = std::min_element(buf.begin(), buf.end(), [](const Cand & a, const Cand & b) {
                      return better(b, a);
                  })->z;
        }
    }
    std::sort(buf.begin(), buf.end(), better);
    if ((int64_t)buf.size() > k) buf.resize((size_t)k);
    return buf;
}

struct RowOut {
    int32_t token;
    float lp, raw;
    uint8_t valid;
};

// Samples row z (given < 0), or scores token `given`.
RowOut sample_one(const Passes & P, const float * z, int64_t V, const SampleRow & r, int32_t given, bool want_raw,
                  int32_t * idx, void * cut_scratch) {
    RowOut o{-1, NAN, NAN, 0};
    // Greedy by temperature is known now; greedy by overflow (sample_greedy) once the max is known.
    const bool greedy = r.temperature < kMinTemperature;
    const bool t1 = greedy || r.temperature == 1.0f;
    const bool listed = (r.top_k > 0 && r.top_k < V) || (r.top_p > 0.0f && r.top_p < 1.0f);  // support sums come later
    const RowMax mx = P.max(z, V, greedy ? 1.0f : r.temperature, want_raw || (t1 && !listed && !greedy),
                            !t1 && !listed && !greedy, greedy);
    if (mx.bad || mx.max == -INFINITY) return o;
    o.valid = 1;
    const double raw_sum = mx.sum;
    const double lse_raw = (double)mx.max + std::log(raw_sum);
    auto raw_of = [&](int64_t t) { return want_raw ? (float)((double)z[t] - lse_raw) : NAN; };
    if (greedy || sample_greedy(r.temperature, mx.max)) {  // a point mass on the first argmax
        const int64_t am = greedy ? mx.argmax : P.next(z, 0, V, 1.0f, mx.max, false);
        o.token = given >= 0 ? given : (int32_t)am;
        o.lp = o.token == am ? 0.0f : -INFINITY;
        o.raw = raw_of(o.token);
        return o;
    }
    const float T = r.temperature;
    const float M = T == 1.0f ? mx.max : mx.max / T;
    auto x_of = [&](int64_t i) { return T == 1.0f ? z[i] : z[i] / T; };
    const bool has_k = r.top_k > 0 && r.top_k<V, has_p = r.top_p> 0.0f && r.top_p<1.0f, has_min = r.min_p> 0.0f;
    const float min_e = has_min ? r.min_p : 0.0f;
    // Below: no noise can make it win (CUDA gives every element its noise; the 20.5 leaves 0.31 over the noise's
    // span, and the 8 ulps of M keep that true where an ulp of the keys outgrows it, |M| past ~1e5).
    const float floor_x = M - kGumbelSpan - std::fabs(M) * 0x1p-20f;
    int64_t best = -1;
    // idx (race_scratch_size(V) entries): the candidates of the Gumbel race, ascending
    double S = 0.0;
    bool given_in = false;
    if (has_k) {
        std::vector<Cand> cand = top_candidates(P, z, V, r.top_k);
        if (has_p) {
            // Masses in sampling_radix.h's fixed point (integer sums of per-element weights): the same decisions
            // as CUDA's radix selection over any number of slices, at every SIMD level.
            const int sbits = radix_scale_bits(V);
            const double scale = std::ldexp(1.0, sbits);
            auto weight = [&](int32_t i) { return fixed_weight(P, z, i, T, M, scale); };
            uint64_t total = 0;
            if (r.order == MAPORL_FILTER_TOP_K_FIRST)
                for (const Cand & c : cand) total += weight(c.i);
            else
                total = P.fixed_mass(z, V, T, M, sbits);
            const double target = (double)r.top_p * (double)total;
            uint64_t before = 0;
            size_t keep = 0;
            while (keep < cand.size() && (double)before < target) before += weight(cand[keep++].i);
            cand.resize(std::max<size_t>(keep, 1));
        }
        std::sort(cand.begin(), cand.end(), [](const Cand & a, const Cand & b) { return a.i < b.i; });
        int64_t n = 0;
        for (const Cand & c : cand) {
            const float e = P.exp_one(x_of(c.i), M);
            if (has_min && e < min_e) continue;
            S += (double)e;
            given_in |= c.i == given;
            if (x_of(c.i) >= floor_x) idx[n++] = c.i;
        }
        if (given < 0) best = P.gumbel(z, idx, n, T, r.seed, r.position);
    } else if (has_p) {
        const Cut cut = top_p_cut(P, z, V, mx.max, T, M, r.top_p, cut_scratch);
        auto in_nucleus = [&](int64_t i) { return z[i] > cut.z || (z[i] == cut.z && i <= cut.i); };
        // The race's candidates: the nucleus at or above floor_x. S from them when they are the whole support
        // (the cut above floor_x, or min-p above e^-20.5 keeping none below it); else the nucleus's mass
        // (exact to 2^-sbits per element), or a pass for a min-p below e^-20.5.
        const float z0 = std::max(z_threshold(floor_x, T), cut.z);
        const int64_t n = P.cands(z, V, z0, idx);
        int64_t m = 0;
        double s_cands = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const int64_t i = idx[j];
            if (!in_nucleus(i)) continue;
            const float e = P.exp_one(x_of(i), M);
            if (has_min && e < min_e) continue;
            s_cands += (double)e;
            idx[m++] = (int32_t)i;
        }
        const bool covered = has_min && (double)min_e >= std::exp(-(double)kGumbelSpan);
        if (z0 == cut.z || covered) {
            S = s_cands;
        } else if (!has_min) {
            S = (double)cut.kept / radix_scale(V);
        } else {
            for (int64_t i = 0; i < V; ++i) {
                if (!(z[i] >= cut.z) || !in_nucleus(i)) continue;
                const float e = P.exp_one(x_of(i), M);
                if (!(e < min_e)) S += (double)e;
            }
        }
        if (given >= 0)
            given_in = z[given] > -INFINITY && in_nucleus(given) && !(has_min && P.exp_one(x_of(given), M) < min_e);
        else
            best = P.gumbel(z, idx, m, T, r.seed, r.position);
    } else {
        // Every element that can win the race, or pass min-p, is at or above floor_x (min-p below e^-20.5 excepted).
        // The first pass's tempered sum is of (z - max) / T; far from 0 the floats x = z / T differ from it by
        // more than the log-probs' 1e-5 allow (sampling_row.h), so there the floats' own terms are summed.
        const double s_t = T == 1.0f ? raw_sum : tempered_sum_serves(M) ? mx.sum_t : P.sum_x(z, V, T, M);
        if (!has_min) {
            S = s_t;
            given_in = z[given >= 0 ? given : 0] > -INFINITY;
            if (given < 0) best = P.race(z, V, T, floor_x, mx.hint, r.seed, r.position, idx);
        } else {
            const int64_t n = P.cands(z, V, z_threshold(floor_x, T), idx);
            const bool covered = (double)min_e >= std::exp(-(double)kGumbelSpan);
            S = covered ? 0.0 : P.sum_exp(z, V, T, M, min_e);
            int64_t m = 0;
            for (int64_t j = 0; j < n; ++j) {
                const float e = P.exp_one(x_of(idx[j]), M);
                if (e < min_e) continue;
                if (covered) S += (double)e;
                idx[m++] = idx[j];
            }
            if (given >= 0)
                given_in = z[given] > -INFINITY && !(P.exp_one(x_of(given), M) < min_e);
            else
                best = P.gumbel(z, idx, m, T, r.seed, r.position);
        }
    }
    if (given >= 0) {
        o.token = given;
        o.lp = given_in ? (float)((double)x_of(given) - (double)M - std::log(S)) : -INFINITY;
    } else if (best < 0) {  // no candidate won: cannot happen on a row the first pass passed; never index z[-1]
        o.valid = 0;
        return o;
    } else {
        o.token = (int32_t)best;
        o.lp = (float)((double)x_of(best) - (double)M - std::log(S));
    }
    o.raw = raw_of(o.token);
    return o;
}

template <typename T>
T pick(const T * arr, T all, int64_t b) {
    return arr ? arr[b] : all;
}

void run_rows(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p, const int32_t * given,
              int32_t * tokens, float * logprobs, float * raw, uint8_t * valid) {
    const Passes P = passes();
    parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        // Leased, not a fresh vector: 2V + 128 zeroed int32 per chunk and call (1.2 MiB at V = 151,936) faulted
        // in its pages every time.
        const size_t race_bytes = (sizeof(int32_t) * (size_t)race_scratch_size(V) + 63) / 64 * 64;
        ScratchLease lease(race_bytes + cut_scratch_bytes(V));
        int32_t * scratch = static_cast<int32_t *>(lease.data());
        void * cut_scratch = static_cast<unsigned char *>(lease.data()) + race_bytes;
        for (int64_t b = b0; b < b1; ++b) {
            const RowOut o = sample_one(P, logits + b * V, V, sample_row(p, b), given ? given[b] : -1, raw != nullptr,
                                        scratch, cut_scratch);
            if (tokens) tokens[b] = o.token;
            if (logprobs) logprobs[b] = o.lp;
            if (raw) raw[b] = o.raw;
            if (valid) valid[b] = o.valid;
        }
    });
}

}  // namespace

SampleRow sample_row(const maporl_sample_params & p, int64_t b) {
    return SampleRow{pick(p.temperature, p.temperature_all, b),
                     pick(p.top_k, p.top_k_all, b),
                     pick(p.top_p, p.top_p_all, b),
                     pick(p.min_p, p.min_p_all, b),
                     pick(p.seed, p.seed_all, b),
                     pick(p.position, p.position_all, b),
                     (int)p.filter_order};
}

void check_sample_params(const maporl_sample_params & p, int64_t B) {
    if (enum_int(p.filter_order) != MAPORL_FILTER_TOP_K_FIRST && enum_int(p.filter_order) != MAPORL_FILTER_JOINT)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "params.filter_order: expected MAPORL_FILTER_TOP_K_FIRST (0) or MAPORL_FILTER_JOINT (1), got %d",
                    enum_int(p.filter_order));
    const bool per_row = p.temperature || p.top_k || p.top_p || p.min_p;
    const int64_t rows = per_row ? B : 1;  // scalars only: one check covers every row
    for (int64_t b = 0; b < rows; ++b) {
        const SampleRow r = sample_row(p, b);
        auto at = [&](const void * arr) { return arr ? "[" + std::to_string(b) + "]" : std::string(); };
        if (!(r.temperature >= 0.0f && std::isfinite(r.temperature)))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.temperature%s: expected a finite number >= 0, got %g",
                        at(p.temperature).c_str(), (double)r.temperature);
        if (r.top_k < 0)
            throw_error(MAPORL_ERR_INVALID_ARG, "params.top_k%s: expected an integer >= 0 (0: off), got %d",
                        at(p.top_k).c_str(), (int)r.top_k);
        if (!(r.top_p >= 0.0f && r.top_p <= 1.0f))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.top_p%s: expected a number in [0, 1] (0 or 1: off), got %g",
                        at(p.top_p).c_str(), (double)r.top_p);
        if (!(r.min_p >= 0.0f && r.min_p <= 1.0f))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.min_p%s: expected a number in [0, 1] (0: off), got %g",
                        at(p.min_p).c_str(), (double)r.min_p);
    }
}

}  // namespace maporl

using namespace maporl;

extern "C" {

maporl_sample_params maporl_sample_default_params(void) {
    maporl_sample_params p;
    p.temperature = nullptr;
    p.temperature_all = 1.0f;
    p.top_k = nullptr;
    p.top_k_all = 0;
    p.top_p = nullptr;
    p.top_p_all = 1.0f;
    p.min_p = nullptr;
    p.min_p_all = 0.0f;
    p.seed = nullptr;
    p.seed_all = 0;
    p.position = nullptr;
    p.position_all = 0;
    p.filter_order = MAPORL_FILTER_TOP_K_FIRST;
    return p;
}

maporl_status maporl_sample(maporl_device device, const float * logits, int64_t B, int64_t V,
                            const maporl_sample_params * params, int32_t * tokens_out, float * logprobs_out,
                            float * raw_logprobs_out, uint8_t * valid_out) {
    return guarded([&] {
        require_device(device);
        require_dims(B, V, "B", "V");
        if (B > 0 && V < 1) throw_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when B > 0, got %lld", (long long)V);
        require_ptr(params, "params", 1);
        require_ptr(logits, "logits", B * V);
        require_ptr(tokens_out, "tokens_out", B);
        if (device == MAPORL_DEVICE_CUDA)
            return sample_cuda(logits, B, V, *params, nullptr, tokens_out, logprobs_out, raw_logprobs_out, valid_out);
        check_sample_params(*params, B);
        run_rows(logits, B, V, *params, nullptr, tokens_out, logprobs_out, raw_logprobs_out, valid_out);
        return MAPORL_OK;
    });
}

maporl_status maporl_sample_logprobs(maporl_device device, const float * logits, int64_t B, int64_t V,
                                     const maporl_sample_params * params, const int32_t * tokens, float * logprobs_out,
                                     float * raw_logprobs_out) {
    return guarded([&] {
        require_device(device);
        require_dims(B, V, "B", "V");
        require_ptr(params, "params", 1);
        require_ptr(logits, "logits", B * V);
        require_ptr(tokens, "tokens", B);
        require_ptr(logprobs_out, "logprobs_out", B);
        if (device == MAPORL_DEVICE_CUDA)
            return sample_cuda(logits, B, V, *params, tokens, nullptr, logprobs_out, raw_logprobs_out, nullptr);
        check_sample_params(*params, B);
        for (int64_t b = 0; b < B; ++b)
            if (tokens[b] < 0 || tokens[b] >= V)
                throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected token ids in [0, %lld) (V), got %d at index %lld",
                            (long long)V, (int)tokens[b], (long long)b);
        run_rows(logits, B, V, *params, tokens, nullptr, logprobs_out, raw_logprobs_out, nullptr);
        return MAPORL_OK;
    });
}

}  // extern "C"
