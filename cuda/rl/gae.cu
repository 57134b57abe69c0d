// gae.cu: CUDA GAE, one warp per row. Each lane owns a contiguous chunk of T/32 steps: pass 1 builds the
// chunk's carry map (native/rl/gae_scan.h), a warp suffix scan over the 32 maps gives every lane its incoming
// carry, pass 2 reruns the chunk with that carry and writes the outputs. Whitening: per-row partial sums
// (double), a one-block reduction in fixed order (deterministic), then an elementwise rewrite.
// REINFORCE++ returns (reinforce_returns_cuda) live here too, to share the whitening kernels.
// The CPU kernels (native/rl/gae.cpp) are the reference; test/native/rl/test_gae.cpp compares the two.
#include <algorithm>
#include <cstdint>

#include "native/rl/gae.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFull = 0xffffffffu;

template <typename M>
__device__ __forceinline__ bool mask_bad(M m);
template <>
__device__ __forceinline__ bool mask_bad<uint8_t>(uint8_t m) {
    return m > 1;
}
template <>
__device__ __forceinline__ bool mask_bad<float>(float m) {
    return !(m == 0.0f || m == 1.0f);
}

__device__ __forceinline__ GaeCarryMap<float> shfl_down_map(GaeCarryMap<float> m, int d) {
    GaeCarryMap<float> o;
    o.has = __shfl_down_sync(kFull, m.has, d);
    o.nv = __shfl_down_sync(kFull, m.nv, d);
    o.c = __shfl_down_sync(kFull, m.c, d);
    o.al = __shfl_down_sync(kFull, m.al, d);
    o.an = __shfl_down_sync(kFull, m.an, d);
    return o;
}

template <typename M>
__global__ void gae_kernel(const float * __restrict__ r, const float * __restrict__ v, const M * __restrict__ mask,
                           int64_t B, int64_t T, float gamma, float gl, float * __restrict__ adv,
                           float * __restrict__ ret, double * __restrict__ partials,  // [3, B] or null
                           unsigned long long * __restrict__ bad) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (row >= B) return;  // whole warps exit together
    const int64_t chunk = (T + 31) / 32;
    const int64_t t_begin = ::min(T, (int64_t)lane * chunk), t_end = ::min(T, t_begin + chunk);
    const float * rr = r + row * T;
    const float * vv = v + row * T;
    const M * mm = mask + row * T;

    GaeCarryMap<float> map = gae_map_identity<float>();
    for (int64_t t = t_end - 1; t >= t_begin; --t) {
        const M m = mm[t];
        if (mask_bad(m)) atomicMin(bad, (unsigned long long)(row * T + t));
        if (m == M(1)) map = gae_map_step<float>(map, rr[t], vv[t], 1, gamma, gl);
    }
    // Inclusive suffix scan: lane i ends with the map of chunks i..31.
    for (int d = 1; d < 32; d <<= 1) {
        GaeCarryMap<float> other = shfl_down_map(map, d);
        if (lane + d < 32) map = gae_map_combine<float>(map, other);
    }
    GaeCarryMap<float> right = shfl_down_map(map, 1);
    float nv = 0.0f, lg = 0.0f;
    if (lane < 31) {
        nv = right.has ? right.nv : 0.0f;
        lg = right.c;  // the map applied to the zero carry after the last step
    }
    double s = 0.0, s2 = 0.0, cnt = 0.0;
    float * aa = adv + row * T;
    float * RR = ret + row * T;
    for (int64_t t = t_end - 1; t >= t_begin; --t) {
        if (mm[t] == M(1)) {
            const float vt = vv[t];
            const float delta = rr[t] + gamma * nv - vt;
            lg = delta + gl * lg;
            nv = vt;
            aa[t] = lg;
            RR[t] = lg + vt;
            s += lg;
            s2 += (double)lg * lg;
            cnt += 1.0;
        } else {
            aa[t] = 0.0f;
            RR[t] = 0.0f;
        }
    }
    if (partials != nullptr) {
        for (int d = 16; d > 0; d >>= 1) {
            s += __shfl_down_sync(kFull, s, d);
            s2 += __shfl_down_sync(kFull, s2, d);
            cnt += __shfl_down_sync(kFull, cnt, d);
        }
        if (lane == 0) {
            partials[row] = s;
            partials[B + row] = s2;
            partials[2 * B + row] = cnt;
        }
    }
}

