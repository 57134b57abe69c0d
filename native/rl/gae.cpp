// gae.cpp: CPU GAE (the reference for CUDA) and the maporl_gae C entry point. Float batches go to the
// vector row kernel of the active ISA (gae_vec.inc, built as gae_avx512.cpp / gae_avx2.cpp); the plain
// recursion below is the scalar path, the double-precision path and the spec the vector paths are tested
// against. Rows are split over the thread pool; every row runs the same code whatever the thread count
// (bit-identical results), and the whitening sums are reduced per row, then over rows in a fixed order.
#include "native/rl/gae.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "native/core/core.h"
#include "native/core/threadpool.h"

#include "native/core/isa.h"

namespace maporl {
namespace {


// Smallest t in the row with a mask value other than 0/1, or -1.
template <typename M>
int64_t first_bad(const M * m, int64_t T) {
    for (int64_t t = 0; t < T; ++t)
        if (bad_mask_value(m[t])) return t;
    return -1;
}

// The plain recursion, one row: the spec the vector path is tested against, and the path for double.
template <typename F, typename M>
int64_t gae_row_scalar(const F * r, const F * v, const M * m, int64_t T, F gamma, F gl, F * A, F * R, GaeRowSums sums,
                       int64_t row) {
    F nv = F(0), lg = F(0);
    double s = 0, s2 = 0, n = 0;
    bool bad = false;
    for (int64_t t = T - 1; t >= 0; --t) {
        bad |= bad_mask_value(m[t]);
        if (m[t] == M(1)) {
            const F delta = r[t] + gamma * nv - v[t];
            lg = delta + gl * lg;
            nv = v[t];
            A[t] = lg;
            R[t] = lg + v[t];
            s += (double)lg;
            s2 += (double)lg * (double)lg;
            n += 1;
        } else {
            A[t] = F(0);
            R[t] = F(0);
        }
    }
    if (sums.sum) {
        sums.sum[row] = s;
        sums.sum_sq[row] = s2;
        sums.count[row] = n;
    }
    return bad ? first_bad(m, T) : -1;
}

// Rows [b0, b1); returns the smallest bad flat index in them or -1.
template <typename F, typename M>
int64_t gae_rows(const F * r, const F * v, const M * m, int64_t T, int64_t b0, int64_t b1, F gamma, F gl, F * A, F * R,
                 GaeRowSums sums) {
    if constexpr (std::is_same<F, float>::value) {
        const Isa isa = active_isa();
        if (isa != Isa::Scalar) {
            const GaeRowsArgs g{
                r, v, m, std::is_same<M, uint8_t>::value ? MAPORL_MASK_U8 : MAPORL_MASK_F32, T, gamma, gl, A, R, sums};
            return isa == Isa::Avx512 ? avx512::gae_rows_f32(g, b0, b1) : avx2::gae_rows_f32(g, b0, b1);
        }
    }
    for (int64_t b = b0; b < b1; ++b) {
        const int64_t o = b * T;
        const int64_t t = gae_row_scalar<F, M>(r + o, v + o, m + o, T, gamma, gl, A + o, R + o, sums, b);
        if (t >= 0) return o + t;
    }
    return -1;
}

// Shared driver of the reverse scans (GAE, REINFORCE++ returns): runs rows(b0, b1, sums) over the pool,
// reports the smallest bad mask index, then, with whiten, writes target = whitened(source) over all unmasked
// tokens from the per-row sums (reduced in row order: no dependence on the thread count).
template <typename F, typename M, typename Rows>
void scan_driver(const M * mask, int64_t B, int64_t T, bool whiten, const F * source, F * target, Rows && rows) {
    if (B == 0 || T == 0) return;
    std::vector<double> sum, sum_sq, count;
    GaeRowSums sums{nullptr, nullptr, nullptr};
    if (whiten) {
        sum.assign((size_t)B, 0.0);
        sum_sq.assign((size_t)B, 0.0);
        count.assign((size_t)B, 0.0);
        sums = GaeRowSums{sum.data(), sum_sq.data(), count.data()};
    }
    std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};
    parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        const int64_t i = rows(b0, b1, sums);
        if (i >= 0) {
            int64_t cur = bad.load();
            while (i < cur && !bad.compare_exchange_weak(cur, i)) {}
        }
    });
    if (bad.load() != std::numeric_limits<int64_t>::max()) {
        const int64_t i = bad.load();
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "mask: expected 0 or 1 at every position, got %g at index %lld (row %lld, t %lld)", (double)mask[i],
                    (long long)i, (long long)(i / T), (long long)(i % T));
    }
    if (!whiten) return;
    double s = 0, s2 = 0, n = 0;
    for (int64_t b = 0; b < B; ++b) {
        s += sum[b];
        s2 += sum_sq[b];
        n += count[b];
    }
    if (n == 0) {  // nothing to whiten: the target is the source (all zeros, every position masked)
        if (source != target) std::memcpy(target, source, sizeof(F) * (size_t)(B * T));
        return;
    }
    const double mean = whiten_mean(s, n);
    double m2 = whiten_m2_one_pass(s, s2, mean);
    if (!whiten_one_pass_ok(s2, m2)) {  // the second, exact pass: per row in double, rows summed in order
        std::vector<double> dev((size_t)B, 0.0);
        parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b) {
                double d = 0;
                for (int64_t t = 0; t < T; ++t)
                    if (mask[b * T + t] == M(1))
                        d += ((double)source[b * T + t] - mean) * ((double)source[b * T + t] - mean);
                dev[(size_t)b] = d;
            }
        });
        m2 = 0;
        for (int64_t b = 0; b < B; ++b) m2 += dev[(size_t)b];
    }
    const WhitenStats st = whiten_from_m2(mean, m2, n, 0);
    const float hi = (float)st.mean, lo = (float)(st.mean - (double)hi), rstd = (float)st.rstd;
    const Isa isa = active_isa();
    parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        const F * x = source + b0 * T;
        F * a = target + b0 * T;
        const M * m = mask + b0 * T;
        const int64_t n = (b1 - b0) * T;
        if constexpr (std::is_same<F, float>::value) {
            const maporl_mask_type mt = std::is_same<M, uint8_t>::value ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
            if (isa == Isa::Avx512) return avx512::gae_whiten_f32(x, a, m, mt, n, hi, lo, rstd);
            if (isa == Isa::Avx2) return avx2::gae_whiten_f32(x, a, m, mt, n, hi, lo, rstd);
            for (int64_t i = 0; i < n; ++i)
                a[i] = m[i] == M(1) ? ((x[i] - hi) - lo) * rstd : F(0);  // as the vector units
        } else {
            for (int64_t i = 0; i < n; ++i) a[i] = m[i] == M(1) ? (F)(((double)x[i] - st.mean) * st.rstd) : F(0);
        }
    });
}

