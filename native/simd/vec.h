// vec.h: W-lane float vectors (GCC/Clang vector extension) for the per-ISA kernel translation units.
// Include only from a <stem>_<isa>.cpp that defines MAPORL_ISA (a namespace name) and MAPORL_VEC_W (8 or 16)
// and is compiled with the matching -m flags; the types live in namespace maporl::MAPORL_ISA.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "native/core/bf16.h"

#if !defined(MAPORL_ISA) || !defined(MAPORL_VEC_W)
#error "define MAPORL_ISA and MAPORL_VEC_W before including vec.h"
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positives inside its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"        // (_mm512_undefined_ps in _mm512_max_ps)
#endif
#define MAPORL_INLINE inline __attribute__((always_inline))
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace maporl {
namespace MAPORL_ISA {

constexpr int W = MAPORL_VEC_W;
typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
typedef uint8_t vb __attribute__((vector_size(W)));
typedef double vd __attribute__((vector_size(8 * W / 2)));  // half the lanes, in double
typedef uint32_t vu __attribute__((vector_size(4 * W)));
typedef uint64_t vu64 __attribute__((vector_size(8 * W)));
typedef int32_t vih __attribute__((vector_size(2 * W)));  // half the lanes: the indices of a double gather
typedef float vfh __attribute__((vector_size(2 * W)));    // half the lanes, in float (one vd's worth)

MAPORL_INLINE vf splat(float x) { return vf{} + x; }
// x in every lane, exactly (splat computes 0 + x, one more instruction, and turns -0 into +0): the GEMM's A values.
MAPORL_INLINE vf broadcast(float x) {
    vf v;
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    const __m512 m = _mm512_set1_ps(x);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
    const __m256 m = _mm256_set1_ps(x);
#else
    vf m;
    for (int i = 0; i < W; ++i) m[i] = x;
#endif
    __builtin_memcpy(&v, &m, sizeof v);
    return v;
}

MAPORL_INLINE vf load(const float * p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
// W bfloat16 values widened to floats, exactly (the 16 bits become the top half of the float's 32).
MAPORL_INLINE vf load_bf16(const uint16_t * p) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    const __m512i i =
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16);
    vf v;
    __builtin_memcpy(&v, &i, sizeof v);
    return v;
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
    const __m256i i =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16);
    vf v;
    __builtin_memcpy(&v, &i, sizeof v);
    return v;
#else
    vu u;
    for (int i = 0; i < W; ++i) u[i] = (uint32_t)p[i] << 16;
    vf v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
#endif
}
MAPORL_INLINE vf loadw(const float * p) { return load(p); }
MAPORL_INLINE vf loadw(const uint16_t * p) { return load_bf16(p); }
// Weight k of a row as a float (the scalar tails): float or bfloat16.
MAPORL_INLINE float at(const float * p, int64_t k) { return p[k]; }
MAPORL_INLINE float at(const uint16_t * p, int64_t k) { return bf16_to_float(p[k]); }
// The address of a weight (for prefetching) and the bytes a weight takes in the stream.
MAPORL_INLINE const void * addr(const float * p) { return p; }
MAPORL_INLINE const void * addr(const uint16_t * p) { return p; }
MAPORL_INLINE constexpr int64_t weight_bytes(const float *) { return 4; }
MAPORL_INLINE constexpr int64_t weight_bytes(const uint16_t *) { return 2; }
// W bytes widened to floats. NOTE(u8 load): GCC 12 lowers __builtin_convertvector from a byte vector lane by
// lane (scalar byte extracts, 2x slower than the whole GAE kernel), so the x86 units use the zero-extend
// intrinsic (vpmovzxbd) directly.
MAPORL_INLINE vf load(const uint8_t * p) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    const __m512i i = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    vi v;
    __builtin_memcpy(&v, &i, sizeof v);
    return __builtin_convertvector(v, vf);
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
    const __m256i i = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
    vi v;
    __builtin_memcpy(&v, &i, sizeof v);
    return __builtin_convertvector(v, vf);
#else
    vb b;
    __builtin_memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, vf);
