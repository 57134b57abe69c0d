// gae.cpp: CPU GAE (the reference for CUDA) and the maporl_gae C entry point.
// The recursion is serial in T, so the kernel runs it for kGaeLanes rows at once, one row per SIMD lane:
// a tile of TT steps x 16 rows is transposed into a small buffer, scanned with blends (no branches), and
// transposed back. Rows are split over the thread pool in whole blocks, so every row is computed by the
// same code whatever the thread count, and the whitening sums are reduced per row in a fixed order.
#include "gae.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core.h"
#include "threadpool.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && defined(__x86_64__)
#define MAPORL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MAPORL_CLONES
#endif
#if defined(__GNUC__)
#define MAPORL_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MAPORL_ALWAYS_INLINE inline
#endif

namespace maporl {
namespace {

constexpr int W = kGaeLanes;
constexpr int TT = 32;  // time steps per tile

inline bool mask_bad(uint8_t m) { return m > 1; }
inline bool mask_bad(float m) { return !(m == 0.0f || m == 1.0f); }

struct RowSums {
    double * sum;     // [B]
    double * sum_sq;  // [B]
    double * count;   // [B]
};

// One block of up to W rows starting at b0. Returns the smallest flat index of a bad mask value, or -1.
template <typename F, typename M, bool Whiten>
MAPORL_ALWAYS_INLINE int64_t gae_block_impl(const F * r, const F * v, const M * mask, int64_t B, int64_t T,
                                            int64_t b0, F gamma, F gl, F * adv, F * ret, RowSums sums) {
    const int lanes = (int)std::min<int64_t>(W, B - b0);
    alignas(64) F tr[TT][W], tv[TT][W], tm[TT][W], ta[TT][W], tR[TT][W];
    alignas(64) F nv[W], lg[W];
    alignas(64) double s[W], s2[W], cnt[W];
    for (int l = 0; l < W; ++l) { nv[l] = F(0); lg[l] = F(0); s[l] = 0; s2[l] = 0; cnt[l] = 0; }
    int64_t bad_index = -1;

    for (int64_t t1 = T; t1 > 0; t1 -= TT) {
        const int64_t t0 = std::max<int64_t>(0, t1 - TT);
        const int len = (int)(t1 - t0);
        bool any_bad = false;
        for (int l = 0; l < lanes; ++l) {
            const int64_t off = (b0 + l) * T + t0;
            for (int j = 0; j < len; ++j) {
                tr[j][l] = r[off + j];
                tv[j][l] = v[off + j];
                const M m = mask[off + j];
                any_bad |= mask_bad(m);
                tm[j][l] = m == M(1) ? F(1) : F(0);
            }
        }
        for (int l = lanes; l < W; ++l)
            for (int j = 0; j < len; ++j) { tr[j][l] = F(0); tv[j][l] = F(0); tm[j][l] = F(0); }
        if (any_bad && bad_index < 0) {
            for (int l = 0; l < lanes && bad_index < 0; ++l)
                for (int j = 0; j < len; ++j)
                    if (mask_bad(mask[(b0 + l) * T + t0 + j])) { bad_index = (b0 + l) * T + t0 + j; break; }
        }
        for (int j = len - 1; j >= 0; --j) {
            for (int l = 0; l < W; ++l) {
                const bool valid = tm[j][l] != F(0);
                const F delta = tr[j][l] + gamma * nv[l] - tv[j][l];
                const F cand = delta + gl * lg[l];
                lg[l] = valid ? cand : lg[l];
                nv[l] = valid ? tv[j][l] : nv[l];
                ta[j][l] = valid ? cand : F(0);
                tR[j][l] = valid ? cand + tv[j][l] : F(0);
                if constexpr (Whiten) {
                    const double a = valid ? (double)cand : 0.0;
                    s[l] += a;
                    s2[l] += a * a;
                    cnt[l] += valid ? 1.0 : 0.0;
                }
            }
        }
        for (int l = 0; l < lanes; ++l) {
            const int64_t off = (b0 + l) * T + t0;
            for (int j = 0; j < len; ++j) {
                adv[off + j] = ta[j][l];
                ret[off + j] = tR[j][l];
            }
        }
    }
    if constexpr (Whiten) {
        for (int l = 0; l < lanes; ++l) {
            sums.sum[b0 + l] = s[l];
            sums.sum_sq[b0 + l] = s2[l];
            sums.count[b0 + l] = cnt[l];
        }
    }
    return bad_index;
}

// Float entry points, compiled once per SIMD level and dispatched at load time (no -march=native).
#define MAPORL_GAE_BLOCK_F32(NAME, M, WHITEN)                                                                  \
    MAPORL_CLONES int64_t NAME(const float * r, const float * v, const M * mask, int64_t B, int64_t T,       \
                               int64_t b0, float gamma, float gl, float * adv, float * ret, RowSums sums) {  \
        return gae_block_impl<float, M, WHITEN>(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums);            \
    }
MAPORL_GAE_BLOCK_F32(gae_block_f32_u8, uint8_t, false)
MAPORL_GAE_BLOCK_F32(gae_block_f32_u8_w, uint8_t, true)
MAPORL_GAE_BLOCK_F32(gae_block_f32_f32, float, false)
MAPORL_GAE_BLOCK_F32(gae_block_f32_f32_w, float, true)
#undef MAPORL_GAE_BLOCK_F32

template <typename F, typename M>
int64_t gae_block(const F * r, const F * v, const M * mask, int64_t B, int64_t T, int64_t b0, F gamma, F gl,
                  bool whiten, F * adv, F * ret, RowSums sums) {
    if constexpr (std::is_same<F, float>::value) {
        if constexpr (std::is_same<M, uint8_t>::value)
            return whiten ? gae_block_f32_u8_w(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums)
                          : gae_block_f32_u8(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums);
        else
            return whiten ? gae_block_f32_f32_w(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums)
                          : gae_block_f32_f32(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums);
    } else {
        return whiten ? gae_block_impl<F, M, true>(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums)
                      : gae_block_impl<F, M, false>(r, v, mask, B, T, b0, gamma, gl, adv, ret, sums);
    }
}

template <typename F, typename M>
void gae_typed(const F * r, const F * v, const M * mask, int64_t B, int64_t T, F gamma, F lambda, bool whiten,
               F * adv, F * ret) {
    if (B == 0 || T == 0) return;
    const F gl = gamma * lambda;
    std::vector<double> sum, sum_sq, count;
    if (whiten) {
        sum.assign((size_t)B, 0.0);
        sum_sq.assign((size_t)B, 0.0);
        count.assign((size_t)B, 0.0);
    }
    RowSums sums{sum.data(), sum_sq.data(), count.data()};
    std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};
    const int64_t blocks = (B + W - 1) / W;
    parallel_for(blocks, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
            int64_t b = gae_block<F, M>(r, v, mask, B, T, k * W, gamma, gl, whiten, adv, ret, sums);
            if (b >= 0) {
                int64_t cur = bad.load();
                while (b < cur && !bad.compare_exchange_weak(cur, b)) {}
            }
        }
    });
    if (bad.load() != std::numeric_limits<int64_t>::max()) {
        const int64_t i = bad.load();
        throw_error(MAPORL_ERR_INVALID_ARG, "mask: expected 0 or 1 at every position, got %g at index %lld (row %lld, t %lld)",
                    (double)mask[i], (long long)i, (long long)(i / T), (long long)(i % T));
    }
    if (!whiten) return;
    double s = 0, s2 = 0, n = 0;
    for (int64_t b = 0; b < B; ++b) { s += sum[b]; s2 += sum_sq[b]; n += count[b]; }
    if (n == 0) return;
    const WhitenStats st = whiten_stats(s, s2, n);
    parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            F * a = adv + b * T;
            const M * m = mask + b * T;
            for (int64_t t = 0; t < T; ++t)
                a[t] = m[t] == M(1) ? (F)(((double)a[t] - st.mean) * st.rstd) : F(0);
        }
    });
}

}  // namespace

