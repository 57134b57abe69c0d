// w8a8_tile.h: the decomposition of the CUDA W8A8 forward (cuda/model/w8a8.cu), written once for the kernels and
// for their CPU emulation (w8a8_emulate below; the emulated device of llama_device_host.h runs it, so the int8 base's
// tests on the emulated device check this decomposition against the CPU model's bits). The arithmetic is w8a8.h's:
//  - quantize: one thread per (row, block of 32) of the input through w8a8_block_scale and w8a8_quantize_value, into
//    xq [N, C] (int8) and xd [N, C / 32] (float scales);
//  - the GEMM over q8.h's packed weight: a thread owns one output column o and four input rows and walks o's blocks
//    in order: per block, the integer dot product of the 32 pairs (eight dp4a of four signed bytes; the stored
//    q + 128 flipped back to q by xor 0x80 per byte), then acc = fma((float) S, dw * dx, acc), and acc + bias at the
//    end: the CPU's chain, so the same bits as every CPU level. A block tile holds TO outputs x TN = 4 * (256 / TO)
//    input rows; the tile's input values and scales pass through shared memory kChunk blocks (128 columns) at a time
//    (load, barrier, compute, barrier).
#pragma once

#include <stdint.h>

#include <cmath>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "native/core/hd.h"
#include "native/core/q8.h"
#include "native/model/w8a8.h"

