// test_q8.cpp: the int8 weight format of a frozen base (native/core/q8.h: llama.cpp's Q8_0 blocks) and its kernels.
// The half conversions against double arithmetic over every half and over random and boundary floats; quantizing a
// block (error at most half a step, zeros, non-finite and out-of-range values refused); and the GEMM and decoding
// GEMV on Q8 weights at each vector level against the same fmaf chains as the float kernels' over the dequantized
// values (q * d is exact, so the contract is bit for bit), plus the public matmuls at every level, scalar included,
// against the float matmuls on the dequantized matrix.
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

namespace maporl {
#define MAPORL_Q8_DECLS                                                                                              \
    void gemm_acc_q8(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                \
                     const int8_t * Bq, const uint16_t * Bd, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc); \
    void gemm_set_q8(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                \
                     const int8_t * Bq, const uint16_t * Bd, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc,  \
                     const float * bias);                                                                            \
    void gemv_rows_q8(int64_t N, int64_t OC, int64_t C, const float * X, const int8_t * Wq, const uint16_t * Wd,     \
                      const float * bias, float * out, int64_t o0, int64_t o1);
namespace avx512 {
MAPORL_Q8_DECLS
}
namespace avx2 {
MAPORL_Q8_DECLS
}
#undef MAPORL_Q8_DECLS
}  // namespace maporl

namespace {

using maporl::kQ8Block;

std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = u(r);
    return v;
}

// A matrix [rows, cols] quantized block by block, and its dequantized float twin.
struct Q8Mat {
    std::vector<int8_t> q;
    std::vector<uint16_t> d;
    std::vector<float> deq;
    Q8Mat(int64_t rows, int64_t cols, uint32_t seed) : q((size_t)(rows * cols)), d(q.size() / kQ8Block), deq(q.size()) {
        std::vector<float> w = rnd(q.size(), seed);
        for (size_t b = 0; b < d.size(); ++b) {  // blocks of different magnitudes, as real weights have
            const float s = std::ldexp(1.0f, (int)(b % 7) - 4);
            for (int64_t i = 0; i < kQ8Block; ++i) w[b * kQ8Block + (size_t)i] *= s;
            maporl::q8_quantize_block(w.data() + b * kQ8Block, q.data() + b * kQ8Block, &d[b]);
        }
        for (size_t i = 0; i < q.size(); ++i) deq[i] = (float)q[i] * maporl::f16_to_float(d[i / kQ8Block]);
    }
};

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

struct Level {
    const char * name;
    maporl::Isa isa;
    int W;
    decltype(&maporl::avx512::gemm_acc_q8) acc;
    decltype(&maporl::avx512::gemm_set_q8) set;
    decltype(&maporl::avx512::gemv_rows_q8) gemv;
};
const Level kLevels[] = {
    {"avx512", maporl::Isa::Avx512, 16, maporl::avx512::gemm_acc_q8, maporl::avx512::gemm_set_q8,
     maporl::avx512::gemv_rows_q8},
    {"avx2", maporl::Isa::Avx2, 8, maporl::avx2::gemm_acc_q8, maporl::avx2::gemm_set_q8, maporl::avx2::gemv_rows_q8}};

size_t first_diff(const std::vector<float> & a, const std::vector<float> & b, size_t * count) {
    size_t first = 0;
    *count = 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && (*count)++ == 0) first = i;
    return first;
}

