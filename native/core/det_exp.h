// det_exp.h: exp(x) for x <= 0 that is the same float on the CPU, at every SIMD level, and in CUDA. The sampler's
// support decisions (min-p's e >= min_p, top-p's masses) are made on these values, so that a row's support, and
// with it the token, does not depend on where it runs: glibc's expf, CUDA's expf and a vector polynomial each
// round differently in the last bits, and a top-p or min-p boundary that falls inside that rounding would go one
// way on one and the other way on another.
// The algorithm is vec.h's vexp_nonpos (Cephes' single-precision reduction and polynomial, relative error
// ~2e-7) written one lane at a time: every step is one correctly rounded IEEE operation (fused multiply-add where
// the vector code uses an FMA instruction; the CPU build has -ffp-contract=off, CUDA uses the __f*_rn
// intrinsics), so each lane of vexp_nonpos equals det_exp_nonpos of that lane (test_sampling_support checks every
// SIMD level against it).
#pragma once

#include <stdint.h>

#include "native/core/hd.h"
#include "native/core/philox.h"

namespace maporl {

#if defined(__CUDA_ARCH__)
#define MAPORL_FFMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define MAPORL_FFMA(a, b, c) __builtin_fmaf((a), (b), (c))
#endif

// exp(x) for x <= 0; 0 below -87.3365447 (under the smallest normal float) and for -Inf; NaN stays NaN.
MAPORL_HD float det_exp_nonpos(float x) {
    if (x != x) return x;
    if (x < -87.3365447f) return 0.0f;
    const float big = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const float n = MAPORL_FSUB(MAPORL_FFMA(x, 1.44269504088896341f, big), big);
    float r = MAPORL_FFMA(n, -0.693359375f, x);
    r = MAPORL_FFMA(n, 2.12194440e-4f, r);
    float y = 1.9875691500e-4f;
    y = MAPORL_FFMA(y, r, 1.3981999507e-3f);
    y = MAPORL_FFMA(y, r, 8.3334519073e-3f);
    y = MAPORL_FFMA(y, r, 4.1665795894e-2f);
    y = MAPORL_FFMA(y, r, 1.6666665459e-1f);
    y = MAPORL_FFMA(y, r, 5.0000001201e-1f);
    y = MAPORL_FADD(MAPORL_FFMA(y, MAPORL_FMUL(r, r), r), 1.0f);
    const uint32_t scale = (uint32_t)((int32_t)n + 127) << 23;  // n in [-126, 0]: 2^n
    return MAPORL_FMUL(y, bits_float(scale));
}

}  // namespace maporl
