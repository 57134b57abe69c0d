// test_llama_device_memory.cpp: the device model's memory (native/model/llama_device.h, llama_device_memory.h) on the
// emulated device (llama_device_host.h, which counts every byte it hands out and can fail the k-th allocation):
// the bytes by kind against the planned formula (device_plan) for LoRA training, base training and generation, and
// against every byte the emulated device holds; generation and LoRA training allocate no base gradients or moments;
// a removed adapter's device copy is freed (maporl_lora_remove, through the C entry points); a backward that runs out
// of memory anywhere adds nothing (a retry gives the bits of a clean backward); attention probabilities that do not
// fit layer by layer are kept once and recomputed in the backward (the same bits), and named when even that does not
// fit; and a 7B-shaped configuration accounted without allocating it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/llama_device_host.h"
#include "native/model/model_handle.h"
#include "test/native/model/llama_variants.h"
#include "maporl.h"

namespace {

using namespace llama_variants;
using E = maporl::llama::HostDevice;
using Dev = L::DeviceLlama<E>;

bool same(const L::DeviceBytes & got, const L::DeviceBytes & want, const char * what) {
    const bool ok = got.weights == want.weights && got.adapters == want.adapters && got.gradients == want.gradients &&
        got.moments == want.moments && got.activations == want.activations && got.cache == want.cache;
    if (!ok)
        std::printf(
            "  %s: measured / planned bytes: weights %lld / %lld, adapters %lld / %lld, gradients %lld / %lld, moments "
            "%lld / %lld, "
            "activations %lld / %lld, cache %lld / %lld\n",
            what, (long long)got.weights, (long long)want.weights, (long long)got.adapters, (long long)want.adapters,
            (long long)got.gradients, (long long)want.gradients, (long long)got.moments, (long long)want.moments,
            (long long)got.activations, (long long)want.activations, (long long)got.cache, (long long)want.cache);
    return ok;
}

std::vector<int32_t> tokens(int64_t n, int64_t V, uint32_t seed) {
    std::mt19937 r(seed);
    std::vector<int32_t> t((size_t)n);
    for (auto & x : t) x = (int32_t)(r() % (uint32_t)V);
    return t;
}
std::vector<float> uniform(int64_t n, uint32_t seed) {
    std::mt19937 r(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x((size_t)n);
    for (auto & v : x) v = u(r);
    return x;
}

// A backward with the LM head in chunks of `chunk` rows (each chunk's logits, then their gradient), as model_scores.cpp
// drives it.
void chunked_backward(Dev & d, const std::vector<float> & dlogits, const std::vector<float> & dvalues, int64_t N,
                      int64_t V, int64_t chunk) {
    std::vector<float> z((size_t)(chunk * V));
    d.backward_begin();
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        const int64_t r = std::min(chunk, N - n0);
        d.head_rows(z.data(), n0, r);  // (the logits of the chunk, as a loss would need them)
        d.head_backward_rows(dlogits.data() + n0 * V, n0, r);
    }
    d.backward_hidden(dvalues.data());
}

TEST(training_memory_by_kind_is_the_plan_and_every_byte_held) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        for (bool lora : {true, false}) {
            L::Model<float> host(c);
            perturb(host, 3);
            const int64_t before = E::counters().live;
            {
                Dev dev(c, &host);
                dev.upload(0, host.params.data(), host.layout.total);
                L::DevicePlan w;
                w.B = 2, w.T = 7, w.backward = true, w.head_rows = 5;
                if (lora) {
                    L::LoraConfig a;
                    a.rank = 3;
                    a.targets = (1u << L::kQ) | (1u << L::kO) | (1u << L::kUp) | (1u << L::kDown);
                    host.active = host.lora_add(a, 9);
                    w.lora_rank = a.rank, w.lora_targets = a.targets;
                } else {
                    w.train_base = true;
                }
                const int64_t N = w.B * w.T, V = c.vocab;
                const auto tok = tokens(N, V, 4);
                dev.forward(tok.data(), w.B, w.T, false, nullptr, nullptr);
                const L::DeviceBytes fwd = dev.memory();
                CHECK(fwd.gradients == (lora ? dev.mirrors[0].grads.cap * 4 : 0) && fwd.moments == 0,
                      "%s lora=%d: a forward allocates no base gradients", var.name, (int)lora);
                chunked_backward(dev, uniform(N * V, 5), uniform(N, 6), N, V, w.head_rows);
                if (!lora) dev.update(maporl::gpt::AdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f}, 1.0, 1);
                const L::DeviceBytes got = dev.memory();
                CHECK(same(got, L::device_plan(c, dev.layout, w), var.name),
                      "%s lora=%d: the bytes by kind are the plan's", var.name, (int)lora);
                CHECK(got.total() == E::counters().live - before,
                      "%s lora=%d: the kinds count every byte held (%lld of %lld)", var.name, (int)lora,
                      (long long)got.total(), (long long)(E::counters().live - before));
                if (lora)
                    CHECK(got.moments == 0 && got.gradients == got.adapters,
                          "%s: LoRA training holds the adapter's gradients only", var.name);
            }
            CHECK(E::counters().live == before, "%s lora=%d: the model's release returns every byte", var.name,
                  (int)lora);
        }
    }
}

