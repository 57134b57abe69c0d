// test_q8.cpp: the int8 weight format of a frozen base (native/core/q8.h: llama.cpp's Q8_0 blocks). The half
// conversions against double arithmetic over every half and over random and boundary floats; quantizing a block
// (error at most half a step, zeros, non-finite and out-of-range values refused); the packed layout the model holds.
// The kernels that read it: test_w8a8.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "maporl.h"
#include "native/core/isa.h"
#include "native/core/q8.h"
#include "native/model/gpt_ops.h"
#include "test/native/core/check.h"

namespace {

using maporl::kQ8Block;

std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = u(r);
    return v;
}

// The nearest half to x (ties to even), in double: the reference for float_to_f16.
uint16_t f16_reference(float x) {
    if (std::isnan(x)) return 0x7e00;
    uint16_t best = 0;
    double bd = INFINITY;
    const double ax = std::fabs((double)x);
    if (ax >= 65520.0) return (uint16_t)((std::signbit(x) ? 0x8000 : 0) | 0x7c00);
    // Binary search over the non-negative halves (ordered as integers) for the neighbours of |x|.
    int lo = 0, hi = 0x7bff;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((double)maporl::f16_to_float((uint16_t)mid) <= ax)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int c : {lo, std::min(lo + 1, 0x7bff)}) {
        const double dd = std::fabs((double)maporl::f16_to_float((uint16_t)c) - ax);
        if (dd < bd || (dd == bd && (c & 1) == 0)) {
            bd = dd;
            best = (uint16_t)c;
        }
    }
    return (uint16_t)((std::signbit(x) ? 0x8000 : 0) | best);
}

TEST(half_conversions_are_exact_and_round_to_nearest_even) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {  // every half widens to its value and narrows back to itself
        const float f = maporl::f16_to_float((uint16_t)h);
        const uint32_t e = (h >> 10) & 31, m = h & 1023;
        const double want = e == 31 ? (m ? NAN : INFINITY)
            : e == 0                ? std::ldexp((double)m, -24)
                                    : std::ldexp(1.0 + m / 1024.0, (int)e - 15);
        const double signed_want = (h & 0x8000) ? -want : want;
        if (e == 31 && m) {
            if (!std::isnan(f) || maporl::float_to_f16(f) != (uint16_t)((h & 0x8000) | 0x7e00)) ++bad;
            continue;
        }
        if ((double)f != signed_want || std::signbit(f) != ((h & 0x8000) != 0) || maporl::float_to_f16(f) != h) ++bad;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    std::mt19937 r(5);
    std::uniform_real_distribution<float> u(-30.0f, 17.0f);
    int wrong = 0;
    for (int i = 0; i < 200000; ++i) {  // random magnitudes from 2^-30 (below the subnormals) to past the largest half
        const float x = (i % 2 ? -1.0f : 1.0f) * std::exp2(u(r));
        if (maporl::float_to_f16(x) != f16_reference(x)) ++wrong;
    }
    // Boundaries: the largest half, the overflow threshold, ties between halves, the subnormal edge.
    const float edges[] = {65504.0f,
                           65519.99f,
                           65520.0f,
                           1.0f + 1.0f / 2048.0f,
                           1.0f + 3.0f / 2048.0f,
                           std::ldexp(1.0f, -14),
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -26),
                           0.0f,
                           -0.0f};
    for (float x : edges)
        if (maporl::float_to_f16(x) != f16_reference(x)) ++wrong;
    CHECK(wrong == 0, "%d floats narrow to another half than the nearest-even one", wrong);
}

