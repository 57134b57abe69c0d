// model_handle.h: the maporl_gpt handle of maporl.h (private to native/model): one model of either family, and
// the state a scoring forward leaves for its backward (model_scores.cpp).
#pragma once

#include <stdint.h>

#include <memory>
#include <vector>

#include "native/include/maporl.h"
#include "native/model/gpt.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama.h"
#include "native/model/llama_device.h"

struct maporl_gpt {
    std::unique_ptr<maporl::gpt::Model<float>> gm;    // the GPT family, or
    std::unique_ptr<maporl::llama::Model<float>> lm;  // the Llama family
    maporl::gpt::CudaModel * cuda = nullptr;          // non-null: the (GPT) model lives on the device
    // Non-null: the (Llama) model lives on the device (llama_device.h); `lm` keeps the config, layout, step counter,
    // shapes and the parameters as staging for moves.
    std::unique_ptr<maporl::llama::DeviceModel> lcuda;
    bool on_device() const { return cuda != nullptr || lcuda != nullptr; }
    explicit maporl_gpt(const maporl::gpt::Config & c) : gm(new maporl::gpt::Model<float>(c)) {}
    explicit maporl_gpt(const maporl::llama::Config & c) : lm(new maporl::llama::Model<float>(c)) {}
    ~maporl_gpt() { maporl::gpt::cuda_model_free(cuda); }
    // fn(model) on whichever family this handle holds (the families share member names).
    template <class Fn>
    decltype(auto) visit(Fn && fn) {
        if (gm) return fn(*gm);
        return fn(*lm);
    }
    template <class Fn>
    decltype(auto) visit(Fn && fn) const {
        if (gm) return fn(static_cast<const maporl::gpt::Model<float> &>(*gm));
        return fn(static_cast<const maporl::llama::Model<float> &>(*lm));
    }
    // fn(set) on the trainable parameter set: the selected LoRA adapter of a Llama model (maporl_lora_select), else
    // the model. Parameter counts, tensors, get / set, the step counter address it (the adapter's and the model's
    // share member names: params, m, v, grads, layout.tensors, step, ensure_train_state, weights_changed).
    template <class Fn>
    decltype(auto) visit_trainable(Fn && fn) {
        if (lm && lm->active >= 0) return fn(*lm->adapters[(size_t)lm->active]);
        if (gm) return fn(*gm);
        return fn(*lm);
    }
    template <class Fn>
    decltype(auto) visit_trainable(Fn && fn) const {
        if (lm && lm->active >= 0)
            return fn(static_cast<const maporl::llama::Lora<float> &>(*lm->adapters[(size_t)lm->active]));
        if (gm) return fn(static_cast<const maporl::gpt::Model<float> &>(*gm));
        return fn(static_cast<const maporl::llama::Model<float> &>(*lm));
    }
    // What maporl_gpt_score kept for maporl_gpt_score_backward: the targets, the temperature and the row chunk.
    std::vector<int32_t> score_targets;
    float score_temperature = 1.0f;
    int64_t score_chunk = 0;
    std::vector<float> score_z;  // the chunk's logits, kept between calls (no 64 MB allocation per call)
    // A training score (maporl_gpt_set_training 1) whose [N, V] float logits fit in score_keep_bytes keeps them in
    // score_kept for its backward, which then skips the LM head's recomputation (maporl_gpt_set_score_keep).
    int64_t score_keep_bytes = (int64_t)256 << 20;
    std::vector<float> score_kept;
    maporl_gpt(const maporl_gpt &) = delete;
    maporl_gpt & operator=(const maporl_gpt &) = delete;
};
