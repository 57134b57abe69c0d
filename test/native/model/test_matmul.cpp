// test_matmul.cpp: the packed SIMD GEMM behind the float matmuls (native/model/matmul_vec.inc), on each vector level
// the CPU has. Its contract is exact: every output element is its start value (the old C for gemm_acc, the bias or 0
// for gemm_set, which never reads C) followed by one chain of FMAs over k in ascending order, whatever the strides (a row-major or transposed A, a weight read as weight^T in place or a
// transposed copy), the B dtype (float, or bfloat16 widened exactly), the blocking (rows past MC, columns past NC,
// K cut into slices) and the thread count. The reference here is that chain written with fmaf, so any packing
// slip (a lane, a tail, an edge sliver or panel) changes the bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "maporl.h"
#include "native/core/bf16.h"
#include "native/core/isa.h"
#include "test/native/core/check.h"

namespace maporl {
#define MAPORL_GEMM_DECLS                                                                                              \
    void gemm_acc_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                 \
                      const float * B, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);                         \
    void gemm_acc_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                \
                       const uint16_t * B, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);                     \
    void gemm_set_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                 \
                      const float * B, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias);     \
    void gemm_set_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k,                \
                       const uint16_t * B, int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias); \
    void gemv_rows_f32(int64_t N, int64_t OC, int64_t C, const float * X, const float * Wm, const float * bias,        \
                       float * out, int64_t o0, int64_t o1);                                                           \
    void gemv_rows_bf16(int64_t N, int64_t OC, int64_t C, const float * X, const uint16_t * Wm, const float * bias,    \
                        float * out, int64_t o0, int64_t o1);
namespace avx512 {
MAPORL_GEMM_DECLS
}
namespace avx2 {
MAPORL_GEMM_DECLS
}
#undef MAPORL_GEMM_DECLS
}  // namespace maporl

namespace {

std::vector<float> rnd(size_t n, uint32_t seed) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto & x : v) x = u(r);
    return v;
}

struct Level {
    const char * name;
    maporl::Isa isa;
    decltype(&maporl::avx512::gemm_acc_f32) f32;
    decltype(&maporl::avx512::gemm_acc_bf16) bf16;
    decltype(&maporl::avx512::gemm_set_f32) set_f32;
    decltype(&maporl::avx512::gemm_set_bf16) set_bf16;
};

