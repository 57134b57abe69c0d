// test_w8a8_cuda.cpp: a frozen base's products on CUDA (cuda/model/w8a8.cu, matmul.cu's widening loads,
// embedding.cu's gathers). In every build: the W8A8 kernels' decomposition (w8a8_tile.h) emulated on the CPU gives
// the CPU kernels' bits. Against their CPU twins where a GPU is visible: the W8A8 forward gives the CPU's bits (NaN as
// NaN) (w8a8.h's arithmetic: the same quantizer, integer block dots, the same fma chain) at shapes off the tiles (N across
// the decode and GEMM tiles, OC across the 16-row groups, C from one block to several chunks), with a bias or none,
// and with blocks of zeros, of values below the 1e-30 floor, of huge values and one holding NaN (NaN out for its
// row); the input gradient through an int8 or bfloat16 weight and the bfloat16 forward are the float GEMM on the
// widened weight (close to the CPU's, accumulating into a non-zero gradient); the embedding gathers are exact.
// `test_w8a8_cuda --bench` times single-stream and batched W8A8 products at the SmolLM2-135M shapes against the
// weight-read floor of the device's copy bandwidth.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/core/gpu_check.h"
#include "native/core/bf16.h"
#include "native/core/q8.h"
#include "native/model/gpt_ops.h"
#include "native/model/w8a8.h"
#include "native/model/w8a8_tile.h"
#include "maporl.h"

#ifdef MAPORL_WITH_CUDA
#include "native/model/llama_cuda.h"
#endif

namespace {

using Vec = std::vector<float>;
namespace g = maporl::gpt;
using gpu_check::rnd;

// An int8 weight [OC, C] in q8.h's packed layout, quantized from normal-ish values.
struct Q8 {
    std::vector<uint8_t> q;
    std::vector<uint16_t> d;
};
Q8 pack(const Vec & w, int64_t OC, int64_t C) {
    Q8 p{std::vector<uint8_t>((size_t)(maporl::q8_padded_rows(OC) * C), 128),
         std::vector<uint16_t>((size_t)(maporl::q8_padded_rows(OC) * C / 32), 0)};
    std::vector<int8_t> q((size_t)C);
    std::vector<uint16_t> d((size_t)(C / 32));
    for (int64_t r = 0; r < OC; ++r) {
        for (int64_t b = 0; b < C / 32; ++b)
            maporl::q8_quantize_block(w.data() + r * C + b * 32, q.data() + b * 32, d.data() + b);
        maporl::q8_pack_row(p.q.data(), p.d.data(), C, r, q.data(), d.data());
    }
    return p;
}

// The shapes: N across the narrow (<= 4 rows) and wide tiles and their edges, OC across the 16-row groups and the
// tile widths, C from one block to several chunks of four.
struct Shape {
    int64_t N, C, OC;
};
const Shape kShapes[] = {{1, 32, 1},  {1, 576, 1536}, {3, 96, 17},    {4, 160, 257},
                         {5, 64, 15}, {17, 512, 48},  {130, 192, 100}};

// An input of random values whose first row holds a block of zeros, one below the 1e-30 floor and one of huge values,
// and whose last row (N > 1) holds a NaN.
Vec special_input(const Shape & s) {
    Vec x = rnd((size_t)(s.N * s.C), 1, 2.0f);
    for (int64_t i = 0; i < 32 && s.C >= 32; ++i) x[(size_t)i] = 0.0f;
    if (s.C >= 64)
        for (int64_t i = 32; i < 64; ++i) x[(size_t)i] = 1e-32f * (float)(i - 40);  // (max |x| 2.3e-31)
    if (s.C >= 96)
        for (int64_t i = 64; i < 96; ++i) x[(size_t)i] = 3e37f * (float)((i % 7) - 3);
    if (s.N > 1) x[(size_t)((s.N - 1) * s.C + s.C / 2)] = NAN;
    return x;
}

// The number of outputs that differ in their bits (NaN equal to NaN); reports the first.
size_t differing(const Vec & got, const Vec & want, const Shape & s, bool bias, const char * what) {
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
        if (!same && differ++ == 0) first = i;
    }
    if (differ)
        std::printf("  %s N=%lld C=%lld OC=%lld bias=%d: %zu outputs differ (first %zu: %.9g vs %.9g)\n", what,
                    (long long)s.N, (long long)s.C, (long long)s.OC, (int)bias, differ, first, (double)got[first],
                    (double)want[first]);
    return differ;
}

