// cuda_stubs.cpp: the device layer of a build without CUDA. Every CUDA entry point answers
// MAPORL_ERR_NO_DEVICE and the device count is 0. Compiled only when MAPORL_WITH_CUDA is not defined;
// the CUDA build gets these from cuda/core/device.cu and cuda/<kernel>.cu instead.
#ifndef MAPORL_WITH_CUDA

#include "native/core/core.h"
#include "native/rl/gae.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama_cuda.h"
#include "native/rl/group_advantages.h"
#include "native/rl/policy_loss.h"
#include "native/rl/rollout_correction.h"
#include "native/sampling/sampling.h"

namespace maporl {

static maporl_status no_device(const char * what) {
    return set_error(MAPORL_ERR_NO_DEVICE, "%s: this build of maporl has no CUDA support (rebuild with MAPORL_CUDA=1)",
                     what);
}

maporl_status gae_cuda(const float *, const float *, const void *, maporl_mask_type, int64_t, int64_t, float, float,
                       bool, float *, float *) {
    return no_device("gae");
}

maporl_status reinforce_returns_cuda(const float *, const void *, maporl_mask_type, int64_t, int64_t, float, bool,
                                     float *, float *) {
    return no_device("reinforce_returns");
}

maporl_status group_advantages_cuda(const float *, const int32_t *, const float *, int64_t, const maporl_group_params &,
                                    float *) {
    return no_device("group_advantages");
}

maporl_status broadcast_rows_cuda(const float *, const void *, maporl_mask_type, int64_t, int64_t, float *) {
    return no_device("broadcast_rows");
}

maporl_status policy_loss_cuda(const PolicyLossArgs<float> &, maporl_policy_loss_stats *) {
    return no_device("policy_loss");
}

maporl_status value_loss_cuda(const float *, const float *, const float *, const void *, maporl_mask_type, int64_t,
                              int64_t, float, maporl_loss_agg, double, float *, maporl_value_loss_stats *) {
    return no_device("value_loss");
}

maporl_status logprobs_cuda(const float *, const uint16_t *, const int32_t *, int64_t, int64_t, float, float *,
                            float *) {
    return no_device("logprobs");
}

maporl_status fused_policy_loss_cuda(const FusedArgs<float> &, maporl_policy_loss_stats *) {
    return no_device("fused_policy_loss");
}

maporl_status rollout_correction_cuda(const float *, const float *, const void *, maporl_mask_type, int64_t, int64_t,
                                      const maporl_rollout_correction_params &, float *, float *,
                                      maporl_rollout_correction_stats *) {
    return no_device("rollout_correction");
}

maporl_status sample_cuda(const float *, int64_t, int64_t, const maporl_sample_params &, const int32_t *, int32_t *,
                          float *, float *, uint8_t *) {
    return no_device("sample");
}

namespace gpt {

// The device model: creation answers "no CUDA in this build"; the rest is unreachable without a model.
[[noreturn]] static void no_gpt_device() {
    throw_error(MAPORL_ERR_NO_DEVICE,
                "device: 'cuda' requested, but this build of maporl has no CUDA support (rebuild with MAPORL_CUDA=1)");
}
CudaModel * cuda_model_create(const Config &) { no_gpt_device(); }
void cuda_model_free(CudaModel *) {}
void cuda_model_upload(CudaModel *, int, const float *, int64_t) { no_gpt_device(); }
void cuda_model_download(const CudaModel *, int, float *, int64_t) { no_gpt_device(); }
void cuda_model_forward(CudaModel *, const int32_t *, int64_t, int64_t, float *, float *) { no_gpt_device(); }
void cuda_model_backward(CudaModel *, const float *, const float *) { no_gpt_device(); }
void cuda_model_zero_grad(CudaModel *) { no_gpt_device(); }
double cuda_model_update(CudaModel *, const AdamW &, double, int64_t) { no_gpt_device(); }
void cuda_model_cache_reset(CudaModel *, int64_t, int64_t) { no_gpt_device(); }
void cuda_model_decode(CudaModel *, const int32_t *, int64_t, float *, float *) { no_gpt_device(); }

}  // namespace gpt

namespace llama {
DeviceModel * cuda_model_create(const Config &, Model<float> *) {
    throw_error(MAPORL_ERR_NO_DEVICE,
                "device: 'cuda' requested, but this build of maporl has no CUDA support (rebuild with MAPORL_CUDA=1)");
}
}  // namespace llama
}  // namespace maporl

extern "C" {

int maporl_cuda_compiled(void) { return 0; }

maporl_status maporl_cuda_device_count(int * count_out) {
    maporl::clear_error();
    if (count_out == nullptr)
        return maporl::set_error(MAPORL_ERR_INVALID_ARG, "count_out: expected a non-NULL pointer, got NULL");
    *count_out = 0;
    return MAPORL_OK;
}

maporl_status maporl_cuda_device_info(int index, maporl_device_info *) {
    return maporl::set_error(MAPORL_ERR_NO_DEVICE, "index: no CUDA device %d (this build has no CUDA support)", index);
}

maporl_status maporl_device_malloc(size_t, void **) { return maporl::no_device("device_malloc"); }
maporl_status maporl_device_free(void * ptr) { return ptr == nullptr ? MAPORL_OK : maporl::no_device("device_free"); }
maporl_status maporl_memcpy_to_device(void *, const void *, size_t) { return maporl::no_device("memcpy_to_device"); }
maporl_status maporl_memcpy_to_host(void *, const void *, size_t) { return maporl::no_device("memcpy_to_host"); }

}  // extern "C"

#endif  // MAPORL_WITH_CUDA
