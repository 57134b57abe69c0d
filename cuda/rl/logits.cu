// logits.cu: CUDA selective log-softmax and the fused logits -> loss -> dlogits path. One block per row
// (vocabulary strided over the threads): pass A keeps an online (max, sum of exp, entropy sum) per thread and
// merges them across the block; the loss step is policy_loss_cuda on the [B*T] log-probs; pass C rereads the
// row and writes (1[v = y] - p_v) * dlogp / temp + the entropy term, in place if asked. Targets are checked in
// pass A and the error returned before pass C writes anything. NOTE(perf): pass A + pass C read each row
// twice, as Liger's Triton kernel does; one block per row leaves SMs idle for N < ~132 rows (vocab splitting
// is the upgrade). Logits are float32 or bfloat16 (widened as loaded). The CPU path (native/rl/logits.cpp) is the
// reference.
#include <cmath>
#include <cstdint>
#include <vector>

#include "native/rl/logits_online.h"
#include "native/rl/policy_loss.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

// A logit as float32: float32 logits as they are, bfloat16 ones (uint16 bit patterns) widened exactly.
__device__ __forceinline__ float logit(const float * z, int64_t i) { return z[i]; }
__device__ __forceinline__ float logit(const uint16_t * z, int64_t i) { return __uint_as_float((unsigned)z[i] << 16); }

struct RowSoftmax {
    double lse;  // log-sum-exp of the tempered row, in double (the log-prob subtracts it in double, as the CPU)
    float H;     // entropy (0 when not asked)
};

// Softmax statistics of row z (length V) over the block (native/rl/logits_online.h: each thread's online state over
// its strided share, warp shuffles down, then the warps in order); every thread gets them. NaN for a row with a NaN
// or +Inf logit, or of only -Inf.
template <typename In>
__device__ RowSoftmax row_softmax(const In * __restrict__ z, int64_t V, float temp, bool entropy) {
    __shared__ OnlineSoftmax sh[32];
    OnlineSoftmax o = online_softmax_init();
    bool nan = false;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float zv = logit(z, v);
        const float x = temp == 1.0f ? zv : zv / temp;
        if (isnan(x) || x == INFINITY) {
            nan = true;
            continue;
        }
        online_softmax_push(o, x, entropy);
    }
    for (int d = 16; d > 0; d >>= 1) {
        OnlineSoftmax p{__shfl_down_sync(kFull, o.m, d), __shfl_down_sync(kFull, o.s, d),
                        __shfl_down_sync(kFull, o.t, d)};
        o = online_softmax_merge(o, p);
    }
    const int any_nan = __syncthreads_or(nan ? 1 : 0);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = o;
    __syncthreads();
    OnlineSoftmax r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) r = online_softmax_merge(r, sh[w]);
    if (any_nan || r.m == -INFINITY) return RowSoftmax{NAN, NAN};
    return RowSoftmax{online_softmax_lse(r), entropy ? (float)online_softmax_entropy(r) : 0.0f};
}

__device__ __forceinline__ bool row_on(const void * mask, int mt, int64_t n) {
    if (!mask) return true;
    return mt == MAPORL_MASK_U8 ? static_cast<const uint8_t *>(mask)[n] == 1
                                : static_cast<const float *>(mask)[n] == 1.0f;
}

// Pass A for rows n (one block each): lse[n], logp[n], entropy[n] (if entropy != null); masked rows get 0. The mask and
// the targets were checked before (check_rows_kernel): nothing is written for a bad call.
template <typename In>
__global__ void pass_a_kernel(const In * __restrict__ z, const int32_t * __restrict__ y, const void * mask, int mt,
                              int64_t V, float temp, float * __restrict__ lse, float * __restrict__ logp,
                              float * __restrict__ entropy) {
    const int64_t n = blockIdx.x;
    if (!row_on(mask, mt, n)) {
        if (threadIdx.x == 0) {
            if (lse) lse[n] = 0.0f;
            logp[n] = 0.0f;
            if (entropy) entropy[n] = 0.0f;
        }
        return;
    }
    const RowSoftmax r = row_softmax(z + n * V, V, temp, entropy != nullptr);
    if (threadIdx.x == 0) {
        const float zt = logit(z, n * V + y[n]);
        const float zy = temp == 1.0f ? zt : zt / temp;
        if (lse) lse[n] = (float)r.lse;
        logp[n] = (float)((double)zy - r.lse);
        if (entropy) entropy[n] = r.H;
    }
}