#endif
}
MAPORL_INLINE void store(float * p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

namespace detail {
template <int K, size_t... I>
MAPORL_INLINE vf shift_down(vf x, vf fill, std::index_sequence<I...>) {
    return __builtin_shufflevector(x, fill, ((I + K < W) ? (int)(I + K) : (int)(W + I))...);
}
template <size_t... I>
MAPORL_INLINE vd low_half(vf x, std::index_sequence<I...>) {
    return __builtin_convertvector(__builtin_shufflevector(x, x, (int)I...), vd);
}
template <size_t... I>
MAPORL_INLINE vd high_half(vf x, std::index_sequence<I...>) {
    return __builtin_convertvector(__builtin_shufflevector(x, x, (int)(I + W / 2)...), vd);
}
}  // namespace detail

namespace detail {
// One butterfly stage of the W x W transpose: in every 2H x 2H block of rows / lanes, the top-right and bottom-left
// H x H blocks trade places (rows i and i + H, i & H == 0).
template <int H, size_t... I>
MAPORL_INLINE vf trade_low(vf a, vf b, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, b, ((I & H) == 0 ? (int)I : (int)(W + I - H))...);
}
template <int H, size_t... I>
MAPORL_INLINE vf trade_high(vf a, vf b, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, b, ((I & H) == 0 ? (int)(I + H) : (int)(W + I))...);
}
template <int H>
MAPORL_INLINE void transpose_stage(vf * r) {
#pragma GCC unroll 16
    for (int i = 0; i < W; ++i)
        if ((i & H) == 0) {
            const vf a = r[i], b = r[i + H];
            r[i] = trade_low<H>(a, b, std::make_index_sequence<W>{});
            r[i + H] = trade_high<H>(a, b, std::make_index_sequence<W>{});
        }
}
}  // namespace detail

// r[i][l] becomes r[l][i] (a W x W block in W vectors): log2(W) butterfly stages of two-source shuffles, pure data
// movement (the GEMM's packing uses it to turn rows of k into the panels' rows, exactly).
MAPORL_INLINE void transpose(vf * r) {
    static_assert(W == 8 || W == 16, "transpose: W is 8 or 16");
    if constexpr (W == 16) detail::transpose_stage<8>(r);
    detail::transpose_stage<4>(r);
    detail::transpose_stage<2>(r);
    detail::transpose_stage<1>(r);
}

// Lane i gets x[i + K]; lanes past the end get fill[i].
template <int K>
MAPORL_INLINE vf shift_down(vf x, vf fill) {
    return detail::shift_down<K>(x, fill, std::make_index_sequence<W>{});
}
MAPORL_INLINE vd low_half(vf x) { return detail::low_half(x, std::make_index_sequence<W / 2>{}); }
MAPORL_INLINE vd high_half(vf x) { return detail::high_half(x, std::make_index_sequence<W / 2>{}); }

// a * b + c with one rounding (explicit FMA instructions: the same result on every run and thread count).
MAPORL_INLINE vf vfma(vf a, vf b, vf c) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__) && MAPORL_VEC_W == 8
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    vf r;  // one rounding per lane, as the FMA instructions (a * b + c would round twice)
    for (int l = 0; l < W; ++l) r[l] = __builtin_fmaf(a[l], b[l], c[l]);
    return r;
#endif
}
// max(a, x) that returns x when x is NaN (maxps returns its second operand when either is NaN).
MAPORL_INLINE vf vmax_keep_nan(vf a, vf x) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    return (vf)_mm512_max_ps((__m512)a, (__m512)x);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
    return (vf)_mm256_max_ps((__m256)a, (__m256)x);
#else
    return a > x ? a : x;