// The CUDA kernels' decomposition (w8a8_tile.h), run on the CPU, gives the CPU kernels' bits: every tile, chunk,
// thread's share and word address of the GPU launch, checked on any machine.
TEST(the_cuda_decomposition_emulated_is_the_cpus_bits) {
    for (const Shape & s : kShapes) {
        const Vec x = special_input(s), w = rnd((size_t)(s.OC * s.C), 2, 0.05f), b = rnd((size_t)s.OC, 3);
        const Q8 p = pack(w, s.OC, s.C);
        if (s.C >= 64) {  // the second block is under the floor: nonzero values, counted as zero
            float d = -1.0f, id = -1.0f;
            CHECK(g::w8a8_block_scale(x.data() + 32, &d, &id) && d == 0.0f && id == 0.0f && x[33] != 0.0f,
                  "a block of values below 1e-30 has the scale 0 (got %g)", (double)d);
        }
        for (bool bias : {true, false}) {
            Vec want((size_t)(s.N * s.OC)), got((size_t)(s.N * s.OC), -1.0f), xd((size_t)(s.N * s.C / 32));
            std::vector<int8_t> xq((size_t)(s.N * s.C));
            g::matmul_forward_w8a8(want.data(), x.data(), p.q.data(), p.d.data(), bias ? b.data() : nullptr, s.N, s.C,
                                   s.OC);
            g::w8a8_tile::emulate(got.data(), x.data(), p.q.data(), p.d.data(), bias ? b.data() : nullptr, s.N, s.C,
                                  s.OC, xq.data(), xd.data());
            CHECK(differing(got, want, s, bias, "emulated") == 0, "N=%lld C=%lld OC=%lld: the emulation's bits",
                  (long long)s.N, (long long)s.C, (long long)s.OC);
            if (s.N > 1) CHECK(std::isnan(got[(size_t)((s.N - 1) * s.OC)]), "a NaN in a row's input: NaN outputs");
        }
    }
}

#ifdef MAPORL_WITH_CUDA

using gpu_check::close_rel;
using gpu_check::D;

GPU_TEST(w8a8_forward_is_the_cpus_bits) {
    for (const Shape & s : kShapes) {
        const Vec x = special_input(s), w = rnd((size_t)(s.OC * s.C), 2, 0.05f), b = rnd((size_t)s.OC, 3);
        const Q8 p = pack(w, s.OC, s.C);
        for (bool bias : {true, false}) {
            Vec want((size_t)(s.N * s.OC));
            g::matmul_forward_w8a8(want.data(), x.data(), p.q.data(), p.d.data(), bias ? b.data() : nullptr, s.N, s.C,
                                   s.OC);
            D<float> X(x), B(b), O(s.N * s.OC), XD(s.N * s.C / 32);
            D<uint8_t> PQ(p.q);
            D<uint16_t> PD(p.d);
            D<int8_t> XQ(s.N * s.C);
            g::cuda::matmul_forward_w8a8(O.p, X.p, PQ.p, PD.p, bias ? B.p : nullptr, s.N, s.C, s.OC, XQ.p, XD.p);
            CHECK(differing(O.host(), want, s, bias, "cuda") == 0, "N=%lld C=%lld OC=%lld: the GPU's bits",
                  (long long)s.N, (long long)s.C, (long long)s.OC);
        }
    }
}

GPU_TEST(frozen_input_gradients_and_bf16_forward_are_the_float_gemm_on_the_widened_weight) {
    struct S {
        int64_t N, C, OC;
    };
    for (const S s : {S{1, 32, 7}, S{9, 96, 33}, S{70, 160, 130}}) {
        const Vec x = rnd((size_t)(s.N * s.C), 4), w = rnd((size_t)(s.OC * s.C), 5, 0.1f),
                  dout = rnd((size_t)(s.N * s.OC), 6), dx0 = rnd((size_t)(s.N * s.C), 7), b = rnd((size_t)s.OC, 8);
        std::vector<uint16_t> w16((size_t)(s.OC * s.C));
        for (size_t i = 0; i < w16.size(); ++i) w16[i] = maporl::float_to_bf16(w[i]);
        const Q8 p = pack(w, s.OC, s.C);
        Vec f16 = dx0, fq = dx0, fo((size_t)(s.N * s.OC));
        g::matmul_backward_input_bf16(f16.data(), dout.data(), w16.data(), s.N, s.C, s.OC);
        g::matmul_backward_input_q8(fq.data(), dout.data(), p.q.data(), p.d.data(), s.N, s.C, s.OC);
        g::matmul_forward_bf16(fo.data(), x.data(), w16.data(), b.data(), s.N, s.C, s.OC);
        D<float> X(x), DO(dout), DX16(dx0), DXQ(dx0), B(b), O(s.N * s.OC);
        D<uint16_t> W16(w16), PD(p.d);
        D<uint8_t> PQ(p.q);
        g::cuda::matmul_backward_input_bf16(DX16.p, DO.p, W16.p, s.N, s.C, s.OC);
        g::cuda::matmul_backward_input_q8(DXQ.p, DO.p, PQ.p, PD.p, s.N, s.C, s.OC);
        g::cuda::matmul_forward_bf16(O.p, X.p, W16.p, B.p, s.N, s.C, s.OC);
        CHECK(close_rel(DX16.host(), f16, 1e-5, "bf16 dinp") && close_rel(DXQ.host(), fq, 1e-5, "int8 dinp") &&
                  close_rel(O.host(), fo, 1e-5, "bf16 out"),
              "N=%lld C=%lld OC=%lld", (long long)s.N, (long long)s.C, (long long)s.OC);
    }
}

