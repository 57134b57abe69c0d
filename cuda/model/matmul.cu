// matmul.cu: CUDA linear layer out = inp @ weight^T + bias and its backward (native/model/gpt_cuda.h; CPU reference
// native/model/matmul.cpp). One tiled SGEMM serves the three products through strides: C[i, j] (+)= sum_k A(i, k) B(k, j)
// with A(i, k) = A[i * ai + k * ak] and B(k, j) = B[k * bk + j * bj]: 64 x 64 output tiles, 16-deep k slabs in
// shared memory (loaded along whichever index is contiguous, so global reads coalesce), 4 x 4 outputs per thread,
// k summed in ascending order (deterministic). dbias is a column sum over a 32 x 32 block: 32 row groups each
// summed in order, then added in group order.
// With maporl_set_matmul_precision(MAPORL_MATMUL_HIGH) the same products run on TF32 tensor cores (WMMA 16x16x8):
// the same 64 x 64 tiles and strided slab loads (32 deep), operands rounded to TF32 as they enter shared memory,
// eight warps each owning a 16 x 32 strip, float32 accumulation in the fragments; the epilogue (bias, accumulate,
// bounds) goes through a shared-memory tile so its global writes coalesce. Fixed summation order in hardware, so
// results repeat run to run; they differ from float32 by the TF32 rounding (~1e-3 relative per product).
// A frozen base's weights enter through the same kernels: bfloat16 widened and int8 dequantized (q * d) exactly as
// the slabs load, so the product is the float GEMM's on the widened weight. NOTE(perf): no double buffering, no BF16
// tensor-core path. Not yet run on a GPU in this project's CI;
// scripts/device-check.sh checks it against the CPU and times both precisions.
#include <cuda_fp16.h>
#include <mma.h>

#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"
#include "native/core/q8.h"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr int BM = 64, BN = 64, BK = 16, kThreads = 256;

// The B operands: B(k, j) as a float, and whether j is the contiguous index (the slab loads run along it).
// FloatB: B[k * bk + j * bj]. Bf16B: the same strides over bfloat16 values, widened exactly (a frozen bfloat16 base's
// weight). Q8B: W[k, j] of an int8 base's weight [rows, C] in q8.h's packed layout, q * d exactly (the input's
// gradient through it: k = the output o, j = the input channel c).
struct FloatB {
    const float * p;
    int64_t bk, bj;
    __device__ bool j_fast() const { return bj == 1; }
    __device__ float operator()(int64_t k, int64_t j) const { return p[k * bk + j * bj]; }
};
struct Bf16B {
    const uint16_t * p;
    int64_t bk, bj;
    __device__ bool j_fast() const { return bj == 1; }
    __device__ float operator()(int64_t k, int64_t j) const {
        return __uint_as_float((uint32_t)p[k * bk + j * bj] << 16);
    }
};
struct Q8B {
    const uint8_t * q;
    const uint16_t * d;
    int64_t C;
    __device__ bool j_fast() const { return true; }
    __device__ float operator()(int64_t k, int64_t j) const {
        return (float)((int)q[q8_packed_index(C, k, j)] - 128) *
            __half2float(__ushort_as_half(d[q8_packed_scale_index(C, k, j)]));
    }
};

// The k0 slab of A into As[k][i] (a BM x KD block) and of B into Bs[k][j] (KD x BN), zero outside the matrices,
// each read along whichever index is contiguous (coalesced); `store` maps a value as it enters shared memory.
template <int KD, int LD, typename BSrc, typename Store>
__device__ __forceinline__ void load_slabs(float (*As)[LD], float (*Bs)[LD], int64_t M, int64_t Ncols, int64_t K,
                                           const float * __restrict__ A, int64_t ai, int64_t ak, const BSrc & Bm,
                                           int64_t i0, int64_t j0, int64_t k0, Store store) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int r = 0; r < (BM * KD) / kThreads; ++r) {
        const int e = tid + r * kThreads;
        int ii, kk;
        if (ak == 1) {
            kk = e % KD;
            ii = e / KD;
        } else {
            ii = e % BM;
            kk = e / BM;
        }
        const int64_t gi = i0 + ii, gk = k0 + kk;
        As[kk][ii] = store((gi < M && gk < K) ? A[gi * ai + gk * ak] : 0.0f);
    }
    const bool jf = Bm.j_fast();