TEST(generation_allocates_no_gradients_and_its_bytes_are_the_plan) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c);
        perturb(host, 7);
        const int64_t before = E::counters().live;
        Dev dev(c, &host);
        dev.upload(0, host.params.data(), host.layout.total);
        const int64_t batch = 3, max_len = 10, P = 4;
        dev.cache_reset(batch, max_len);
        const auto tok = tokens(batch * P, c.vocab, 8);
        const std::vector<int64_t> lens = {4, 2, 3};
        dev.prefill(tok.data(), lens.data(), P);
        std::vector<float> logits((size_t)(batch * c.vocab)), values((size_t)batch);
        const std::vector<int64_t> pos = {4, 2, 3};
        dev.decode_rows(tok.data(), pos.data(), logits.data(), values.data());
        L::DevicePlan w;
        w.cache_batch = batch, w.cache_len = max_len, w.step_rows = 4 + 2 + 3, w.head_rows = batch;
        const L::DeviceBytes got = dev.memory();
        CHECK(got.gradients == 0 && got.moments == 0, "%s: generation holds no gradients (%lld) or moments (%lld)",
              var.name, (long long)got.gradients, (long long)got.moments);
        CHECK(same(got, L::device_plan(c, dev.layout, w), var.name) && got.total() == E::counters().live - before,
              "%s: generation's bytes by kind are the plan's and every byte held", var.name);
        std::vector<float> g((size_t)dev.layout.total, 1.0f);
        dev.download(3, g.data(), dev.layout.total);
        CHECK(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }) && dev.memory().gradients == 0,
              "%s: downloading gradients never allocated gives zeros and allocates none", var.name);
    }
}

TEST(removing_an_adapter_frees_its_device_copy) {
    maporl_llama_config lc = maporl_llama_default_config();
    lc.vocab = 40, lc.context = 16, lc.layers = 2, lc.d_model = 32, lc.heads = 4, lc.kv_heads = 2, lc.head_dim = 8,
    lc.intermediate = 48;
    maporl_gpt * gpt = nullptr;
    CHECK(maporl_llama_create(&lc, 1, &gpt) == MAPORL_OK && maporl_llama_emulate_device(gpt) == MAPORL_OK,
          "create + emulate: %s", maporl_last_error());
    if (!gpt) return;
    const int64_t B = 2, T = 8, N = B * T;
    const auto tok = tokens(N, lc.vocab, 2);
    const auto dlog = uniform(N * lc.vocab, 3), dval = uniform(N, 4);
    std::vector<float> logits((size_t)(N * lc.vocab)), values((size_t)N);
    maporl_adamw_params h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
    std::vector<int64_t> live;
    for (int cycle = 0; cycle < 4; ++cycle) {
        maporl_lora_config a = maporl_lora_default_config();
        a.rank = 4;
        int64_t id = -1;
        bool ok = maporl_lora_add(gpt, &a, 10 + (uint64_t)cycle, &id) == MAPORL_OK &&
            maporl_lora_select(gpt, id) == MAPORL_OK &&
            maporl_gpt_forward(gpt, tok.data(), B, T, logits.data(), values.data()) == MAPORL_OK &&
            maporl_gpt_backward(gpt, dlog.data(), dval.data()) == MAPORL_OK &&
            maporl_gpt_step(gpt, &h, 1.0, nullptr) == MAPORL_OK;
        const L::DeviceBytes held = gpt->lcuda->memory();
        ok = ok && maporl_lora_select(gpt, -1) == MAPORL_OK && maporl_lora_remove(gpt, id) == MAPORL_OK;
        CHECK(ok, "cycle %d: add / train / remove: %s", cycle, maporl_last_error());
        const L::DeviceBytes left = gpt->lcuda->memory();
        CHECK(held.adapters > 0 && left.adapters == 0 && left.gradients == 0,
              "cycle %d: the removed adapter's bytes are freed (adapters %lld -> %lld, gradients %lld -> %lld)", cycle,
              (long long)held.adapters, (long long)left.adapters, (long long)held.gradients, (long long)left.gradients);
        live.push_back(E::counters().live);
    }
    CHECK(live[1] == live[2] && live[2] == live[3],
          "the device holds the same bytes after each add / train / remove cycle (%lld, %lld, %lld)",
          (long long)live[1], (long long)live[2], (long long)live[3]);
    maporl_gpt_free(gpt);
}

