// sampling.cu: CUDA maporl_sample / maporl_sample_logprobs: the argument checks (on host copies of the per-row
// parameters, as the CPU checks them), then the kernels of sampling_split.cu, which cut each row's vocabulary into
// slices, one block each (one slice per row from 64 rows up; more below, so that B = 1 still fills the GPU).
// Same rules as the CPU (native/sampling/sampling.cpp): the total order (logit, then lower index), top-k, the top-p prefix
// (mass ranked before < p * total), min-p, and Gumbel-max with philox.h's noise, which is the same float on both
// (det_log uses only correctly rounded __f*_rn operations), so the same (row, parameters, seed, position) gives the
// same token as on the CPU. The support is decided on the same floats too: min-p's and top-p's weights are
// det_exp_nonpos (native/core/det_exp.h) on both, and top-p's masses are integer sums in sampling_radix.h's fixed
// point on both, so a row's token depends neither on the batch or the slice count nor on the device, even when
// a top-p or min-p boundary falls within float rounding of the mass.
#include <cstdint>
#include <vector>

#include "native/sampling/sampling.h"
#include "cuda/core/common.cuh"

namespace maporl {
namespace {

template <typename T>
maporl_status copy_row_params(const T * dev, int64_t B, std::vector<T> & host, const T ** view) {
    if (!dev) return MAPORL_OK;
    host.resize((size_t)B);
    MAPORL_CUDA_CALL(cudaMemcpy(host.data(), dev, sizeof(T) * (size_t)B, cudaMemcpyDeviceToHost));
    *view = host.data();
    return MAPORL_OK;
}

}  // namespace

maporl_status sample_cuda(const float * logits, int64_t B, int64_t V, const maporl_sample_params & p,
                          const int32_t * given, int32_t * tokens, float * logprobs, float * raw_logprobs,
                          uint8_t * valid) {
    MAPORL_RETURN_IF_ERROR(cuda_require_device("sample"));
    if (B > 0 && V < 1) return set_error(MAPORL_ERR_INVALID_ARG, "V: expected >= 1 when B > 0, got %lld", (long long)V);
    // The per-row parameters (and given tokens) are device arrays: check a host copy, as the CPU does.
    maporl_sample_params h = p;
    std::vector<float> t, tp, mp;
    std::vector<int32_t> k, gv;
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.temperature, B, t, &h.temperature));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.top_k, B, k, &h.top_k));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.top_p, B, tp, &h.top_p));
    MAPORL_RETURN_IF_ERROR(copy_row_params(p.min_p, B, mp, &h.min_p));
    try {
        check_sample_params(h, B);
    } catch (const Error & e) { return set_error(e.status, "%s", e.message.c_str()); }
    if (given) {
        const int32_t * gh = nullptr;
        MAPORL_RETURN_IF_ERROR(copy_row_params(given, B, gv, &gh));
        for (int64_t b = 0; b < B; ++b)
            if (gh[b] < 0 || gh[b] >= V)
                return set_error(MAPORL_ERR_INVALID_ARG,
                                 "tokens: expected token ids in [0, %lld) (V), got %d at index %lld", (long long)V,
                                 (int)gh[b], (long long)b);
    }
    if (B == 0) return MAPORL_OK;
    return sample_split_cuda(logits, B, V, p, h, given, tokens, logprobs, raw_logprobs, valid);
}

}  // namespace maporl
