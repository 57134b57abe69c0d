// model_device.cpp: moving a model between the CPU and CUDA (maporl.h's maporl_gpt_set_device / get_device), for
// both families: the GPT to gpt::CudaModel (cuda/model/gpt.cu), a Llama-family model to llama::DeviceModel
// (llama_device.h over cuda/model/llama.cu). Weights, AdamW moments and accumulated gradients move; the last forward
// and the KV cache belong to the device they were made on and are dropped. A failed move leaves the model where it
// was, intact (copies go to temporaries first).
#include <vector>

#include "native/core/core.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama_cuda.h"
#include "native/model/llama_device_host.h"
#include "native/model/model_handle.h"

using namespace maporl;

namespace {

void move_gpt(maporl_gpt * gpt, maporl_device device) {
    gpt::Model<float> & m = *gpt->gm;
    const int64_t n = m.layout.total;
    if (device == MAPORL_DEVICE_CUDA) {
        gpt::CudaModel * c = gpt::cuda_model_create(m.cfg);
        try {
            gpt::cuda_model_upload(c, 0, m.params.data(), n);
            gpt::cuda_model_upload(c, 1, m.m.data(), n);
            gpt::cuda_model_upload(c, 2, m.v.data(), n);
            gpt::cuda_model_upload(c, 3, m.grads.data(), n);
        } catch (...) {
            gpt::cuda_model_free(c);
            throw;
        }
        gpt->cuda = c;
    } else {
        std::vector<float> p((size_t)n), mm((size_t)n), vv((size_t)n), g((size_t)n);
        gpt::cuda_model_download(gpt->cuda, 0, p.data(), n);
        gpt::cuda_model_download(gpt->cuda, 1, mm.data(), n);
        gpt::cuda_model_download(gpt->cuda, 2, vv.data(), n);
        gpt::cuda_model_download(gpt->cuda, 3, g.data(), n);
        m.params.swap(p);
        m.weights_changed();
        m.m.swap(mm);
        m.v.swap(vv);
        m.grads.swap(g);
        gpt::cuda_model_free(gpt->cuda);
        gpt->cuda = nullptr;
    }
    m.B = m.T = 0;
    m.cache_batch = m.cache_len = 0;
    m.acts = gpt::Acts<float>();
    m.logits = std::vector<float>();
    m.values = std::vector<float>();
    m.cache_release();
}

// On the device the host model keeps its config, layout, step and parameter vector (the staging of later moves), a
// frozen base's matrices (bfloat16 / int8, uploaded as they are; frozen, so never downloaded) and its LoRA adapters
// (the device copies theirs); its moments, gradients, activations and caches are released.
// emulate: the device is llama_device_host.h's (host memory), for tests of the device path without a GPU.
void move_llama(maporl_gpt * gpt, maporl_device device, bool emulate = false) {
    llama::Model<float> & m = *gpt->lm;
    const int64_t n = m.layout.total;
    if (device == MAPORL_DEVICE_CUDA) {
        std::unique_ptr<llama::DeviceModel> d(emulate ? new llama::DeviceLlama<llama::HostDevice>(m.cfg, &m)
                                                      : llama::cuda_model_create(m.cfg, &m));
        d->upload(0, m.params.data(), n);
        if (m.frozen_dtype())  // (a frozen base's matrices: the host keeps its copy, which never changes)
            d->upload_frozen(m.half.data(), (int64_t)m.half.size(), m.q8.data(), (int64_t)m.q8.size(), m.q8d.data(),
                             (int64_t)m.q8d.size());
        if (m.grads.size() == (size_t)n) {
            d->upload(1, m.m.data(), n);
            d->upload(2, m.v.data(), n);
            d->upload(3, m.grads.data(), n);
        }
        gpt->lcuda = std::move(d);
        m.grads = m.m = m.v = std::vector<float>();
    } else {
        std::vector<float> p((size_t)n), mm((size_t)n), vv((size_t)n), g((size_t)n);
        gpt->lcuda->download(0, p.data(), n);
        gpt->lcuda->download(1, mm.data(), n);
        gpt->lcuda->download(2, vv.data(), n);
        gpt->lcuda->download(3, g.data(), n);
        m.params.swap(p);
        m.m.swap(mm);
        m.v.swap(vv);
        m.grads.swap(g);
        m.weights_changed();
        gpt->lcuda.reset();
    }
    m.B = m.T = 0;
    m.cache_batch = m.cache_len = 0;
    m.acts = std::vector<llama::LayerActs<float>>();
    m.logits = m.values = m.embedded = m.lnf = m.lnf_rstd = std::vector<float>();
    m.cache_release();
    m.wt_cache = std::vector<std::vector<float>>();
}

}  // namespace

extern "C" {

maporl_status maporl_gpt_set_device(maporl_gpt * gpt, maporl_device device) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model from maporl_gpt_create, got NULL");
        require_device(device);
        if ((device == MAPORL_DEVICE_CUDA) == gpt->on_device()) return MAPORL_OK;
        gpt->score_targets.clear();  // the last scoring forward belongs to the other device
        if (gpt->gm)
            move_gpt(gpt, device);
        else
            move_llama(gpt, device);
        return MAPORL_OK;
    });
}

maporl_status maporl_llama_emulate_device(maporl_gpt * gpt) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model from maporl_gpt_create, got NULL");
        if (!gpt->lm)
            throw_error(MAPORL_ERR_INVALID_ARG, "emulate_device: expected a Llama-family model, got the embedded GPT");
        if (gpt->on_device()) throw_error(MAPORL_ERR_INVALID_ARG, "emulate_device: the model is on a device already");
        gpt->score_targets.clear();
        move_llama(gpt, MAPORL_DEVICE_CUDA, /*emulate=*/true);
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_get_device(const maporl_gpt * gpt, maporl_device * device_out) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model from maporl_gpt_create, got NULL");
        require_ptr(device_out, "device_out", 1);
        *device_out = gpt->on_device() ? MAPORL_DEVICE_CUDA : MAPORL_DEVICE_CPU;
        return MAPORL_OK;
    });
}

}  // extern "C"
