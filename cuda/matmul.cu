// matmul.cu: CUDA linear layer out = inp @ weight^T + bias and its backward (native/gpt_cuda.h; CPU reference
// native/matmul.cpp). One tiled SGEMM serves the three products through strides: C[i, j] (+)= sum_k A(i, k) B(k, j)
// with A(i, k) = A[i * ai + k * ak] and B(k, j) = B[k * bk + j * bj]: 64 x 64 output tiles, 16-deep k slabs in
// shared memory (loaded along whichever index is contiguous, so global reads coalesce), 4 x 4 outputs per thread,
// k summed in ascending order (deterministic). dbias is a column sum over a 32 x 32 block: 32 row groups each
// summed in order, then added in group order.
// NOTE(perf): plain FP32 SIMT; tensor cores (TF32 / BF16 mma) and double buffering are the upgrades. Not yet run
// on a GPU in this project's CI; scripts/device-check.sh times it.
#include "../native/gpt_cuda.h"
#include "common.cuh"

namespace maporl {
namespace gpt {
namespace cuda {
namespace {

constexpr int BM = 64, BN = 64, BK = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads) gemm_kernel(int64_t M, int64_t Ncols, int64_t K, const float * __restrict__ A,
                                                        int64_t ai, int64_t ak, const float * __restrict__ Bm, int64_t bk,
                                                        int64_t bj, float * __restrict__ Cm, int64_t ldc, bool accumulate,
                                                        const float * __restrict__ bias) {
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t i0 = (int64_t)blockIdx.y * BM, j0 = (int64_t)blockIdx.x * BN;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < (BM * BK) / kThreads; ++r) {
            const int e = tid + r * kThreads;
            int ii, kk;
            if (ak == 1) { kk = e % BK; ii = e / BK; } else { ii = e % BM; kk = e / BM; }
            const int64_t gi = i0 + ii, gk = k0 + kk;
            As[kk][ii] = (gi < M && gk < K) ? A[gi * ai + gk * ak] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < (BN * BK) / kThreads; ++r) {
            const int e = tid + r * kThreads;
            int jj, kk;
            if (bj == 1) { jj = e % BN; kk = e / BN; } else { kk = e % BK; jj = e / BK; }
            const int64_t gj = j0 + jj, gk = k0 + kk;
            Bs[kk][jj] = (gj < Ncols && gk < K) ? Bm[gk * bk + gj * bj] : 0.0f;
        }
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

void gemm(int64_t M, int64_t Ncols, int64_t K, const float * A, int64_t ai, int64_t ak, const float * B, int64_t bk,
          int64_t bj, float * C, int64_t ldc, bool accumulate, const float * bias, const char * what) {
    if (M <= 0 || Ncols <= 0) return;
    const int64_t gy = (M + BM - 1) / BM, gx = (Ncols + BN - 1) / BN;
    if (gy > 65535) throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected at most %d rows, got %lld", what, 65535 * BM, (long long)M);
    gemm_kernel<<<dim3((unsigned)gx, (unsigned)gy), kThreads>>>(M, Ncols, K, A, ai, ak, B, bk, bj, C, ldc, accumulate, bias);
    MAPORL_CUDA_LAUNCHED(what);
}

}  // namespace

void matmul_forward(float * out, const float * inp, const float * weight, const float * bias, int64_t N, int64_t C, int64_t OC) {
    // out[n, o] = bias[o] + sum_c inp[n, c] weight[o, c]
    gemm(N, OC, C, inp, C, 1, weight, 1, C, out, OC, false, bias, "matmul_forward");
}

void matmul_backward(float * dinp, float * dweight, float * dbias, const float * dout, const float * inp, const float * weight,
                     int64_t N, int64_t C, int64_t OC) {
    // dinp[n, c] += sum_o dout[n, o] weight[o, c]
    gemm(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C, true, nullptr, "matmul_backward");
    // dweight[o, c] += sum_n dout[n, o] inp[n, c]
    gemm(OC, C, N, dout, 1, OC, inp, C, 1, dweight, C, true, nullptr, "matmul_backward");
    if (dbias && N > 0 && OC > 0) {
        column_sum_kernel<<<(unsigned)((OC + 31) / 32), dim3(32, 32)>>>(dbias, dout, N, OC);
        MAPORL_CUDA_LAUNCHED("matmul_backward");
    }
}

}  // namespace cuda
}  // namespace gpt
}  // namespace maporl