// One block: sums the per-row partials in a fixed order and writes the mean and the count to stats[0], stats[2].
__global__ void whiten_stats_kernel(const double * __restrict__ partials, int64_t B, double * __restrict__ stats) {
    __shared__ double sh[3][256];
    double s = 0, s2 = 0, n = 0;
    for (int64_t b = threadIdx.x; b < B; b += blockDim.x) {
        s += partials[b];
        s2 += partials[B + b];
        n += partials[2 * B + b];
    }
    sh[0][threadIdx.x] = s;
    sh[1][threadIdx.x] = s2;
    sh[2][threadIdx.x] = n;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            sh[0][threadIdx.x] += sh[0][threadIdx.x + k];
            sh[1][threadIdx.x] += sh[1][threadIdx.x + k];
            sh[2][threadIdx.x] += sh[2][threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        stats[0] = whiten_mean(sh[0][0], sh[2][0]);
        stats[2] = sh[2][0];
    }
}

// The second, exact pass (the CPU takes it only where one pass loses digits): per-block sums of (x - mean)^2 over the
// valid tokens, kDevBlocks blocks in a fixed grid; then one thread adds them in order and writes stats[1] = rstd.
constexpr int kDevBlocks = 1024;

template <typename M>
__global__ void whiten_dev_kernel(const float * __restrict__ adv, const M * __restrict__ mask, int64_t n,
                                  const double * __restrict__ stats, double * __restrict__ dev) {
    __shared__ double sh[32];
    const double mean = stats[0];
    double d = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (mask[i] == M(1)) d += ((double)adv[i] - mean) * ((double)adv[i] - mean);
    d = block_sum(d, sh);
    if (threadIdx.x == 0) dev[blockIdx.x] = d;
}

__global__ void whiten_rstd_kernel(const double * __restrict__ dev, double * __restrict__ stats) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double m2 = 0;
    for (int b = 0; b < kDevBlocks; ++b) m2 += dev[b];
    stats[1] = whiten_from_m2(stats[0], m2, stats[2], 0).rstd;
}

template <typename M>
__global__ void whiten_apply_kernel(float * __restrict__ adv, const M * __restrict__ mask, int64_t n,
                                    const double * __restrict__ stats) {
    if (stats[2] == 0.0) return;  // no valid token: nothing to whiten
    const double mean = stats[0], rstd = stats[1];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (mask[i] == M(1)) adv[i] = (float)(((double)adv[i] - mean) * rstd);
}

// Temporaries of a scan: the bad-mask index (set to ~0) and, with whitening, per-row partials and the stats.
maporl_status scan_buffers(int64_t B, bool whiten, DeviceBuffer & bad_buf, DeviceBuffer & partials,
                           DeviceBuffer & stats) {
    MAPORL_RETURN_IF_ERROR(bad_buf.alloc(sizeof(unsigned long long)));
    MAPORL_CUDA_CALL(cudaMemset(bad_buf.ptr, 0xff, sizeof(unsigned long long)));
    if (whiten) {
        MAPORL_RETURN_IF_ERROR(partials.alloc(sizeof(double) * 3 * (size_t)B));
        MAPORL_RETURN_IF_ERROR(stats.alloc(sizeof(double) * 3));
    }
    return MAPORL_OK;
}

