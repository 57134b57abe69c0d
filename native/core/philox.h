// philox.h: the counter-based randomness of the sampler, identical bit for bit on the CPU and in CUDA.
//   - Philox4x32-10 (Salmon et al., SC'11): key = the request's 64-bit seed, counter = (element / 4, position
//     low, position high, stream tag). A draw depends only on (seed, position, element), never on the batch,
//     the row order, the thread count or the device.
//   - det_log: a natural log built only from IEEE add / multiply / divide (each correctly rounded, no FMA
//     contraction: the CPU build uses -ffp-contract=off, CUDA the __f*_rn intrinsics), so that the Gumbel noise
//     -log(-log(u)) is the same float on both. Relative error ~2e-7 (a float log is not needed to be the
//     correctly rounded one, only the same everywhere).
#pragma once

#include <stdint.h>
#include <string.h>

#include "native/core/hd.h"

namespace maporl {

#if defined(__CUDA_ARCH__)
#define MAPORL_FADD(a, b) __fadd_rn((a), (b))
#define MAPORL_FSUB(a, b) __fsub_rn((a), (b))
#define MAPORL_FMUL(a, b) __fmul_rn((a), (b))
#define MAPORL_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define MAPORL_FADD(a, b) ((a) + (b))
#define MAPORL_FSUB(a, b) ((a) - (b))
#define MAPORL_FMUL(a, b) ((a) * (b))
#define MAPORL_FDIV(a, b) ((a) / (b))
#endif

struct Philox4 {
    uint32_t v[4];
};

MAPORL_HD void mulhilo32(uint32_t a, uint32_t b, uint32_t * hi, uint32_t * lo) {
#if defined(__CUDA_ARCH__)
    *hi = __umulhi(a, b);
    *lo = a * b;
#else
    const uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
#endif
}

MAPORL_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo32(0xD2511F53u, c0, &hi0, &lo0);
        mulhilo32(0xCD9E8D57u, c2, &hi1, &lo1);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return Philox4{{c0, c1, c2, c3}};
}

// The 32 random bits for vocabulary element `i` of a row sampled with (seed, position). Elements come in
// blocks of 64 served by 16 Philox calls: element i takes word (i % 64) / 16 of call 16 * (i / 64) + i % 16,
// so a SIMD unit gets whole vectors of words from vectors of calls, with no shuffling.
MAPORL_HD uint32_t philox_bits(uint64_t seed, int64_t position, int64_t i) {
    const uint64_t pos = (uint64_t)position, u = (uint64_t)i;
    const Philox4 r = philox4x32_10((uint32_t)((u >> 6) * 16 + (u & 15)), (uint32_t)pos, (uint32_t)(pos >> 32),
                                    0x5A3D1C07u, (uint32_t)seed, (uint32_t)(seed >> 32));
    return r.v[(u >> 4) & 3];
}

// Uniform in (0, 1) from the top 24 bits: (k + 0.5) * 2^-24 rounded to float (exact for k < 2^23, to even
// above). The top k = 2^24 - 1 would round to exactly 1, where -log(-log(u)) blows up (to ~88 with det_log):
// it maps to the largest float below 1 instead, so u is never 0 or 1 and the noise stays in [-2.86, 17.33].
// The same expression, clamp included, is the vector code's (sampling_vec.inc); the two must agree to the bit.
constexpr float kUniformTop = 0.99999994f;  // 1 - 2^-24
MAPORL_HD float uniform24(uint32_t bits) {
    const float u = ((float)(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
    return u < 1.0f ? u : kUniformTop;
}

MAPORL_HD uint32_t float_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}
MAPORL_HD float bits_float(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

// log(x) for a positive normal float x, from IEEE-rounded add / mul / div only: x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m - 1) / (m + 1), odd series to s^13 (|s| < 0.1716).
MAPORL_HD float det_log(float x) {
    const uint32_t b = float_bits(x);
    int e = (int)((b >> 23) & 0xFF) - 127;
    float m = bits_float((b & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
    if (m > 1.41421356f) {
        m = MAPORL_FMUL(m, 0.5f);
        e += 1;
    }
    const float s = MAPORL_FDIV(MAPORL_FSUB(m, 1.0f), MAPORL_FADD(m, 1.0f));
    const float s2 = MAPORL_FMUL(s, s);
    float p = 0.0769230769f;                             // 1/13
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 0.0909090909f);  // 1/11
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 0.1111111111f);  // 1/9
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 0.1428571429f);  // 1/7
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 0.2f);           // 1/5
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 0.3333333333f);  // 1/3
    p = MAPORL_FADD(MAPORL_FMUL(p, s2), 1.0f);
    const float logm = MAPORL_FMUL(MAPORL_FMUL(2.0f, s), p);
    // e * ln2 in two parts (the high part has few bits, so e * hi is exact).
    const float fe = (float)e;
    return MAPORL_FADD(MAPORL_FADD(MAPORL_FMUL(fe, 0.693145752f), logm), MAPORL_FMUL(fe, 1.42860677e-6f));
}

// Gumbel noise for element i: -log(-log(u)), u = uniform24(philox_bits(seed, position, i)). In [-2.86, 17.33].
MAPORL_HD float gumbel(uint64_t seed, int64_t position, int64_t i) {
    const float u = uniform24(philox_bits(seed, position, i));
    return -det_log(-det_log(u));
}

// A candidate x can beat the row's best key only if x >= max_x - kGumbelSpan (Gumbel noise lies in
// [-2.86, 17.33]); elements below are never given noise. Rounded up for safety.
constexpr float kGumbelSpan = 20.5f;

}  // namespace maporl
