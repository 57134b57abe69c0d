// test_w8a8.cpp: the W8A8 linear layer of an int8 base (native/model/w8a8.h) at every SIMD level the CPU runs
// (AVX-512 with VNNI where it has it, AVX2, scalar). The activations' quantization against Q8_0's rule written out
// here (and its half-step bound); the matmul against this file's own integer block dot products over the row-major
// blocks (before q8.h's packing) and fmaf chain, bit for bit, for any row count, split of the outputs and thread count;
// its distance to float64 within the bound the activations' rounding allows; NaN inputs; and the input's gradient
// through the packed weight equal to the float backward on the dequantized matrix.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "maporl.h"
#include "native/core/q8.h"
#include "native/model/gpt_ops.h"
#include "native/model/w8a8.h"
#include "test/native/core/check.h"

namespace {

namespace G = maporl::gpt;
using maporl::kQ8Block;

const char * const kLevels[] = {"scalar", "avx2", "avx512"};

std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = u(r);
    for (size_t b = 0; b * kQ8Block < n; ++b)  // blocks of different magnitudes, as real activations have
        for (int64_t i = 0; i < kQ8Block && b * kQ8Block + (size_t)i < n; ++i)
            v[b * kQ8Block + (size_t)i] *= std::ldexp(1.0f, (int)(b % 9) - 4);
    return v;
}

// A weight [rows, cols]: its row-major Q8 blocks, the dequantized float matrix, and q8.h's packed copy.
struct Weight {
    int64_t rows, cols;
    std::vector<int8_t> q;
    std::vector<uint16_t> d;
    std::vector<float> deq;
    std::vector<uint8_t> pq;
    std::vector<uint16_t> pd;
    Weight(int64_t r, int64_t c, uint32_t seed)
        : rows(r),
          cols(c),
          q((size_t)(r * c)),
          d(q.size() / kQ8Block),
          deq(q.size()),
          pq((size_t)(maporl::q8_padded_rows(r) * c), 128),
          pd((size_t)(maporl::q8_padded_rows(r) * c / kQ8Block), 0) {
        const std::vector<float> w = rnd(q.size(), seed, 0.05f);
        for (size_t b = 0; b < d.size(); ++b)
            maporl::q8_quantize_block(w.data() + b * kQ8Block, q.data() + b * kQ8Block, &d[b]);
        for (size_t i = 0; i < q.size(); ++i) deq[i] = (float)q[i] * maporl::f16_to_float(d[i / kQ8Block]);
        for (int64_t o = 0; o < r; ++o)
            maporl::q8_pack_row(pq.data(), pd.data(), c, o, q.data() + o * c, d.data() + o * c / kQ8Block);
    }
};

// Q8_0's rule for one block of an activation row, written out: d = max |x| / 127, q = round(x * (1 / d)) to nearest
// even, within +-127; a block whose max |x| is below 1e-30 is zero (1 / d would overflow); a block holding Inf or
// NaN: d = NaN, q = 0.
void quantize_ref(const float * x, int8_t * q, float * d) {
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < kQ8Block; ++i) {
        finite = finite && std::isfinite(x[i]);
        amax = std::max(amax, std::fabs(x[i]));
    }
    const float db = amax >= 1e-30f ? amax / 127.0f : 0.0f, id = db > 0.0f ? 1.0f / db : 0.0f;
    for (int64_t i = 0; i < kQ8Block; ++i) {
        const float r = finite ? std::nearbyint(x[i] * id) : 0.0f;
        q[i] = (int8_t)std::max(-127.0f, std::min(127.0f, r));
    }
    *d = finite ? db : NAN;
}

// out[n, o] by w8a8.h's formula from the row-major blocks: integer sums in int64, the fmaf chain over blocks.
std::vector<float> matmul_ref(const std::vector<float> & x, int64_t N, const Weight & w, const float * bias) {
    const int64_t C = w.cols, nb = C / kQ8Block;
    std::vector<int8_t> qx((size_t)(N * C));
    std::vector<float> dx((size_t)(N * nb));
    for (int64_t i = 0; i < N * nb; ++i)
        quantize_ref(x.data() + i * kQ8Block, qx.data() + i * kQ8Block, &dx[(size_t)i]);
    std::vector<float> out((size_t)(N * w.rows));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < w.rows; ++o) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                int64_t S = 0;
                for (int64_t i = 0; i < kQ8Block; ++i)
                    S += (int64_t)qx[(size_t)(n * C + b * kQ8Block + i)] * w.q[(size_t)(o * C + b * kQ8Block + i)];
                acc = std::fmaf((float)S, maporl::f16_to_float(w.d[(size_t)(o * nb + b)]) * dx[(size_t)(n * nb + b)],
                                acc);
            }
            out[(size_t)(n * w.rows + o)] = acc + (bias ? bias[o] : 0.0f);
        }
    return out;
}

size_t count_diff(const std::vector<float> & a, const std::vector<float> & b, size_t * first) {
    size_t count = 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && count++ == 0) *first = i;
    return count;
}