template <typename F>
void gae_cpu(const F * rewards, const F * values, const void * mask, maporl_mask_type mask_type, int64_t B,
             int64_t T, F gamma, F lambda, bool whiten, F * advantages, F * returns) {
    if (mask_type == MAPORL_MASK_U8)
        gae_typed<F, uint8_t>(rewards, values, static_cast<const uint8_t *>(mask), B, T, gamma, lambda, whiten,
                              advantages, returns);
    else
        gae_typed<F, float>(rewards, values, static_cast<const float *>(mask), B, T, gamma, lambda, whiten,
                            advantages, returns);
}

template void gae_cpu<float>(const float *, const float *, const void *, maporl_mask_type, int64_t, int64_t, float,
                             float, bool, float *, float *);
template void gae_cpu<double>(const double *, const double *, const void *, maporl_mask_type, int64_t, int64_t,
                              double, double, bool, double *, double *);

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
        require_device(device);
        require_mask_type(mask_type);
        require_dims(B, T, "B", "T");
        const int64_t n = B * T;
        require_ptr(rewards, "rewards", n);
        require_ptr(values, "values", n);
        require_ptr(mask, "mask", n);
        require_ptr(advantages_out, "advantages_out", n);
        require_ptr(returns_out, "returns_out", n);
        require_unit_interval(params.gamma, "gamma");
        require_unit_interval(params.lambda, "lambda");
        if (params.whiten != 0 && params.whiten != 1)
            throw_error(MAPORL_ERR_INVALID_ARG, "whiten: expected 0 or 1, got %d", params.whiten);
        if (device == MAPORL_DEVICE_CUDA)
            return gae_cuda(rewards, values, mask, mask_type, B, T, params.gamma, params.lambda, params.whiten != 0,
                            advantages_out, returns_out);
        gae_cpu<float>(rewards, values, mask, mask_type, B, T, params.gamma, params.lambda, params.whiten != 0,
                       advantages_out, returns_out);
        return MAPORL_OK;
    });
}

}  // extern "C"
