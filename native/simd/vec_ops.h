// vec_ops.h: the SIMD "Ops" of the shared row templates (policy_loss.h, logits_row.h, sampling_row.h): the
// vector type of vec.h with load/store/exp/select and the lane reductions, in the interface ScalarLoad<float>
// gives the scalar paths. Include only from a per-ISA unit (see vec.h).
#pragma once

#include "native/simd/vec.h"

namespace maporl {
namespace MAPORL_ISA {

struct VecOps {
    typedef vf V;
    typedef vi K;
    static constexpr int W = maporl::MAPORL_ISA::W;
    static MAPORL_INLINE V splat(double x) { return maporl::MAPORL_ISA::splat((float)x); }
    static MAPORL_INLINE V exp(V x) { return vexp(x); }
    static MAPORL_INLINE V exp_nonpos(V x) { return vexp_nonpos(x); }
    static MAPORL_INLINE V exp2_sum(V t) { return vexp2_sum(t); }
    // z / t rounded as IEEE division rounds it, without a divide: q = z * inv (inv = 1 / t rounded), then q plus
    // the exact remainder z - q * t (an FMA) times inv, rounded once (Markstein's correction; no pair differed
    // from division over 4e8 random ones). Three FMA-port operations against a divide's ~10 cycles.
    static MAPORL_INLINE V quotient(V z, V t, V inv) {
        const V q = z * inv;
        return vfma(vfma(-q, t, z), inv, q);
    }
    // Fixed-point weights (vec.h's vfixed_half) added to per-lane sums or stored per lane, the bins of top-p's cut,
    // and the sums' total: the sampler's top-p masses.
    typedef vh64 Fixed;
    static MAPORL_INLINE void fixed_add(Fixed & acc, V e, double scale, int s) { vfixed_add(acc, e, scale, s); }
    static MAPORL_INLINE void fixed_lanes(V e, double scale, int s, uint64_t * out) {
        vh64 lo, hi;
        vfixed_halves(e, scale, s, lo, hi);
        __builtin_memcpy(out, &lo, sizeof lo);
        __builtin_memcpy(out + W / 2, &hi, sizeof hi);
    }
    // top_p_hist_t's bin of every lane: 0 below lo, else 1 + min(nbins - 1, (int)((z - lo) * inv)).
    static MAPORL_INLINE void bins(V z, float lo, float inv, int nbins, int32_t * out) {
        const V t = (z - splat(lo)) * splat(inv), top = splat((double)(nbins - 1));
        const vi b = __builtin_convertvector(t < top ? t : top, vi) + 1;
        const vi r = z >= splat(lo) ? b : vi{};
        __builtin_memcpy(out, &r, sizeof r);
    }
    static MAPORL_INLINE uint64_t fixed_sum(const Fixed & f) {
        uint64_t t = 0;
        for (int l = 0; l < W / 2; ++l) t += f[l];
        return t;
    }
    static MAPORL_INLINE V max(V a, V b) { return vmax_keep_nan(a, b); }
    static MAPORL_INLINE V abs(V x) { return vabs(x); }
    static MAPORL_INLINE V sel(K k, V a, V b) { return k ? a : b; }
    static MAPORL_INLINE V load(const float * p) { return maporl::MAPORL_ISA::load(p); }
    static MAPORL_INLINE V loadm(const uint8_t * p) { return maporl::MAPORL_ISA::load(p); }
    static MAPORL_INLINE V loadm(const float * p) { return maporl::MAPORL_ISA::load(p); }
    static MAPORL_INLINE void store(float * p, V v) { maporl::MAPORL_ISA::store(p, v); }
    // Non-temporal store (no read-for-ownership of the line); p must be aligned to the vector size.
    static MAPORL_INLINE void stream(float * p, V v) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
        _mm512_stream_ps(p, (__m512)v);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
        _mm256_stream_ps(p, (__m256)v);
#else
        store(p, v);
#endif
    }
    static MAPORL_INLINE void fence() { _mm_sfence(); }
    static MAPORL_INLINE double hsum(V v) { return hsum_d(v); }
    static MAPORL_INLINE double hmax(V v) { return (double)maporl::MAPORL_ISA::hmax(v); }
    static MAPORL_INLINE bool any(K k) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
        return _mm512_test_epi32_mask((__m512i)k, (__m512i)k) != 0;
#elif defined(__AVX__) && MAPORL_VEC_W == 8
        return !_mm256_testz_si256((__m256i)k, (__m256i)k);
#else
        for (int i = 0; i < W; ++i)
            if (k[i]) return true;
        return false;
#endif
    }
    static MAPORL_INLINE double lane(V v, int i) { return (double)v[i]; }
    // The lanes set in k as bits (lane l -> bit l).
    static MAPORL_INLINE unsigned bits(K k) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
        return (unsigned)_mm512_movepi32_mask((__m512i)k);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
        return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps((__m256i)k));
#else
        unsigned m = 0;
        for (int l = 0; l < W; ++l) m |= (k[l] ? 1u : 0u) << l;
        return m;
#endif
    }
    // bits(a >= b) straight from the compare: AVX-512's compare writes a mask register, where going through the
    // vector extension's int lanes cost a masked move and a vpmovd2m per vector (cand_scan_t's loop ran ~1.6x
    // slower).
    static MAPORL_INLINE unsigned ge_bits(V a, V b) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
        return (unsigned)_mm512_cmp_ps_mask((__m512)a, (__m512)b, _CMP_GE_OQ);
#elif defined(__AVX__) && MAPORL_VEC_W == 8
        return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps((__m256)a, (__m256)b, _CMP_GE_OQ));
#else
        return bits(a >= b);
#endif
    }
    // Writes base + l for every bit l set in m to out, in lane order (popcount(m) of them). Branch-free: a whole
    // vector is stored at out (the slots past the count are scratch), so out needs W slots of room.
    static MAPORL_INLINE void compress_bits(unsigned m, int64_t base, int32_t * out) {
#if defined(__AVX512F__) && MAPORL_VEC_W == 16
        // A register compress and a plain store: vpcompressd to memory is microcoded on several cores.
        const __m512i ids = _mm512_add_epi32(_mm512_set1_epi32((int)base),
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        _mm512_storeu_si512(out, _mm512_maskz_compress_epi32((__mmask16)m, ids));
#elif defined(__AVX2__) && MAPORL_VEC_W == 8
        // The lane indices of each 8-bit mask, packed 4 bits apiece, spread by a shift per lane.
        static const struct Lut {
            uint32_t v[256];
            constexpr Lut() : v() {
                for (int k = 0; k < 256; ++k) {
                    uint32_t x = 0;
                    int n = 0;
                    for (int l = 0; l < 8; ++l)
                        if (k >> l & 1) x |= (uint32_t)l << (4 * n++);
                    v[k] = x;
                }
            }
        } lut;
        const __m256i sh =
            _mm256_srlv_epi32(_mm256_set1_epi32((int)lut.v[m & 255]), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        const __m256i lanes = _mm256_and_si256(sh, _mm256_set1_epi32(15));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out), _mm256_add_epi32(lanes, _mm256_set1_epi32((int)base)));
#else
        int n = 0;
        for (int l = 0; l < W; ++l)
            if (m >> l & 1) out[n++] = (int32_t)(base + l);
#endif
    }
};

}  // namespace MAPORL_ISA
}  // namespace maporl