// For every level the CPU runs, shape, A layout (rows of k, or transposed), B layout (rows of columns, or a weight
// [N, K] read in place as its transpose), B dtype and mode (accumulate onto C, or set C from a bias or from 0 with
// NaN in C beforehand, which must not leak): the kernel's bits equal the fmaf chain's, for 1 and 3 threads.
TEST(packed_gemm_is_the_fma_chain_over_k_in_every_layout) {
    const Level levels[] = {{"avx512", maporl::Isa::Avx512, maporl::avx512::gemm_acc_f32, maporl::avx512::gemm_acc_bf16,
                             maporl::avx512::gemm_set_f32, maporl::avx512::gemm_set_bf16},
                            {"avx2", maporl::Isa::Avx2, maporl::avx2::gemm_acc_f32, maporl::avx2::gemm_acc_bf16,
                             maporl::avx2::gemm_set_f32, maporl::avx2::gemm_set_bf16}};
    struct Shape {
        int64_t M, N, K;
    };
    // (1 x 1 x 1; tails under one vector; every block edge of both levels: rows past MC = 192, columns past NC = 256,
    // K = 600 in three slices of 208 + 208 + 184, K = 530 past a multiple of 16; a weight-gradient-like tall K.)
    const Shape shapes[] = {{1, 1, 1},       {5, 7, 3},      {13, 37, 45},  {25, 70, 17},
                            {200, 300, 600}, {37, 260, 530}, {12, 64, 1100}};
    int levels_run = 0;
    for (const Level & lv : levels) {
        if (maporl::cpu_isa() < lv.isa) continue;
        ++levels_run;
        for (const Shape s : shapes) {
            const int64_t M = s.M, N = s.N, K = s.K;
            const std::vector<float> a = rnd((size_t)(M * K), 1), b = rnd((size_t)(K * N), 2),
                                     c0 = rnd((size_t)(M * N), 3), bias = rnd((size_t)N, 4);
            std::vector<uint16_t> bh((size_t)(K * N));
            for (size_t i = 0; i < bh.size(); ++i) bh[i] = maporl::float_to_bf16(b[i]);
            for (int a_t = 0; a_t < 2; ++a_t)
                for (int b_t = 0; b_t < 2; ++b_t)
                    for (int half = 0; half < 2; ++half)
                        for (int set = 0; set < 2; ++set) {
                            const float * sb =
                                set && (a_t ^ b_t ^ half) ? bias.data() : nullptr;  // (set from a bias or from 0)
                            // A(i, k) = a[i * K + k] (rows of k) or a[k * M + i] (transposed); B(k, j) = b[k * N + j] or
                            // b[j * K + k] (a weight [N, K] read as its transpose).
                            const int64_t lda_i = a_t ? 1 : K, lda_k = a_t ? M : 1, ldb_k = b_t ? 1 : N,
                                          ldb_j = b_t ? K : 1;
                            std::vector<float> want(c0);
                            for (int64_t i = 0; i < M; ++i)
                                for (int64_t j = 0; j < N; ++j) {
                                    float acc = set ? (sb ? sb[j] : 0.0f) : c0[(size_t)(i * N + j)];
                                    for (int64_t k = 0; k < K; ++k) {
                                        const size_t bi = (size_t)(k * ldb_k + j * ldb_j);
                                        acc = std::fmaf(a[(size_t)(i * lda_i + k * lda_k)],
                                                        half ? maporl::bf16_to_float(bh[bi]) : b[bi], acc);
                                    }
                                    want[(size_t)(i * N + j)] = acc;
                                }
                            for (int threads : {1, 3}) {
                                maporl_set_threads(threads);
                                std::vector<float> got = set ? std::vector<float>(c0.size(), NAN) : c0;
                                if (set && half)
                                    lv.set_bf16(M, N, K, a.data(), lda_i, lda_k, bh.data(), ldb_k, ldb_j, got.data(), N,
                                                sb);
                                else if (set)
                                    lv.set_f32(M, N, K, a.data(), lda_i, lda_k, b.data(), ldb_k, ldb_j, got.data(), N,
                                               sb);
                                else if (half)
                                    lv.bf16(M, N, K, a.data(), lda_i, lda_k, bh.data(), ldb_k, ldb_j, got.data(), N);
                                else
                                    lv.f32(M, N, K, a.data(), lda_i, lda_k, b.data(), ldb_k, ldb_j, got.data(), N);
                                size_t bad = 0, first = 0;
                                for (size_t i = 0; i < got.size(); ++i)
                                    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
                                CHECK(bad == 0,
                                      "%s M=%lld N=%lld K=%lld A %s, B %s, %s, %s, %d threads: %zu of %zu elements "
                                      "differ from the fmaf chain "
                                      "(first [%lld, %lld]: %.9g vs %.9g)",
                                      lv.name, (long long)M, (long long)N, (long long)K, a_t ? "transposed" : "rows",
                                      b_t ? "weight^T in place" : "rows", half ? "bf16" : "f32",
                                      set ? (sb ? "set from a bias" : "set from 0") : "accumulate", threads, bad,
                                      got.size(), (long long)(first / N), (long long)(first % N),
                                      bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
                            }
                        }
        }
    }
    // K = 0, an empty sum: accumulating leaves C as it was, setting writes the bias (or 0).
    for (const Level & lv : levels) {
        if (maporl::cpu_isa() < lv.isa) continue;
        const float a = 1.0f, b = 1.0f, bias[3] = {1.5f, -0.0f, 2.0f};
        float c[6] = {7, 7, 7, 7, 7, 7};
        lv.f32(2, 3, 0, &a, 1, 1, &b, 1, 1, c, 3);
        CHECK(c[0] == 7 && c[5] == 7, "%s: K = 0 accumulate changed C", lv.name);
        lv.set_f32(2, 3, 0, &a, 1, 1, &b, 1, 1, c, 3, bias);
        CHECK(c[0] == 1.5f && c[3] == 1.5f && c[4] == 0.0f && std::signbit(c[4]) && c[5] == 2.0f,
              "%s: K = 0 set from a bias: %g %g %g", lv.name, c[0], c[4], c[5]);
        lv.set_f32(2, 3, 0, &a, 1, 1, &b, 1, 1, c, 3, nullptr);
        CHECK(c[0] == 0.0f && c[5] == 0.0f, "%s: K = 0 set from 0", lv.name);
    }
    maporl_set_threads(0);
    CHECK(levels_run > 0 || maporl::cpu_isa() == maporl::Isa::Scalar, "no vector level ran");
    std::printf("  %d vector level(s) checked\n", levels_run);
}

// The decoding GEMV (gemv_rows): out[n, o] = bias[o] + the dot product of X's row n with Wm's row o, in a fixed
// order: lane i of two accumulators sums (fmaf chains over c in steps of 2W) the elements c + i and c + W + i, the two
// are added, the lanes summed in order from 0 (starting at 0), the tail (C % 2W) chained with fmaf, then the bias added.
// Bit for bit, on each level (W = 16, 8), for both weight dtypes, outputs not a multiple of the row blocks, with and
// without a bias, all outputs in one call or in three ranges split anywhere (as threads and fused weights split them).
TEST(decoding_gemv_is_its_documented_sum_order) {
    struct Level {
        const char * name;
        maporl::Isa isa;
        int W;
        decltype(&maporl::avx512::gemv_rows_f32) f32;
        decltype(&maporl::avx512::gemv_rows_bf16) bf16;
    };
    const Level levels[] = {
        {"avx512", maporl::Isa::Avx512, 16, maporl::avx512::gemv_rows_f32, maporl::avx512::gemv_rows_bf16},
        {"avx2", maporl::Isa::Avx2, 8, maporl::avx2::gemv_rows_f32, maporl::avx2::gemv_rows_bf16}};
    struct Shape {
        int64_t N, OC, C;
    };
    const Shape shapes[] = {{1, 1, 5}, {1, 37, 576}, {3, 133, 583}, {2, 16, 64}, {8, 70, 1536}};
    int levels_run = 0;
    for (const Level & lv : levels) {
        if ((int)maporl::cpu_isa() < (int)lv.isa) continue;
        ++levels_run;
        const int W = lv.W;
        for (const Shape & sh : shapes)
            for (int half = 0; half < 2; ++half)
                for (int with_bias = 0; with_bias < 2; ++with_bias)
                    for (int pieces : {1, 3}) {
                        const auto x = rnd((size_t)(sh.N * sh.C), 11), bias = rnd((size_t)sh.OC, 12);
                        auto w = rnd((size_t)(sh.OC * sh.C), 13);
                        std::vector<uint16_t> wh(w.size());
                        for (size_t i = 0; i < w.size(); ++i) wh[i] = maporl::float_to_bf16(w[i]);
                        if (half)
                            for (size_t i = 0; i < w.size(); ++i) w[i] = maporl::bf16_to_float(wh[i]);
                        const int64_t full = sh.C - sh.C % (2 * W);
                        std::vector<float> want((size_t)(sh.N * sh.OC)), got(want.size(), NAN);
                        for (int64_t n = 0; n < sh.N; ++n)
                            for (int64_t o = 0; o < sh.OC; ++o) {
                                const float * xr = x.data() + n * sh.C;
                                const float * wr = w.data() + o * sh.C;
                                float s = 0.0f;
                                for (int i = 0; i < W; ++i) {
                                    float a0 = 0.0f, a1 = 0.0f;
                                    for (int64_t c = 0; c < full; c += 2 * W) {
                                        a0 = std::fmaf(xr[c + i], wr[c + i], a0);
                                        a1 = std::fmaf(xr[c + W + i], wr[c + W + i], a1);
                                    }
                                    s += a0 + a1;
                                }
                                for (int64_t c = full; c < sh.C; ++c) s = std::fmaf(xr[c], wr[c], s);
                                want[(size_t)(n * sh.OC + o)] = (with_bias ? bias[(size_t)o] : 0.0f) + s;
                            }
                        const float * b = with_bias ? bias.data() : nullptr;
                        const int64_t cut[4] = {0, pieces == 1 ? sh.OC : sh.OC / 3,
                                                pieces == 1 ? sh.OC : (sh.OC * 2) / 3 + 1, sh.OC};
                        for (int i = 0; i < 3; ++i) {
                            const int64_t o0 = std::min(cut[i], sh.OC), o1 = std::min(cut[i + 1], sh.OC);
                            if (o0 >= o1) continue;
                            if (half)
                                lv.bf16(sh.N, sh.OC, sh.C, x.data(), wh.data(), b, got.data(), o0, o1);
                            else
                                lv.f32(sh.N, sh.OC, sh.C, x.data(), w.data(), b, got.data(), o0, o1);
                        }
                        size_t bad = 0, first = 0;
                        for (size_t i = 0; i < got.size(); ++i)
                            if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
                        CHECK(bad == 0,
                              "%s N=%lld OC=%lld C=%lld %s bias=%d pieces=%d: %zu of %zu outputs differ (first [%lld, "
                              "%lld]: %.9g vs %.9g)",
                              lv.name, (long long)sh.N, (long long)sh.OC, (long long)sh.C, half ? "bf16" : "f32",
                              with_bias, pieces, bad, got.size(), (long long)(first / sh.OC),
                              (long long)(first % sh.OC), bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
                    }
    }
    CHECK(levels_run > 0 || maporl::cpu_isa() == maporl::Isa::Scalar, "no vector level ran");
}

}  // namespace

int main() { return check::run_all("test_matmul"); }