// The mask (0 or 1 everywhere) and the targets of the rows it keeps (in [0, V)): the first bad index of each, before
// any output is written (the CPU checks both before writing).
__global__ void check_rows_kernel(const int32_t * __restrict__ y, const void * mask, int mt, int64_t N, int64_t V,
                                  unsigned long long * __restrict__ bad_mask,
                                  unsigned long long * __restrict__ bad_target) {
    for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
        if (mask) {
            const bool u8 = mt == MAPORL_MASK_U8;
            const float mv = u8 ? (float)static_cast<const uint8_t *>(mask)[n] : static_cast<const float *>(mask)[n];
            if (!(mv == 0.0f || mv == 1.0f)) {
                atomicMin(bad_mask, (unsigned long long)n);
                continue;
            }
            if (mv == 0.0f) continue;
        }
        if (y[n] < 0 || y[n] >= V) atomicMin(bad_target, (unsigned long long)n);
    }
}

// Pass C: g[n, v] = -p_v (a + ge (x_v - lse)) + [v = y] gl with a = gl + ge H; masked rows are zeroed.
template <typename In>
__global__ void pass_c_kernel(const In * z, const int32_t * __restrict__ y, const void * mask, int mt, int64_t V,
                              float temp, const float * __restrict__ lse, const float * __restrict__ H,
                              const float * __restrict__ dlogp, const float * __restrict__ dent, float * g) {
    const int64_t n = blockIdx.x;
    float * gr = g + n * V;
    if (!row_on(mask, mt, n)) {
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) gr[v] = 0.0f;
        return;
    }
    const float gl = dlogp[n] / temp, ge = dent ? dent[n] / temp : 0.0f, L = lse[n];
    const float a = gl + ge * (H ? H[n] : 0.0f);
    const int32_t t = y[n];
    const In * zr = z + n * V;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float zv = logit(zr, v);
        const float x = temp == 1.0f ? zv : zv / temp;
        const float q = x - L;
        const float out = q == -INFINITY ? 0.0f : -expf(q) * (a + ge * q);
        gr[v] = v == t ? out + gl : out;
    }
}

template <typename T>
struct Scratch {
    DeviceBuffer buf;
    maporl_status alloc(int64_t n) { return buf.alloc(sizeof(T) * (size_t)(n > 0 ? n : 1)); }
    T * get() const { return buf.as<T>(); }
};

// Calls launch with the logits that are set, typed (float32 or bfloat16), so each kernel launch is written once.
template <typename Launch>
void on_logits(const float * f32, const uint16_t * bf16, Launch && launch) {
    if (bf16)
        launch(bf16);
    else
        launch(f32);
}

// check_rows_kernel, then the CPU's errors: the mask's first bad value (row and t of [B, T]), else the first bad target.
maporl_status check_rows(const int32_t * targets, const void * mask, maporl_mask_type mt, int64_t N, int64_t T,
                         int64_t V) {
    DeviceBuffer bad_dev;
    MAPORL_RETURN_IF_ERROR(bad_dev.alloc(2 * sizeof(unsigned long long)));
    const unsigned long long none[2] = {~0ull, ~0ull};
    MAPORL_CUDA_CALL(cudaMemcpy(bad_dev.ptr, none, sizeof none, cudaMemcpyHostToDevice));
    unsigned long long * bad_d = bad_dev.as<unsigned long long>();
    check_rows_kernel<<<grid_for(N, kThreads), kThreads>>>(targets, mask, (int)mt, N, V, bad_d, bad_d + 1);
    MAPORL_CUDA_CALL(cudaGetLastError());
    unsigned long long bad[2];
    MAPORL_CUDA_CALL(cudaMemcpy(bad, bad_dev.ptr, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad[0] != ~0ull) {
        float mv = 0;
        uint8_t mb = 0;
        if (mt == MAPORL_MASK_U8)
            MAPORL_CUDA_CALL(cudaMemcpy(&mb, static_cast<const char *>(mask) + bad[0], 1, cudaMemcpyDeviceToHost));
        else
            MAPORL_CUDA_CALL(cudaMemcpy(&mv, static_cast<const char *>(mask) + 4 * bad[0], 4, cudaMemcpyDeviceToHost));
        return set_error(MAPORL_ERR_INVALID_ARG,
                         "mask: expected 0 or 1 at every position, got %g at index %llu (row %llu, t %llu)",
                         mt == MAPORL_MASK_U8 ? (double)mb : (double)mv, bad[0], bad[0] / (unsigned long long)T,
                         bad[0] % (unsigned long long)T);
    }
    if (bad[1] == ~0ull) return MAPORL_OK;
    int32_t t = 0;
    MAPORL_CUDA_CALL(cudaMemcpy(&t, targets + bad[1], sizeof t, cudaMemcpyDeviceToHost));
    return set_error(MAPORL_ERR_INVALID_ARG, "targets: expected token ids in [0, %lld) (V), got %d at index %llu",
                     (long long)V, (int)t, bad[1]);
}

}  // namespace

