// test_gpt_ops.cpp: every layer of the embedded GPT (native/model/gpt_ops.h) checked in double against central finite
// differences of L = sum(out * R) (R fixed random weights), on tiny shapes; AdamW against the update written
// here from torch.optim.AdamW's definition; and bit-identical float results for 1 and 3 threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/core/bf16.h"
#include "native/core/core.h"
#include "native/model/gpt_ops.h"
#include "maporl.h"

namespace {

using Vec = std::vector<double>;
namespace g = maporl::gpt;

Vec rnd(size_t n, uint32_t seed, double scale = 1.0) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<double> u(-scale, scale);
    Vec v(n);
    for (auto & x : v) x = u(r);
    return v;
}

std::vector<float> fvec(const Vec & v) { return std::vector<float>(v.begin(), v.end()); }

double dot(const Vec & a, const Vec & b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Central differences of loss() w.r.t. every entry of x against grad; returns the number of mismatches.
int fd_check(Vec & x, const Vec & grad, const std::function<double()> & loss, const char * what, double tol = 1e-6) {
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i], h = 1e-6 * std::max(1.0, std::fabs(x0));
        x[i] = x0 + h;
        const double up = loss();
        x[i] = x0 - h;
        const double dn = loss();
        x[i] = x0;
        const double fd = (up - dn) / (2 * h);
        if (!(std::fabs(fd - grad[i]) <= tol * std::max(1.0, std::fabs(fd)))) {
            if (bad < 3) std::printf("  %s[%zu]: analytic %.10g, finite difference %.10g\n", what, i, grad[i], fd);
            ++bad;
        }
    }
    return bad;
}

TEST(encoder_backward_is_the_gradient) {
    const int64_t B = 2, T = 3, C = 4, V = 5;
    const std::vector<int32_t> tok = {0, 3, 3, 1, 4, 3};  // repeated tokens accumulate
    Vec wte = rnd(V * C, 1), wpe = rnd(T * C, 2), R = rnd(B * T * C, 3), out(B * T * C);
    auto loss = [&] {
        g::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
        return dot(out, R);
    };
    Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
    g::encoder_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C);
    CHECK(fd_check(wte, dwte, loss, "dwte") == 0, "encoder dwte");
    CHECK(fd_check(wpe, dwpe, loss, "dwpe") == 0, "encoder dwpe");
}

TEST(layernorm_backward_is_the_gradient) {
    const int64_t N = 5, C = 7;
    Vec x = rnd(N * C, 4, 2.0), w = rnd(C, 5), b = rnd(C, 6), R = rnd(N * C, 7), out(N * C), mean(N), rstd(N);
    auto loss = [&] {
        g::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        return dot(out, R);
    };
    loss();
    Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    g::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                          C);
    CHECK(fd_check(x, dx, loss, "dx") == 0, "layernorm dx");
    CHECK(fd_check(w, dw, loss, "dw") == 0, "layernorm dw");
    CHECK(fd_check(b, db, loss, "db") == 0, "layernorm db");
}

TEST(matmul_backward_is_the_gradient) {
    const int64_t N = 6, C = 5, OC = 7;
    Vec x = rnd(N * C, 8), w = rnd(OC * C, 9), b = rnd(OC, 10), R = rnd(N * OC, 11), out(N * OC);
    auto loss = [&] {
        g::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
        return dot(out, R);
    };
    Vec dx(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
    g::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC);
    CHECK(fd_check(x, dx, loss, "dx") == 0, "matmul dx");
    CHECK(fd_check(w, dw, loss, "dw") == 0, "matmul dw");
    CHECK(fd_check(b, db, loss, "db") == 0, "matmul db");
    // Accumulation: a second backward adds the same gradient again.
    g::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, C, OC);
    Vec dx1(N * C, 0.0), dw1(OC * C, 0.0), db1(OC, 0.0);
    g::matmul_backward(dx1.data(), dw1.data(), db1.data(), R.data(), x.data(), w.data(), N, C, OC);
    bool twice = true;
    for (size_t i = 0; i < dw.size(); ++i) twice &= std::fabs(dw[i] - 2 * dw1[i]) < 1e-12;
    CHECK(twice, "backward accumulates into the gradients");
    // The forward against a plain triple loop.
    loss();
    double worst = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) {
            double s = b[o];
            for (int64_t c = 0; c < C; ++c) s += x[n * C + c] * w[o * C + c];
            worst = std::max(worst, std::fabs(s - out[n * OC + o]));
        }
    CHECK(worst < 1e-12, "forward differs from the triple loop by %g", worst);
}

