// matmul.cpp: the linear layer out = inp @ weight^T + bias (gpt_ops.h). Every loop is written as an axpy over a
// contiguous output row (the forward on a transposed copy of the weight), so the compiler vectorises it without
// reassociating any sum: each output element is summed in index order, the same for any thread count.
// Float on AVX2 / AVX-512 goes through the packed GEMM of matmul_vec.inc instead (explicit FMA, k in ascending
// order: also independent of the thread count, and within float rounding of this path); it reads a Linear's
// weight through its strides, so matmul_forward makes no transposed copy there.
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "native/core/bf16.h"
#include "native/core/q8.h"
#include "native/core/core.h"
#include "native/model/gpt_ops.h"
#include "native/model/w8a8.h"
#include "native/core/isa.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace avx512 {
void gemm_acc_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const float * B,
                  int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);
void gemm_set_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const float * B,
                  int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias);
void gemm_set_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const uint16_t * B,
                   int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias);
void gemv_rows_f32(int64_t N, int64_t OC, int64_t C, const float * X, const float * Wm, const float * bias, float * out,
                   int64_t o0, int64_t o1);
void gemm_acc_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const uint16_t * B,
                   int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);
void gemv_rows_bf16(int64_t N, int64_t OC, int64_t C, const float * X, const uint16_t * Wm, const float * bias,
                    float * out, int64_t o0, int64_t o1);
}
namespace avx2 {
void gemm_acc_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const float * B,
                  int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);
void gemm_set_f32(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const float * B,
                  int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias);
void gemm_set_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const uint16_t * B,
                   int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc, const float * bias);
void gemv_rows_f32(int64_t N, int64_t OC, int64_t C, const float * X, const float * Wm, const float * bias, float * out,
                   int64_t o0, int64_t o1);
void gemm_acc_bf16(int64_t M, int64_t Nc, int64_t K, const float * A, int64_t lda_i, int64_t lda_k, const uint16_t * B,
                   int64_t ldb_k, int64_t ldb_j, float * Cm, int64_t ldc);
void gemv_rows_bf16(int64_t N, int64_t OC, int64_t C, const float * X, const uint16_t * Wm, const float * bias,
                    float * out, int64_t o0, int64_t o1);
}
namespace gpt {
namespace {

// The kernels of one SIMD level (matmul_vec.inc): C (+)= A B with B float or bfloat16 (acc adds onto C; set writes
// bias + A B without reading C), and the decoding GEMV.
struct GemmKernels {
    decltype(&avx512::gemm_acc_f32) acc_f32;
    decltype(&avx512::gemm_set_f32) set_f32;
    decltype(&avx512::gemm_acc_bf16) acc_bf16;
    decltype(&avx512::gemm_set_bf16) set_bf16;
    decltype(&avx512::gemv_rows_f32) gemv_f32;
    decltype(&avx512::gemv_rows_bf16) gemv_bf16;
};

// The active level's kernels, or null at the scalar level.
const GemmKernels * simd_kernels() {
    static const GemmKernels k512{avx512::gemm_acc_f32,  avx512::gemm_set_f32,  avx512::gemm_acc_bf16,
                                  avx512::gemm_set_bf16, avx512::gemv_rows_f32, avx512::gemv_rows_bf16};
    static const GemmKernels k2{avx2::gemm_acc_f32,  avx2::gemm_set_f32,  avx2::gemm_acc_bf16,
                                avx2::gemm_set_bf16, avx2::gemv_rows_f32, avx2::gemv_rows_bf16};
    const Isa isa = active_isa();
    return isa == Isa::Avx512 ? &k512 : isa == Isa::Avx2 ? &k2 : nullptr;
}

// The same for the float build; null for double (the reference build runs the loops below).
template <typename F>
const GemmKernels * simd_kernels_for() {
    if constexpr (std::is_same<F, float>::value) return simd_kernels();
    return nullptr;
}

}  // namespace

template <typename F>
bool matmul_packs() {
    return simd_kernels_for<F>() != nullptr;
}

template <typename F>
void matmul_forward_wt(F * out, const F * inp, const F * wt, const F * bias, int64_t N, int64_t C, int64_t OC) {
    if (const GemmKernels * k = simd_kernels_for<F>())
        return k->set_f32(N, OC, C, (const float *)inp, C, 1, (const float *)wt, OC, 1, (float *)out, OC,
                          (const float *)bias);
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            F * __restrict__ o = out + n * OC;
            const F * x = inp + n * C;
            for (int64_t k = 0; k < OC; ++k) o[k] = bias ? bias[k] : F(0);
            for (int64_t c = 0; c < C; ++c) {
                const F a = x[c];
                const F * __restrict__ w = wt + c * OC;
                for (int64_t k = 0; k < OC; ++k) o[k] += a * w[k];
            }
        }
    });
}