// The two ways a Linear reads its weight W [OC, C]: the forward (out = inp W^T: B(k, j) = W[j, k], read in place as
// its transpose) and the input's gradient (dinp = dout W: B(k, j) = W[k, j]); set (from a bias or 0) and accumulate;
// rows past a block, K in slices, 1 and 3 threads. Every element is the fmaf chain over k of the dequantized values.
TEST(q8_gemm_is_the_fma_chain_over_the_dequantized_weight) {
    struct Shape {
        int64_t M, OC, C;
    };
    const Shape shapes[] = {{1, 1, 32}, {5, 37, 64}, {200, 300, 576}, {13, 70, 608}};
    int levels_run = 0;
    for (const Level & lv : kLevels) {
        if (maporl::cpu_isa() < lv.isa) continue;
        ++levels_run;
        for (const Shape s : shapes) {
            const Q8Mat w(s.OC, s.C, 21);
            for (int backward = 0; backward < 2; ++backward)
                for (int set = 0; set < 2; ++set) {
                    // forward: A [M, C], out [M, OC]; backward: A = dout [M, OC], out = dinp [M, C]
                    const int64_t K = backward ? s.OC : s.C, Nc = backward ? s.C : s.OC;
                    const int64_t ldb_k = backward ? s.C : 1, ldb_j = backward ? 1 : s.C;
                    const std::vector<float> a = rnd((size_t)(s.M * K), 22), c0 = rnd((size_t)(s.M * Nc), 23),
                                             bias = rnd((size_t)Nc, 24);
                    const float * sb = set && !backward ? bias.data() : nullptr;
                    std::vector<float> want(c0);
                    for (int64_t i = 0; i < s.M; ++i)
                        for (int64_t j = 0; j < Nc; ++j) {
                            float acc = set ? (sb ? sb[j] : 0.0f) : c0[(size_t)(i * Nc + j)];
                            for (int64_t k = 0; k < K; ++k)
                                acc = std::fmaf(a[(size_t)(i * K + k)], w.deq[(size_t)(k * ldb_k + j * ldb_j)], acc);
                            want[(size_t)(i * Nc + j)] = acc;
                        }
                    for (int threads : {1, 3}) {
                        maporl_set_threads(threads);
                        std::vector<float> got = set ? std::vector<float>(c0.size(), NAN) : c0;
                        if (set)
                            lv.set(s.M, Nc, K, a.data(), K, 1, w.q.data(), w.d.data(), ldb_k, ldb_j, got.data(), Nc,
                                   sb);
                        else
                            lv.acc(s.M, Nc, K, a.data(), K, 1, w.q.data(), w.d.data(), ldb_k, ldb_j, got.data(), Nc);
                        size_t bad = 0;
                        const size_t first = first_diff(got, want, &bad);
                        CHECK(bad == 0,
                              "%s M=%lld OC=%lld C=%lld %s %s %d threads: %zu of %zu differ (first %zu: %.9g "
                              "vs %.9g)",
                              lv.name, (long long)s.M, (long long)s.OC, (long long)s.C,
                              backward ? "input gradient" : "forward", set ? "set" : "accumulate", threads, bad,
                              got.size(), first, bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
                    }
                }
        }
    }
    maporl_set_threads(0);
    CHECK(levels_run > 0 || maporl::cpu_isa() == maporl::Isa::Scalar, "no vector level ran");
}

// The decoding GEMV on Q8 rows: the float GEMV's documented order (two accumulators over c in steps of 2W, lanes
// summed from 0, then the bias) on the dequantized values, for outputs split anywhere.
TEST(q8_decoding_gemv_is_the_float_gemv_order_on_the_dequantized_weight) {
    struct Shape {
        int64_t N, OC, C;
    };
    const Shape shapes[] = {{1, 1, 32}, {1, 37, 576}, {3, 133, 608}, {8, 70, 1536}};
    for (const Level & lv : kLevels) {
        if (maporl::cpu_isa() < lv.isa) continue;
        const int W = lv.W;
        for (const Shape & sh : shapes)
            for (int with_bias = 0; with_bias < 2; ++with_bias)
                for (int pieces : {1, 3}) {
                    const Q8Mat w(sh.OC, sh.C, 31);
                    const auto x = rnd((size_t)(sh.N * sh.C), 32), bias = rnd((size_t)sh.OC, 33);
                    std::vector<float> want((size_t)(sh.N * sh.OC)), got(want.size(), NAN);
                    for (int64_t n = 0; n < sh.N; ++n)
                        for (int64_t o = 0; o < sh.OC; ++o) {
                            const float * xr = x.data() + n * sh.C;
                            const float * wr = w.deq.data() + o * sh.C;
                            float s = 0.0f;
                            for (int i = 0; i < W; ++i) {
                                float a0 = 0.0f, a1 = 0.0f;
                                for (int64_t c = 0; c < sh.C; c += 2 * W) {
                                    a0 = std::fmaf(xr[c + i], wr[c + i], a0);
                                    a1 = std::fmaf(xr[c + W + i], wr[c + W + i], a1);
                                }
                                s += a0 + a1;
                            }
                            want[(size_t)(n * sh.OC + o)] = (with_bias ? bias[(size_t)o] : 0.0f) + s;
                        }
                    const int64_t cut[4] = {0, pieces == 1 ? sh.OC : sh.OC / 3,
                                            pieces == 1 ? sh.OC : (sh.OC * 2) / 3 + 1, sh.OC};
                    for (int i = 0; i < 3; ++i) {
                        const int64_t o0 = std::min(cut[i], sh.OC), o1 = std::min(cut[i + 1], sh.OC);
                        if (o0 < o1)
                            lv.gemv(sh.N, sh.OC, sh.C, x.data(), w.q.data(), w.d.data(),
                                    with_bias ? bias.data() : nullptr, got.data(), o0, o1);
                    }
                    size_t bad = 0;
                    const size_t first = first_diff(got, want, &bad);
                    CHECK(bad == 0, "%s N=%lld OC=%lld C=%lld bias=%d pieces=%d: %zu of %zu differ (first %zu)",
                          lv.name, (long long)sh.N, (long long)sh.OC, (long long)sh.C, with_bias, pieces, bad,
                          got.size(), first);
                }
    }
}

// The public entry points at each level the CPU runs (scalar: a widened copy): the forward, the rows' GEMV and the
// input's gradient give the float functions' bits on the dequantized matrix.
TEST(public_q8_matmuls_equal_the_float_ones_on_the_dequantized_weight_at_every_level) {
    namespace G = maporl::gpt;
    const int64_t N = 5, C = 96, OC = 40;
    const Q8Mat w(OC, C, 41);
    const auto x = rnd((size_t)(N * C), 42), bias = rnd((size_t)OC, 43), dout = rnd((size_t)(N * OC), 44);
    int run = 0;
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        ++run;
        std::vector<float> a((size_t)(N * OC)), b(a.size());
        G::matmul_forward_q8(a.data(), x.data(), w.q.data(), w.d.data(), bias.data(), N, C, OC);
        G::matmul_forward(b.data(), x.data(), w.deq.data(), bias.data(), N, C, OC);
        CHECK(a == b, "%s: matmul_forward_q8", level);
        G::RowsPart<float> q8part{nullptr, nullptr, bias.data(), a.data(), OC, w.q.data(), w.d.data()};
        G::matmul_forward_rows_parts(&q8part, 1, x.data(), N, C);
        G::matmul_forward_rows(b.data(), x.data(), w.deq.data(), bias.data(), N, C, OC);
        CHECK(a == b, "%s: the rows' GEMV", level);
        std::vector<float> da((size_t)(N * C), 0.5f), db(da);
        G::matmul_backward_input_q8(da.data(), dout.data(), w.q.data(), w.d.data(), N, C, OC, false);
        G::matmul_backward(db.data(), (float *)nullptr, (float *)nullptr, dout.data(), x.data(), w.deq.data(), N, C, OC,
                           false);
        CHECK(da == db, "%s: matmul_backward_input_q8 (accumulate)", level);
        G::matmul_backward_input_q8(da.data(), dout.data(), w.q.data(), w.d.data(), N, C, OC, true);
        G::matmul_backward(db.data(), (float *)nullptr, (float *)nullptr, dout.data(), x.data(), w.deq.data(), N, C, OC,
                           true);
        CHECK(da == db, "%s: matmul_backward_input_q8 (set)", level);
    }
    maporl_set_simd("best");
    CHECK(run >= 1, "no level ran");
}

}  // namespace

int main() { return check::run_all("test_q8"); }