TEST(attention_backward_is_the_gradient_and_the_forward_is_causal) {
    const int64_t B = 2, T = 4, C = 6, NH = 2;
    Vec qkv = rnd(B * T * 3 * C, 12), R = rnd(B * T * C, 13), out(B * T * C), att(B * NH * T * T);
    auto loss = [&] {
        g::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        return dot(out, R);
    };
    loss();
    Vec dqkv(qkv.size(), 0.0);
    g::attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
    CHECK(fd_check(qkv, dqkv, loss, "dqkv") == 0, "attention dqkv");
    // Causality: changing the last position's keys and values leaves earlier outputs unchanged.
    const Vec before = out;
    for (int64_t i = 0; i < 3 * C; ++i) qkv[(0 * T + T - 1) * 3 * C + i] += 0.5;
    loss();
    double moved = 0;
    for (int64_t t = 0; t < T - 1; ++t)
        for (int64_t c = 0; c < C; ++c) moved = std::max(moved, std::fabs(out[t * C + c] - before[t * C + c]));
    CHECK(moved == 0.0, "earlier outputs moved by %g", moved);
}

TEST(gelu_and_residual_backward_are_the_gradient) {
    const int64_t n = 40;
    Vec x = rnd(n, 14, 4.0), R = rnd(n, 15), out(n);
    auto loss = [&] {
        g::gelu_forward(out.data(), x.data(), n);
        return dot(out, R);
    };
    Vec dx(n, 0.0);
    g::gelu_backward(dx.data(), x.data(), R.data(), n);
    CHECK(fd_check(x, dx, loss, "dx") == 0, "gelu dx");
    Vec a = rnd(n, 16), b = rnd(n, 17);
    auto rl = [&] {
        g::residual_forward(out.data(), a.data(), b.data(), n);
        return dot(out, R);
    };
    Vec da(n, 0.0), db(n, 0.0);
    g::residual_backward(da.data(), db.data(), R.data(), n);
    CHECK(fd_check(a, da, rl, "da") == 0 && fd_check(b, db, rl, "db") == 0, "residual");
}

TEST(adamw_matches_the_torch_definition) {
    const int64_t n = 9;
    Vec p = rnd(n, 18), grad = rnd(n, 19), m(n, 0.0), v(n, 0.0);
    Vec pr = p, mr(n, 0.0), vr(n, 0.0);
    const g::AdamW h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    double worst = 0;
    for (int64_t t = 1; t <= 3; ++t) {
        g::adamw_update(p.data(), grad.data(), m.data(), v.data(), n, h, t, 0.5);
        for (int64_t i = 0; i < n; ++i) {  // torch.optim.AdamW, decoupled decay, then the Adam step
            const double gi = grad[i] * 0.5;
            pr[i] *= 1 - (double)h.lr * (double)h.weight_decay;
            mr[i] = (double)h.beta1 * mr[i] + (1 - (double)h.beta1) * gi;
            vr[i] = (double)h.beta2 * vr[i] + (1 - (double)h.beta2) * gi * gi;
            const double mh = mr[i] / (1 - std::pow((double)h.beta1, (double)t)),
                         vh = vr[i] / (1 - std::pow((double)h.beta2, (double)t));
            pr[i] -= (double)h.lr * mh / (std::sqrt(vh) + (double)h.eps);
            worst = std::max(worst, std::fabs(pr[i] - p[i]));
        }
    }
    CHECK(worst < 1e-12, "AdamW differs from the definition by %g", worst);
}

