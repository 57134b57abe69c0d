// q8.h: the int8 weight format of a frozen base, llama.cpp's Q8_0: a matrix [rows, cols] with cols a multiple of
// 32 has int8 values q and one IEEE half scale d per block of 32 consecutive values of a row. A weight is q * d,
// exact in float (8 bits times 11 bits of mantissa). Quantizing a block: d = half(max |x| / 127) (nearest even),
// q = round(x / d) (nearest even) clamped to +-127. The model holds the blocks in the packed layout below, which the
// W8A8 kernels (native/model/w8a8.h) read; the backward and the embedding read them back as q * d.
#pragma once

#include <stdint.h>

#include <cmath>
#include <cstring>

#include "native/core/hd.h"

namespace maporl {

constexpr int64_t kQ8Block = 32;

// The helpers here are `static`: the per-ISA kernel units (built with -mavx2 / -mavx512f) include this header too,
// and an inline function with external linkage could be kept from an AVX-512 unit and then run on a CPU without it.

// IEEE half to float, exactly (every half is a float; subnormals included).
static inline float f16_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {
        const float f = (float)m * 5.9604644775390625e-8f;  // m * 2^-24: exact
        std::memcpy(&u, &f, 4);
    } else if (e == 0x1f) {
        u = 0x7f800000u | (m << 13);  // Inf / NaN
    } else {
        u = ((e + 112) << 23) | (m << 13);
    }
    u |= sign;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Every half's float value (256 KiB, built on first use; q8.cpp, compiled for the baseline ISA): the kernels widen
// a block's scale with one load (a handful of weights' scales stay in cache) instead of f16_to_float's branches.
const float * f16_table();

// float to IEEE half, to nearest even (as torch's .to(torch.float16)): past 65504 (from 65520 up) it is Inf; NaN stays
// a quiet NaN of the same sign.
static inline uint16_t float_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00u;
    if (u >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds to Inf
    if (u < 0x38800000u) {                        // below 2^-14: a subnormal half (or zero), in units of 2^-24
        float a;
        std::memcpy(&a, &u, 4);
        return sign | (uint16_t)std::nearbyint(a * 16777216.0f);  // exact scaling; nearest even (the default mode)
    }
    const uint32_t r = u + 0xfffu + ((u >> 13) & 1u) - (112u << 23);
    return sign | (uint16_t)(r >> 13);
}

// Quantizes one block of kQ8Block values into q[0 .. 31] and *d. Returns false, writing nothing, when a value is
// not finite or the block's scale is beyond a half (max |x| past about 8.3e6).
static inline bool q8_quantize_block(const float * x, int8_t * q, uint16_t * d) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kQ8Block; ++i) {
        if (!std::isfinite(x[i])) return false;
        amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    }
    const uint16_t dh = float_to_f16(amax / 127.0f);
    const float df = f16_to_float(dh);
    if (std::isinf(df)) return false;
    *d = dh;
    for (int64_t i = 0; i < kQ8Block; ++i) {
        const float r = df > 0.0f ? std::nearbyint(x[i] / df) : 0.0f;
        q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
    }
    return true;
}

// The layout an int8 base holds a matrix [rows, cols] in (the W8A8 kernels read it as it is; w8a8.h): rows in groups of
// kQ8Rows = 16, the last group padded with zero rows, and inside a group the values interleaved four at a time: for
// each c4 < cols / 4, 64 bytes, row j's values 4 c4 .. 4 c4 + 3 at bytes 4 j .. 4 j + 3 (one 32-bit lane per row:
// one AVX-512 vector holds four columns of the group's 16 rows). Each value is stored as q + 128, an unsigned byte
// (the u8 operand of VNNI's dot product). The scales: per group and block of 32 columns, the 16 rows' halves in row
// order. q = -128 (which the quantizer above never writes, and llama.cpp's neither) is stored as -127.
constexpr int64_t kQ8Rows = 16;
static MAPORL_HD int64_t q8_padded_rows(int64_t rows) { return (rows + kQ8Rows - 1) / kQ8Rows * kQ8Rows; }
static MAPORL_HD int64_t q8_packed_index(int64_t cols, int64_t r, int64_t c) {
    return (r / kQ8Rows) * kQ8Rows * cols + (c / 4) * (4 * kQ8Rows) + (r % kQ8Rows) * 4 + c % 4;
}
static MAPORL_HD int64_t q8_packed_scale_index(int64_t cols, int64_t r, int64_t c) {
    return (r / kQ8Rows) * kQ8Rows * (cols / kQ8Block) + (c / kQ8Block) * kQ8Rows + r % kQ8Rows;
}
// Stores row r from its row-major values q [cols] and scales d [cols / 32].
static inline void q8_pack_row(uint8_t * pq, uint16_t * pd, int64_t cols, int64_t r, const int8_t * q,
                               const uint16_t * d) {
    uint8_t * dst = pq + q8_packed_index(cols, r, 0);
    for (int64_t c4 = 0; c4 < cols / 4; ++c4)
        for (int64_t t = 0; t < 4; ++t) {
            const int8_t v = q[4 * c4 + t];
            dst[c4 * 4 * kQ8Rows + t] = (uint8_t)((v < -127 ? -127 : v) + 128);
        }
    uint16_t * ds = pd + q8_packed_scale_index(cols, r, 0);
    for (int64_t b = 0; b < cols / kQ8Block; ++b) ds[b * kQ8Rows] = d[b];
}
// Row r as floats, q * d exactly.
static inline void q8_unpack_row(float * dst, const uint8_t * pq, const uint16_t * pd, int64_t cols, int64_t r) {
    const float * table = f16_table();
    for (int64_t b = 0; b < cols / kQ8Block; ++b) {
        const float d = table[pd[q8_packed_scale_index(cols, r, b * kQ8Block)]];
        const uint8_t * src = pq + q8_packed_index(cols, r, b * kQ8Block);
        for (int64_t c4 = 0; c4 < kQ8Block / 4; ++c4)
            for (int64_t t = 0; t < 4; ++t)
                dst[b * kQ8Block + 4 * c4 + t] = (float)((int)src[c4 * 4 * kQ8Rows + t] - 128) * d;
    }
}

}  // namespace maporl
