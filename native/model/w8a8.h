// w8a8.h: the linear layer of an int8 base (q8.h's packed layout), W8A8 as llama.cpp computes Q8_0: each row of the
// input is quantized per block of 32 as the weights are (d = max |x| / 127, kept as a float where llama.cpp rounds it
// to a half; q = round(x / d), to
// nearest even, through x * (1 / d)), the block's dot product is taken in integers, exactly, and scaled:
//   out[n, o] = (sum over blocks b, in order, of fmaf((float) S[n, o, b], dw[o, b] * dx[n, b], acc)) + bias[o]
// with acc starting at 0 and S the integer sum of q_x * q_w over the block. Every SIMD level (AVX-512 VNNI, AVX2,
// scalar) computes exactly this, so their outputs are the same bits, and so are the decoding GEMV's and the GEMM's
// (one kernel). A block holding Inf or NaN gives NaN outputs; a block whose max |x| is below 1e-30 counts as zero (its
// 1 / d would overflow a float).
#pragma once

#include <stdint.h>

#include <cmath>
#include <vector>

#include "native/core/hd.h"

namespace maporl {
namespace gpt {

// One block of 32 input values' scale d and its inverse id (every level's quantizer starts here, the CUDA one too:
// cuda/model/w8a8.cu); false, with d = NaN and id = 0, when the block holds Inf or NaN. `static`: the per-ISA units
// include it too (q8.h says why).
static MAPORL_HD bool w8a8_block_scale(const float * xb, float * d, float * id) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
        const float a = fabsf(xb[i]);
        finite = finite && a <= 3.40282347e+38f;  // (false for Inf and NaN)
        amax = a > amax ? a : amax;
    }
    if (!finite) {
        *d = NAN;
        *id = 0.0f;
        return false;
    }
    *d = amax >= 1e-30f ? amax / 127.0f : 0.0f;
    *id = *d > 0.0f ? 1.0f / *d : 0.0f;
    return true;
}

// One value of a finite block: round(x * id) to nearest even, clamped to +-127.
static MAPORL_HD int8_t w8a8_quantize_value(float x, float id) {
    const float r = rintf(x * id);
    return (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}

// An input quantized per row and block: q [N, C], d and s (the sum of the block's q) [N, C / 32].
struct W8A8Input {
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int32_t> s;
    int64_t N = 0, C = 0;
};

// x [N, C] (C a multiple of 32) into in, on the pool.
void w8a8_quantize(W8A8Input & in, const float * x, int64_t N, int64_t C);

// out [N, OC] rows' outputs of the 16-row groups g0 .. g1 - 1 (outputs 16 g0 .. min(16 g1, OC) - 1) of the packed
// weight (pq, pd) [OC, C] on the calling thread.
void w8a8_groups(const W8A8Input & in, const uint8_t * pq, const uint16_t * pd, int64_t OC, const float * bias,
                 float * out, int64_t g0, int64_t g1);

// out [N, OC] = inp [N, C] @ W^T (+ bias): quantizes the input and runs every group on the pool.
void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd, const float * bias,
                         int64_t N, int64_t C, int64_t OC);

// "avx512-vnni", "avx2" or "scalar": the level the kernels above run at now (maporl_set_simd's level, VNNI where
// that level is AVX-512 and the CPU has it, else AVX2).
const char * w8a8_level();

}  // namespace gpt
}  // namespace maporl