TEST(activations_are_quantized_by_q8_0s_rule_within_half_a_step_at_every_level) {
    const int64_t N = 7, C = 96;
    std::vector<float> x = rnd((size_t)(N * C), 1, 3.0f);
    for (int64_t i = 0; i < kQ8Block; ++i) x[(size_t)(C + i)] = 0.0f;  // an all-zero block
    x[(size_t)(2 * C + 5)] = INFINITY;
    x[(size_t)(3 * C + 40)] = NAN;
    x[(size_t)(4 * C + 70)] = 3.0e38f;  // huge but finite
    x[(size_t)(5 * C + 1)] = 1e-40f;    // a subnormal next to zeros
    for (int64_t i = 2; i < kQ8Block; ++i) x[(size_t)(5 * C + i)] = 0.0f;
    x[(size_t)(5 * C)] = 0.0f;
    int run = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        ++run;
        G::W8A8Input in;
        G::w8a8_quantize(in, x.data(), N, C);
        int bad = 0, loose = 0;
        for (int64_t b = 0; b < N * C / kQ8Block; ++b) {
            int8_t q[kQ8Block];
            float d;
            quantize_ref(x.data() + b * kQ8Block, q, &d);
            int32_t s = 0;
            for (int8_t v : q) s += v;
            const bool same_d =
                std::memcmp(&d, &in.d[(size_t)b], 4) == 0 || (std::isnan(d) && std::isnan(in.d[(size_t)b]));
            if (!same_d || std::memcmp(q, in.q.data() + b * kQ8Block, kQ8Block) != 0 || s != in.s[(size_t)b]) ++bad;
            if (std::isfinite(d))
                for (int64_t i = 0; i < kQ8Block; ++i) {
                    const double err = std::fabs((double)x[(size_t)(b * kQ8Block + i)] - (double)q[i] * (double)d);
                    if (err > (d > 0 ? 0.5 * (double)d * (1 + 1e-6) : 1e-30)) ++loose;
                }
        }
        CHECK(bad == 0, "%s (%s): %d of %lld blocks differ from Q8_0's rule", level, G::w8a8_level(), bad,
              (long long)(N * C / kQ8Block));
        CHECK(loose == 0, "%s: %d values further than half a step from x", level, loose);
        CHECK(std::isnan(in.d[2 * 3 + 0]) && std::isnan(in.d[3 * 3 + 1]) && in.d[1 * 3 + 0] == 0.0f &&
                  in.d[5 * 3 + 0] == 0.0f && in.d[4 * 3 + 2] > 1e36f,
              "%s: the Inf / NaN blocks' scale is NaN, the zero and 1e-40 blocks' 0, the 3e38 block's finite", level);
    }
    maporl_set_simd("best");
    CHECK(run >= 1, "no level ran");
}

TEST(the_matmul_is_the_integer_block_dot_chain_at_every_level_thread_count_and_split) {
    struct Shape {
        int64_t N, OC, C;
    };
    // (OC % 16 from 0 to 14: every lane count of the last group, both halves of AVX2's)
    const Shape shapes[] = {{1, 1, 32},   {1, 37, 576},  {2, 16, 64}, {3, 70, 608}, {4, 48, 96},
                            {5, 33, 128}, {9, 130, 576}, {2, 29, 64}, {6, 45, 96},  {1, 14, 32}};
    int run = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        ++run;
        std::printf("  %s: the W8A8 kernels run at %s\n", level, G::w8a8_level());
        for (const Shape & s : shapes)
            for (int with_bias = 0; with_bias < 2; ++with_bias) {
                const Weight w(s.OC, s.C, (uint32_t)(10 + s.OC));
                const auto x = rnd((size_t)(s.N * s.C), 20), bias = rnd((size_t)s.OC, 21);
                const float * bp = with_bias ? bias.data() : nullptr;
                const std::vector<float> want = matmul_ref(x, s.N, w, bp);
                for (int threads : {1, 3}) {
                    maporl_set_threads(threads);
                    std::vector<float> got(want.size(), NAN);
                    G::matmul_forward_w8a8(got.data(), x.data(), w.pq.data(), w.pd.data(), bp, s.N, s.C, s.OC);
                    size_t first = 0;
                    const size_t bad = count_diff(got, want, &first);
                    CHECK(bad == 0,
                          "%s (%s) N=%lld OC=%lld C=%lld bias=%d threads=%d: %zu of %zu differ (first %zu: "
                          "%.9g vs %.9g)",
                          level, G::w8a8_level(), (long long)s.N, (long long)s.OC, (long long)s.C, with_bias, threads,
                          bad, got.size(), first, bad ? got[first] : 0.0f, bad ? want[first] : 0.0f);
                }
                // The decoding path: this weight between a float part and a second int8 part in one job.
                const Weight w2(19, s.C, 30);
                const auto wf = rnd((size_t)(5 * s.C), 31);
                std::vector<float> a(want.size(), NAN), b((size_t)(s.N * 19), NAN), f((size_t)(s.N * 5), NAN);
                const G::RowsPart<float> parts[3] = {
                    {wf.data(), nullptr, nullptr, f.data(), 5},
                    {nullptr, nullptr, bp, a.data(), s.OC, w.pq.data(), w.pd.data()},
                    {nullptr, nullptr, nullptr, b.data(), 19, w2.pq.data(), w2.pd.data()}};
                G::matmul_forward_rows_parts(parts, 3, x.data(), s.N, s.C);
                size_t first = 0;
                CHECK(count_diff(a, want, &first) == 0 && count_diff(b, matmul_ref(x, s.N, w2, nullptr), &first) == 0,
                      "%s N=%lld OC=%lld: the rows' parts differ", level, (long long)s.N, (long long)s.OC);
                std::vector<float> fw((size_t)(s.N * 5));
                G::matmul_forward_rows(fw.data(), x.data(), wf.data(), (const float *)nullptr, s.N, s.C, 5);
                CHECK(count_diff(f, fw, &first) == 0, "%s: the float part beside them differs", level);
            }
    }
    maporl_set_threads(0);
    maporl_set_simd("best");
    CHECK(run >= 1, "no level ran");
}