#endif
}
// exp for x <= 0 (softmax terms x - max), -Inf and NaN, Cephes' single-precision reduction and polynomial
// (relative error ~2e-7) with FMA. Below -87.33 (under the smallest normal) it gives 0; NaN stays NaN.
// Round-to-nearest through the 1.5 * 2^23 trick.
MAPORL_INLINE vf vexp_nonpos(vf x) {
    const vf big = splat(12582912.0f);
    const vf xc = vmax_keep_nan(splat(-87.3365447f), x);
    const vf n = vfma(xc, splat(1.44269504088896341f), big) - big;
    vf r = vfma(n, splat(-0.693359375f), xc);
    r = vfma(n, splat(2.12194440e-4f), r);
    vf y = splat(1.9875691500e-4f);
    y = vfma(y, r, splat(1.3981999507e-3f));
    y = vfma(y, r, splat(8.3334519073e-3f));
    y = vfma(y, r, splat(4.1665795894e-2f));
    y = vfma(y, r, splat(1.6666665459e-1f));
    y = vfma(y, r, splat(5.0000001201e-1f));
    y = vfma(y, r * r, r) + 1.0f;
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    // y * 2^n in one instruction (vscalefps), the same float as the multiply below (n is an integer in [-126, 0]:
    // both are y times an exact power of two, rounded once).
    const vf out = (vf)_mm512_scalef_ps((__m512)y, (__m512)n);
#else
    const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    __builtin_memcpy(&scale, &e, sizeof scale);
    const vf out = y * scale;
#endif
    return x < -87.3365447f ? splat(0.0f) : out;
}
// 2^t on every lane for t in [-125, 0] (the caller clamps; NaN stays NaN), for the softmax sums that need ~1e-7
// relative accuracy but not det_exp's bits (the terms of a log-sum-exp: t = (z - max) * log2(e) / temp).
// f = t - floor(t) in [0, 1) (exact), 2^f by a degree-5 minimax polynomial (relative error 1.5e-7 in float, as
// vexp_nonpos's 2e-7), times 2^floor(t). On AVX-512 that is vreduceps (t - floor(t) in one instruction) and
// vscalefps (y * 2^floor(t), straight from t): eight operations with the caller's multiply, against vexp_nonpos's
// fifteen; elsewhere floor, subtract and an exponent-field power of two.
MAPORL_INLINE vf vexp2_sum(vf t) {
#if defined(__AVX512DQ__) && MAPORL_VEC_W == 16
    const vf f = (vf)_mm512_reduce_ps((__m512)t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
    const vf n = (vf)_mm256_round_ps((__m256)t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const vf f = t - n;
#else
    vf n;
    for (int l = 0; l < W; ++l) n[l] = __builtin_floorf(t[l]);
    const vf f = t - n;
#endif
    vf y = splat(1.8775766948e-3f);
    y = vfma(y, f, splat(8.9893396944e-3f));
    y = vfma(y, f, splat(5.5826317519e-2f));
    y = vfma(y, f, splat(2.4015361071e-1f));
    y = vfma(y, f, splat(6.9315308332e-1f));
    y = vfma(y, f, splat(9.9999994040e-1f));
#if defined(__AVX512DQ__) && MAPORL_VEC_W == 16
    return (vf)_mm512_scalef_ps((__m512)y, (__m512)t);
#else
    const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    __builtin_memcpy(&scale, &e, sizeof scale);
    return y * scale;
#endif
}
// Sampling_radix.h's radix_fixed on every lane, added into acc (half-width lanes): floor(e * 2^s + 0.5) for
// finite e in [0, 2) and s <= 62, in double as radix_fixed computes it (e * 2^s and the + 0.5 are exact below
// 2^52; above, e * 2^s is an even integer the sum rounds back to), then truncated to an integer: AVX-512DQ's
// vcvttpd2uqq; on AVX2, floor and the 2^52 trick (exact below 2^52, so s <= 51, V > 1024; smaller rows, whose
// weights reach 2^52, go lane by lane).
typedef uint64_t vh64 __attribute__((vector_size(8 * W / 2)));
MAPORL_INLINE vh64 vfixed_half(vd x, int s) {
#if defined(__AVX512DQ__) && MAPORL_VEC_W == 16
    (void)s;
    return (vh64)_mm512_cvttpd_epu64((__m512d)x);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
    if (s <= 51) {
        const __m256d magic = _mm256_set1_pd(4503599627370496.0);  // 2^52
        const __m256d f = _mm256_add_pd(_mm256_floor_pd((__m256d)x), magic);
        return (vh64)_mm256_sub_epi64(_mm256_castpd_si256(f), _mm256_castpd_si256(magic));
    }
    vh64 r;
    for (int l = 0; l < W / 2; ++l) r[l] = (uint64_t)x[l];
    return r;
#else
    (void)s;
    vh64 r;
    for (int l = 0; l < W / 2; ++l) r[l] = (uint64_t)x[l];
    return r;
#endif
}
// The weights of the low and high lanes of e.
MAPORL_INLINE void vfixed_halves(vf e, double scale, int s, vh64 & lo, vh64 & hi) {
    const vd sc = vd{} + scale, half = vd{} + 0.5;
    lo = vfixed_half(low_half(e) * sc + half, s);
    hi = vfixed_half(high_half(e) * sc + half, s);
}
MAPORL_INLINE void vfixed_add(vh64 & acc, vf e, double scale, int s) {
    vh64 lo, hi;
    vfixed_halves(e, scale, s, lo, hi);
    acc += lo + hi;
}
// exp on every lane (relative error ~2e-7): vexp_nonpos's kernel on the input clamped to [-87.33, 88.38],
// then 0 below and +Inf above that range; NaN stays NaN.
MAPORL_INLINE vf vexp(vf x) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    const vf xc = (vf)_mm512_min_ps(_mm512_set1_ps(88.3762626f), (__m512)x);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
    const vf xc = (vf)_mm256_min_ps(_mm256_set1_ps(88.3762626f), (__m256)x);
#else
    const vf xc = x > 88.3762626f ? splat(88.3762626f) : x;
#endif
    const vf out = vexp_nonpos(xc);
    return x > 88.3762626f ? splat(__builtin_inff()) : out;
}
// p[idx[l]] on every lane (idx >= 0).
MAPORL_INLINE vf vgather(const float * p, vi idx) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    return (vf)_mm512_i32gather_ps((__m512i)idx, p, 4);
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
    return (vf)_mm256_i32gather_ps(p, (__m256i)idx, 4);
#else
    vf v;
    for (int l = 0; l < W; ++l) v[l] = p[idx[l]];
    return v;
#endif
}
// p[idx[l]] on each of the W / 2 double lanes (idx >= 0).
MAPORL_INLINE vd vgather_d(const double * p, vih idx) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    return (vd)_mm512_i32gather_pd((__m256i)idx, p, 8);
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
    return (vd)_mm256_i32gather_pd(p, (__m128i)idx, 8);