GPU_TEST(frozen_embedding_rows_are_exact) {
    const int64_t V = 37, C = 96, N = 11;
    const Vec w = rnd((size_t)(V * C), 9, 0.5f);
    std::vector<uint16_t> w16((size_t)(V * C));
    for (size_t i = 0; i < w16.size(); ++i) w16[i] = maporl::float_to_bf16(w[i]);
    const Q8 p = pack(w, V, C);
    std::vector<int32_t> tok((size_t)N);
    for (int64_t n = 0; n < N; ++n) tok[(size_t)n] = (int32_t)((n * 13 + 5) % V);
    Vec want16((size_t)(N * C)), wantq((size_t)(N * C));
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c)
            want16[(size_t)(n * C + c)] = maporl::bf16_to_float(w16[(size_t)(tok[n] * C + c)]);
        maporl::q8_unpack_row(wantq.data() + n * C, p.q.data(), p.d.data(), C, tok[(size_t)n]);
    }
    D<int32_t> T(tok);
    D<uint16_t> W16(w16), PD(p.d);
    D<uint8_t> PQ(p.q);
    D<float> O16(N * C), OQ(N * C);
    maporl::llama::cuda::embedding_forward_bf16(O16.p, T.p, W16.p, N, C);
    maporl::llama::cuda::embedding_forward_q8(OQ.p, T.p, PQ.p, PD.p, N, C);
    CHECK(O16.host() == want16 && OQ.host() == wantq, "the bfloat16 and int8 embedding rows are the CPU's values");
}

// The SmolLM2-135M layer's products (q: 576 -> 576, gate: 576 -> 1536, down: 1536 -> 576, the LM head 576 -> 49152)
// at N = 1 (decoding: the weight read is the floor) and N = 8, 64; GB/s of weight bytes read (34 per 32 weights).
void bench() {
    if (gpu_check::devices() == 0) {
        std::printf("BENCH w8a8 cuda: no CUDA device\n");
        return;
    }
    struct S {
        int64_t C, OC;
        const char * name;
    };
    for (const S s :
         {S{576, 576, "q_proj"}, S{576, 1536, "gate_proj"}, S{1536, 576, "down_proj"}, S{576, 49152, "lm_head"}})
        for (int64_t N : {1, 8, 64}) {
            const Q8 p = pack(rnd((size_t)(s.OC * s.C), 2, 0.05f), s.OC, s.C);
            D<float> X(rnd((size_t)(N * s.C), 1)), O(N * s.OC), XD(N * s.C / 32);
            D<uint8_t> PQ(p.q);
            D<uint16_t> PD(p.d);
            D<int8_t> XQ(N * s.C);
            const double ms = gpu_check::median_ms(
                [&] {
                    g::cuda::matmul_forward_w8a8(O.p, X.p, PQ.p, PD.p, nullptr, N, s.C, s.OC, XQ.p, XD.p);
                    g::cuda::synchronize("bench");
                },
                50);
            const double bytes = (double)s.OC * s.C * 34.0 / 32.0;
            std::printf("BENCH w8a8 cuda %s N=%lld C=%lld OC=%lld median_ms=%.4f weight_GBps=%.1f int8_TOPS=%.2f\n",
                        s.name, (long long)N, (long long)s.C, (long long)s.OC, ms, bytes / (ms / 1e3) / 1e9,
                        2.0 * N * s.C * s.OC / (ms / 1e3) / 1e12);
        }
}

#else

void bench() {}

#endif

}  // namespace

int main(int argc, char ** argv) { return gpu_check::run("test_w8a8_cuda", "W8A8-vs-CPU", argc, argv, bench); }
