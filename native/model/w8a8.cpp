// w8a8.cpp: the W8A8 linear layer of an int8 base (w8a8.h): dispatch to the level's kernels (w8a8_vec.inc) and the
// scalar level, which states the arithmetic the vector levels reproduce bit for bit.
#include "native/model/w8a8.h"

#include <cmath>
#include <cstring>

#include "native/core/core.h"
#include "native/core/isa.h"
#include "native/core/q8.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace avx512 {
void w8a8_quantize_rows(const float * x, int64_t n0, int64_t n1, int64_t C, int8_t * q, float * d, int32_t * s);
void w8a8_groups(int64_t N, int64_t C, const int8_t * qx, const float * dx, const int32_t * sx, const uint8_t * pq,
                 const uint16_t * pd, int64_t OC, const float * bias, float * out, int64_t g0, int64_t g1);
}  // namespace avx512
namespace avx2 {
void w8a8_quantize_rows(const float * x, int64_t n0, int64_t n1, int64_t C, int8_t * q, float * d, int32_t * s);
void w8a8_groups(int64_t N, int64_t C, const int8_t * qx, const float * dx, const int32_t * sx, const uint8_t * pq,
                 const uint16_t * pd, int64_t OC, const float * bias, float * out, int64_t g0, int64_t g1);
}  // namespace avx2
namespace gpt {
namespace {

enum class Level { Scalar, Avx2, Vnni };

Level level() {
    const Isa isa = active_isa();
    if (isa == Isa::Avx512 && cpu_has_avx512_vnni()) return Level::Vnni;
    return isa == Isa::Scalar ? Level::Scalar : Level::Avx2;
}

void quantize_rows_scalar(const float * x, int64_t n0, int64_t n1, int64_t C, int8_t * q, float * d, int32_t * s) {
    const int64_t nb = C / kQ8Block;
    for (int64_t n = n0; n < n1; ++n)
        for (int64_t b = 0; b < nb; ++b) {
            const float * xb = x + n * C + b * kQ8Block;
            int8_t * qb = q + n * C + b * kQ8Block;
            float db, id;
            const bool finite = w8a8_block_scale(xb, &db, &id);
            int32_t sum = 0;
            for (int64_t i = 0; i < kQ8Block; ++i) {
                qb[i] = finite ? w8a8_quantize_value(xb[i], id) : (int8_t)0;
                sum += qb[i];
            }
            d[n * nb + b] = db;
            s[n * nb + b] = sum;
        }
}

void groups_scalar(int64_t N, int64_t C, const int8_t * qx, const float * dx, const uint8_t * pq, const uint16_t * pd,
                   int64_t OC, const float * bias, float * out, int64_t g0, int64_t g1) {
    const int64_t nb = C / kQ8Block;
    const float * table = f16_table();
    for (int64_t o = g0 * kQ8Rows; o < g1 * kQ8Rows && o < OC; ++o)
        for (int64_t n = 0; n < N; ++n) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                int32_t S = 0;
                for (int64_t c = b * kQ8Block; c < (b + 1) * kQ8Block; ++c)
                    S += (int32_t)qx[n * C + c] * ((int32_t)pq[q8_packed_index(C, o, c)] - 128);
                const float dw = table[pd[q8_packed_scale_index(C, o, b * kQ8Block)]];
                acc = std::fma((float)S, dw * dx[n * nb + b], acc);
            }
            out[n * OC + o] = acc + (bias ? bias[o] : 0.0f);
        }
}

void require_cols(int64_t C) {
    if (C <= 0 || C % kQ8Block != 0)
        throw_error(MAPORL_ERR_INTERNAL,
                    "W8A8 matmul: the weight's rows have %lld values, not a positive multiple of 32", (long long)C);
}

}  // namespace

const char * w8a8_level() {
    const Level l = level();
    return l == Level::Vnni ? "avx512-vnni" : l == Level::Avx2 ? "avx2" : "scalar";
}

void w8a8_quantize(W8A8Input & in, const float * x, int64_t N, int64_t C) {
    require_cols(C);
    const int64_t nb = C / kQ8Block;
    if (in.q.size() < (size_t)(N * C)) in.q.resize((size_t)(N * C));
    if (in.d.size() < (size_t)(N * nb)) in.d.resize((size_t)(N * nb));
    if (in.s.size() < (size_t)(N * nb)) in.s.resize((size_t)(N * nb));
    in.N = N;
    in.C = C;
    const Level l = level();
    parallel_for(N, N * C < (1 << 15) ? N : 8, [&](int64_t n0, int64_t n1) {
        if (l == Level::Vnni)
            avx512::w8a8_quantize_rows(x, n0, n1, C, in.q.data(), in.d.data(), in.s.data());
        else if (l == Level::Avx2)
            avx2::w8a8_quantize_rows(x, n0, n1, C, in.q.data(), in.d.data(), in.s.data());
        else
            quantize_rows_scalar(x, n0, n1, C, in.q.data(), in.d.data(), in.s.data());
    });
}

void w8a8_groups(const W8A8Input & in, const uint8_t * pq, const uint16_t * pd, int64_t OC, const float * bias,
                 float * out, int64_t g0, int64_t g1) {
    switch (level()) {
        case Level::Vnni:
            return avx512::w8a8_groups(in.N, in.C, in.q.data(), in.d.data(), in.s.data(), pq, pd, OC, bias, out, g0,
                                       g1);
        case Level::Avx2:
            return avx2::w8a8_groups(in.N, in.C, in.q.data(), in.d.data(), in.s.data(), pq, pd, OC, bias, out, g0, g1);
        default:
            return groups_scalar(in.N, in.C, in.q.data(), in.d.data(), pq, pd, OC, bias, out, g0, g1);
    }
}

void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd, const float * bias,
                         int64_t N, int64_t C, int64_t OC) {
    thread_local W8A8Input in_buffer;
    W8A8Input & in = in_buffer;  // (the caller's, in the pool's threads too: a lambda names a thread_local)
    w8a8_quantize(in, inp, N, C);
    const int64_t groups = q8_padded_rows(OC) / kQ8Rows;
    parallel_for(groups, 1, [&](int64_t g0, int64_t g1) { w8a8_groups(in, pq, pd, OC, bias, out, g0, g1); });
}

}  // namespace gpt
}  // namespace maporl