// The global norm's sum of squares: its documented order (blocks of 2^16, eight interleaved accumulators, the tail,
// the blocks in order) bit for bit, whatever the thread count, for sizes around the block and lane edges; and
// within a few ulps of a long-double sum.
TEST(sum_squares_is_its_fixed_order_for_any_thread_count) {
    const int64_t B = (int64_t)1 << 16;
    for (const int64_t n : {(int64_t)0, (int64_t)1, (int64_t)7, (int64_t)8, (int64_t)13, B - 1, B, B + 9, 3 * B + 5}) {
        std::vector<float> x((size_t)n);
        std::mt19937 r((uint32_t)n + 1);
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (auto & e : x) e = u(r);
        double want = 0;
        long double exact = 0;
        for (int64_t b = 0; b * B < n; ++b) {
            const int64_t len = std::min(B, n - b * B), full = len - len % 8;
            double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s = 0;
            for (int64_t i = 0; i < full; ++i)
                acc[i % 8] += (double)x[(size_t)(b * B + i)] * (double)x[(size_t)(b * B + i)];
            for (double a : acc) s += a;
            for (int64_t i = full; i < len; ++i) s += (double)x[(size_t)(b * B + i)] * (double)x[(size_t)(b * B + i)];
            want += s;
        }
        for (float e : x) exact += (long double)e * (long double)e;
        for (int threads : {1, 2, 3}) {
            maporl_set_threads(threads);
            const double got = g::sum_squares(x.data(), n);
            CHECK(std::memcmp(&got, &want, sizeof got) == 0, "n=%lld threads=%d: %.17g vs %.17g", (long long)n, threads,
                  got, want);
        }
        CHECK(std::fabs((long double)want - exact) <= 1e-14L * (exact + 1), "n=%lld: %.17g vs the long-double %.17Lg",
              (long long)n, want, exact);
    }
    maporl_set_threads(0);
}

// The float kernels of every SIMD level (the packed GEMM on AVX2 / AVX-512) against the double path, on shapes
// whose columns are not a multiple of the tile width, and on one that crosses every block of the packed GEMM (rows
// past MC, columns past NC, k past KC, on both ISAs). There the weight read in place (matmul_forward) and through
// a transposed copy (matmul_forward_wt) give the same bits, and 1 and 3 threads too.
TEST(float_matmul_matches_double_at_every_simd_level) {
    struct Shape {
        int64_t N, C, OC;
    };
    for (const Shape s : {Shape{13, 37, 45}, Shape{200, 300, 270}}) {
        const int64_t N = s.N, C = s.C, OC = s.OC;
        const Vec x = rnd(N * C, 30), w = rnd(OC * C, 31), b = rnd(OC, 32), d = rnd(N * OC, 33);
        Vec out(N * OC), dx(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
        g::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
        g::matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
        auto f = [](const Vec & v) { return std::vector<float>(v.begin(), v.end()); };
        const double tol = 2e-5 * std::sqrt(std::max<double>({1.0, (double)N / 37, (double)C / 37, (double)OC / 37}));
        for (const char * level : {"scalar", "avx2", "avx512"}) {
            if (maporl_set_simd(level) != MAPORL_OK) continue;
            std::vector<std::vector<float>> runs;
            const std::vector<float> fx = f(x), fw = f(w), fb = f(b), fd = f(d);
            for (int threads : {1, 3}) {
                maporl_set_threads(threads);
                std::vector<float> fo(N * OC), fdx(N * C, 0.f), fdw(OC * C, 0.f), fdb(OC, 0.f), wt(C * OC),
                    fo_wt(N * OC);
                g::matmul_forward(fo.data(), fx.data(), fw.data(), fb.data(), N, C, OC);
                g::matmul_backward(fdx.data(), fdw.data(), fdb.data(), fd.data(), fx.data(), fw.data(), N, C, OC);
                g::transpose_weight(wt.data(), fw.data(), C, OC);
                g::matmul_forward_wt(fo_wt.data(), fx.data(), wt.data(), fb.data(), N, C, OC);
                CHECK(fo_wt == fo, "%s N=%lld: the weight in place and its transposed copy give different bits", level,
                      (long long)N);
                double worst = 0;
                for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(fo[i] - out[i]));
                for (size_t i = 0; i < dx.size(); ++i) worst = std::max(worst, std::fabs(fdx[i] - dx[i]));
                for (size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::fabs(fdw[i] - dw[i]));
                for (size_t i = 0; i < db.size(); ++i) worst = std::max(worst, std::fabs(fdb[i] - db[i]));
                CHECK(worst < tol, "%s N=%lld: float matmul differs from double by %g", level, (long long)N, worst);
                runs.push_back(fo), runs.push_back(fdx), runs.push_back(fdw), runs.push_back(fdb);
            }
            for (size_t i = 0; i < 4; ++i)
                CHECK(runs[i] == runs[i + 4], "%s N=%lld: output %zu differs between 1 and 3 threads", level,
                      (long long)N, i);
        }
        maporl_set_threads(0);
        maporl_set_simd("best");
    }
}