template <typename F>
void matmul_forward_rows_parts(const RowsPart<F> * parts, int nparts, const F * inp, int64_t N, int64_t C) {
    // Work units: a float / bfloat16 part's outputs, an int8 part's groups of 16 rows (its input quantized once).
    auto units_of = [](const RowsPart<F> & pt) { return pt.w8 ? q8_padded_rows(pt.OC) / kQ8Rows : pt.OC; };
    int64_t total = 0;
    bool any8 = false;
    for (int i = 0; i < nparts; ++i) {
        if ((parts[i].w != nullptr) + (parts[i].w16 != nullptr) + (parts[i].w8 != nullptr) != 1)
            throw_error(MAPORL_ERR_INTERNAL, "matmul_forward_rows_parts: part %d: expected exactly one of w, w16, w8",
                        i);
        if (parts[i].w8 && (!std::is_same<F, float>::value || C % kQ8Block != 0 || !parts[i].d8))
            throw_error(MAPORL_ERR_INTERNAL,
                        "matmul_forward_rows_parts: part %d: an int8 weight needs float, C %% 32 == 0 and scales", i);
        any8 = any8 || parts[i].w8;
        total += units_of(parts[i]);
    }
    // (the pool's threads read the caller's buffer: a lambda names a thread_local, it does not capture it)
    thread_local W8A8Input in8_buffer;
    W8A8Input & in8 = in8_buffer;
    if constexpr (std::is_same<F, float>::value)
        if (any8) w8a8_quantize(in8, inp, N, C);
    const GemmKernels * k = simd_kernels_for<F>();
    // One job over the parts' units end to end; each chunk runs its piece of every part it overlaps.
    parallel_for(total, any8 ? 1 : 16, [&](int64_t g0, int64_t g1) {
        int64_t off = 0;
        for (int i = 0; i < nparts; ++i) {
            const RowsPart<F> & pt = parts[i];
            const int64_t units = units_of(pt);
            const int64_t o0 = std::max(g0, off) - off, o1 = std::min(g1, off + units) - off;
            off += units;
            if (o0 >= o1) continue;
            if constexpr (std::is_same<F, float>::value)
                if (pt.w8) {
                    w8a8_groups(in8, pt.w8, pt.d8, pt.OC, pt.bias, pt.out, o0, o1);
                    continue;
                }
            if (k) {
                if (pt.w16)
                    k->gemv_bf16(N, pt.OC, C, (const float *)inp, pt.w16, (const float *)pt.bias, (float *)pt.out, o0,
                                 o1);
                else
                    k->gemv_f32(N, pt.OC, C, (const float *)inp, (const float *)pt.w, (const float *)pt.bias,
                                (float *)pt.out, o0, o1);
                continue;
            }
            for (int64_t o = o0; o < o1; ++o)
                for (int64_t n = 0; n < N; ++n) {
                    F s = pt.bias ? pt.bias[o] : F(0);
                    const F * x = inp + n * C;
                    if (pt.w16)
                        for (int64_t c = 0; c < C; ++c) s += x[c] * (F)bf16_to_float(pt.w16[o * C + c]);
                    else
                        for (int64_t c = 0; c < C; ++c) s += x[c] * pt.w[o * C + c];
                    pt.out[n * pt.OC + o] = s;
                }
        }
    });
}

template <typename F>
void matmul_forward_rows(F * out, const F * inp, const F * weight, const F * bias, int64_t N, int64_t C, int64_t OC) {
    const RowsPart<F> part{weight, nullptr, bias, out, OC};
    matmul_forward_rows_parts(&part, 1, inp, N, C);
}

