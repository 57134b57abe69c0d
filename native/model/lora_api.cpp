// lora_api.cpp: the C entry points of LoRA adapters (maporl.h's maporl_lora_*) over llama::Model's adapter slots
// (lora.h). Every call is guarded: a bad argument is a status with a message, never an exception across the C
// boundary; a failed call changes nothing.
#include <cmath>
#include <cstring>

#include "native/core/core.h"
#include "native/model/model_handle.h"

using namespace maporl;

namespace {

llama::Model<float> & require_llama(maporl_gpt * g, const char * fn) {
    if (!g) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
    if (!g->lm)
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "%s: LoRA adapters need a Llama-family model (maporl_llama_create); this is the embedded GPT", fn);
    return *g->lm;
}

void require_live(const llama::Model<float> & m, int64_t id, const char * what) {
    if (id < 0 || id >= (int64_t)m.adapters.size() || !m.adapters[(size_t)id])
        throw_error(MAPORL_ERR_INVALID_ARG,
                    "%s: expected the id of a live adapter (0..%lld, not removed or merged), got %lld", what,
                    (long long)m.adapters.size() - 1, (long long)id);
}

}  // namespace

extern "C" {

maporl_lora_config maporl_lora_default_config(void) { return maporl_lora_config{8, 8.0, MAPORL_LORA_ALL, 0.0, 0}; }

maporl_status maporl_lora_add(maporl_gpt * gpt, const maporl_lora_config * config, uint64_t seed, int64_t * id_out) {
    return guarded([&] {
        auto & m = require_llama(gpt, "lora_add");
        require_ptr(config, "config", 1);
        require_ptr(id_out, "id_out", 1);
        if (config->use_rslora != 0 && config->use_rslora != 1)
            throw_error(MAPORL_ERR_INVALID_ARG, "config.use_rslora: expected 0 or 1, got %d", config->use_rslora);
        llama::LoraConfig c;
        c.rank = config->rank;
        c.alpha = config->alpha;
        c.targets = config->target_modules;
        c.dropout = config->dropout;
        c.rslora = config->use_rslora != 0;
        // On the device the host's parameters are staging: bring the base's value head (the adapter's initial one) up to date.
        if (gpt->lcuda) gpt->lcuda->download(0, m.params.data(), m.layout.total);
        *id_out = m.lora_add(c, seed);
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_remove(maporl_gpt * gpt, int64_t id) {
    return guarded([&] {
        auto & m = require_llama(gpt, "lora_remove");
        require_live(m, id, "id");
        m.lora_remove(id);
        if (gpt->lcuda) gpt->lcuda->lora_removed(id);  // (its device copy, gradients and kept activations go too)
        gpt->score_targets.clear();                    // the last scoring forward ran through it
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_select(maporl_gpt * gpt, int64_t id) {
    return guarded([&] {
        auto & m = require_llama(gpt, "lora_select");
        if (id != -1) require_live(m, id, "id (or -1 for the base)");
        if (m.active != id) {  // a backward must run through its forward's adapter: the last forward is dropped
            gpt->score_targets.clear();
            m.B = m.T = 0;
        }
        m.active = id;
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_selected(const maporl_gpt * gpt, int64_t * id_out) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
        require_ptr(id_out, "id_out", 1);
        *id_out = gpt->lm ? gpt->lm->active : -1;
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_info(const maporl_gpt * gpt, int64_t id, maporl_lora_config * config_out, int64_t * count_out,
                               uint64_t * seed_out) {
    return guarded([&] {
        const auto & m = require_llama(const_cast<maporl_gpt *>(gpt), "lora_info");
        require_live(m, id, "id");
        const auto & a = *m.adapters[(size_t)id];
        if (config_out)
            *config_out =
                maporl_lora_config{a.cfg.rank, a.cfg.alpha, a.cfg.targets, a.cfg.dropout, a.cfg.rslora ? 1 : 0};
        if (count_out) *count_out = a.layout.total;
        if (seed_out) *seed_out = a.seed;
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_merge(maporl_gpt * gpt, int64_t id) {
    return guarded([&] {
        auto & m = require_llama(gpt, "lora_merge");
        require_live(m, id, "id");
        if (gpt->lcuda)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "lora_merge: the base is on CUDA; merging runs on the CPU in this version (move the model to "
                        "the CPU, merge, move it back)");
        m.lora_merge(id);
        gpt->score_targets.clear();
        return MAPORL_OK;
    });
}

maporl_status maporl_lora_cache_rows(maporl_gpt * gpt, const int64_t * ids, int64_t batch) {
    return guarded([&] {
        auto & m = require_llama(gpt, "lora_cache_rows");
        if (m.cache_batch == 0)
            throw_error(MAPORL_ERR_INVALID_ARG, "lora_cache_rows: call maporl_gpt_cache_reset first");
        if (batch != m.cache_batch)
            throw_error(MAPORL_ERR_INVALID_ARG, "batch: expected the cache's batch %lld, got %lld",
                        (long long)m.cache_batch, (long long)batch);
        require_ptr(ids, "ids", batch);
        for (int64_t b = 0; b < batch; ++b)
            if (ids[b] != -1) require_live(m, ids[b], "ids[]");
        m.row_adapter.assign(ids, ids + batch);
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_set_training(maporl_gpt * gpt, int training) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
        if (training != 0 && training != 1)
            throw_error(MAPORL_ERR_INVALID_ARG, "training: expected 0 or 1, got %d", training);
        if (gpt->lm) gpt->lm->training = training != 0;  // (the GPT family has no dropout)
        return MAPORL_OK;
    });
}

}  // extern "C"