#pragma unroll
    for (int r = 0; r < (BN * KD) / kThreads; ++r) {
        const int e = tid + r * kThreads;
        int jj, kk;
        if (jf) {
            jj = e % BN;
            kk = e / BN;
        } else {
            kk = e % KD;
            jj = e / KD;
        }
        const int64_t gj = j0 + jj, gk = k0 + kk;
        Bs[kk][jj] = store((gj < Ncols && gk < K) ? Bm(gk, gj) : 0.0f);
    }
}

template <typename BSrc>
__global__ void __launch_bounds__(kThreads)
    gemm_kernel(int64_t M, int64_t Ncols, int64_t K, const float * __restrict__ A, int64_t ai, int64_t ak, BSrc Bm,
                float * __restrict__ Cm, int64_t ldc, bool accumulate, const float * __restrict__ bias,
                bool rows_on_x) {
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t i0 = (int64_t)(rows_on_x ? blockIdx.x : blockIdx.y) * BM,
                  j0 = (int64_t)(rows_on_x ? blockIdx.y : blockIdx.x) * BN;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        load_slabs<BK, BM + 4>(As, Bs, M, Ncols, K, A, ai, ak, Bm, i0, j0, k0, [](float v) { return v; });
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                a[u] = As[kk][ty * 4 + u];
                b[u] = Bs[kk][tx * 4 + u];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int w = 0; w < 4; ++w) acc[u][w] += a[u] * b[w];
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int64_t gi = i0 + ty * 4 + u;
        if (gi >= M) continue;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int64_t gj = j0 + tx * 4 + w;
            if (gj >= Ncols) continue;
            float v = acc[u][w];
            if (bias) v += bias[gj];
            float * c = Cm + gi * ldc + gj;
            *c = accumulate ? *c + v : v;
        }
    }
}

// dbias[o] += sum_n dout[n, o]: block (32 columns) x (32 row groups).
__global__ void column_sum_kernel(float * dbias, const float * dout, int64_t N, int64_t OC) {
    __shared__ float sh[32][33];
    const int64_t o = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (o < OC)
        for (int64_t n = threadIdx.y; n < N; n += 32) s += dout[n * OC + o];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float t = 0.0f;
        for (int g = 0; g < 32; ++g) t += sh[g][threadIdx.x];
        dbias[o] += t;
    }
}

// The TF32 tensor-core twin of gemm_kernel (same arguments, same tiles). Warp w owns rows 16 * (w / 2) and
// columns 32 * (w % 2) of the block's tile: one A fragment, two B fragments and two accumulators per 8-deep step.
constexpr int TK = 32, kPad = 8, kLd = BM + kPad;  // kLd * 4 bytes keeps every fragment pointer 32-byte aligned

template <typename BSrc>
__global__ void __launch_bounds__(kThreads)
    gemm_tf32_kernel(int64_t M, int64_t Ncols, int64_t K, const float * __restrict__ A, int64_t ai, int64_t ak, BSrc Bm,
                     float * __restrict__ Cm, int64_t ldc, bool accumulate, const float * __restrict__ bias,
                     bool rows_on_x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    __shared__ __align__(32) float As[TK][kLd];  // As[k][i] = A(i0 + i, k0 + k): a column-major 64 x TK block
    __shared__ __align__(32) float Bs[TK][kLd];  // Bs[k][j] = B(k0 + k, j0 + j): a row-major TK x 64 block
    __shared__ __align__(32) float Cs[BM][kLd];
    const int tid = threadIdx.x, warp = tid / 32, wr = warp / 2, wc = warp % 2;
    const int64_t i0 = (int64_t)(rows_on_x ? blockIdx.x : blockIdx.y) * BM,
                  j0 = (int64_t)(rows_on_x ? blockIdx.y : blockIdx.x) * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += TK) {
        load_slabs<TK, kLd>(As, Bs, M, Ncols, K, A, ai, ak, Bm, i0, j0, k0,
                            [](float v) { return wmma::__float_to_tf32(v); });
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < TK; ks += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> a;
            wmma::load_matrix_sync(a, &As[ks][wr * 16], kLd);
#pragma unroll
            for (int f = 0; f < 2; ++f) {
                wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
                wmma::load_matrix_sync(b, &Bs[ks][wc * 32 + f * 16], kLd);
                wmma::mma_sync(acc[f], a, b, acc[f]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int f = 0; f < 2; ++f)
        wmma::store_matrix_sync(&Cs[wr * 16][wc * 32 + f * 16], acc[f], kLd, wmma::mem_row_major);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < (BM * BN) / kThreads; ++r) {
        const int e = tid + r * kThreads, ii = e / BN, jj = e % BN;
        const int64_t gi = i0 + ii, gj = j0 + jj;
        if (gi >= M || gj >= Ncols) continue;
        float v = Cs[ii][jj];
        if (bias) v += bias[gj];
        float * c = Cm + gi * ldc + gj;
        *c = accumulate ? *c + v : v;
    }
#else
    __trap();  // (require_tf32 refuses such a device before any launch; a build for an older arch must not run silently)
#endif
}