// The decoding GEMV (matmul_forward_rows: dot products over the weight's rows) against the double matmul at every
// SIMD level, for 1..9 rows and row lengths around the vector widths (tails of every size); with and without bias;
// and the same bits for any thread count.
TEST(float_rows_matmul_matches_double_at_every_simd_level) {
    for (const int64_t C : {1, 7, 16, 31, 32, 33, 576}) {
        const int64_t OC = 45;
        for (int64_t N = 1; N <= 9; N += 4) {
            const Vec x = rnd(N * C, 50), w = rnd(OC * C, 51), b = rnd(OC, 52);
            Vec out(N * OC);
            g::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
            const std::vector<float> fx(x.begin(), x.end()), fw(w.begin(), w.end()), fb(b.begin(), b.end());
            for (const char * level : {"scalar", "avx2", "avx512"}) {
                if (maporl_set_simd(level) != MAPORL_OK) continue;
                std::vector<float> fo(N * OC), nb(N * OC), one(N * OC);
                g::matmul_forward_rows(fo.data(), fx.data(), fw.data(), fb.data(), N, C, OC);
                g::matmul_forward_rows(nb.data(), fx.data(), fw.data(), (const float *)nullptr, N, C, OC);
                double worst = 0;
                for (size_t i = 0; i < out.size(); ++i) {
                    worst = std::max(worst, std::fabs(fo[i] - out[i]));
                    worst = std::max(worst, std::fabs(nb[i] + fb[i % OC] - out[i]));
                }
                CHECK(worst < 1e-5 * std::max<double>(1, std::sqrt((double)C)),
                      "%s C=%lld N=%lld: rows matmul differs from double by %g", level, (long long)C, (long long)N,
                      worst);
                maporl_set_threads(1);
                g::matmul_forward_rows(one.data(), fx.data(), fw.data(), fb.data(), N, C, OC);
                maporl_set_threads(0);
                CHECK(std::memcmp(one.data(), fo.data(), sizeof(float) * one.size()) == 0,
                      "%s: thread count changed the bits", level);
            }
        }
    }
    maporl_set_simd("best");
}

// Weights that share an input run as one GEMV job (matmul_forward_rows_parts: a layer's q, k, v while decoding):
// each part's outputs are the bits of matmul_forward_rows (or _bf16) on it alone, at every SIMD level, float and
// bfloat16 parts mixed, with and without biases, for 1 and 3 threads (which split the parts' outputs anywhere); a
// part with neither or both weights is refused.
TEST(fused_rows_matmul_gives_each_part_its_own_bits) {
    const int64_t C = 97, OCs[3] = {45, 16, 7};
    for (int64_t N = 1; N <= 5; N += 4) {
        const std::vector<float> x = fvec(rnd(N * C, 60));
        std::vector<std::vector<float>> w, b, alone;
        std::vector<std::vector<uint16_t>> wh;
        for (int i = 0; i < 3; ++i) {
            w.push_back(fvec(rnd(OCs[i] * C, 61 + i)));
            b.push_back(fvec(rnd(OCs[i], 64 + i)));
            wh.emplace_back(w.back().size());
            for (size_t j = 0; j < w.back().size(); ++j) wh.back()[j] = maporl::float_to_bf16(w.back()[j]);
        }
        for (const char * level : {"scalar", "avx2", "avx512"}) {
            if (maporl_set_simd(level) != MAPORL_OK) continue;
            for (int threads : {1, 3}) {
                maporl_set_threads(threads);
                // Part 1 in bfloat16, part 2 without a bias.
                std::vector<std::vector<float>> want, got;
                for (int i = 0; i < 3; ++i) {
                    want.emplace_back((size_t)(N * OCs[i]));
                    got.emplace_back((size_t)(N * OCs[i]), NAN);
                    const float * bias = i == 2 ? nullptr : b[i].data();
                    if (i == 1)
                        g::matmul_forward_rows_bf16(want[i].data(), x.data(), wh[i].data(), bias, N, C, OCs[i]);
                    else
                        g::matmul_forward_rows(want[i].data(), x.data(), w[i].data(), bias, N, C, OCs[i]);
                }
                const g::RowsPart<float> parts[3] = {{w[0].data(), nullptr, b[0].data(), got[0].data(), OCs[0]},
                                                     {nullptr, wh[1].data(), b[1].data(), got[1].data(), OCs[1]},
                                                     {w[2].data(), nullptr, nullptr, got[2].data(), OCs[2]}};
                g::matmul_forward_rows_parts(parts, 3, x.data(), N, C);
                for (int i = 0; i < 3; ++i)
                    CHECK(std::memcmp(want[i].data(), got[i].data(), sizeof(float) * want[i].size()) == 0,
                          "%s N=%lld threads=%d: part %d differs from alone", level, (long long)N, threads, i);
                // The widened bf16 part is the float GEMV on the widened weight.
                std::vector<float> widened(w[1].size()), twin((size_t)(N * OCs[1]));
                for (size_t j = 0; j < widened.size(); ++j) widened[j] = maporl::bf16_to_float(wh[1][j]);
                g::matmul_forward_rows(twin.data(), x.data(), widened.data(), b[1].data(), N, C, OCs[1]);
                CHECK(twin == got[1], "%s: the bf16 part differs from its widened float twin", level);
            }
        }
    }
    maporl_set_threads(0);
    maporl_set_simd("best");
    std::vector<float> x(4, 1.0f), w(8, 1.0f), out(2);
    const g::RowsPart<float> none{nullptr, nullptr, nullptr, out.data(), 2},
        both{w.data(), (const uint16_t *)w.data(), nullptr, out.data(), 2};
    for (const auto & part : {none, both}) {
        bool threw = false;
        try {
            g::matmul_forward_rows_parts(&part, 1, x.data(), 1, 4);
        } catch (const maporl::Error & e) { threw = e.message.find("exactly one of w, w16") != std::string::npos; }
        CHECK(threw, "a part with %s weight is refused", part.w ? "both" : "neither");
    }
}

