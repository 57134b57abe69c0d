// model_scores.cpp: scoring and training through the log-probs instead of the logits (maporl_gpt_score,
// maporl_gpt_score_backward). The forward keeps the final hidden state, and the LM head runs over `chunk` rows at a
// time: each chunk's logits give their log-probs (and entropies), and the backward recomputes them to turn the
// loss's gradient w.r.t. those log-probs into the head's and the hidden state's gradients. So no [B, T, V] array
// exists at any time (a Qwen vocabulary of 151,936 at B = 4, T = 256 would be 622 MB of float logits), at the
// cost of the LM head's GEMM once more in training (unless the logits fit the keep budget: then they are computed
// once, over all rows, and kept for the backward). The results equal the fused kernel's over the full logits (the
// same row formulas, and each weight-gradient element one chain over the rows in order, chunks or not).
#include <algorithm>
#include <cstring>
#include <vector>

#include "native/core/core.h"
#include "native/model/model_handle.h"
#include "native/rl/policy_loss.h"

using namespace maporl;

namespace {

// Rows per chunk: `asked`, or by default at most 64 MB of float logits split evenly over the chunks that takes (1024
// rows at V = 49,152: 4 chunks of 256, not 6 of 170 and one of 4). Every chunk packs the whole LM head for its GEMM,
// so fewer, even chunks pack it fewer times (7 -> 4 there: ~3% of the scoring forward).
int64_t chunk_rows(int64_t asked, int64_t V, int64_t N) {
    N = std::max<int64_t>(1, N);
    if (asked > 0) return std::min(asked, N);
    const int64_t most = std::max<int64_t>(1, ((int64_t)16 << 20) / std::max<int64_t>(1, V)),
                  chunks = (N + most - 1) / most;
    return (N + chunks - 1) / chunks;
}

// fn(z, n0, r) for each chunk of rows n0 .. n0 + r (z: room for r x V logits, kept in the handle between calls;
// or, with `whole` (all N x V logits), the chunk's own rows of it).
template <class Fn>
void over_chunks(maporl_gpt * gpt, int64_t chunk, int64_t V, int64_t N, float * whole, Fn && fn) {
    const int64_t rows = chunk_rows(chunk, V, N);
    std::vector<float> & z = gpt->score_z;
    if (!whole) z.resize((size_t)(rows * V));
    for (int64_t n0 = 0; n0 < N; n0 += rows) fn(whole ? whole + n0 * V : z.data(), n0, std::min(rows, N - n0));
}

void drop_kept(maporl_gpt * gpt) { std::vector<float>().swap(gpt->score_kept); }

}  // namespace

