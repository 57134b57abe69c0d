// test_llama_cuda.cpp: the Llama family's layers on CUDA (native/model/llama_cuda.h) against their CPU twins of
// llama_ops.h, where a GPU is visible (CUDA build and a device; elsewhere the binary says how many it left out):
// RMSNorm, rotate-half RoPE (llama3-scaled tables, a position offset, in place), SwiGLU, and GQA / MQA causal
// attention, forward and backward, at shapes off the warp and tile sizes, every backward accumulating into
// non-zero gradients (the contract is +=).
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/core/gpu_check.h"
#include "native/model/llama_ops.h"
#include "maporl.h"

#ifdef MAPORL_WITH_CUDA
#include "native/model/llama_cuda.h"
#endif

namespace {

#ifdef MAPORL_WITH_CUDA

namespace L = maporl::llama;
using Vec = std::vector<float>;
using gpu_check::D;
using gpu_check::close_rel;
using gpu_check::rnd;

GPU_TEST(cuda_rmsnorm_matches_cpu) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 7}, {130, 576}, {77, 33}};
    for (auto [N, C] : shapes) {
        const Vec x = rnd((size_t)(N * C), 1, 2.0f), w = rnd((size_t)C, 2), d = rnd((size_t)(N * C), 3);
        Vec out((size_t)(N * C)), rstd((size_t)N), dx = rnd((size_t)(N * C), 4), dw = rnd((size_t)C, 5);
        D<float> X(x), W(w), Dd(d), O(N * C), R(N), DX(dx), DW(dw), S(L::cuda::rmsnorm_scratch(N, C));
        L::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
        L::cuda::rmsnorm_forward(O.p, R.p, X.p, W.p, N, C, 1e-6);
        CHECK(close_rel(O.host(), out, 2e-6, "rmsnorm out") && close_rel(R.host(), rstd, 2e-6, "rmsnorm rstd"), "N=%lld C=%lld", (long long)N, (long long)C);
        L::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), N, C);
        L::cuda::rmsnorm_backward(DX.p, DW.p, Dd.p, X.p, W.p, R.p, N, C, S.p);
        CHECK(close_rel(DX.host(), dx, 1e-5, "rmsnorm dx") && close_rel(DW.host(), dw, 1e-5, "rmsnorm dw"), "N=%lld C=%lld", (long long)N, (long long)C);
    }
}

GPU_TEST(cuda_rope_matches_cpu) {
    L::RopeScaling s;
    s.type = L::RopeScaling::Llama3; s.factor = 8; s.low_freq_factor = 1; s.high_freq_factor = 4; s.original_max_position = 16;
    const int64_t B = 2, T = 19, H = 3, dim = 64, pos0 = 5, P = 64;
    std::vector<float> cos, sin;
    L::rope_tables(cos, sin, L::rope_inv_freq(dim, 500000.0, s), P);
    const Vec x = rnd((size_t)(B * T * H * dim), 1), d = rnd((size_t)(B * T * H * dim), 2);
    Vec out((size_t)(B * T * H * dim)), dx = rnd((size_t)(B * T * H * dim), 3);
    D<float> X(x), Cs(cos), Sn(sin), O(B * T * H * dim), Dd(d), DX(dx);
    L::rope_forward(out.data(), x.data(), cos.data(), sin.data(), B, T, pos0, H, dim);
    L::cuda::rope_forward(O.p, X.p, Cs.p, Sn.p, B, T, pos0, H, dim);
    CHECK(close_rel(O.host(), out, 1e-6, "rope out"), "forward");
    L::cuda::rope_forward(X.p, X.p, Cs.p, Sn.p, B, T, pos0, H, dim);  // in place
    CHECK(close_rel(X.host(), out, 1e-6, "rope in place"), "in place");
    L::rope_backward(dx.data(), d.data(), cos.data(), sin.data(), B, T, pos0, H, dim);
    L::cuda::rope_backward(DX.p, Dd.p, Cs.p, Sn.p, B, T, pos0, H, dim);
    CHECK(close_rel(DX.host(), dx, 1e-6, "rope dx"), "backward");
}