// After a scan kernel: reports the first bad mask value (bad_buf holds its index or ~0), then, when partials
// is given, whitens A over the unmasked tokens, and waits for the device.
template <typename M>
maporl_status finish_scan(const DeviceBuffer & bad_buf, const M * mask, int64_t B, int64_t T, double * partials,
                          double * stats, float * A) {
    MAPORL_CUDA_CALL(cudaGetLastError());
    unsigned long long bad = 0;
    MAPORL_CUDA_CALL(cudaMemcpy(&bad, bad_buf.ptr, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad != ~0ull) {
        M value;
        MAPORL_CUDA_CALL(cudaMemcpy(&value, mask + bad, sizeof value, cudaMemcpyDeviceToHost));
        return set_error(
            MAPORL_ERR_INVALID_ARG, "mask: expected 0 or 1 at every position, got %g at index %llu (row %lld, t %lld)",
            (double)value, bad, (long long)(bad / (unsigned long long)T), (long long)(bad % (unsigned long long)T));
    }
    if (partials != nullptr) {
        whiten_stats_kernel<<<1, 256>>>(partials, B, stats);
        MAPORL_CUDA_CALL(cudaGetLastError());
        const int64_t n = B * T;
        DeviceBuffer dev;
        MAPORL_RETURN_IF_ERROR(dev.alloc(sizeof(double) * kDevBlocks));
        whiten_dev_kernel<M><<<kDevBlocks, 256>>>(A, mask, n, stats, dev.as<double>());
        whiten_rstd_kernel<<<1, 32>>>(dev.as<double>(), stats);
        MAPORL_CUDA_CALL(cudaGetLastError());
        whiten_apply_kernel<M><<<(unsigned)std::min<int64_t>((n + 255) / 256, 65535), 256>>>(A, mask, n, stats);
        MAPORL_CUDA_CALL(cudaGetLastError());
    }
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

template <typename M>
maporl_status gae_cuda_typed(const float * r, const float * v, const M * mask, int64_t B, int64_t T, float gamma,
                             float lambda, bool whiten, float * adv, float * ret) {
    DeviceBuffer bad_buf, partials, stats;
    MAPORL_RETURN_IF_ERROR(scan_buffers(B, whiten, bad_buf, partials, stats));
    const int64_t blocks = (B + kWarpsPerBlock - 1) / kWarpsPerBlock;
    MAPORL_RETURN_IF_ERROR(check_grid(blocks, "gae: rows (B)"));
    gae_kernel<M><<<(unsigned)blocks, kWarpsPerBlock * 32>>>(r, v, mask, B, T, gamma, gamma * lambda, adv, ret,
                                                             partials.as<double>(), bad_buf.as<unsigned long long>());
    return finish_scan<M>(bad_buf, mask, B, T, partials.as<double>(), stats.as<double>(), adv);
}

// REINFORCE++ returns: one thread per row, the plain recursion (rows are independent; a chunked warp scan as
// in gae_kernel is the next step if this shows up in profiles). Per-row whitening partials as above.
template <typename M>
__global__ void returns_kernel(const float * __restrict__ r, const M * __restrict__ mask, int64_t B, int64_t T,
                               float gamma, float * __restrict__ G, float * __restrict__ A,
                               double * __restrict__ partials, unsigned long long * __restrict__ bad) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= B) return;
    const float * rr = r + row * T;
    const M * mm = mask + row * T;
    float run = 0.0f;
    double s = 0.0, s2 = 0.0, cnt = 0.0;
    for (int64_t t = T - 1; t >= 0; --t) {
        const M m = mm[t];
        if (mask_bad(m)) atomicMin(bad, (unsigned long long)(row * T + t));
        if (m == M(1)) {
            run = rr[t] + gamma * run;
            s += run;
            s2 += (double)run * run;
            cnt += 1.0;
        } else {
            run = 0.0f;
        }
        const float out = m == M(1) ? run : 0.0f;
        G[row * T + t] = out;
        A[row * T + t] = out;
    }
    if (partials != nullptr) {
        partials[row] = s;
        partials[B + row] = s2;
        partials[2 * B + row] = cnt;
    }
}

template <typename M>
maporl_status returns_cuda_typed(const float * r, const M * mask, int64_t B, int64_t T, float gamma, bool whiten,
                                 float * G, float * A) {
    DeviceBuffer bad_buf, partials, stats;
    MAPORL_RETURN_IF_ERROR(scan_buffers(B, whiten, bad_buf, partials, stats));
    MAPORL_RETURN_IF_ERROR(check_grid((B + 255) / 256, "reinforce_returns: rows (B)"));
    returns_kernel<M><<<(unsigned)((B + 255) / 256), 256>>>(r, mask, B, T, gamma, G, A, partials.as<double>(),
                                                            bad_buf.as<unsigned long long>());
    return finish_scan<M>(bad_buf, mask, B, T, partials.as<double>(), stats.as<double>(), A);
}

}  // namespace

maporl_status reinforce_returns_cuda(const float * rewards, const void * mask, maporl_mask_type mask_type, int64_t B,
                                     int64_t T, float gamma, bool whiten, float * returns, float * advantages) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("reinforce_returns"));
    if (B == 0 || T == 0) return MAPORL_OK;
    if (mask_type == MAPORL_MASK_U8)
        return returns_cuda_typed(rewards, static_cast<const uint8_t *>(mask), B, T, gamma, whiten, returns,
                                  advantages);
    return returns_cuda_typed(rewards, static_cast<const float *>(mask), B, T, gamma, whiten, returns, advantages);
}

maporl_status gae_cuda(const float * rewards, const float * values, const void * mask, maporl_mask_type mask_type,
                       int64_t B, int64_t T, float gamma, float lambda, bool whiten, float * advantages,
                       float * returns) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("gae"));
    if (B == 0 || T == 0) return MAPORL_OK;
    if (mask_type == MAPORL_MASK_U8)
        return gae_cuda_typed(rewards, values, static_cast<const uint8_t *>(mask), B, T, gamma, lambda, whiten,
                              advantages, returns);
    return gae_cuda_typed(rewards, values, static_cast<const float *>(mask), B, T, gamma, lambda, whiten, advantages,
                          returns);
}

}  // namespace maporl