TEST(a_quantized_block_is_within_half_a_step_and_refuses_what_it_cannot_hold) {
    std::mt19937 r(9);
    std::normal_distribution<float> n(0.0f, 1.0f);
    float x[kQ8Block];
    int8_t q[kQ8Block];
    uint16_t d = 0;
    double worst = 0;
    for (int trial = 0; trial < 2000; ++trial) {
        const float s = std::ldexp(1.0f, trial % 30 - 20);  // 2^-20 .. 2^9
        for (auto & v : x) v = s * n(r);
        CHECK(maporl::q8_quantize_block(x, q, &d), "trial %d refused", trial);
        const float df = maporl::f16_to_float(d);
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        for (int i = 0; i < kQ8Block; ++i) {
            CHECK(q[i] >= -127 && q[i] <= 127, "q out of range");
            // half a step, plus the step's own rounding to a half when the largest value hits the clamp
            const double err = std::fabs((double)x[i] - (double)q[i] * df);
            if (df >= std::ldexp(1.0f, -14)) worst = std::max(worst, err / (double)df);  // (a normal half scale)
            CHECK(err <= 0.5 * df + std::fabs((double)amax / 127 - df) * 127 + 1e-6 * df, "trial %d: error %g for d %g",
                  trial, err, (double)df);
        }
    }
    std::printf("  worst error %.3f steps (blocks with a normal half scale)\n", worst);
    std::fill(x, x + kQ8Block, 0.0f);
    CHECK(
        maporl::q8_quantize_block(x, q, &d) && d == 0 && std::all_of(q, q + kQ8Block, [](int8_t v) { return v == 0; }),
        "a zero block");
    x[3] = NAN;
    CHECK(!maporl::q8_quantize_block(x, q, &d), "NaN accepted");
    x[3] = INFINITY;
    CHECK(!maporl::q8_quantize_block(x, q, &d), "Inf accepted");
    x[3] = 1e7f;  // max / 127 is past the largest half
    CHECK(!maporl::q8_quantize_block(x, q, &d), "a scale past 65504 accepted");
    x[3] = 8e6f;
    CHECK(maporl::q8_quantize_block(x, q, &d) && q[3] == 127, "8e6 refused");
}

// q8.h's packed layout against the index written out here: group g = r / 16, lane j = r % 16, 64 bytes per four
// columns; values stored as q + 128 (-128 as -127); scales per group and block in lane order; a row unpacks to q * d.
TEST(the_packed_layout_interleaves_sixteen_rows_four_columns_at_a_time) {
    const int64_t rows = 19, cols = 64, nb = cols / kQ8Block;
    std::mt19937 r(5);
    std::vector<int8_t> q((size_t)(rows * cols));
    std::vector<uint16_t> d((size_t)(rows * nb));
    for (auto & v : q) v = (int8_t)((int)(r() % 255) - 127);
    q[77] = -128;
    for (size_t i = 0; i < d.size(); ++i) d[i] = maporl::float_to_f16(0.001f * (float)(i + 1));
    CHECK(maporl::q8_padded_rows(rows) == 32 && maporl::q8_padded_rows(16) == 16, "padded rows");
    std::vector<uint8_t> pq((size_t)(32 * cols), 128);
    std::vector<uint16_t> pd((size_t)(32 * nb), 0);
    for (int64_t o = 0; o < rows; ++o)
        maporl::q8_pack_row(pq.data(), pd.data(), cols, o, q.data() + o * cols, d.data() + o * nb);
    int bad = 0, bad_d = 0, bad_row = 0;
    for (int64_t o = 0; o < rows; ++o) {
        const int64_t g = o / 16, j = o % 16;
        for (int64_t c = 0; c < cols; ++c) {
            const int want = std::max(-127, (int)q[(size_t)(o * cols + c)]) + 128;
            if (pq[(size_t)(g * 16 * cols + (c / 4) * 64 + j * 4 + c % 4)] != want) ++bad;
        }
        for (int64_t b = 0; b < nb; ++b)
            if (pd[(size_t)(g * 16 * nb + b * 16 + j)] != d[(size_t)(o * nb + b)]) ++bad_d;
        std::vector<float> row((size_t)cols);
        maporl::q8_unpack_row(row.data(), pq.data(), pd.data(), cols, o);
        for (int64_t c = 0; c < cols; ++c)
            if (row[(size_t)c] !=
                (float)std::max(-127, (int)q[(size_t)(o * cols + c)]) *
                    maporl::f16_to_float(d[(size_t)(o * nb + c / kQ8Block)]))
                ++bad_row;
    }
    CHECK(bad == 0 && bad_d == 0 && bad_row == 0, "%d values, %d scales, %d unpacked values misplaced", bad, bad_d,
          bad_row);
    CHECK(pq[(size_t)maporl::q8_packed_index(cols, 1, 13)] == 1, "-128 is stored as -127");
    int padding = 0;
    for (int64_t o = rows; o < 32; ++o)
        for (int64_t c = 0; c < cols; ++c) padding += pq[(size_t)maporl::q8_packed_index(cols, o, c)] != 128;
    CHECK(padding == 0, "the padding rows were written");
}

}  // namespace

int main() { return check::run_all("test_q8"); }
