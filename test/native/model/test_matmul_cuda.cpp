// test_matmul_cuda.cpp: the matmul precision switch (maporl_set_matmul_precision, PyTorch's 'highest' / 'high').
// In every build: the setting's contract (default float32, bad values refused and the setting kept). With a GPU:
// the TF32 tensor-core path of cuda/model/matmul.cu against a float64 reference with TF32's error bound, forward and
// both backward products accumulating into non-zero gradients, at shapes off the tiles; that it really is a
// different path from float32 (results differ); and the whole model's logits under TF32 against the CPU's.
// `test_matmul_cuda --bench` times the three products of one linear layer in both precisions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/gpt_cuda.h"
#include "test/native/core/gpu_check.h"
#include "native/model/gpt_ops.h"
#include "maporl.h"

namespace {

using Vec = std::vector<float>;
namespace g = maporl::gpt;

using gpu_check::rnd;

// Restores float32 on scope exit, whatever a test did.
struct PrecisionScope {
    ~PrecisionScope() { maporl_set_matmul_precision(MAPORL_MATMUL_HIGHEST); }
};

TEST(matmul_precision_defaults_to_float32_and_refuses_bad_values) {
    PrecisionScope keep;
    CHECK(maporl_get_matmul_precision() == MAPORL_MATMUL_HIGHEST, "default is float32");
    CHECK(maporl_set_matmul_precision(MAPORL_MATMUL_HIGH) == MAPORL_OK &&
              maporl_get_matmul_precision() == MAPORL_MATMUL_HIGH,
          "set high");
    for (int bad : {2, -1, 1 << 30}) {
        CHECK(maporl_set_matmul_precision(bad) == MAPORL_ERR_INVALID_ARG &&
                  std::strstr(maporl_last_error(), "precision") != nullptr,
              "bad value %d: %s", bad, maporl_last_error());
        CHECK(maporl_get_matmul_precision() == MAPORL_MATMUL_HIGH, "a refused value leaves the setting alone");
    }
    CHECK(maporl_set_matmul_precision(MAPORL_MATMUL_HIGHEST) == MAPORL_OK &&
              maporl_get_matmul_precision() == MAPORL_MATMUL_HIGHEST,
          "back to float32");
}

using gpu_check::devices;

#ifdef MAPORL_WITH_CUDA

using D = gpu_check::D<float>;

// C[i, j] = base[i, j] + sum_k A(i, k) B(k, j) in float64, and the bound sum_k |A(i, k)| |B(k, j)| that TF32
// rounding (2^-11 relative per operand, so ~2^-10 per product) plus float32 accumulation stays within.
struct Ref {
    std::vector<double> c, bound;
};
template <typename FA, typename FB>
Ref reference(int64_t M, int64_t Nc, int64_t K, FA a, FB b, const Vec * base, const Vec * bias) {
    Ref r{std::vector<double>((size_t)(M * Nc)), std::vector<double>((size_t)(M * Nc))};
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < Nc; ++j) {
            double s = base ? (*base)[(size_t)(i * Nc + j)] : 0.0, m = std::fabs(s);
            if (bias) s += (*bias)[(size_t)j], m += std::fabs((*bias)[(size_t)j]);
            for (int64_t k = 0; k < K; ++k) {
                const double p = (double)a(i, k) * (double)b(k, j);
                s += p;
                m += std::fabs(p);
            }
            r.c[(size_t)(i * Nc + j)] = s;
            r.bound[(size_t)(i * Nc + j)] = m;
        }
    return r;
}

// |got - want| <= 2^-9 * bound + 1e-6 everywhere (twice TF32's product error, float32 sums of these lengths are far
// inside it); reports the worst ratio.
bool within_tf32(const Vec & got, const Ref & want, const char * what) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            std::printf("  %s[%zu]: not finite\n", what, i);
            return false;
        }
        const double ratio = std::fabs(got[i] - want.c[i]) / (std::ldexp(want.bound[i], -9) + 1e-6);
        if (ratio > worst) worst = ratio, at = i;
    }
    if (worst > 1.0)
        std::printf("  %s: worst at %zu: %.8g vs %.8g (%.3g of the bound)\n", what, at, (double)got[at], want.c[at],
                    worst);
    return worst <= 1.0;
}

GPU_TEST(tf32_matmul_is_within_tf32_rounding_of_float64) {
    PrecisionScope keep;
    struct S {
        int64_t N, C, OC;
        bool bias;
    };
    for (const S s :
         {S{1, 8, 1, true}, S{7, 13, 5, false}, S{130, 70, 193, true}, S{256, 128, 384, true}, S{33, 512, 64, false}}) {
        const Vec x = rnd((size_t)(s.N * s.C), 1), w = rnd((size_t)(s.OC * s.C), 2), b = rnd((size_t)s.OC, 3),
                  dout = rnd((size_t)(s.N * s.OC), 4);
        const Vec dx0 = rnd((size_t)(s.N * s.C), 5), dw0 = rnd((size_t)(s.OC * s.C), 6);
        D X(x), W(w), Bb(b), DO(dout), O(Vec((size_t)(s.N * s.OC))), DX(dx0), DW(dw0);
        maporl_set_matmul_precision(MAPORL_MATMUL_HIGH);
        g::cuda::matmul_forward(O.p, X.p, W.p, s.bias ? Bb.p : nullptr, s.N, s.C, s.OC);
        g::cuda::matmul_backward(DX.p, DW.p, nullptr, DO.p, X.p, W.p, s.N, s.C, s.OC);
        const Ref out = reference(
            s.N, s.OC, s.C, [&](int64_t n, int64_t c) { return x[(size_t)(n * s.C + c)]; },
            [&](int64_t c, int64_t o) { return w[(size_t)(o * s.C + c)]; }, nullptr, s.bias ? &b : nullptr);
        const Ref dx = reference(
            s.N, s.C, s.OC, [&](int64_t n, int64_t o) { return dout[(size_t)(n * s.OC + o)]; },
            [&](int64_t o, int64_t c) { return w[(size_t)(o * s.C + c)]; }, &dx0, nullptr);
        const Ref dw = reference(
            s.OC, s.C, s.N, [&](int64_t o, int64_t n) { return dout[(size_t)(n * s.OC + o)]; },
            [&](int64_t n, int64_t c) { return x[(size_t)(n * s.C + c)]; }, &dw0, nullptr);
        CHECK(within_tf32(O.host(), out, "out") && within_tf32(DX.host(), dx, "dinp") &&
                  within_tf32(DW.host(), dw, "dweight"),
              "N=%lld C=%lld OC=%lld", (long long)s.N, (long long)s.C, (long long)s.OC);
    }
}