template <typename F, typename M>
void gae_typed(const F * r, const F * v, const M * mask, int64_t B, int64_t T, F gamma, F lambda, bool whiten, F * adv,
               F * ret) {
    const F gl = gamma * lambda;
    scan_driver<F, M>(mask, B, T, whiten, adv, adv, [&](int64_t b0, int64_t b1, GaeRowSums sums) {
        return gae_rows<F, M>(r, v, mask, T, b0, b1, gamma, gl, adv, ret, sums);
    });
}

// The plain REINFORCE++ recursion for one row (scalar and double path; the spec of reinforce_rows_f32).
template <typename F, typename M>
int64_t returns_row_scalar(const F * r, const M * m, int64_t T, F gamma, F * G, GaeRowSums sums, int64_t row) {
    F run = F(0);
    double s = 0, s2 = 0, n = 0;
    bool bad = false;
    for (int64_t t = T - 1; t >= 0; --t) {
        bad |= bad_mask_value(m[t]);
        if (m[t] == M(1)) {
            run = r[t] + gamma * run;
            G[t] = run;
            s += (double)run;
            s2 += (double)run * (double)run;
            n += 1;
        } else {
            G[t] = F(0);
            run = F(0);
        }
    }
    if (sums.sum) {
        sums.sum[row] = s;
        sums.sum_sq[row] = s2;
        sums.count[row] = n;
    }
    return bad ? first_bad(m, T) : -1;
}

template <typename F, typename M>
void returns_typed(const F * r, const M * mask, int64_t B, int64_t T, F gamma, bool whiten, F * G, F * adv) {
    // Rows are scanned into the returns. Without whitening each row is copied to the advantages while still in
    // cache; with it, the driver writes the advantages from the returns (one read of G instead of a write and a
    // re-read of A: 24 bytes per token instead of 28).
    scan_driver<F, M>(mask, B, T, whiten, G, adv, [&](int64_t b0, int64_t b1, GaeRowSums sums) -> int64_t {
        auto copy = [&](int64_t c0, int64_t c1) {
            if (!whiten) std::memcpy(adv + c0 * T, G + c0 * T, sizeof(F) * (size_t)((c1 - c0) * T));
        };
        if constexpr (std::is_same<F, float>::value) {
            const Isa isa = active_isa();
            const maporl_mask_type mt = std::is_same<M, uint8_t>::value ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
            if (isa != Isa::Scalar) {
                for (int64_t b = b0; b < b1; ++b) {  // row by row, so the copy reads from cache
                    const int64_t bad = isa == Isa::Avx512
                        ? avx512::reinforce_rows_f32(r, mask, mt, T, gamma, G, sums, b, b + 1)
                        : avx2::reinforce_rows_f32(r, mask, mt, T, gamma, G, sums, b, b + 1);
                    if (bad >= 0) return bad;
                    copy(b, b + 1);
                }
                return -1;
            }
        }
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t o = b * T;
            const int64_t t = returns_row_scalar<F, M>(r + o, mask + o, T, gamma, G + o, sums, b);
            if (t >= 0) return o + t;
            copy(b, b + 1);
        }
        return -1;
    });
}

}  // namespace

