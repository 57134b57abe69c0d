// model_api.cpp: the C entry points of the model engine (maporl.h's maporl_gpt_* handle calls) over one of the
// model families: gpt::Model<float> (gpt.cpp, the embedded GPT) or llama::Model<float> (llama.cpp, Hugging Face
// Llama / Mistral / Qwen2 / Qwen3), or over the device models once a model is moved to CUDA (model_device.cpp):
// gpt::CudaModel (cuda/model/gpt.cu) or llama::DeviceModel (llama_device.h); then the host Model keeps the config,
// layout, step counter and shapes, and its parameter vectors serve as staging. Every call is guarded: a bad argument
// is a status with a message, never an exception across the C boundary.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "native/core/bf16.h"
#include "native/core/q8.h"
#include "native/core/threadpool.h"
#include "native/core/core.h"
#include "native/model/gpt.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama.h"
#include "native/model/model_handle.h"


using namespace maporl;

namespace {

gpt::Config to_config(const maporl_gpt_config & c) {
    gpt::Config g;
    g.vocab = c.vocab;
    g.context = c.context;
    g.layers = c.layers;
    g.heads = c.heads;
    g.d_model = c.d_model;
    g.mlp_ratio = c.mlp_ratio;
    g.tie_embeddings = c.tie_embeddings != 0;
    return g;
}

void require_gpt(const maporl_gpt * g) {
    if (!g) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model from maporl_gpt_create, got NULL");
}

std::vector<float> & buffer(maporl_gpt * g, int which) {
    if (which == 0) return g->visit_trainable([](auto & m) -> std::vector<float> & { return m.params; });
    if (which == 1 || which == 2)
        return g->visit_trainable([which](auto & m) -> std::vector<float> & {
            m.ensure_train_state();  // a Llama model allocates its moments on first use
            return which == 1 ? m.m : m.v;
        });
    throw_error(MAPORL_ERR_INVALID_ARG, "which: expected 0 (params), 1 (m) or 2 (v), got %d", which);
}

}  // namespace

