// group_advantages_avx512.cpp: group advantages for groups of exactly G members stored one after the other
// (verl's layout), 16 groups at a time with one group per lane: member t of the 16 groups is one gather. Each
// lane does the arithmetic of the scalar run path in the same order (double sums in index order), so the
// result is bit-identical to it; lanes only put 16 groups' add and divide latency chains side by side.
// Built with the AVX-512 flags (CMakeLists.txt, binding.gyp); dispatched by group_advantages.cpp.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside its own intrinsics
#endif
#include <immintrin.h>

#include <cmath>

#include "native/rl/group_advantages.h"

namespace maporl {
namespace avx512 {

void group_uniform_f32(const float * __restrict__ S, float * __restrict__ O, int64_t G, int64_t k0, int64_t k1,
                       const maporl_group_params & p) {
    const bool excl = p.nan_exclude != 0;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)G));  // member offsets of 16 groups
    int64_t k = k0;
    if (G <= (int64_t)1 << 24)  // offsets fit the 32-bit gather indices
        for (; k + 16 <= k1; k += 16) {
            const float * base = S + k * G;
            __m512d n_lo = _mm512_setzero_pd(), n_hi = _mm512_setzero_pd();
            __m512d s_lo = _mm512_setzero_pd(), s_hi = _mm512_setzero_pd();
            for (int64_t t = 0; t < G; ++t) {
                const __m512 x = _mm512_i32gather_ps(idx, base + t, 4);
                const __mmask16 c = excl ? _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q) : (__mmask16)0xffff;
                const __m512 xz = _mm512_maskz_mov_ps(c, x);
                const __m512 one = _mm512_maskz_mov_ps(c, _mm512_set1_ps(1.0f));
                s_lo = _mm512_add_pd(s_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(xz)));
                s_hi = _mm512_add_pd(
                    s_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xz), 1))));
                n_lo = _mm512_add_pd(n_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(one)));
                n_hi = _mm512_add_pd(
                    n_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(one), 1))));
            }
            const __m512d m_lo = _mm512_div_pd(s_lo, n_lo), m_hi = _mm512_div_pd(s_hi, n_hi);
            __m512d d_lo = _mm512_setzero_pd(), d_hi = _mm512_setzero_pd();
            if (p.scale_by_std)
                for (int64_t t = 0; t < G; ++t) {
                    const __m512 x = _mm512_i32gather_ps(idx, base + t, 4);
                    const __mmask16 c = excl ? _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q) : (__mmask16)0xffff;
                    const __m512d xl = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
                    const __m512d xh =
                        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
                    const __m512d el = _mm512_sub_pd(xl, m_lo), eh = _mm512_sub_pd(xh, m_hi);
                    d_lo = _mm512_mask_add_pd(d_lo, (__mmask8)(c & 0xff), d_lo, _mm512_mul_pd(el, el));
                    d_hi = _mm512_mask_add_pd(d_hi, (__mmask8)(c >> 8), d_hi, _mm512_mul_pd(eh, eh));
                }
            alignas(64) double n[16], sum[16], mean[16], dev[16];
            _mm512_store_pd(n, n_lo);
            _mm512_store_pd(n + 8, n_hi);
            _mm512_store_pd(sum, s_lo);
            _mm512_store_pd(sum + 8, s_hi);
            _mm512_store_pd(mean, m_lo);
            _mm512_store_pd(mean + 8, m_hi);
            _mm512_store_pd(dev, d_lo);
            _mm512_store_pd(dev + 8, d_hi);
            for (int j = 0; j < 16; ++j) {
                write_group(base + j * G, O + (k + j) * G, G, fold(Slot{n[j], sum[j], mean[j], dev[j]}, p), excl);
            }
        }
    for (; k < k1; ++k) group_run_sequential(S + k * G, O + k * G, G, p);
}

void write_from_folds(const float * __restrict__ S, const int32_t * __restrict__ ids, int32_t lo, const Fold * folds,
                      float * __restrict__ O, int64_t b, int64_t e, bool excl) {
    const double * f = &folds[0].center;  // center at 2k, factor at 2k + 1
    const __m256i vlo = _mm256_set1_epi32(lo), one = _mm256_set1_epi32(1);
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        const __m256i k2 = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(ids + i)), vlo), 1);
        const __m512d c = _mm512_i32gather_pd(k2, f, 8), fa = _mm512_i32gather_pd(_mm256_add_epi32(k2, one), f, 8);
        const __m256 x = _mm256_loadu_ps(S + i);
        __mmask8 keep = _mm512_cmp_pd_mask(fa, _mm512_setzero_pd(), _CMP_NEQ_UQ);  // factor 0: advantage 0
        if (excl) keep &= (__mmask8)_mm256_cmp_ps_mask(x, x, _CMP_ORD_Q);
        const __m512d a = _mm512_maskz_mul_pd(keep, _mm512_sub_pd(_mm512_cvtps_pd(x), c), fa);
        _mm256_storeu_ps(O + i, _mm512_cvtpd_ps(a));
    }
    for (; i < e; ++i) O[i] = write_one(S[i], folds[(int64_t)ids[i] - lo], excl);
}

}  // namespace avx512
}  // namespace maporl
#endif