template <typename F>
void transpose_weight(F * wt, const F * weight, int64_t C, int64_t OC) {
    parallel_for(OC, 16, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
            for (int64_t c = 0; c < C; ++c) wt[c * OC + o] = weight[o * C + c];
    });
}

template <typename F>
void matmul_forward(F * out, const F * inp, const F * weight, const F * bias, int64_t N, int64_t C, int64_t OC) {
    if (const GemmKernels * k =
            simd_kernels_for<F>())  // the kernel packs weight^T from weight's strides: no transposed copy
        return k->set_f32(N, OC, C, (const float *)inp, C, 1, (const float *)weight, 1, C, (float *)out, OC,
                          (const float *)bias);
    std::vector<F> wt((size_t)(C * OC));  // [C, OC]
    transpose_weight(wt.data(), weight, C, OC);
    matmul_forward_wt(out, inp, wt.data(), bias, N, C, OC);
}

template <typename F>
void matmul_backward(F * dinp, F * dweight, F * dbias, const F * dout, const F * inp, const F * weight, int64_t N,
                     int64_t C, int64_t OC, bool set_dinp) {
    if (const GemmKernels * k = simd_kernels_for<F>()) {
        // dinp[N, C] (+)= dout[N, OC] @ weight[OC, C]; dweight[OC, C] += dout^T @ inp (A read with transposed strides).
        if (set_dinp)
            k->set_f32(N, C, OC, (const float *)dout, OC, 1, (const float *)weight, C, 1, (float *)dinp, C, nullptr);
        else
            k->acc_f32(N, C, OC, (const float *)dout, OC, 1, (const float *)weight, C, 1, (float *)dinp, C);
        if (dweight) k->acc_f32(OC, C, N, (const float *)dout, 1, OC, (const float *)inp, C, 1, (float *)dweight, C);
        if (dbias)
            parallel_for(OC, 16, [&](int64_t o0, int64_t o1) {
                for (int64_t o = o0; o < o1; ++o) {
                    F db = F(0);
                    for (int64_t n = 0; n < N; ++n) db += dout[n * OC + o];
                    dbias[o] += db;
                }
            });
        return;
    }
    if (set_dinp) zero_parallel(dinp, (size_t)(N * C));
    parallel_for(N, 4, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) {
            F * __restrict__ di = dinp + n * C;
            const F * d = dout + n * OC;
            for (int64_t o = 0; o < OC; ++o) {
                const F g = d[o];
                const F * __restrict__ w = weight + o * C;
                for (int64_t c = 0; c < C; ++c) di[c] += g * w[c];
            }
        }
    });
    if (!dweight && !dbias) return;
    parallel_for(OC, 4, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
            F db = F(0);
            for (int64_t n = 0; n < N; ++n) {
                const F g = dout[n * OC + o];
                db += g;
                if (!dweight) continue;
                F * __restrict__ dw = dweight + o * C;
                const F * __restrict__ x = inp + n * C;
                for (int64_t c = 0; c < C; ++c) dw[c] += g * x[c];
            }
            if (dbias) dbias[o] += db;
        }
    });
}

// bfloat16 weights (a frozen base): the SIMD kernels widen them as they pack or stream them (the same bits as the
// float kernels on the widened values); the scalar level widens a float copy and runs the float path (the decoding
// GEMV widens each value as it reads it: matmul_forward_rows_parts).
namespace {
std::vector<float> widened(const uint16_t * w, int64_t n) {
    std::vector<float> out((size_t)n);
    for (int64_t i = 0; i < n; ++i) out[(size_t)i] = bf16_to_float(w[i]);
    return out;
}
}  // namespace

void matmul_forward_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                         int64_t C, int64_t OC) {
    if (const GemmKernels * k = simd_kernels()) return k->set_bf16(N, OC, C, inp, C, 1, weight, 1, C, out, OC, bias);
    const std::vector<float> w = widened(weight, OC * C);
    matmul_forward(out, inp, w.data(), bias, N, C, OC);
}

void matmul_forward_rows_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                              int64_t C, int64_t OC) {
    const RowsPart<float> part{nullptr, weight, bias, out, OC};
    matmul_forward_rows_parts(&part, 1, inp, N, C);
}