TEST(float_gelu_matches_double_at_every_simd_level) {
    const int64_t n = 1037;
    Vec x = rnd(n, 40, 6.0), d = rnd(n, 41), out(n), dx(n, 0.0);
    x[0] = 0.0;
    x[1] = 1e-4;
    x[2] = -1e-4;
    x[3] = 30.0;
    x[4] = -30.0;
    g::gelu_forward(out.data(), x.data(), n);
    g::gelu_backward(dx.data(), x.data(), d.data(), n);
    const std::vector<float> fx(x.begin(), x.end()), fd(d.begin(), d.end());
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        std::vector<float> fo(n), fdx(n, 0.f);
        g::gelu_forward(fo.data(), fx.data(), n);
        g::gelu_backward(fdx.data(), fx.data(), fd.data(), n);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i)
            worst = std::max(
                {worst, std::fabs(fo[i] - out[i]) / std::max(1.0, std::fabs(out[i])), std::fabs(fdx[i] - dx[i])});
        CHECK(worst < 2e-6, "%s: float GELU differs from double by %g", level, worst);
    }
    maporl_set_simd("best");
}

TEST(float_attention_matches_double_at_every_simd_level) {
    for (int64_t hs : {3, 16, 20}) {  // head sizes below, at and above a vector width
        const int64_t B = 2, T = 19, NH = 2, C = NH * hs;
        const Vec qkv = rnd(B * T * 3 * C, 50), d = rnd(B * T * C, 51);
        Vec out(B * T * C), att(B * NH * T * T), dqkv(qkv.size(), 0.0);
        g::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        g::attention_backward(dqkv.data(), d.data(), qkv.data(), att.data(), B, T, C, NH);
        const std::vector<float> fq(qkv.begin(), qkv.end()), fd(d.begin(), d.end());
        for (const char * level : {"scalar", "avx2", "avx512"}) {
            if (maporl_set_simd(level) != MAPORL_OK) continue;
            std::vector<float> fo(out.size()), fa(att.size()), fdq(qkv.size(), 0.f);
            g::attention_forward(fo.data(), fa.data(), fq.data(), B, T, C, NH);
            g::attention_backward(fdq.data(), fd.data(), fq.data(), fa.data(), B, T, C, NH);
            double worst = 0;
            for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(fo[i] - out[i]));
            for (size_t i = 0; i < att.size(); ++i) worst = std::max(worst, std::fabs(fa[i] - att[i]));
            for (size_t i = 0; i < dqkv.size(); ++i) worst = std::max(worst, std::fabs(fdq[i] - dqkv[i]));
            CHECK(worst < 1e-5, "%s hs=%lld: float attention differs from double by %g", level, (long long)hs, worst);
        }
    }
    maporl_set_simd("best");
}