extern "C" {

maporl_status maporl_gpt_score(maporl_gpt * gpt, const int32_t * tokens, const int32_t * targets, int64_t B, int64_t T,
                               float temperature, int64_t chunk, float * logp_out, float * entropy_out,
                               float * values_out) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
        if (gpt->cuda)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "score: the model is on CUDA (use maporl_gpt_forward and the fused loss there)");
        require_dims(B, T, "B", "T");
        const int64_t N = B * T;
        require_ptr(tokens, "tokens", N);
        require_ptr(targets, "targets", N);
        require_ptr(logp_out, "logp_out", N);
        if (!(temperature > 0.0f) || !(temperature < INFINITY))
            throw_error(MAPORL_ERR_INVALID_ARG, "temperature: expected a finite number > 0, got %g",
                        (double)temperature);
        const int64_t V = gpt->visit([](const auto & m) { return m.cfg.vocab; });
        for (int64_t n = 0; n < N; ++n)
            if (targets[n] < 0 || targets[n] >= V)
                throw_error(MAPORL_ERR_INVALID_ARG, "targets: expected ids in [0, %lld), got %d at index %lld",
                            (long long)V, (int)targets[n], (long long)n);
        gpt->score_targets.clear();  // a failed forward leaves nothing for a backward
        drop_kept(gpt);
        if (gpt->gm) {
            auto & m = *gpt->gm;
            m.forward(tokens, B, T);
            logprobs_cpu<float>(m.logits.data(), targets, N, V, temperature, logp_out, entropy_out);
            if (values_out) std::memcpy(values_out, m.values.data(), sizeof(float) * (size_t)N);
        } else {  // a Llama model, on the CPU or the device (whose chunks of logits come to the host)
            llama::DeviceModel * d = gpt->lcuda.get();
            if (d) {
                d->forward(tokens, B, T, /*head=*/false, nullptr, values_out);
                gpt->lm->B = B;
                gpt->lm->T = T;
            } else {
                gpt->lm->forward(tokens, B, T, /*head=*/false);
                if (values_out) std::memcpy(values_out, gpt->lm->values.data(), sizeof(float) * (size_t)N);
            }
            // A training forward whose logits fit the budget keeps them all for the backward (score_kept; a failure
            // frees them).
            if (gpt->lm->training && (double)N * (double)V * sizeof(float) <= (double)gpt->score_keep_bytes)
                gpt->score_kept.resize((size_t)(N * V));
            struct Drop {
                maporl_gpt * g;
                bool armed = true;
                ~Drop() {
                    if (armed) drop_kept(g);
                }
            } drop{gpt};
            // Kept logits on the CPU: the head's GEMM over all N rows at once (its weight packed once, not once per
            // chunk; every logit is the same float either way), then the log-probs chunk by chunk.
            float * whole = gpt->score_kept.empty() ? nullptr : gpt->score_kept.data();
            const bool at_once = whole && !d;
            if (at_once) gpt->lm->head_rows(whole, 0, N);
            over_chunks(gpt, chunk, V, N, whole, [&](float * z, int64_t n0, int64_t r) {
                if (d)
                    d->head_rows(z, n0, r);
                else if (!at_once)
                    gpt->lm->head_rows(z, n0, r);
                logprobs_cpu<float>(z, targets + n0, r, V, temperature, logp_out + n0,
                                    entropy_out ? entropy_out + n0 : nullptr);
            });
            drop.armed = false;
        }
        gpt->score_targets.assign(targets, targets + N);
        gpt->score_temperature = temperature;
        gpt->score_chunk = chunk;
        release_free_memory();
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_score_backward(maporl_gpt * gpt, const float * grad_logp, const float * grad_entropy,
                                        const float * dvalues) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
        const int64_t N = (int64_t)gpt->score_targets.size();
        if (N == 0 || gpt->cuda)
            throw_error(MAPORL_ERR_INVALID_ARG, "score_backward: no maporl_gpt_score to go back through");
        if (!grad_logp && !grad_entropy && !dvalues)
            throw_error(MAPORL_ERR_INVALID_ARG, "score_backward: expected grad_logp, grad_entropy or dvalues");
        const int32_t * y = gpt->score_targets.data();
        const float temp = gpt->score_temperature;
        const int64_t V = gpt->visit([](const auto & m) { return m.cfg.vocab; });
        std::vector<float> zero_lp;
        if (!grad_logp) zero_lp.assign((size_t)N, 0.0f);
        const float * gl = grad_logp ? grad_logp : zero_lp.data();
        const bool head = grad_logp || grad_entropy;
        if (gpt->gm) {
            auto & m = *gpt->gm;
            if (head)
                logits_backward_cpu<float>(m.logits.data(), y, N, V, temp, gl, grad_entropy,
                                           m.logits.data());  // in place
            m.backward(head ? m.logits.data() : nullptr, dvalues);
        } else {
            auto & m = *gpt->lm;
            llama::DeviceModel * d = gpt->lcuda.get();
            std::vector<float> dlnf;  // (the CPU model's; the device keeps its own)
            if (d)
                d->backward_begin();
            else
                dlnf.assign((size_t)(N * m.cfg.d_model), 0.0f);
            // The forward's logits (freed when this call returns, whatever happens: the gradient overwrites them), or
            // none: each chunk's are recomputed.
            std::vector<float> kept;
            kept.swap(gpt->score_kept);
            const bool have = kept.size() == (size_t)(N * V);
            // With all the logits kept on the CPU, the head's backward GEMMs run once over all N rows after the
            // chunks' gradients (the same floats: each weight-gradient element is one chain over the rows in order,
            // and each input-gradient row its own), instead of once per chunk.
            const bool at_once = have && !d;
            if (head)
                over_chunks(gpt, gpt->score_chunk, V, N, have ? kept.data() : nullptr,
                            [&](float * z, int64_t n0, int64_t r) {
                                if (!have) {
                                    if (d)
                                        d->head_rows(z, n0, r);
                                    else
                                        m.head_rows(z, n0, r);
                                }
                                logits_backward_cpu<float>(z, y + n0, r, V, temp, gl + n0,
                                                           grad_entropy ? grad_entropy + n0 : nullptr, z);
                                if (d)
                                    d->head_backward_rows(z, n0, r);
                                else if (!at_once)
                                    m.head_backward_rows(dlnf.data(), z, n0, r);
                            });
            if (head && at_once) m.head_backward_rows(dlnf.data(), kept.data(), 0, N);
            if (d)
                d->backward_hidden(dvalues);
            else
                m.backward_hidden(dlnf, dvalues);
        }
        gpt->score_targets.clear();  // one backward per scoring forward
        release_free_memory();
        return MAPORL_OK;
    });
}

maporl_status maporl_gpt_set_score_keep(maporl_gpt * gpt, int64_t bytes) {
    return guarded([&] {
        if (!gpt) throw_error(MAPORL_ERR_INVALID_ARG, "gpt: expected a model, got NULL");
        if (bytes < 0 || bytes > ((int64_t)1 << 40))
            throw_error(MAPORL_ERR_INVALID_ARG, "bytes: expected 0 .. 2^40, got %lld", (long long)bytes);
        gpt->score_keep_bytes = bytes;
        return MAPORL_OK;
    });
}

}  // extern "C"