// |out - x W^T| (float64, dequantized W) <= sum over c of |W[o, c]| * d_x(block of c) / 2, plus float rounding: the
// activations' rounding is the only approximation.
TEST(the_distance_to_float64_is_within_the_activations_rounding) {
    const int64_t N = 6, OC = 45, C = 576;
    const Weight w(OC, C, 40);
    const auto x = rnd((size_t)(N * C), 41, 2.0f);
    std::vector<float> got((size_t)(N * OC));
    G::matmul_forward_w8a8(got.data(), x.data(), w.pq.data(), w.pd.data(), nullptr, N, C, OC);
    int over = 0;
    double worst = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
            double exact = 0, bound = 0, mag = 0;
            for (int64_t b = 0; b < C / kQ8Block; ++b) {
                float amax = 0;
                for (int64_t i = 0; i < kQ8Block; ++i)
                    amax = std::max(amax, std::fabs(x[(size_t)(n * C + b * 32 + i)]));
                for (int64_t i = 0; i < kQ8Block; ++i) {
                    const double wv = w.deq[(size_t)(o * C + b * 32 + i)], xv = x[(size_t)(n * C + b * 32 + i)];
                    exact += wv * xv;
                    bound += std::fabs(wv) * amax / 127.0 / 2;
                    mag += std::fabs(wv * xv) + std::fabs(wv) * amax;
                }
            }
            const double err = std::fabs((double)got[(size_t)(n * OC + o)] - exact);
            worst = std::max(worst, err / (bound + 1e-30));
            if (err > bound * 1.001 + mag * 1e-6) ++over;
        }
    CHECK(over == 0, "%d outputs beyond the bound (worst %.3f of it)", over, worst);
    CHECK(worst > 0.01, "the bound is never approached (worst %.4f): the test would not see a wrong rounding", worst);
}

TEST(a_nan_input_row_gives_nan_outputs_and_leaves_the_others) {
    const int64_t N = 3, OC = 20, C = 64;
    const Weight w(OC, C, 50);
    auto x = rnd((size_t)(N * C), 51);
    x[(size_t)(C + 10)] = NAN;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        std::vector<float> got((size_t)(N * OC));
        G::matmul_forward_w8a8(got.data(), x.data(), w.pq.data(), w.pd.data(), nullptr, N, C, OC);
        int nan_row = 0, nan_other = 0;
        for (int64_t o = 0; o < OC; ++o) {
            nan_row += std::isnan(got[(size_t)(OC + o)]);
            nan_other += std::isnan(got[(size_t)o]) + std::isnan(got[(size_t)(2 * OC + o)]);
        }
        CHECK(nan_row == OC && nan_other == 0, "%s: %d of %lld NaN in the NaN row, %d elsewhere", level, nan_row,
              (long long)OC, nan_other);
    }
    maporl_set_simd("best");
}

// The backward dequantizes row blocks of 256 (OC = 300: two) into the float GEMM: the float backward's bits on the
// dequantized matrix, accumulating and setting.
TEST(the_input_gradient_is_the_float_backward_on_the_dequantized_weight) {
    const int64_t N = 5, C = 96, OC = 300;
    const Weight w(OC, C, 60);
    const auto x = rnd((size_t)(N * C), 61), dout = rnd((size_t)(N * OC), 62);
    int run = 0;
    for (const char * level : kLevels) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        ++run;
        for (int set = 0; set < 2; ++set) {
            std::vector<float> da((size_t)(N * C), 0.5f), db(da);
            G::matmul_backward_input_q8(da.data(), dout.data(), w.pq.data(), w.pd.data(), N, C, OC, set);
            G::matmul_backward(db.data(), (float *)nullptr, (float *)nullptr, dout.data(), x.data(), w.deq.data(), N, C,
                               OC, set);
            CHECK(da == db, "%s: matmul_backward_input_q8 (%s)", level, set ? "set" : "accumulate");
        }
    }
    maporl_set_simd("best");
    CHECK(run >= 1, "no level ran");
}

}  // namespace

int main() { return check::run_all("test_w8a8"); }