maporl_status logprobs_cuda(const float * logits, const uint16_t * logits_bf16, const int32_t * targets, int64_t N,
                            int64_t V, float temperature, float * logp, float * entropy) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("logprobs"));
    if (N > 0 && V < 1) return set_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when N > 0, got %lld", (long long)V);
    if (N == 0) return MAPORL_OK;
    MAPORL_RETURN_IF_ERROR(check_grid(N, "logprobs: rows (N)"));
    MAPORL_RETURN_IF_ERROR(check_rows(targets, nullptr, MAPORL_MASK_U8, N, N, V));
    on_logits(logits, logits_bf16, [&](const auto * z) {
        pass_a_kernel<<<(unsigned)N, kThreads>>>(z, targets, nullptr, 0, V, temperature, nullptr, logp, entropy);
    });
    MAPORL_CUDA_CALL(cudaGetLastError());
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

maporl_status fused_policy_loss_cuda(const FusedArgs<float> & fa, maporl_policy_loss_stats * st) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("fused_policy_loss"));
    const int64_t N = fa.loss.B * fa.loss.T, V = fa.V;
    if (N > 0 && V < 1)
        return set_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when B*T > 0, got %lld", (long long)V);
    const maporl_policy_loss_params & P = fa.loss.params;
    const bool want_entropy = P.entropy_coef != 0.0f || fa.entropy_out != nullptr;
    Scratch<float> lse, lp, ent, glp, gent;
    MAPORL_RETURN_IF_ERROR(lse.alloc(N));
    float * logp = fa.logp_out;
    if (!logp) {
        MAPORL_RETURN_IF_ERROR(lp.alloc(N));
        logp = lp.get();
    }
    float * H = nullptr;
    if (want_entropy) {
        H = fa.entropy_out;
        if (!H) {
            MAPORL_RETURN_IF_ERROR(ent.alloc(N));
            H = ent.get();
        }
    }
    float * dlogp = fa.grad_logp_out;
    if (!dlogp) {
        MAPORL_RETURN_IF_ERROR(glp.alloc(N));
        dlogp = glp.get();
    }
    float * dent = nullptr;
    if (P.entropy_coef != 0.0f) {
        MAPORL_RETURN_IF_ERROR(gent.alloc(N));
        dent = gent.get();
    }
    if (N == 0)
        return policy_loss_cuda(PolicyLossArgs<float>{logp, fa.loss.old_logp, fa.loss.advantages, fa.loss.adv_per_seq,
                                                      fa.loss.mask, fa.loss.mask_type, fa.loss.ref_logp, nullptr,
                                                      fa.loss.B, fa.loss.T, P, nullptr, nullptr},
                                st);
    MAPORL_RETURN_IF_ERROR(check_grid(N, "fused_policy_loss: rows (B*T)"));
    MAPORL_RETURN_IF_ERROR(
        check_rows(fa.targets, fa.loss.mask, fa.loss.mask_type, N, fa.loss.T, V));  // before any write
    on_logits(fa.logits, fa.logits_bf16, [&](const auto * z) {
        pass_a_kernel<<<(unsigned)N, kThreads>>>(z, fa.targets, fa.loss.mask, (int)fa.loss.mask_type, V, fa.temperature,
                                                 lse.get(), logp, H);
    });
    MAPORL_CUDA_CALL(cudaGetLastError());
    PolicyLossArgs<float> a = fa.loss;
    a.logp = logp;
    a.entropy = H;  // when computed, also for the stats (entropy_mean) without an entropy bonus
    a.grad_logp = dlogp;
    a.grad_entropy = dent;
    MAPORL_RETURN_IF_ERROR(policy_loss_cuda(a, st));  // checks the mask before pass C writes
    on_logits(fa.logits, fa.logits_bf16, [&](const auto * z) {
        pass_c_kernel<<<(unsigned)N, kThreads>>>(z, fa.targets, fa.loss.mask, (int)fa.loss.mask_type, V, fa.temperature,
                                                 lse.get(), H, dlogp, dent, fa.grad_logits);
    });
    MAPORL_CUDA_CALL(cudaGetLastError());
    MAPORL_CUDA_CALL(cudaDeviceSynchronize());
    return MAPORL_OK;
}

}  // namespace maporl