TEST(a_backward_out_of_memory_anywhere_adds_nothing) {
    const L::Config c = decoder_config(variants()[3]);  // (qk-norm: every backward buffer)
    for (bool lora : {false, true}) {
        L::Model<float> host(c);
        perturb(host, 13);
        if (lora) {
            L::LoraConfig a;
            a.rank = 2;
            host.active = host.lora_add(a, 3);
            for (auto & x : host.adapters[0]->params) x += 0.05f;
            host.adapters[0]->weights_changed();
        }
        const int64_t B = 2, T = 6, N = B * T, V = c.vocab, chunk = 5;
        const auto tok = tokens(N, V, 14);
        const auto dlog = uniform(N * V, 15), dval = uniform(N, 16);
        auto grads = [&](Dev & d) {
            if (lora) {
                d.pull_adapter_grads();
                return host.adapters[0]->grads;
            }
            std::vector<float> g((size_t)d.layout.total);
            d.download(3, g.data(), d.layout.total);
            return g;
        };
        std::vector<float> want;
        int64_t allocs = 0;
        {
            Dev d(c, &host);
            d.upload(0, host.params.data(), host.layout.total);
            d.forward(tok.data(), B, T, false, nullptr, nullptr);
            const int64_t a0 = E::counters().allocs;
            chunked_backward(d, dlog, dval, N, V, chunk);
            allocs = E::counters().allocs - a0;
            want = grads(d);
        }
        CHECK(allocs > 3, "lora=%d: the backward allocates (%lld allocations to fail)", (int)lora, (long long)allocs);
        for (int64_t k = 1; k <= allocs; ++k) {
            Dev d(c, &host);
            d.upload(0, host.params.data(), host.layout.total);
            d.forward(tok.data(), B, T, false, nullptr, nullptr);
            E::counters().fail_after = k;
            bool failed = false;
            try {
                chunked_backward(d, dlog, dval, N, V, chunk);
            } catch (const maporl::Error & e) { failed = e.status == MAPORL_ERR_OUT_OF_MEMORY; }
            E::counters().fail_after = 0;
            CHECK(failed, "lora=%d: allocation %lld of the backward failed as out of memory", (int)lora, (long long)k);
            chunked_backward(d, dlog, dval, N, V, chunk);  // the retry
            CHECK(grads(d) == want,
                  "lora=%d: out of memory at allocation %lld, then a retry: the bits of one clean backward", (int)lora,
                  (long long)k);
        }
    }
}

TEST(an_uploaded_first_moment_is_kept_by_the_first_step) {
    const L::Config c = decoder_config(variants()[1]);
    L::Model<float> host(c);
    perturb(host, 5);
    Dev dev(c, &host);
    dev.upload(0, host.params.data(), host.layout.total);
    const int64_t n = dev.layout.total, B = 1, T = 5;
    const auto m0 = uniform(n, 17);
    dev.upload(1, m0.data(), n);  // (m alone: v is allocated, zero, by the step)
    const auto tok = tokens(B * T, c.vocab, 18);
    dev.forward(tok.data(), B, T, false, nullptr, nullptr);
    dev.backward(uniform(B * T * c.vocab, 19).data(), nullptr);
    std::vector<float> g((size_t)n), m1((size_t)n), v1((size_t)n);
    dev.download(3, g.data(), n);
    dev.update(maporl::gpt::AdamW{0.0f, 0.9f, 0.95f, 1e-8f, 0.0f}, 0.0, 1);
    dev.download(1, m1.data(), n);
    dev.download(2, v1.data(), n);
    double worst_m = 0, worst_v = 0;
    for (int64_t i = 0; i < n; ++i) {
        worst_m = std::max(worst_m, std::fabs((double)m1[(size_t)i] - (0.9 * m0[(size_t)i] + 0.1 * g[(size_t)i])));
        worst_v = std::max(worst_v, std::fabs((double)v1[(size_t)i] - 0.05 * g[(size_t)i] * g[(size_t)i]));
    }
    CHECK(worst_m < 1e-6 && worst_v < 1e-6, "m = 0.9 m0 + 0.1 g (worst %g), v = 0.05 g^2 from zero (worst %g)", worst_m,
          worst_v);
}

