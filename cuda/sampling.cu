// sampling.cu: the CUDA entry point of maporl_sample / maporl_sample_logprobs. NOTE(not yet): the sampler runs
// on the CPU only (native/sampling.cpp). The row passes, the Philox stream and det_log are written to be shared
// (philox.h is host/device code, so a CUDA kernel will draw the same noise bit for bit); the kernel itself,
// with vocabulary splitting for small batches, is the next step. Until then a CUDA call says so clearly rather
// than copying to the host behind the caller's back.
#include "../native/sampling.h"
#include "common.cuh"

namespace maporl {

maporl_status sample_cuda(const float *, int64_t, int64_t, const maporl_sample_params &, const int32_t *, int32_t *,
                          float *, float *, uint8_t *) {
    return set_error(MAPORL_ERR_INVALID_ARG,
                     "device: sampling on CUDA is not implemented yet; use device 'cpu' (the CPU sampler gives the "
                     "same tokens for the same seed and position)");
}

}  // namespace maporl
