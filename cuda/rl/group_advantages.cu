// group_advantages.cu: CUDA group-relative advantages and the row broadcast. Group statistics go into tables
// indexed by (id - min id) with double atomics (two passes: n/sum/max, then squared deviations), then the
// same per-group fold as the CPU (native/rl/group_advantages.h) and an elementwise write. NOTE(determinism):
// the atomics make the last bits of the group sums depend on scheduling; results agree with the CPU to
// rounding but can differ run to run in the last bits. Ids must span at most 2N + 1024 values here (the CPU
// also handles arbitrary ids through a sort); wider ids are MAPORL_ERR_INVALID_ARG with a hint.
#include <cstdint>
#include <climits>
#include <cmath>
#include <limits>

#include "native/rl/gae_scan.h"  // whiten_mean, whiten_from_m2
#include "native/rl/group_advantages.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

__device__ __forceinline__ bool counted(float s, int excl) { return !(excl && isnan(s)); }

__global__ void minmax_kernel(const int32_t * __restrict__ g, int64_t N, int * __restrict__ mm) {
    int lo = INT_MAX, hi = INT_MIN;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        lo = min(lo, g[i]);
        hi = max(hi, g[i]);
    }
    atomicMin(&mm[0], lo);
    atomicMax(&mm[1], hi);
}

__device__ void atomic_max_double(double * addr, double v) {
    unsigned long long * p = (unsigned long long *)addr;
    unsigned long long old = *p, assumed;
    do {
        assumed = old;
        const double cur = __longlong_as_double((long long)assumed);
        if (isnan(cur) || (!isnan(v) && v <= cur)) return;
        old = atomicCAS(p, assumed, (unsigned long long)__double_as_longlong(v));
    } while (assumed != old);
}

__global__ void init_kernel(Slot * t, int64_t K, double aux0) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K; k += (int64_t)gridDim.x * blockDim.x)
        t[k] = Slot{0.0, 0.0, 0.0, aux0};
}

__global__ void accumulate_kernel(const float * __restrict__ s, const int32_t * __restrict__ g, int64_t N, int min_id,
                                  Slot * __restrict__ t, int excl, int use_max) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = s[i];
        if (!counted(x, excl)) continue;
        Slot & slot = t[(int64_t)g[i] - min_id];
        atomicAdd(&slot.n, 1.0);
        atomicAdd(&slot.sum, (double)x);
        if (use_max) atomic_max_double(&slot.aux, (double)x);
    }
}

__global__ void mean_kernel(Slot * t, int64_t K) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K; k += (int64_t)gridDim.x * blockDim.x)
        t[k].mean = t[k].n > 0 ? t[k].sum / t[k].n : 0.0;
}

__global__ void deviation_kernel(const float * __restrict__ s, const int32_t * __restrict__ g, int64_t N, int min_id,
                                 Slot * __restrict__ t, int excl) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = s[i];
        if (!counted(x, excl)) continue;
        Slot & slot = t[(int64_t)g[i] - min_id];
        const double d = (double)x - slot.mean;
        atomicAdd(&slot.aux, d * d);
    }
}

__global__ void write_kernel(const float * __restrict__ s, const int32_t * __restrict__ g, int64_t N, int min_id,
                             const Slot * __restrict__ t, maporl_group_params p, float * __restrict__ out) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = s[i];
        const Fold f = fold(t[(int64_t)g[i] - min_id], p);
        out[i] = (!counted(x, p.nan_exclude) || f.factor == 0.0) ? 0.0f : (float)(((double)x - f.center) * f.factor);
    }
}