// A layer's probabilities that do not fit (the injected failure of that allocation): the forward keeps one buffer
// for all layers and the backward recomputes each layer's; logits, values and gradients are the bits of the forward
// that kept them all, and the bytes are the plan with recompute_attention. A later forward of that size recomputes
// from the start; a smaller one keeps every layer's again.
TEST(attention_probabilities_that_do_not_fit_are_recomputed_with_the_same_bits) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c);
        perturb(host, 21);
        const int64_t B = 2, T = 9, N = B * T, V = c.vocab, chunk = 5;
        const auto tok = tokens(N, V, 22);
        const auto dlog = uniform(N * V, 23), dval = uniform(N, 24);
        struct Out {
            std::vector<float> logits, values, grads;
        };
        auto run = [&](Dev & d, Out & o) {
            o.logits.assign((size_t)(N * V), 0.0f);
            o.values.assign((size_t)N, 0.0f);
            d.forward(tok.data(), B, T, true, o.logits.data(), o.values.data());
        };
        auto back = [&](Dev & d, Out & o) {
            chunked_backward(d, dlog, dval, N, V, chunk);
            o.grads.assign((size_t)d.layout.total, 0.0f);
            d.download(3, o.grads.data(), d.layout.total);
        };
        Out want;
        int64_t allocs = 0;
        {
            Dev d(c, &host);
            d.upload(0, host.params.data(), host.layout.total);
            const int64_t a0 = E::counters().allocs;
            run(d, want);
            allocs = E::counters().allocs - a0;
            CHECK(!d.att_recompute, "%s: a forward that fits keeps every layer's probabilities", var.name);
            back(d, want);
        }
        int recomputed = 0;
        for (int64_t k = 1; k <= allocs; ++k) {
            Dev d(c, &host);
            d.upload(0, host.params.data(), host.layout.total);
            E::counters().fail_after = k;
            Out got;
            bool oom = false;
            try {
                run(d, got);
            } catch (const maporl::Error & e) { oom = e.status == MAPORL_ERR_OUT_OF_MEMORY; }
            const bool consumed = E::counters().fail_after == 0;
            E::counters().fail_after = 0;
            CHECK(consumed, "%s: allocation %lld of the forward was reached", var.name, (long long)k);
            if (oom || !d.att_recompute) continue;  // (another buffer's failure: an error, as before)
            ++recomputed;
            back(d, got);
            CHECK(got.logits == want.logits && got.values == want.values && got.grads == want.grads,
                  "%s: allocation %lld failed, probabilities recomputed: the bits of the forward that kept them",
                  var.name, (long long)k);
            Out again;
            run(d, again);
            CHECK(d.att_recompute && again.logits == want.logits,
                  "%s: the next forward of that size recomputes from the start, the same logits", var.name);
            std::vector<float> l1((size_t)(T * V)), v1((size_t)T);
            d.forward(tok.data(), 1, T, true, l1.data(), v1.data());
            CHECK(!d.att_recompute, "%s: a smaller forward keeps every layer's probabilities again", var.name);
            // The bytes of a training step that recomputes (the head in chunks, as the plan counts it).
            Dev m(c, &host);
            m.upload(0, host.params.data(), host.layout.total);
            E::counters().fail_after = k;
            m.forward(tok.data(), B, T, false, nullptr, nullptr);
            E::counters().fail_after = 0;
            chunked_backward(m, dlog, dval, N, V, chunk);
            m.update(maporl::gpt::AdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f}, 1.0, 1);
            L::DevicePlan w;
            w.B = B, w.T = T, w.backward = true, w.head_rows = chunk, w.train_base = true, w.recompute_attention = true;
            CHECK(m.att_recompute && same(m.memory(), L::device_plan(c, m.layout, w), var.name),
                  "%s: the bytes are the plan's with recompute_attention", var.name);
        }
        CHECK(recomputed == c.layers, "%s: each layer's probabilities failing is recomputed (%d of %lld)", var.name,
              recomputed, (long long)c.layers);
    }
}