GPU_TEST(tf32_is_a_different_path_and_repeats_run_to_run) {
    PrecisionScope keep;
    const int64_t N = 256, C = 128, OC = 384;
    const Vec x = rnd((size_t)(N * C), 11), w = rnd((size_t)(OC * C), 12);
    D X(x), W(w), O(Vec((size_t)(N * OC)));
    g::cuda::matmul_forward(O.p, X.p, W.p, nullptr, N, C, OC);
    const Vec f32 = O.host();
    maporl_set_matmul_precision(MAPORL_MATMUL_HIGH);
    g::cuda::matmul_forward(O.p, X.p, W.p, nullptr, N, C, OC);
    const Vec t1 = O.host();
    g::cuda::matmul_forward(O.p, X.p, W.p, nullptr, N, C, OC);
    const Vec t2 = O.host();
    size_t differ = 0;
    for (size_t i = 0; i < f32.size(); ++i) differ += f32[i] != t1[i];
    CHECK(differ > f32.size() / 2, "TF32 results differ from float32 (%zu of %zu do)", differ, f32.size());
    CHECK(t1 == t2, "TF32 repeats bit for bit");
}

GPU_TEST(model_logits_under_tf32_follow_the_cpu) {
    PrecisionScope keep;
    maporl_gpt_config c = maporl_gpt_default_config();
    c.vocab = 37, c.context = 40, c.layers = 2, c.heads = 4, c.d_model = 64;
    maporl_gpt *cpu = nullptr, *gpu = nullptr;
    maporl_gpt_create(&c, 11, &cpu);
    maporl_gpt_create(&c, 11, &gpu);
    CHECK(cpu && gpu && maporl_gpt_set_device(gpu, MAPORL_DEVICE_CUDA) == MAPORL_OK, "%s", maporl_last_error());
    maporl_set_matmul_precision(MAPORL_MATMUL_HIGH);
    const int64_t B = 3, T = 33;
    std::vector<int32_t> tok((size_t)(B * T));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)((i * 7 + 3) % (size_t)c.vocab);
    Vec lc((size_t)(B * T * c.vocab)), lg(lc.size());
    maporl_gpt_forward(cpu, tok.data(), B, T, lc.data(), nullptr);
    CHECK(maporl_gpt_forward(gpu, tok.data(), B, T, lg.data(), nullptr) == MAPORL_OK, "%s", maporl_last_error());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < lc.size(); ++i) scale = std::max(scale, (double)std::fabs(lc[i]));
    for (size_t i = 0; i < lc.size(); ++i) worst = std::max(worst, (double)std::fabs(lg[i] - lc[i]));
    CHECK(worst <= 1e-2 * scale && worst > 0, "logits: worst %.3g of max %.3g (TF32: within 1e-2, and not equal)",
          worst, scale);
    maporl_gpt_free(cpu);
    maporl_gpt_free(gpu);
}

// One linear layer's forward + both backward products (6 N C OC flops), in each precision.
void bench() {
    if (devices() == 0) {
        std::printf("BENCH matmul cuda: no CUDA device\n");
        return;
    }
    PrecisionScope keep;
    struct S {
        int64_t N, C, OC;
    };
    for (const S s : {S{4096, 128, 512}, S{4096, 512, 128}, S{8192, 1024, 4096}}) {
        D X(rnd((size_t)(s.N * s.C), 1)), W(rnd((size_t)(s.OC * s.C), 2)), DO(rnd((size_t)(s.N * s.OC), 3)),
            O(Vec((size_t)(s.N * s.OC))), DX(Vec((size_t)(s.N * s.C))), DW(Vec((size_t)(s.OC * s.C)));
        for (int p : {MAPORL_MATMUL_HIGHEST, MAPORL_MATMUL_HIGH}) {
            maporl_set_matmul_precision(p);
            const double ms = gpu_check::median_ms(
                [&] {
                    g::cuda::matmul_forward(O.p, X.p, W.p, nullptr, s.N, s.C, s.OC);
                    g::cuda::matmul_backward(DX.p, DW.p, nullptr, DO.p, X.p, W.p, s.N, s.C, s.OC);
                    g::cuda::synchronize("bench");
                },
                20);
            std::printf("BENCH matmul fwd+bwd cuda %s N=%lld C=%lld OC=%lld median_ms=%.3f tflops=%.1f\n",
                        p ? "tf32" : "fp32", (long long)s.N, (long long)s.C, (long long)s.OC, ms,
                        6.0 * s.N * s.C * s.OC / (ms / 1e3) / 1e12);
        }
    }
}

#else

void bench() {}

#endif

}  // namespace

int main(int argc, char ** argv) { return gpu_check::run("test_matmul_cuda", "TF32-vs-reference", argc, argv, bench); }