// Whitening over the batch in two exact passes (the CPU takes the second one only where one pass loses digits):
// per-block partials in fixed order, reduced by one thread. Without `center`: (sum w a, -, sum w); with it:
// (-, sum w (a - center)^2, -).
__global__ void whiten_partials_kernel(const float * __restrict__ a, const float * __restrict__ s,
                                       const float * __restrict__ w, int64_t N, int excl,
                                       const double * __restrict__ center, double * __restrict__ part) {
    __shared__ double sh[3][256];
    double s1 = 0, s2 = 0, sw = 0;
    const double c = center ? center[0] : 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const double wi = counted(s[i], excl) ? (w ? (double)w[i] : 1.0) : 0.0;
        if (wi == 0.0) continue;
        if (center) {
            s2 += wi * ((double)a[i] - c) * ((double)a[i] - c);
        } else {
            s1 += wi * a[i];
            sw += wi;
        }
    }
    sh[0][threadIdx.x] = s1;
    sh[1][threadIdx.x] = s2;
    sh[2][threadIdx.x] = sw;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k)
            for (int q = 0; q < 3; ++q) sh[q][threadIdx.x] += sh[q][threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int q = 0; q < 3; ++q) part[3 * blockIdx.x + q] = sh[q][0];
}

// st[0] = the mean, st[2] = the total weight (first pass); then st[1] = rstd from the deviations (second pass).
__global__ void whiten_mean_kernel(const double * __restrict__ part, int blocks, double * __restrict__ st) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double s1 = 0, sw = 0;
    for (int b = 0; b < blocks; ++b) {
        s1 += part[3 * b];
        sw += part[3 * b + 2];
    }
    st[0] = whiten_mean(s1, sw);
    st[2] = sw;
}

__global__ void whiten_finish_kernel(const double * __restrict__ part, int blocks, int mode, double * __restrict__ st) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double m2 = 0;
    for (int b = 0; b < blocks; ++b) m2 += part[3 * b + 1];
    st[1] = whiten_from_m2(st[0], m2, st[2], mode == 2).rstd;
}

__global__ void whiten_write_kernel(float * __restrict__ a, const float * __restrict__ s, const float * __restrict__ w,
                                    int64_t N, int excl, const double * __restrict__ st) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        const double wi = counted(s[i], excl) ? (w ? (double)w[i] : 1.0) : 0.0;
        a[i] = wi == 0.0 ? 0.0f : (float)(((double)a[i] - st[0]) * st[1]);
    }
}

template <typename M>
__global__ void broadcast_kernel(const float * __restrict__ v, const M * __restrict__ m, int64_t N, int64_t T,
                                 float * __restrict__ out, unsigned long long * __restrict__ bad) {
    const int64_t n = N * T;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const M x = m[i];
        if (!(x == M(0) || x == M(1))) atomicMin(bad, (unsigned long long)i);
        out[i] = x == M(1) ? v[i / T] : 0.0f;
    }
}

// The first weight that is not finite and >= 0 (the CPU checks them before anything else).
__global__ void weights_kernel(const float * __restrict__ w, int64_t N, unsigned long long * __restrict__ bad) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x)
        if (!group_weight_ok(w[i])) atomicMin(bad, (unsigned long long)i);
}