#else
    vd v;
    for (int l = 0; l < W / 2; ++l) v[l] = p[idx[l]];
    return v;
#endif
}
// Lane-wise 32 x 32 -> 64-bit product of a and b: high and low words (Philox's mulhilo).
// vpmuludq on the even lanes and on the odd lanes shifted down, then the high words blended (GCC's generic
// 64-bit product would use the slow vpmullq).
MAPORL_INLINE void vmulhilo(vu a, uint32_t b, vu & hi, vu & lo) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
    const __m512i A = (__m512i)a, Bv = _mm512_set1_epi32((int)b);
    const __m512i even = _mm512_mul_epu32(A, Bv), odd = _mm512_mul_epu32(_mm512_srli_epi64(A, 32), Bv);
    // Both words picked from the two 64-bit products by one two-source permute each (even: lanes 2j and 2j + 1 of
    // `even`, odd: of `odd`), rather than shifts and blends, or vpmulld (two uops, ten cycles) for the low words.
    const __m512i hi_idx = _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    const __m512i lo_idx = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    hi = (vu)_mm512_permutex2var_epi32(even, hi_idx, odd);
    lo = (vu)_mm512_permutex2var_epi32(even, lo_idx, odd);
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
    const __m256i A = (__m256i)a, Bv = _mm256_set1_epi32((int)b);
    const __m256i even = _mm256_mul_epu32(A, Bv), odd = _mm256_mul_epu32(_mm256_srli_epi64(A, 32), Bv);
    hi = (vu)_mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    lo = a * b;
#else
    const vu64 p = __builtin_convertvector(a, vu64) * (uint64_t)b;
    hi = __builtin_convertvector(p >> 32, vu);
    lo = a * b;
#endif
}
// philox.h's det_log on every lane, with the same operations in the same order (so the same floats).
MAPORL_INLINE vf vdet_log(vf x) {
    vu b;
    __builtin_memcpy(&b, &x, sizeof b);
    vi e = (vi)((b >> 23) & 0xFFu) - 127;
    const vu mb = (b & 0x007FFFFFu) | 0x3F800000u;
    vf m;
    __builtin_memcpy(&m, &mb, sizeof m);
    const vi big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e = e - big;  // big is -1 where true
    const vf s = (m - 1.0f) / (m + 1.0f);
    const vf s2 = s * s;
    vf p = splat(0.0769230769f);
    p = p * s2 + 0.0909090909f;
    p = p * s2 + 0.1111111111f;
    p = p * s2 + 0.1428571429f;
    p = p * s2 + 0.2f;
    p = p * s2 + 0.3333333333f;
    p = p * s2 + 1.0f;
    const vf logm = (s * 2.0f) * p;
    const vf fe = __builtin_convertvector(e, vf);
    return (fe * 0.693145752f + logm) + fe * 1.42860677e-6f;
}
MAPORL_INLINE vf vabs(vf x) {
    vi b;
    __builtin_memcpy(&b, &x, sizeof b);
    b &= 0x7fffffff;
    vf o;
    __builtin_memcpy(&o, &b, sizeof o);
    return o;
}
// The sum of x's lanes in lane order from 0 (W dependent adds: the order every float result of the decoding GEMV and
// attention was calibrated with). hsum_lanes gives W such sums at once, bit for bit.
MAPORL_INLINE float hsum(vf x) {
    float s = 0.0f;
    for (int i = 0; i < W; ++i) s += x[i];
    return s;
}
// Lane j of the result = hsum(a[j]), bit for bit, for the W vectors a[0..W) (overwritten): a transpose, then the
// rows added in lane order from 0 (W full-vector adds for W sums, not W x W scalar ones).
MAPORL_INLINE vf hsum_lanes(vf * a) {
    transpose(a);
    vf s = splat(0.0f);
#pragma GCC unroll 16
    for (int l = 0; l < W; ++l) s = s + a[l];
    return s;
}
MAPORL_INLINE double hsum_d(vf x) {
    double s = 0.0;
    for (int i = 0; i < W; ++i) s += (double)x[i];
    return s;
}
MAPORL_INLINE float hmax(vf x) {
    float s = x[0];
    for (int i = 1; i < W; ++i) s = x[i] > s ? x[i] : s;
    return s;
}

}  // namespace MAPORL_ISA
}  // namespace maporl
