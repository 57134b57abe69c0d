// model_check.h: checks shared by the model tests (test_gpt, test_llama, test_lora, test_model_scores): every
// parameter's analytic gradient against central finite differences of the loss in double, the mean next-token
// cross-entropy of float logits with its gradient (written out, independent of the loss kernels), decoding without
// the heads, and cached decoding against the full forward.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace model_check {

// Decodes the same 2-row, T-position prompt into two copies of a model, one with the heads at every position and one
// with them only at the last; true when the last position's logits and values agree to the bit (skipping the heads
// must leave the KV cache as it was).
template <typename Model>
bool heads_skipped_cache_the_same(Model & with, Model & without, int64_t vocab, int64_t T) {
    with.cache_reset(2, T);
    without.cache_reset(2, T);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t cur[2] = {(int32_t)((3 * t + 1) % vocab), (int32_t)((5 * t + 2) % vocab)};
        with.decode(cur, t);
        without.decode(cur, t, t == T - 1, t == T - 1);
    }
    return with.step_logits == without.step_logits && with.step_values == without.step_values;
}

// Greedy decoding through the KV cache against the full forward. B rows (row b starts with token first + b) are
// decoded T steps, each next token the argmax (first on ties) of the cached step's logits; then each row's full forward
// over its T tokens (after select(b)) must give every step's logits and values. select(-1) runs once after the cache
// reset, before decoding (a LoRA test sets the per-row adapters there and picks row b's adapter at select(b)). With
// `prefixes`, the B rows' forward over every prefix 0..t, all rows in one batch, must give step t too (a batched or
// shorter forward differs from a one-row full-length one in its shapes). Returns the largest absolute difference.
template <typename Model, typename Select>
float cached_decode_vs_forward(Model & m, int64_t B, int64_t T, int64_t V, int32_t first, bool prefixes,
                               Select && select) {
    std::vector<int32_t> seq((size_t)(B * T));
    for (int64_t b = 0; b < B; ++b) seq[(size_t)(b * T)] = first + (int32_t)b;
    m.cache_reset(B, T);
    select(-1);
    std::vector<std::vector<float>> logits, values;
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> cur((size_t)B);
        for (int64_t b = 0; b < B; ++b) cur[(size_t)b] = seq[(size_t)(b * T + t)];
        m.decode(cur.data(), t);
        logits.push_back(m.step_logits);
        values.push_back(m.step_values);
        if (t + 1 < T)
            for (int64_t b = 0; b < B; ++b) {
                const float * z = m.step_logits.data() + b * V;
                seq[(size_t)(b * T + t + 1)] = (int32_t)(std::max_element(z, z + V) - z);
            }
    }
    float worst = 0;
    for (int64_t b = 0; b < B; ++b) {
        select(b);
        m.forward(seq.data() + b * T, 1, T);
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t v = 0; v < V; ++v)
                worst =
                    std::max(worst, std::fabs(m.logits[(size_t)(t * V + v)] - logits[(size_t)t][(size_t)(b * V + v)]));
            worst = std::max(worst, std::fabs(m.values[(size_t)t] - values[(size_t)t][(size_t)b]));
        }
    }
    for (int64_t t = 0; prefixes && t < T; ++t) {
        std::vector<int32_t> prefix((size_t)(B * (t + 1)));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t u = 0; u <= t; ++u) prefix[(size_t)(b * (t + 1) + u)] = seq[(size_t)(b * T + u)];
        m.forward(prefix.data(), B, t + 1);
        for (int64_t b = 0; b < B; ++b) {
            for (int64_t v = 0; v < V; ++v)
                worst = std::max(
                    worst,
                    std::fabs(m.logits[(size_t)((b * (t + 1) + t) * V + v)] - logits[(size_t)t][(size_t)(b * V + v)]));
            worst = std::max(worst, std::fabs(m.values[(size_t)(b * (t + 1) + t)] - values[(size_t)t][(size_t)b]));
        }
    }
    return worst;
}

// How many of `params` have an analytic gradient (grads) off (L(x + h) - L(x - h)) / 2h, h = 1e-6, by more than
// 1e-6 * max(1, |fd|); the first three are printed after `label`. `loss` recomputes L from the current params.
template <typename Loss>
int fd_mismatches(std::vector<double> & params, const std::vector<double> & grads, Loss && loss, const char * label) {
    int bad = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        const double x0 = params[i], h = 1e-6;
        params[i] = x0 + h;
        const double up = loss();
        params[i] = x0 - h;
        const double dn = loss();
        params[i] = x0;
        const double fd = (up - dn) / (2 * h);
        if (!(std::fabs(fd - grads[i]) <= 1e-6 * std::max(1.0, std::fabs(fd)))) {
            if (bad < 3) std::printf("  %s param %zu: analytic %.9g fd %.9g\n", label, i, grads[i], fd);
            ++bad;
        }
    }
    return bad;
}

// Mean over N rows of -log softmax(z)[target] for logits [N, V] (in double); dl [N, V] = its gradient.
inline double cross_entropy(const float * logits, const int32_t * tgt, int64_t N, int64_t V, float * dl) {
    double loss = 0;
    for (int64_t n = 0; n < N; ++n) {
        const float * z = logits + n * V;
        double mx = z[0], sum = 0;
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, (double)z[v]);
        for (int64_t v = 0; v < V; ++v) sum += std::exp((double)z[v] - mx);
        loss += -((double)z[tgt[n]] - mx - std::log(sum));
        for (int64_t v = 0; v < V; ++v)
            dl[n * V + v] = (float)((std::exp((double)z[v] - mx) / sum - (v == tgt[n])) / (double)N);
    }
    return loss / (double)N;
}

}  // namespace model_check