extern "C" {

maporl_gpt_config maporl_gpt_default_config(void) {
    maporl_gpt_config c;
    c.vocab = 0;
    c.context = 0;
    c.layers = 0;
    c.heads = 0;
    c.d_model = 0;
    c.mlp_ratio = 4;
    c.tie_embeddings = 1;
    return c;
}

maporl_adamw_params maporl_adamw_default_params(void) { return maporl_adamw_params{3e-4f, 0.9f, 0.95f, 1e-8f, 0.0f}; }

maporl_status maporl_gpt_create(const maporl_gpt_config * config, uint64_t seed, maporl_gpt ** out) {
    return guarded([&] {
        require_ptr(config, "config", 1);
        require_ptr(out, "out", 1);
        *out = nullptr;
        auto * g = new maporl_gpt(to_config(*config));
        g->gm->init(seed);
        *out = g;
        return MAPORL_OK;
    });
}

void maporl_gpt_free(maporl_gpt * gpt) { delete gpt; }

maporl_status maporl_gpt_param_count(const maporl_gpt * gpt, int64_t * count_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_ptr(count_out, "count_out", 1);
        *count_out = gpt->visit_trainable([](const auto & m) { return m.layout.total; });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_tensor_count(const maporl_gpt * gpt, int64_t * count_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_ptr(count_out, "count_out", 1);
        *count_out = gpt->visit_trainable([](const auto & m) { return (int64_t)m.layout.tensors.size(); });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_tensor_info(const maporl_gpt * gpt, int64_t index, char name_out[64], int64_t dims_out[2],
                                     int64_t * offset_out) {
    return guarded([&] {
        require_gpt(gpt);
        const auto & ts = gpt->visit_trainable(
            [](const auto & m) -> const std::vector<gpt::Layout::Tensor> & { return m.layout.tensors; });
        if (index < 0 || index >= (int64_t)ts.size())
            throw_error(MAPORL_ERR_INVALID_ARG, "index: expected 0..%lld, got %lld", (long long)ts.size() - 1,
                        (long long)index);
        const auto & t = ts[(size_t)index];
        if (name_out) {
            std::memset(name_out, 0, 64);
            std::memcpy(name_out, t.name.data(), std::min<size_t>(63, t.name.size()));
        }
        if (dims_out) {
            dims_out[0] = t.shape[0];
            dims_out[1] = t.shape.size() > 1 ? t.shape[1] : 0;
        }
        if (offset_out) *offset_out = t.offset;
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_get(const maporl_gpt * gpt, int which, float * out, int64_t count) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->lcuda &&
            gpt->lm->active < 0) {  // the base on the device (no host moments are made; an adapter's are the host's)
            if (which < 0 || which > 2)
                throw_error(MAPORL_ERR_INVALID_ARG, "which: expected 0 (params), 1 (m) or 2 (v), got %d", which);
            require_ptr(out, "out", count);
            gpt->lcuda->download(which, out, count);
            return MAPORL_OK;
        }
        const std::vector<float> & b = buffer(const_cast<maporl_gpt *>(gpt), which);
        if (count != (int64_t)b.size())
            throw_error(MAPORL_ERR_INVALID_ARG, "count: expected %lld (the parameter count), got %lld",
                        (long long)b.size(), (long long)count);
        require_ptr(out, "out", count);
        if (gpt->cuda) {
            gpt::cuda_model_download(gpt->cuda, which, out, count);
            return MAPORL_OK;
        }
        std::memcpy(out, b.data(), sizeof(float) * b.size());
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_set(maporl_gpt * gpt, int which, const float * in, int64_t count) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->lcuda && gpt->lm->active < 0) {
            if (which < 0 || which > 2)
                throw_error(MAPORL_ERR_INVALID_ARG, "which: expected 0 (params), 1 (m) or 2 (v), got %d", which);
            require_ptr(in, "in", count);
            gpt->lcuda->upload(which, in, count);
            return MAPORL_OK;
        }
        std::vector<float> & b = buffer(gpt, which);
        if (count != (int64_t)b.size())
            throw_error(MAPORL_ERR_INVALID_ARG, "count: expected %lld (the parameter count), got %lld",
                        (long long)b.size(), (long long)count);
        require_ptr(in, "in", count);
        if (gpt->cuda) {
            gpt::cuda_model_upload(gpt->cuda, which, in, count);
            return MAPORL_OK;
        }
        std::memcpy(b.data(), in, sizeof(float) * b.size());
        if (which == 0) gpt->visit_trainable([](auto & m) { m.weights_changed(); });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_get_step(const maporl_gpt * gpt, int64_t * step_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_ptr(step_out, "step_out", 1);
        *step_out = gpt->visit_trainable([](const auto & m) { return m.step; });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_set_step(maporl_gpt * gpt, int64_t step) {
    return guarded([&] {
        require_gpt(gpt);
        if (step < 0) throw_error(MAPORL_ERR_INVALID_ARG, "step: expected >= 0, got %lld", (long long)step);
        gpt->visit_trainable([step](auto & m) { m.step = step; });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_forward(maporl_gpt * gpt, const int32_t * tokens, int64_t B, int64_t T, float * logits_out,
                                 float * values_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_dims(B, T, "B", "T");
        require_ptr(tokens, "tokens", B * T);
        gpt->score_targets.clear();  // this forward replaces the activations a scoring backward would need
        if (gpt->cuda) {
            gpt::cuda_model_forward(gpt->cuda, tokens, B, T, logits_out, values_out);
            gpt->gm->B = B;
            gpt->gm->T = T;
            return MAPORL_OK;
        }
        if (gpt->lcuda) {
            gpt->lcuda->forward(tokens, B, T, logits_out != nullptr, logits_out, values_out);
            gpt->lm->B = B;
            gpt->lm->T = T;
            return MAPORL_OK;
        }
        // A Llama model computes its [B, T, V] logits only when they are asked for (values alone need none).
        if (gpt->gm)
            gpt->gm->forward(tokens, B, T);
        else
            gpt->lm->forward(tokens, B, T, logits_out != nullptr);
        gpt->visit([&](auto & m) {
            if (logits_out) std::memcpy(logits_out, m.logits.data(), sizeof(float) * m.logits.size());
            if (values_out) std::memcpy(values_out, m.values.data(), sizeof(float) * m.values.size());
        });
        if (gpt->lm) release_free_memory();
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_backward(maporl_gpt * gpt, const float * dlogits, const float * dvalues) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->cuda)
            gpt::cuda_model_backward(gpt->cuda, dlogits, dvalues);
        else if (gpt->lcuda)
            gpt->lcuda->backward(dlogits, dvalues);
        else
            gpt->visit([&](auto & m) { m.backward(dlogits, dvalues); });
        if (gpt->lm) release_free_memory();
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_zero_grad(maporl_gpt * gpt) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->cuda)
            gpt::cuda_model_zero_grad(gpt->cuda);
        else if (gpt->lcuda)
            gpt->lcuda->zero_grad();
        else
            gpt->visit([](auto & m) { m.zero_grad(); });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_step(maporl_gpt * gpt, const maporl_adamw_params * params, double max_grad_norm,
                              double * grad_norm_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_ptr(params, "params", 1);
        const maporl_adamw_params & p = *params;
        if (!(p.lr >= 0.0f && std::isfinite(p.lr)))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.lr: expected a finite number >= 0, got %g", (double)p.lr);
        if (!(p.beta1 >= 0.0f && p.beta1 < 1.0f))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.beta1: expected [0, 1), got %g", (double)p.beta1);
        if (!(p.beta2 >= 0.0f && p.beta2 < 1.0f))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.beta2: expected [0, 1), got %g", (double)p.beta2);
        if (!(p.eps > 0.0f)) throw_error(MAPORL_ERR_INVALID_ARG, "params.eps: expected > 0, got %g", (double)p.eps);
        if (!(p.weight_decay >= 0.0f && std::isfinite(p.weight_decay)))
            throw_error(MAPORL_ERR_INVALID_ARG, "params.weight_decay: expected a finite number >= 0, got %g",
                        (double)p.weight_decay);
        if (std::isnan(max_grad_norm))
            throw_error(MAPORL_ERR_INVALID_ARG, "max_grad_norm: expected a number (<= 0: no clip), got NaN");
        const gpt::AdamW h{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay};
        double n;
        if (gpt->cuda) {
            n = gpt::cuda_model_update(gpt->cuda, h, max_grad_norm, gpt->gm->step + 1);
            ++gpt->gm->step;
        } else if (gpt->lcuda && gpt->lm->active >= 0) {  // an adapter: its gradients to the host, its step there
            gpt->lcuda->pull_adapter_grads();
            n = gpt->lm->update(h, max_grad_norm);
        } else if (gpt->lcuda) {
            n = gpt->lcuda->update(h, max_grad_norm, gpt->lm->step + 1);
            ++gpt->lm->step;
        } else {
            n = gpt->visit([&](auto & m) { return m.update(h, max_grad_norm); });
        }
        if (grad_norm_out) *grad_norm_out = n;
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_cache_reset(maporl_gpt * gpt, int64_t batch, int64_t max_len) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->cuda) {
            gpt::cuda_model_cache_reset(gpt->cuda, batch, max_len);
            gpt->gm->cache_batch = batch;
            gpt->gm->cache_len = max_len;
        } else if (gpt->lcuda) {
            gpt->lcuda->cache_reset(batch, max_len);
            gpt->lm->cache_batch = batch;
            gpt->lm->cache_len = max_len;
            gpt->lm->row_adapter.assign((size_t)batch, gpt->lm->active);
        } else {
            gpt->visit([&](auto & m) { m.cache_reset(batch, max_len); });
        }
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_cache_release(maporl_gpt * gpt) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->cuda || gpt->lcuda) return maporl_gpt_cache_reset(gpt, 1, 1);  // the device buffers, shrunk
        gpt->visit([](auto & m) { m.cache_release(); });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_cache_swap(maporl_gpt * gpt, int64_t slot) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->cuda || gpt->lcuda)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "cache_swap: cache slots are kept on the CPU only; this model is on a GPU");
        gpt->visit([&](auto & m) { m.cache_swap(slot); });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_decode(maporl_gpt * gpt, const int32_t * tokens, int64_t pos, float * logits_out,
                                float * values_out) {
    return guarded([&] {
        require_gpt(gpt);
        require_ptr(tokens, "tokens", gpt->visit([](const auto & m) { return m.cache_batch; }));
        if (gpt->cuda) {
            gpt::cuda_model_decode(gpt->cuda, tokens, pos, logits_out, values_out);
            return MAPORL_OK;
        }
        if (gpt->lcuda) {
            const std::vector<int64_t> at((size_t)gpt->lm->cache_batch, pos);
            gpt->lcuda->decode_rows(tokens, at.data(), logits_out, values_out);
            return MAPORL_OK;
        }
        gpt->visit([&](auto & m) {
            m.decode(tokens, pos, logits_out != nullptr, values_out != nullptr);
            if (logits_out) std::memcpy(logits_out, m.step_logits.data(), sizeof(float) * m.step_logits.size());
            if (values_out) std::memcpy(values_out, m.step_values.data(), sizeof(float) * m.step_values.size());
        });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_prefill(maporl_gpt * gpt, const int32_t * tokens, const int64_t * lens, int64_t P) {
    return guarded([&] {
        require_gpt(gpt);
        if (!gpt->lm)
            throw_error(
                MAPORL_ERR_INVALID_ARG,
                "prefill: the model is of the GPT family (prefill and per-row positions are the Llama family's)");
        require_ptr(lens, "lens", gpt->lm->cache_batch);
        int64_t longest = 0;
        for (int64_t b = 0; b < gpt->lm->cache_batch; ++b) longest = std::max(longest, lens[b]);
        require_ptr(tokens, "tokens", longest > 0 ? gpt->lm->cache_batch * P : 0);
        if (gpt->lcuda)
            gpt->lcuda->prefill(tokens, lens, P);
        else
            gpt->lm->prefill(tokens, lens, P);
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_decode_rows(maporl_gpt * gpt, const int32_t * tokens, const int64_t * pos, float * logits_out,
                                     float * values_out) {
    return guarded([&] {
        require_gpt(gpt);
        if (!gpt->lm)
            throw_error(
                MAPORL_ERR_INVALID_ARG,
                "decode_rows: the model is of the GPT family (prefill and per-row positions are the Llama family's)");
        auto & m = *gpt->lm;
        require_ptr(tokens, "tokens", m.cache_batch);
        require_ptr(pos, "pos", m.cache_batch);
        if (gpt->lcuda) {
            gpt->lcuda->decode_rows(tokens, pos, logits_out, values_out);
            return MAPORL_OK;
        }
        m.decode_rows(tokens, pos, logits_out != nullptr, values_out != nullptr);
        if (logits_out) std::memcpy(logits_out, m.step_logits.data(), sizeof(float) * m.step_logits.size());
        if (values_out) std::memcpy(values_out, m.step_values.data(), sizeof(float) * m.step_values.size());
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_cache_info(const maporl_gpt * gpt, int64_t * batch_out, int64_t * max_len_out,
                                    int64_t * vocab_out) {
    return guarded([&] {
        require_gpt(gpt);
        gpt->visit([&](const auto & m) {
            if (batch_out) *batch_out = m.cache_batch;
            if (max_len_out) *max_len_out = m.cache_len;
            if (vocab_out) *vocab_out = m.cfg.vocab;
        });
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_forward_shape(const maporl_gpt * gpt, int64_t * B_out, int64_t * T_out) {
    return guarded([&] {
        require_gpt(gpt);
        gpt->visit([&](const auto & m) {
            if (B_out) *B_out = m.B;
            if (T_out) *T_out = m.T;
        });
        return MAPORL_OK;
    });
}

maporl_llama_config maporl_llama_default_config(void) {
    maporl_llama_config c;
    std::memset(&c, 0, sizeof c);
    c.rms_eps = 1e-6;
    c.rope_theta = 10000.0;
    c.rope_factor = 1.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_position = 8192;
    return c;
}

namespace {
maporl_status llama_create(const maporl_llama_config * config, bool init, uint64_t seed, maporl_gpt ** out) {
    return guarded([&] {
        require_ptr(config, "config", 1);
        require_ptr(out, "out", 1);
        *out = nullptr;
        const maporl_llama_config & c = *config;
        llama::Config l;
        l.vocab = c.vocab;
        l.context = c.context;
        l.layers = c.layers;
        l.d_model = c.d_model;
        l.heads = c.heads;
        l.kv_heads = c.kv_heads;
        l.head_dim = c.head_dim;
        l.intermediate = c.intermediate;
        l.rms_eps = c.rms_eps;
        l.rope_theta = c.rope_theta;
        if (c.rope_scaling < 0 || c.rope_scaling > 2)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "config.rope_scaling: expected 0 (none), 1 (linear) or 2 (llama3), got %d", c.rope_scaling);
        l.rope.type = (llama::RopeScaling::Type)c.rope_scaling;
        l.rope.factor = c.rope_factor;
        l.rope.low_freq_factor = c.rope_low_freq_factor;
        l.rope.high_freq_factor = c.rope_high_freq_factor;
        l.rope.original_max_position = c.rope_original_max_position;
        l.qkv_bias = c.qkv_bias != 0;
        l.o_bias = c.o_bias != 0;
        l.qk_norm = c.qk_norm != 0;
        l.tie_embeddings = c.tie_embeddings != 0;
        l.bf16 = c.bf16_matrices != 0;
        l.int8 = c.int8_matrices != 0;
        auto * g = new maporl_gpt(l);
        if (init) g->lm->init(seed);  // else zeros, for a loader that writes every tensor
        *out = g;
        return MAPORL_OK;
    });
}
}  // namespace

maporl_status maporl_llama_create(const maporl_llama_config * config, uint64_t seed, maporl_gpt ** out) {
    return llama_create(config, true, seed, out);
}

maporl_status maporl_llama_create_zeroed(const maporl_llama_config * config, maporl_gpt ** out) {
    return llama_create(config, false, 0, out);
}


namespace {
// An int8 base's matrix from F32 / BF16 / F16 values (quantized block by block) or Q8_0 blocks (taken as they are).
void set_q8_tensor(llama::Model<float> & m, int64_t index, int dtype, const void * data) {
    const auto & t = m.layout.tensors[(size_t)index];
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const uint8_t * src = (const uint8_t *)data;  // possibly unaligned (a view into a file buffer)
    const int64_t blocks = t.size / kQ8Block;
    // Row-major blocks first (the tensor is unchanged if a block is refused), then packed (q8.h) on the pool.
    std::vector<int8_t> nq((size_t)t.size);
    std::vector<uint16_t> nd((size_t)blocks);
    if (dtype == MAPORL_DTYPE_Q8_0) {
        for (int64_t b = 0; b < blocks; ++b) {  // every scale checked before anything is written
            uint16_t h;
            std::memcpy(&h, src + 34 * b, 2);
            if (!std::isfinite(f16_to_float(h)))
                throw_error(MAPORL_ERR_INVALID_ARG, "data: tensor %s: block %lld's scale is not finite", t.name.c_str(),
                            (long long)b);
        }
        for (int64_t b = 0; b < blocks; ++b) {
            std::memcpy(nd.data() + b, src + 34 * b, 2);
            std::memcpy(nq.data() + b * kQ8Block, src + 34 * b + 2, kQ8Block);
        }
    } else {
        if (dtype != MAPORL_DTYPE_F32 && dtype != MAPORL_DTYPE_BF16 && dtype != MAPORL_DTYPE_F16)
            throw_error(MAPORL_ERR_INVALID_ARG, "dtype: expected 0 (F32), 1 (BF16), 2 (F16) or 3 (Q8_0), got %d",
                        dtype);
        const int64_t es = dtype == MAPORL_DTYPE_F32 ? 4 : 2;
        auto read_block = [&](int64_t b, float * blk) {
            for (int64_t i = 0; i < kQ8Block; ++i) {
                const uint8_t * e = src + es * (b * kQ8Block + i);
                if (dtype == MAPORL_DTYPE_F32) {
                    std::memcpy(&blk[i], e, 4);
                } else {
                    uint16_t x;
                    std::memcpy(&x, e, 2);
                    blk[i] = dtype == MAPORL_DTYPE_BF16 ? bf16_to_float(x) : f16_to_float(x);
                }
            }
        };
        // Quantized on the pool; the first refused block is reported.
        std::atomic<int64_t> bad{blocks};
        parallel_for(blocks, 256, [&](int64_t b0, int64_t b1) {
            float blk[kQ8Block];
            for (int64_t b = b0; b < b1; ++b) {
                read_block(b, blk);
                if (!q8_quantize_block(blk, nq.data() + b * kQ8Block, nd.data() + b)) {
                    int64_t cur = bad.load();
                    while (b < cur && !bad.compare_exchange_weak(cur, b)) {}
                    return;
                }
            }
        });
        if (const int64_t b = bad.load(); b < blocks) {
            float blk[kQ8Block];
            read_block(b, blk);
            int64_t at = 0;
            while (at < kQ8Block && std::isfinite(blk[at])) ++at;
            if (at < kQ8Block)
                throw_error(MAPORL_ERR_INVALID_ARG,
                            "data: tensor %s has a non-finite value (%g) at index %lld; int8 cannot hold it",
                            t.name.c_str(), (double)blk[at], (long long)(b * kQ8Block + at));
            throw_error(
                MAPORL_ERR_INVALID_ARG,
                "data: tensor %s: values near index %lld are beyond int8's range (max |x| / 127 past a half's 65504)",
                t.name.c_str(), (long long)(b * kQ8Block));
        }
    }
    uint8_t * pq = const_cast<uint8_t *>(m.q8q(index));
    uint16_t * pd = const_cast<uint16_t *>(m.q8s(index));
    parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            q8_pack_row(pq, pd, cols, r, nq.data() + r * cols, nd.data() + r * cols / kQ8Block);
    });
}
}  // namespace

maporl_status maporl_gpt_set_tensor(maporl_gpt * gpt, int64_t index, int dtype, const void * data, int64_t count) {
    return guarded([&] {
        require_gpt(gpt);
        if (gpt->on_device())
            throw_error(MAPORL_ERR_INVALID_ARG, "set_tensor: the model is on CUDA; write tensors before moving it");
        const auto & ts = gpt->visit_trainable(
            [](const auto & m) -> const std::vector<gpt::Layout::Tensor> & { return m.layout.tensors; });
        if (index < 0 || index >= (int64_t)ts.size())
            throw_error(MAPORL_ERR_INVALID_ARG, "index: expected 0..%lld, got %lld", (long long)ts.size() - 1,
                        (long long)index);
        const auto & t = ts[(size_t)index];
        if (count != t.size)
            throw_error(MAPORL_ERR_INVALID_ARG, "count: tensor %s has %lld elements, got %lld", t.name.c_str(),
                        (long long)t.size, (long long)count);
        require_ptr(data, "data", count);
        if (gpt->lm && gpt->lm->active < 0 && gpt->lm->is_q8(index)) {
            set_q8_tensor(*gpt->lm, index, dtype, data);
            return MAPORL_OK;
        }
        if (dtype == MAPORL_DTYPE_Q8_0)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "dtype: Q8_0 (3) is for the matrices of an int8 base; tensor %s is held as %s", t.name.c_str(),
                        gpt->lm && gpt->lm->is_half(index) ? "bfloat16" : "float32");
        if (gpt->lm && gpt->lm->active < 0 &&
            gpt->lm->is_half(index)) {  // a bfloat16 matrix: kept as bf16 (others rounded)
            uint16_t * dst = gpt->lm->h(index);
            const uint8_t * src = (const uint8_t *)data;
            if (dtype == MAPORL_DTYPE_BF16) {
                std::memcpy(dst, src, 2 * (size_t)count);
            } else if (dtype == MAPORL_DTYPE_F32 || dtype == MAPORL_DTYPE_F16) {
                for (int64_t i = 0; i < count; ++i) {
                    float f;
                    if (dtype == MAPORL_DTYPE_F32) {
                        std::memcpy(&f, src + 4 * i, 4);
                    } else {
                        uint16_t x;
                        std::memcpy(&x, src + 2 * i, 2);
                        f = f16_to_float(x);
                    }
                    dst[i] = float_to_bf16(f);
                }
            } else {
                throw_error(MAPORL_ERR_INVALID_ARG, "dtype: expected 0 (F32), 1 (BF16) or 2 (F16), got %d", dtype);
            }
            return MAPORL_OK;
        }
        float * dst = gpt->visit_trainable([](auto & m) { return m.params.data(); }) + t.offset;
        if (dtype == MAPORL_DTYPE_F32) {
            std::memcpy(dst, data, sizeof(float) * (size_t)count);
        } else if (dtype == MAPORL_DTYPE_BF16 || dtype == MAPORL_DTYPE_F16) {
            const uint8_t * src = (const uint8_t *)data;  // possibly unaligned (a view into a file buffer)
            for (int64_t i = 0; i < count; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = dtype == MAPORL_DTYPE_BF16 ? bf16_to_float(h) : f16_to_float(h);
            }
        } else {
            throw_error(MAPORL_ERR_INVALID_ARG, "dtype: expected 0 (F32), 1 (BF16) or 2 (F16), got %d", dtype);
        }
        gpt->visit_trainable([](auto & m) { m.weights_changed(); });
        return MAPORL_OK;
    });
}

}  // extern "C"