// The blocked attention rows (forward_rows: R queries sharing the key and value reads, the training forward) give
// every row the bits of the single-row kernel (forward: what the KV-cache decoder runs), at every vector level: head
// sizes with tails, rows starting at 1 and past a W-key block and the 32-row value chunks, strided operands, and
// groups of rows scored from a transposed key block (dots_block_t) next to rows scored one by one.
TEST(blocked_attention_rows_are_the_single_rows_bit_for_bit) {
    for (const char * level : {"avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        const auto rows = g::attention_rows();
        CHECK(rows.forward && rows.forward_rows, "%s: no vector attention rows", level);
        if (!rows.forward || !rows.forward_rows) continue;
        for (int64_t hs : {5, 16, 64, 72, 130, 264}) {  // (130: a tail of 2; 264: past the transposed key blocks' 256)
            const int64_t T = 90, qs = 3 * hs + 1, ks = 2 * hs + 3;  // (strides that are not the head size)
            std::vector<float> q(T * qs), k(T * ks), v(T * ks);
            const Vec rq = rnd(q.size(), 60), rk = rnd(k.size(), 61), rv = rnd(v.size(), 62);
            for (size_t i = 0; i < q.size(); ++i) q[i] = (float)rq[i] * 2;
            for (size_t i = 0; i < k.size(); ++i) k[i] = (float)rk[i], v[i] = (float)rv[i];
            for (int64_t len0 : {1, 15, 30, 41}) {
                for (int64_t R :
                     {1, 3, 8, 13, 32}) {  // (8, 13, 32: groups of transposed-block rows, 4 or 8 a group, and the rest)
                    std::vector<float> att(R * T, -1.0f), out(R * hs, -1.0f), att1(T), out1(hs);
                    rows.forward_rows(q.data(), qs, k.data(), ks, v.data(), ks, len0, R, hs, 0.125f, att.data(), T,
                                      out.data(), hs);
                    for (int64_t r = 0; r < R; ++r) {
                        const int64_t len = len0 + r;
                        rows.forward(q.data() + r * qs, k.data(), ks, v.data(), ks, len, hs, 0.125f, att1.data(),
                                     out1.data());
                        CHECK(std::memcmp(att1.data(), att.data() + r * T, sizeof(float) * (size_t)len) == 0 &&
                                  std::memcmp(out1.data(), out.data() + r * hs, sizeof(float) * (size_t)hs) == 0,
                              "%s hs=%lld len0=%lld R=%lld: row %lld differs from the single-row kernel", level,
                              (long long)hs, (long long)len0, (long long)R, (long long)r);
                        CHECK(att[(size_t)(r * T + len)] == -1.0f, "%s: row %lld wrote past its length", level,
                              (long long)r);
                    }
                }
            }
        }
    }
    maporl_set_simd("best");
}

TEST(float_results_do_not_depend_on_the_thread_count) {
    const int64_t B = 3, T = 37, C = 24, NH = 4, N = B * T, OC = 3 * C, V = 11;
    std::mt19937 r(20);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fv = [&](size_t n) {
        std::vector<float> v(n);
        for (auto & x : v) x = u(r);
        return v;
    };
    const std::vector<float> x = fv(N * C), w = fv(OC * C), b = fv(OC), dout = fv(N * OC), lw = fv(C), lb = fv(C),
                             dy = fv(N * C), wte = fv(V * C), wpe = fv(T * C);
    std::vector<int32_t> tok(N);
    for (auto & t : tok) t = (int32_t)(r() % V);
    std::vector<std::vector<float>> runs[2];
    for (int k = 0; k < 2; ++k) {
        maporl_set_threads(k == 0 ? 1 : 3);
        std::vector<float> out(N * OC), dx(N * C, 0.f), dw(OC * C, 0.f), db(OC, 0.f), ln(N * C), mean(N), rstd(N),
            dlx(N * C, 0.f), dlw(C, 0.f), dlb(C, 0.f), att(B * NH * T * T), ao(N * C), dqkv(N * OC, 0.f),
            dwte(V * C, 0.f), dwpe(T * C, 0.f);
        g::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
        g::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
        g::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N, C);
        g::layernorm_backward(dlx.data(), dlw.data(), dlb.data(), dy.data(), x.data(), lw.data(), mean.data(),
                              rstd.data(), N, C);
        g::attention_forward(ao.data(), att.data(), out.data(), B, T, C, NH);
        g::attention_backward(dqkv.data(), dy.data(), out.data(), att.data(), B, T, C, NH);
        g::encoder_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
        runs[k] = {out, dx, dw, db, ln, dlx, dlw, dlb, ao, dqkv, dwte, dwpe};
    }
    maporl_set_threads(0);
    for (size_t i = 0; i < runs[0].size(); ++i)
        CHECK(runs[0][i] == runs[1][i], "output %zu differs between 1 and 3 threads", i);
}

}  // namespace

int main() { return check::run_all("test_gpt_ops"); }