namespace maporl {
namespace gpt {
namespace w8a8_tile {

constexpr int kThreads = 256, kChunk = 4;

// The sum of the products of the four signed bytes of a and b, plus c (CUDA's __dp4a).
static MAPORL_HD int32_t dp4a(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int t = 0; t < 4; ++t)
        c += (int32_t)(int8_t)(uint8_t)(a >> (8 * t)) * (int32_t)(int8_t)(uint8_t)(b >> (8 * t));
    return c;
#endif
}
static MAPORL_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
static MAPORL_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
static MAPORL_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
static MAPORL_HD float half_value(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return f16_to_float(h);
#endif
}

// Four bytes as one 32-bit word (memcpy on the host: no aliasing of int8 storage as int32).
static MAPORL_HD int32_t load_word(const void * p) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const int32_t *>(p);
#else
    int32_t w;
    std::memcpy(&w, p, 4);
    return w;
#endif
}
static MAPORL_HD void store_word(void * p, int32_t w) {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<int32_t *>(p) = w;
#else
    std::memcpy(p, &w, 4);
#endif
}

// Quantizer thread i: block i of the row-major input (row n, block b is 32 (n C / 32 + b) = 32 i into x).
static MAPORL_HD void quantize_block(const float * x, int64_t i, int8_t * q, float * d) {
    const float * xb = x + i * 32;
    float db, id;
    const bool finite = w8a8_block_scale(xb, &db, &id);
    int8_t * qb = q + i * 32;
    for (int w = 0; w < 8; ++w) {
        uint32_t word = 0;
        for (int t = 0; t < 4; ++t) {
            const int8_t v = finite ? w8a8_quantize_value(xb[4 * w + t], id) : (int8_t)0;
            word |= (uint32_t)(uint8_t)v << (8 * t);
        }
        store_word(qb + 4 * w, (int32_t)word);
    }
    d[i] = db;
}

template <int TO>
struct Tile {
    static constexpr int TN = 4 * (kThreads / TO);  // input rows per tile
    int32_t xs[TN][kChunk * 8];
    float ds[TN][kChunk];
};

// Thread tid's share of loading chunk b0 (blocks b0 .. b0 + kChunk - 1) of the tile's rows n0 .. n0 + TN - 1.
template <int TO>
MAPORL_HD void load_chunk(Tile<TO> & sh, int tid, const int8_t * xq, const float * xd, int64_t N, int64_t C, int64_t n0,
                          int64_t b0) {
    constexpr int TN = Tile<TO>::TN;
    const int64_t nb = C / 32;
    for (int e = tid; e < TN * kChunk * 8; e += kThreads) {
        const int r = e / (kChunk * 8), w = e % (kChunk * 8);
        const int64_t n = n0 + r, b = b0 + w / 8;
        sh.xs[r][w] = (n < N && b < nb) ? load_word(xq + n * C + b * 32 + 4 * (w % 8)) : 0;
    }
    for (int e = tid; e < TN * kChunk; e += kThreads) {
        const int r = e / kChunk, k = e % kChunk;
        sh.ds[r][k] = (n0 + r < N && b0 + k < nb) ? xd[(n0 + r) * nb + b0 + k] : 0.0f;
    }
}

// Thread tid's blocks of chunk b0 for output o (< OC) and tile rows nl .. nl + 3 (nl = 4 (tid / TO)), into acc.
template <int TO>
MAPORL_HD void compute_chunk(const Tile<TO> & sh, int tid, const uint8_t * pq, const uint16_t * pd, int64_t C,
                             int64_t o, int64_t b0, float * acc) {
    const int nl = (tid / TO) * 4;
    const int64_t nb = C / 32;
    // Row o's word for columns 4 c4 .. 4 c4 + 3 is at wrow + 4 kQ8Rows c4; its block b's scale at drow[kQ8Rows b].
    const uint8_t * wrow = pq + q8_packed_index(C, o, 0);
    const uint16_t * drow = pd + q8_packed_scale_index(C, o, 0);
    for (int k = 0; k < kChunk && b0 + k < nb; ++k) {
        const int64_t b = b0 + k;
        int32_t w[8];
        for (int j = 0; j < 8; ++j) w[j] = load_word(wrow + (b * 8 + j) * 4 * kQ8Rows) ^ (int32_t)0x80808080u;
        const float dw = half_value(drow[b * kQ8Rows]);
        for (int r = 0; r < 4; ++r) {
            int32_t S = 0;
            for (int j = 0; j < 8; ++j) S = dp4a(w[j], sh.xs[nl + r][k * 8 + j], S);
            acc[r] = fma_rn((float)S, mul_rn(dw, sh.ds[nl + r][k]), acc[r]);
        }
    }
}

// Thread tid's outputs: rows n0 + nl .. n0 + nl + 3 (those below N) of column o.
template <int TO>
MAPORL_HD void store(int tid, const float * acc, const float * bias, float * out, int64_t N, int64_t OC, int64_t o,
                     int64_t n0) {
    const int nl = (tid / TO) * 4;
    const float bo = bias ? bias[o] : 0.0f;
    for (int r = 0; r < 4; ++r) {
        const int64_t n = n0 + nl + r;
        if (n < N) out[n * OC + o] = add_rn(acc[r], bo);
    }
}

// The tile width the launch picks: 256 outputs x 4 rows for up to four input rows (decoding: one pass over the
// weight), 64 x 16 otherwise.
static MAPORL_HD bool narrow(int64_t N) { return N <= 4; }

// The CPU emulation of the two launches (host code; nvcc compiles it too where the emulated device is included):
// every block of the grid, its threads one after another between barriers.
template <int TO>
void emulate_gemm(const int8_t * xq, const float * xd, const uint8_t * pq, const uint16_t * pd, const float * bias,
                  float * out, int64_t N, int64_t C, int64_t OC) {
    constexpr int TN = Tile<TO>::TN;
    static thread_local Tile<TO> sh;
    static thread_local float acc[kThreads][4];
    for (int64_t by = 0; by * TN < N; ++by)
        for (int64_t bx = 0; bx * TO < OC; ++bx) {
            const int64_t n0 = by * TN;
            for (auto & a : acc) a[0] = a[1] = a[2] = a[3] = 0.0f;
            for (int64_t b0 = 0; b0 < C / 32; b0 += kChunk) {
                for (int tid = 0; tid < kThreads; ++tid) load_chunk<TO>(sh, tid, xq, xd, N, C, n0, b0);
                for (int tid = 0; tid < kThreads; ++tid) {
                    const int64_t o = bx * TO + tid % TO;
                    if (o < OC) compute_chunk<TO>(sh, tid, pq, pd, C, o, b0, acc[tid]);
                }
            }
            for (int tid = 0; tid < kThreads; ++tid) {
                const int64_t o = bx * TO + tid % TO;
                if (o < OC) store<TO>(tid, acc[tid], bias, out, N, OC, o, n0);
            }
        }
}
inline void emulate(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd, const float * bias,
                    int64_t N, int64_t C, int64_t OC, int8_t * xq, float * xd) {
    for (int64_t i = 0; i < N * (C / 32); ++i) quantize_block(inp, i, xq, xd);
    if (narrow(N))
        emulate_gemm<256>(xq, xd, pq, pd, bias, out, N, C, OC);
    else
        emulate_gemm<64>(xq, xd, pq, pd, bias, out, N, C, OC);
}

}  // namespace w8a8_tile
}  // namespace gpt
}  // namespace maporl