unsigned grid_for(int64_t n) { return (unsigned)std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

maporl_status group_advantages_cuda(const float * scores, const int32_t * groups, const float * weights, int64_t N,
                                    const maporl_group_params & p, float * out) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("group_advantages"));
    if (N == 0) return MAPORL_OK;
    if (weights != nullptr) {
        DeviceBuffer bad_buf;
        MAPORL_RETURN_IF_ERROR(bad_buf.alloc(sizeof(unsigned long long)));
        MAPORL_CUDA_CALL(cudaMemset(bad_buf.ptr, 0xff, sizeof(unsigned long long)));
        weights_kernel<<<grid_for(N), 256>>>(weights, N, bad_buf.as<unsigned long long>());
        MAPORL_CUDA_CALL(cudaGetLastError());
        unsigned long long bad = 0;
        MAPORL_CUDA_CALL(cudaMemcpy(&bad, bad_buf.ptr, sizeof bad, cudaMemcpyDeviceToHost));
        if (bad != ~0ull) {
            float w = 0;
            MAPORL_CUDA_CALL(cudaMemcpy(&w, weights + bad, sizeof w, cudaMemcpyDeviceToHost));
            return set_error(MAPORL_ERR_INVALID_ARG, "weights: expected finite values >= 0, got %g at index %llu",
                             (double)w, bad);
        }
    }
    DeviceBuffer mm, table;
    MAPORL_RETURN_IF_ERROR(mm.alloc(2 * sizeof(int)));
    const int init[2] = {INT_MAX, INT_MIN};
    MAPORL_CUDA_CALL(cudaMemcpy(mm.ptr, init, sizeof init, cudaMemcpyHostToDevice));
    minmax_kernel<<<grid_for(N), 256>>>(groups, N, mm.as<int>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    int lohi[2];
    MAPORL_CUDA_CALL(cudaMemcpy(lohi, mm.ptr, sizeof lohi, cudaMemcpyDeviceToHost));
    const int64_t K = (int64_t)lohi[1] - lohi[0] + 1;
    if (K > 2 * N + 1024)
        return set_error(
            MAPORL_ERR_INVALID_ARG,
            "groups: the CUDA path needs ids within a range of 2N + 1024 = %lld values, got ids from %d to %d "
            "(remap them to 0..G-1, or use device 'cpu')",
            (long long)(2 * N + 1024), lohi[0], lohi[1]);
    const bool use_max = p.baseline == MAPORL_BASELINE_MAX;
    MAPORL_RETURN_IF_ERROR(table.alloc(sizeof(Slot) * (size_t)K));
    init_kernel<<<grid_for(K), 256>>>(table.as<Slot>(), K, use_max ? -INFINITY : 0.0);
    accumulate_kernel<<<grid_for(N), 256>>>(scores, groups, N, lohi[0], table.as<Slot>(), p.nan_exclude, use_max);
    mean_kernel<<<grid_for(K), 256>>>(table.as<Slot>(), K);
    if (p.scale_by_std)
        deviation_kernel<<<grid_for(N), 256>>>(scores, groups, N, lohi[0], table.as<Slot>(), p.nan_exclude);
    write_kernel<<<grid_for(N), 256>>>(scores, groups, N, lohi[0], table.as<Slot>(), p, out);
    MAPORL_CUDA_CALL(cudaGetLastError());
    if (p.whiten) {
        DeviceBuffer part, st;
        const unsigned blocks = grid_for(N);
        MAPORL_RETURN_IF_ERROR(part.alloc(sizeof(double) * 3 * blocks));
        MAPORL_RETURN_IF_ERROR(st.alloc(sizeof(double) * 3));
        whiten_partials_kernel<<<blocks, 256>>>(out, scores, weights, N, p.nan_exclude, nullptr, part.as<double>());
        whiten_mean_kernel<<<1, 32>>>(part.as<double>(), (int)blocks, st.as<double>());
        whiten_partials_kernel<<<blocks, 256>>>(out, scores, weights, N, p.nan_exclude, st.as<double>(),
                                                part.as<double>());
        whiten_finish_kernel<<<1, 32>>>(part.as<double>(), (int)blocks, p.whiten, st.as<double>());
        whiten_write_kernel<<<grid_for(N), 256>>>(out, scores, weights, N, p.nan_exclude, st.as<double>());
        MAPORL_CUDA_CALL(cudaGetLastError());
        MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    }
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

maporl_status broadcast_rows_cuda(const float * values, const void * mask, maporl_mask_type mask_type, int64_t N,
                                  int64_t T, float * out) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("broadcast_rows"));
    if (N == 0 || T == 0) return MAPORL_OK;
    DeviceBuffer bad_buf;
    MAPORL_RETURN_IF_ERROR(bad_buf.alloc(sizeof(unsigned long long)));
    MAPORL_CUDA_CALL(cudaMemset(bad_buf.ptr, 0xff, sizeof(unsigned long long)));
    if (mask_type == MAPORL_MASK_U8)
        broadcast_kernel<uint8_t>
            <<<grid_for(N * T), 256>>>(values, (const uint8_t *)mask, N, T, out, bad_buf.as<unsigned long long>());
    else
        broadcast_kernel<float>
            <<<grid_for(N * T), 256>>>(values, (const float *)mask, N, T, out, bad_buf.as<unsigned long long>());
    MAPORL_CUDA_CALL(cudaGetLastError());
    unsigned long long bad = 0;
    MAPORL_CUDA_CALL(cudaMemcpy(&bad, bad_buf.ptr, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad != ~0ull)
        return set_error(MAPORL_ERR_INVALID_ARG,
                         "mask: expected 0 or 1 at every position, got another value at index %llu", bad);
    return MAPORL_OK;
}

}  // namespace maporl