// TF32 tensor cores need compute capability 8.0 (the kernel is empty below it): refused before a launch, naming the device.
void require_tf32(const char * what) {
    int dev = 0, major = 0, minor = 0;
    MAPORL_CUDA_THROW(cudaGetDevice(&dev));
    MAPORL_CUDA_THROW(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MAPORL_CUDA_THROW(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major < 8)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "%s: matmul precision 'high' (TF32) needs compute capability 8.0 or newer; device %d is %d.%d "
                    "(setMatmulPrecision('highest'))",
                    what, dev, major, minor);
}

template <typename BSrc>
void gemm(int64_t M, int64_t Ncols, int64_t K, const float * A, int64_t ai, int64_t ak, BSrc B, float * C, int64_t ldc,
          bool accumulate, const float * bias, const char * what) {
    if (M <= 0 || Ncols <= 0) return;
    // The larger tile count goes on gridDim.x (2^31 - 1 blocks), the other on y (65,535): the LM head's backward has
    // the vocabulary as its rows, which on y would stop at 65,535 x 64 = 4.2M.
    const int64_t rt = (M + BM - 1) / BM, ct = (Ncols + BN - 1) / BN;
    const bool rows_on_x = rt > ct;
    const unsigned gx = grid_dim(rows_on_x ? rt : ct, what), gy = grid_dim(rows_on_x ? ct : rt, what, kGridYZ);
    if (maporl_get_matmul_precision() == MAPORL_MATMUL_HIGH) {
        require_tf32(what);
        gemm_tf32_kernel<BSrc>
            <<<dim3(gx, gy), kThreads>>>(M, Ncols, K, A, ai, ak, B, C, ldc, accumulate, bias, rows_on_x);
    } else
        gemm_kernel<BSrc><<<dim3(gx, gy), kThreads>>>(M, Ncols, K, A, ai, ak, B, C, ldc, accumulate, bias, rows_on_x);
    MAPORL_CUDA_LAUNCHED(what);
}

}  // namespace

void matmul_forward(float * out, const float * inp, const float * weight, const float * bias, int64_t N, int64_t C,
                    int64_t OC) {
    // out[n, o] = bias[o] + sum_c inp[n, c] weight[o, c]
    gemm(N, OC, C, inp, C, 1, FloatB{weight, 1, C}, out, OC, false, bias, "matmul_forward");
}

void matmul_backward(float * dinp, float * dweight, float * dbias, const float * dout, const float * inp,
                     const float * weight, int64_t N, int64_t C, int64_t OC) {
    // dinp[n, c] += sum_o dout[n, o] weight[o, c]
    gemm(N, C, OC, dout, OC, 1, FloatB{weight, C, 1}, dinp, C, true, nullptr, "matmul_backward");
    // dweight[o, c] += sum_n dout[n, o] inp[n, c] (null: a frozen weight, as a base under LoRA)
    if (dweight) gemm(OC, C, N, dout, 1, OC, FloatB{inp, C, 1}, dweight, C, true, nullptr, "matmul_backward");
    if (dbias && N > 0 && OC > 0) {
        column_sum_kernel<<<grid_dim((OC + 31) / 32, "matmul_backward"), dim3(32, 32)>>>(dbias, dout, N, OC);
        MAPORL_CUDA_LAUNCHED("matmul_backward");
    }
}

void matmul_forward_bf16(float * out, const float * inp, const uint16_t * weight, const float * bias, int64_t N,
                         int64_t C, int64_t OC) {
    gemm(N, OC, C, inp, C, 1, Bf16B{weight, 1, C}, out, OC, false, bias, "matmul_forward_bf16");
}

void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * weight, int64_t N, int64_t C,
                                int64_t OC) {
    gemm(N, C, OC, dout, OC, 1, Bf16B{weight, C, 1}, dinp, C, true, nullptr, "matmul_backward_input_bf16");
}

void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd, int64_t N,
                              int64_t C, int64_t OC) {
    gemm(N, C, OC, dout, OC, 1, Q8B{pq, pd, C}, dinp, C, true, nullptr, "matmul_backward_input_q8");
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