void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * weight, int64_t N, int64_t C,
                                int64_t OC, bool set_dinp) {
    if (const GemmKernels * k = simd_kernels()) {
        if (set_dinp) return k->set_bf16(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C, nullptr);
        return k->acc_bf16(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C);
    }
    const std::vector<float> w = widened(weight, OC * C);
    matmul_backward(dinp, (float *)nullptr, (float *)nullptr, dout, (const float *)nullptr, w.data(), N, C, OC,
                    set_dinp);
}

// An int8 base's weight (q8.h's packed layout) in the backward: row blocks of W dequantized into a float buffer and
// accumulated by the float GEMM in order (each block's bits do not depend on the thread count).
void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd, int64_t N,
                              int64_t C, int64_t OC, bool set_dinp) {
    if (C % kQ8Block != 0)
        throw_error(MAPORL_ERR_INTERNAL, "Q8 matmul: the weight's rows have %lld values, not a multiple of 32",
                    (long long)C);
    const GemmKernels * k = simd_kernels();
    if (OC == 0) {
        if (set_dinp) zero_parallel(dinp, (size_t)(N * C));
        return;
    }
    auto unpack = [&](float * dst, int64_t k0, int64_t kc) {  // rows k0 .. k0 + kc of W into dst, on the pool
        parallel_for(kc, 16, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) q8_unpack_row(dst + r * C, pq, pd, C, k0 + r);
        });
    };
    if (!k) {  // the scalar level: the whole matrix dequantized (freed after), then the float loops
        std::vector<float> w((size_t)(OC * C));
        unpack(w.data(), 0, OC);
        matmul_backward(dinp, (float *)nullptr, (float *)nullptr, dout, (const float *)nullptr, w.data(), N, C, OC,
                        set_dinp);
        return;
    }
    constexpr int64_t KB = 256;  // rows of W per block
    thread_local std::vector<float> wf_buffer;
    std::vector<float> & wf = wf_buffer;  // (the caller's, in the pool's threads too; KB x C floats at most)
    if (wf.size() < (size_t)(std::min(KB, OC) * C)) wf.resize((size_t)(std::min(KB, OC) * C));
    for (int64_t k0 = 0; k0 < OC; k0 += KB) {
        const int64_t kc = std::min(KB, OC - k0);
        unpack(wf.data(), k0, kc);
        if (set_dinp && k0 == 0)
            k->set_f32(N, C, kc, dout + k0, OC, 1, wf.data(), C, 1, dinp, C, nullptr);
        else
            k->acc_f32(N, C, kc, dout + k0, OC, 1, wf.data(), C, 1, dinp, C);
    }
}

#define MAPORL_INSTANTIATE(F)                                                                              \
    template void matmul_forward<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t);      \
    template void matmul_forward_wt<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t);   \
    template void transpose_weight<F>(F *, const F *, int64_t, int64_t);                                   \
    template bool matmul_packs<F>();                                                                       \
    template void matmul_forward_rows<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t); \
    template void matmul_forward_rows_parts<F>(const RowsPart<F> *, int, const F *, int64_t, int64_t);     \
    template void matmul_backward<F>(F *, F *, F *, const F *, const F *, const F *, int64_t, int64_t, int64_t, bool);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace gpt
}  // namespace maporl

namespace {
std::atomic<int> g_matmul_precision{MAPORL_MATMUL_HIGHEST};
}

extern "C" maporl_status maporl_set_matmul_precision(int precision) {
    maporl::clear_error();
    if (precision != MAPORL_MATMUL_HIGHEST && precision != MAPORL_MATMUL_HIGH)
        return maporl::set_error(MAPORL_ERR_INVALID_ARG,
                                 "precision: expected MAPORL_MATMUL_HIGHEST (0) or MAPORL_MATMUL_HIGH (1), got %d",
                                 precision);
    g_matmul_precision.store(precision, std::memory_order_relaxed);
    return MAPORL_OK;
}

extern "C" maporl_matmul_precision maporl_get_matmul_precision(void) {
    return (maporl_matmul_precision)g_matmul_precision.load(std::memory_order_relaxed);
}