template <typename F>
void gae_cpu(const F * rewards, const F * values, const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
             F gamma, F lambda, bool whiten, F * advantages, F * returns) {
    if (mask_type == MAPORL_MASK_U8)
        gae_typed<F, uint8_t>(rewards, values, static_cast<const uint8_t *>(mask), B, T, gamma, lambda, whiten,
                              advantages, returns);
    else
        gae_typed<F, float>(rewards, values, static_cast<const float *>(mask), B, T, gamma, lambda, whiten, advantages,
                            returns);
}

template void gae_cpu<float>(const float *, const float *, const void *, maporl_mask_type, int64_t, int64_t, float,
                             float, bool, float *, float *);
template <typename F>
void reinforce_returns_cpu(const F * rewards, const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
                           F gamma, bool whiten, F * returns, F * advantages) {
    if (mask_type == MAPORL_MASK_U8)
        returns_typed<F, uint8_t>(rewards, static_cast<const uint8_t *>(mask), B, T, gamma, whiten, returns,
                                  advantages);
    else
        returns_typed<F, float>(rewards, static_cast<const float *>(mask), B, T, gamma, whiten, returns, advantages);
}

template void reinforce_returns_cpu<float>(const float *, const void *, maporl_mask_type, int64_t, int64_t, float, bool,
                                           float *, float *);
template void reinforce_returns_cpu<double>(const double *, const void *, maporl_mask_type, int64_t, int64_t, double,
                                            bool, double *, double *);

template void gae_cpu<double>(const double *, const double *, const void *, maporl_mask_type, int64_t, int64_t, double,
                              double, bool, double *, double *);

}  // namespace maporl

namespace maporl {
// The argument checks the two scans share; returns B * T.
static int64_t require_scan_args(const maporl_device & device, const maporl_mask_type & mask_type, int64_t B, int64_t T,
                                 const float * rewards, const void * mask, float gamma, int whiten) {
    require_device(device);
    require_mask_type(mask_type);
    require_dims(B, T, "B", "T");
    const int64_t n = B * T;
    require_ptr(rewards, "rewards", n);
    require_ptr(mask, "mask", n);
    require_unit_interval(gamma, "gamma");
    if (whiten != 0 && whiten != 1) throw_error(MAPORL_ERR_INVALID_ARG, "whiten: expected 0 or 1, got %d", whiten);
    return n;
}
}  // namespace maporl

extern "C" {

maporl_gae_params maporl_gae_default_params(void) {
    maporl_gae_params p;
    p.gamma = 1.0f;
    p.lambda = 0.95f;
    p.whiten = 0;
    return p;
}

maporl_status maporl_gae(maporl_device device, const float * rewards, const float * values, const void * mask,
                         maporl_mask_type mask_type, int64_t B, int64_t T, maporl_gae_params params,
                         float * advantages_out, float * returns_out) {
    using namespace maporl;
    return guarded([&] {
        const int64_t n = require_scan_args(device, mask_type, B, T, rewards, mask, params.gamma, params.whiten);
        require_ptr(values, "values", n);
        require_ptr(advantages_out, "advantages_out", n);
        require_ptr(returns_out, "returns_out", n);
        require_unit_interval(params.lambda, "lambda");
        if (device == MAPORL_DEVICE_CUDA)
            return gae_cuda(rewards, values, mask, mask_type, B, T, params.gamma, params.lambda, params.whiten != 0,
                            advantages_out, returns_out);
        gae_cpu<float>(rewards, values, mask, mask_type, B, T, params.gamma, params.lambda, params.whiten != 0,
                       advantages_out, returns_out);
        return MAPORL_OK;
    });
}

maporl_returns_params maporl_returns_default_params(void) {
    maporl_returns_params p;
    p.gamma = 1.0f;
    p.whiten = 1;
    return p;
}

maporl_status maporl_reinforce_returns(maporl_device device, const float * rewards, const void * mask,
                                       maporl_mask_type mask_type, int64_t B, int64_t T, maporl_returns_params params,
                                       float * returns_out, float * advantages_out) {
    using namespace maporl;
    return guarded([&] {
        const int64_t n = require_scan_args(device, mask_type, B, T, rewards, mask, params.gamma, params.whiten);
        require_ptr(returns_out, "returns_out", n);
        require_ptr(advantages_out, "advantages_out", n);
        if (returns_out == advantages_out && n > 0)
            throw_error(MAPORL_ERR_INVALID_ARG, "advantages_out: expected a buffer distinct from returns_out");
        if (device == MAPORL_DEVICE_CUDA)
            return reinforce_returns_cuda(rewards, mask, mask_type, B, T, params.gamma, params.whiten != 0, returns_out,
                                          advantages_out);
        reinforce_returns_cpu<float>(rewards, mask, mask_type, B, T, params.gamma, params.whiten != 0, returns_out,
                                     advantages_out);
        return MAPORL_OK;
    });
}

}  // extern "C"