// When even one layer's probabilities do not fit, the error names B, heads and T.
TEST(attention_probabilities_that_do_not_fit_at_all_are_named) {
    const L::Config c = decoder_config(variants()[0]);
    L::Model<float> host(c);
    const auto tok = tokens(2 * 9, c.vocab, 1);
    int named = 0;
    for (int k = 1; k <= 40; ++k) {
        Dev d(c, &host);
        E::counters().fail_after = k;
        E::counters().fail_more = 1;  // (that allocation and the next: a layer's, then the one for all layers)
        try {
            d.forward(tok.data(), 2, 9, false, nullptr, nullptr);
        } catch (const maporl::Error & e) {
            if (e.message.find("attention probabilities") != std::string::npos) {
                ++named;
                CHECK(e.status == MAPORL_ERR_OUT_OF_MEMORY && e.message.find("T=9") != std::string::npos &&
                          e.message.find("B=2") != std::string::npos &&
                          e.message.find("recomputed in the backward") != std::string::npos,
                      "the error names B and T: %s", e.message.c_str());
            }
        }
        E::counters().fail_after = 0;
        E::counters().fail_more = 0;
    }
    CHECK(named == c.layers,
          "each layer's attention-probability allocation, failing with the next, is named (%d of "
          "%lld)",
          named, (long long)c.layers);
}

// Llama-2-7B's shape (6.74e9 parameters), accounted without allocating.
TEST(a_7b_shaped_model_accounted_without_allocating) {
    L::Config c;
    c.vocab = 32000, c.context = 4096, c.layers = 32, c.d_model = 4096, c.heads = 32, c.kv_heads = 32, c.head_dim = 128,
    c.intermediate = 11008;
    const L::Layout layout = L::make_layout(c);
    const double GB = 1e9;
    CHECK(layout.total > 6.7e9 && layout.total < 6.8e9, "the 7B shape has %lld parameters", (long long)layout.total);
    L::DevicePlan lora;
    lora.B = 4, lora.T = 1024, lora.backward = true, lora.lora_rank = 16, lora.head_rows = 512;
    L::DevicePlan full = lora;
    full.lora_rank = 0, full.train_base = true;
    L::DevicePlan gen;
    gen.cache_batch = 32, gen.cache_len = 2048, gen.step_rows = 256, gen.head_rows = 64;
    const L::DeviceBytes l = L::device_plan(c, layout, lora), f = L::device_plan(c, layout, full),
                         g = L::device_plan(c, layout, gen);
    for (auto [name, b] : {std::pair<const char *, L::DeviceBytes>{"LoRA r16 training B=4 T=1024", l},
                           {"full training B=4 T=1024", f},
                           {"generation batch 32 x 2048", g}})
        std::printf(
            "  7B %s: weights %.2f GB, adapters %.3f, gradients %.2f, moments %.2f, activations %.2f, cache %.2f: "
            "total %.2f GB\n",
            name, b.weights / GB, b.adapters / GB, b.gradients / GB, b.moments / GB, b.activations / GB, b.cache / GB,
            b.total() / GB);
    CHECK(g.gradients == 0 && g.moments == 0 && g.adapters == 0, "generation: no gradients or moments");
    CHECK(l.moments == 0 && l.gradients == l.adapters && l.adapters < 0.2 * GB,
          "LoRA: the adapter's gradients only (%.3f GB)", l.adapters / GB);
    CHECK(l.total() < 139.0 * (1 << 30) && g.total() < 139.0 * (1 << 30),
          "LoRA training and generation fit an H200 (%.1f, %.1f GB)", l.total() / GB, g.total() / GB);
    CHECK(f.gradients + f.moments == 3 * layout.total * 4 && f.total() > 139.0 * (1 << 30),
          "full float32 training: 12 bytes a parameter beyond the weights (%.1f GB in all: more than an H200)",
          f.total() / GB);
    // A frozen base under the same adapter: bfloat16 about 2 bytes a parameter, int8 (34 bytes a block of 32) 1.06.
    for (bool int8 : {false, true}) {
        L::Config q = c;
        (int8 ? q.int8 : q.bf16) = true;
        const L::DeviceBytes b = L::device_plan(q, layout, lora);
        std::printf("  7B LoRA r16 training on %s base: weights %.2f GB, total %.2f GB\n",
                    int8 ? "an int8" : "a bfloat16", b.weights / GB, b.total() / GB);
        const double per = (double)b.weights / (double)layout.total;
        CHECK(int8 ? per > 1.06 && per < 1.07 : per > 2.0 && per < 2.01,
              "%s base: %.4f bytes a parameter on the device", int8 ? "int8" : "bfloat16", per);
    }
    CHECK(L::attention_probs_bytes(c, 1, 4096) == (int64_t)32 * 32 * 4096 * 4096 * 4,
          "the attention bound at T=4096: %.1f GB", L::attention_probs_bytes(c, 1, 4096) / GB);
}

}  // namespace

int main() { return check::run_all("test_llama_device_memory"); }