GPU_TEST(cuda_swiglu_matches_cpu) {
    for (int64_t n : {1, 1000, 65537}) {
        const Vec g = rnd((size_t)n, 1, 6.0f), u = rnd((size_t)n, 2), d = rnd((size_t)n, 3);
        Vec out((size_t)n), dg = rnd((size_t)n, 4), du = rnd((size_t)n, 5);
        D<float> G(g), U(u), Dd(d), O(n), DG(dg), DU(du);
        L::swiglu_forward(out.data(), g.data(), u.data(), n);
        L::cuda::swiglu_forward(O.p, G.p, U.p, n);
        CHECK(close_rel(O.host(), out, 2e-6, "swiglu out"), "n=%lld", (long long)n);
        L::swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), n);
        L::cuda::swiglu_backward(DG.p, DU.p, Dd.p, G.p, U.p, n);
        CHECK(close_rel(DG.host(), dg, 2e-6, "swiglu dgate") && close_rel(DU.host(), du, 2e-6, "swiglu dup"), "n=%lld", (long long)n);
    }
}

GPU_TEST(cuda_gqa_attention_matches_cpu) {
    struct S { int64_t B, T, NH, NKV, hs; };
    for (const S & c : {S{2, 37, 4, 2, 16}, S{1, 70, 9, 3, 64}, S{3, 5, 4, 1, 8}, S{1, 33, 2, 2, 40}}) {
        const int64_t NQ = c.B * c.T * c.NH * c.hs, NK = c.B * c.T * c.NKV * c.hs, NA = c.B * c.NH * c.T * c.T;
        const Vec q = rnd((size_t)NQ, 1), k = rnd((size_t)NK, 2), v = rnd((size_t)NK, 3), d = rnd((size_t)NQ, 4);
        Vec out((size_t)NQ), att((size_t)NA), dq = rnd((size_t)NQ, 5), dk = rnd((size_t)NK, 6), dv = rnd((size_t)NK, 7);
        D<float> Q(q), K(k), Vd(v), Dd(d), O(NQ), A(NA), DQ(dq), DK(dk), DV(dv), Sc(NA);
        L::attention_gqa_forward(out.data(), att.data(), q.data(), k.data(), v.data(), c.B, c.T, c.NH, c.NKV, c.hs);
        L::cuda::attention_gqa_forward(O.p, A.p, Q.p, K.p, Vd.p, c.B, c.T, c.NH, c.NKV, c.hs);
        CHECK(close_rel(O.host(), out, 1e-5, "gqa out") && close_rel(A.host(), att, 1e-5, "gqa att"), "T=%lld NH=%lld NKV=%lld", (long long)c.T,
              (long long)c.NH, (long long)c.NKV);
        L::attention_gqa_backward(dq.data(), dk.data(), dv.data(), d.data(), q.data(), k.data(), v.data(), att.data(), c.B, c.T, c.NH, c.NKV, c.hs);
        L::cuda::attention_gqa_backward(DQ.p, DK.p, DV.p, Dd.p, Q.p, K.p, Vd.p, A.p, c.B, c.T, c.NH, c.NKV, c.hs, Sc.p);
        CHECK(close_rel(DQ.host(), dq, 2e-5, "gqa dq") && close_rel(DK.host(), dk, 2e-5, "gqa dk") && close_rel(DV.host(), dv, 2e-5, "gqa dv"),
              "T=%lld NH=%lld NKV=%lld", (long long)c.T, (long long)c.NH, (long long)c.NKV);
    }
}

#endif

}  // namespace

int main(int argc, char ** argv) { return gpu_check::run("test_llama_cuda", "CUDA-vs-CPU", argc, argv, nullptr); }
