// group_advantages_avx2.cpp: the AVX2 twin of group_advantages_avx512.cpp: groups of exactly G members stored one
// after the other, 8 groups at a time with one group per lane (member t of the 8 groups is one gather), each lane
// doing the scalar run path's arithmetic in the same order (bit-identical). Built with the AVX2 flags.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside its own intrinsics
#endif
#include <immintrin.h>

#include <cmath>

#include "native/rl/group_advantages.h"

namespace maporl {
namespace avx2 {

void group_uniform_f32(const float * __restrict__ S, float * __restrict__ O, int64_t G, int64_t k0, int64_t k1,
                       const maporl_group_params & p) {
    const bool excl = p.nan_exclude != 0;
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)G));
    const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    int64_t k = k0;
    if (G <= (int64_t)1 << 24)  // offsets fit the 32-bit gather indices
        for (; k + 8 <= k1; k += 8) {
            const float * base = S + k * G;
            __m256d n_lo = _mm256_setzero_pd(), n_hi = _mm256_setzero_pd();
            __m256d s_lo = _mm256_setzero_pd(), s_hi = _mm256_setzero_pd();
            for (int64_t t = 0; t < G; ++t) {
                const __m256 x = _mm256_i32gather_ps(base + t, idx, 4);
                const __m256 c = excl ? _mm256_cmp_ps(x, x, _CMP_ORD_Q) : all;  // all-ones where counted
                const __m256 xz = _mm256_and_ps(x, c);
                const __m256 one = _mm256_and_ps(_mm256_set1_ps(1.0f), c);
                s_lo = _mm256_add_pd(s_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(xz)));
                s_hi = _mm256_add_pd(s_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(xz, 1)));
                n_lo = _mm256_add_pd(n_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(one)));
                n_hi = _mm256_add_pd(n_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(one, 1)));
            }
            const __m256d m_lo = _mm256_div_pd(s_lo, n_lo), m_hi = _mm256_div_pd(s_hi, n_hi);
            __m256d d_lo = _mm256_setzero_pd(), d_hi = _mm256_setzero_pd();
            if (p.scale_by_std)
                for (int64_t t = 0; t < G; ++t) {
                    const __m256 x = _mm256_i32gather_ps(base + t, idx, 4);
                    const __m256 c = excl ? _mm256_cmp_ps(x, x, _CMP_ORD_Q) : all;
                    const __m256d el = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), m_lo);
                    const __m256d eh = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), m_hi);
                    // Widen the 32-bit lane masks to 64-bit ones for the double halves.
                    const __m256d cl =
                        _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(_mm256_castps256_ps128(c))));
                    const __m256d ch =
                        _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(_mm256_extractf128_ps(c, 1))));
                    d_lo = _mm256_add_pd(d_lo, _mm256_and_pd(_mm256_mul_pd(el, el), cl));
                    d_hi = _mm256_add_pd(d_hi, _mm256_and_pd(_mm256_mul_pd(eh, eh), ch));
                }
            alignas(32) double n[8], sum[8], mean[8], dev[8];
            _mm256_store_pd(n, n_lo);
            _mm256_store_pd(n + 4, n_hi);
            _mm256_store_pd(sum, s_lo);
            _mm256_store_pd(sum + 4, s_hi);
            _mm256_store_pd(mean, m_lo);
            _mm256_store_pd(mean + 4, m_hi);
            _mm256_store_pd(dev, d_lo);
            _mm256_store_pd(dev + 4, d_hi);
            for (int j = 0; j < 8; ++j) {
                write_group(base + j * G, O + (k + j) * G, G, fold(Slot{n[j], sum[j], mean[j], dev[j]}, p), excl);
            }
        }
    for (; k < k1; ++k) group_run_sequential(S + k * G, O + k * G, G, p);
}

void write_from_folds(const float * __restrict__ S, const int32_t * __restrict__ ids, int32_t lo, const Fold * folds,
                      float * __restrict__ O, int64_t b, int64_t e, bool excl) {
    const double * f = &folds[0].center;  // center at 2k, factor at 2k + 1
    const __m128i vlo = _mm_set1_epi32(lo), one = _mm_set1_epi32(1);
    int64_t i = b;
    for (; i + 4 <= e; i += 4) {
        const __m128i k2 = _mm_slli_epi32(_mm_sub_epi32(_mm_loadu_si128((const __m128i *)(ids + i)), vlo), 1);
        const __m256d c = _mm256_i32gather_pd(f, k2, 8), fa = _mm256_i32gather_pd(f, _mm_add_epi32(k2, one), 8);
        const __m128 x = _mm_loadu_ps(S + i);
        __m256d keep = _mm256_cmp_pd(fa, _mm256_setzero_pd(), _CMP_NEQ_UQ);  // factor 0: advantage 0
        if (excl)
            keep = _mm256_and_pd(
                keep, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(_mm_cmp_ps(x, x, _CMP_ORD_Q)))));
        const __m256d a = _mm256_and_pd(_mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(x), c), fa), keep);
        _mm_storeu_ps(O + i, _mm256_cvtpd_ps(a));
    }
    for (; i < e; ++i) O[i] = write_one(S[i], folds[(int64_t)ids[i] - lo], excl);
}

}  // namespace avx2
}  // namespace maporl
#endif
