// test_llama_device.cpp: the device model's composition (native/model/llama_device.h), run on the CPU through the
// emulated op table (native/model/llama_device_host.h), against llama::Model for every variant: the forward's logits and
// values, the gradients of a backward (whole, and with the LM head in row chunks), clipped AdamW steps, and KV-cache
// decoding after a ragged prefill; the misuse errors. With the CPU ops inside, the forward, backward and update
// must give llama::Model's bits exactly (the same ops in the same order); decoding differs only by the attention
// row's and the GEMV's summation order (1e-5, as the CPU model's own decode against its forward). The CUDA
// instantiation runs the same tests in test_llama_cuda.cpp where a GPU is visible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/llama_device_host.h"
#include "test/native/model/llama_variants.h"
#include "native/core/core.h"
#include "maporl.h"

namespace {

using namespace llama_variants;
using Dev = L::DeviceLlama<maporl::llama::HostDevice>;

std::vector<float> download(const Dev & d, int which) {
    std::vector<float> out((size_t)d.layout.total);
    d.download(which, out.data(), d.layout.total);
    return out;
}

float worst_diff(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size()) return INFINITY;
    float w = 0;
    for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]));
    return w;
}

TEST(device_forward_backward_and_update_are_the_host_models_bits) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c);
        perturb(host, 11);
        Dev dev(c);
        dev.upload(0, host.params.data(), host.layout.total);
        const int64_t B = 2, T = 9, N = B * T, V = c.vocab;
        std::mt19937 r(12);
        std::vector<int32_t> tok((size_t)N);
        for (auto & t : tok) t = (int32_t)(r() % (uint32_t)V);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> dlogits((size_t)(N * V)), dvalues((size_t)N);
        for (auto & x : dlogits) x = u(r);
        for (auto & x : dvalues) x = u(r);
        const maporl::gpt::AdamW h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f};
        for (int step = 1; step <= 3; ++step) {  // (the second and third steps start from updated weights and moments)
            host.forward(tok.data(), B, T);
            std::vector<float> logits((size_t)(N * V)), values((size_t)N);
            dev.forward(tok.data(), B, T, true, logits.data(), values.data());
            CHECK(logits == host.logits && values == host.values, "%s step %d: forward differs (logits %g, values %g)",
                  var.name, step, worst_diff(logits, host.logits), worst_diff(values, host.values));
            host.zero_grad();
            host.backward(dlogits.data(), dvalues.data());
            dev.zero_grad();
            dev.backward(dlogits.data(), dvalues.data());
            CHECK(download(dev, 3) == host.grads, "%s step %d: gradients differ by %g", var.name, step,
                  worst_diff(download(dev, 3), host.grads));
            const double hn = host.update(h, 0.5), dn = dev.update(h, 0.5, host.step);
            CHECK(hn == dn, "%s step %d: gradient norm %.17g vs %.17g", var.name, step, hn, dn);
            CHECK(download(dev, 0) == host.params && download(dev, 1) == host.m && download(dev, 2) == host.v,
                  "%s step %d: AdamW differs", var.name, step);
        }
        // The LM head's gradient in row chunks (as maporl_gpt_score_backward drives it) adds up to the whole one.
        host.forward(tok.data(), B, T);
        host.zero_grad();
        host.backward(dlogits.data(), dvalues.data());
        dev.forward(tok.data(), B, T, false, nullptr, nullptr);
        std::vector<float> z((size_t)(5 * V));
        dev.head_rows(z.data(), 4, 5);
        CHECK(std::equal(z.begin(), z.end(), host.logits.begin() + 4 * V), "%s: head_rows 4..9 differ", var.name);
        dev.zero_grad();
        dev.backward_begin();
        for (int64_t n0 = 0; n0 < N; n0 += 7)
            dev.head_backward_rows(dlogits.data() + n0 * V, n0, std::min<int64_t>(7, N - n0));
        dev.backward_hidden(dvalues.data());
        const float w = worst_diff(download(dev, 3), host.grads);
        CHECK(w < 1e-5f, "%s: chunked head backward differs by %g", var.name, w);
    }
}

// Ragged prompts prefilled in one call, then every row decoding its own position, greedy: the logits and values of
// each step are the host model's (prefill + decode_rows) within the attention rows' and GEMV's rounding.
TEST(device_prefill_and_decode_follow_the_host_model) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c);
        perturb(host, 13);
        Dev dev(c);
        dev.upload(0, host.params.data(), host.layout.total);
        const std::vector<std::vector<int32_t>> prompts = {{3}, {1, 4, 1, 5}, {9, 2, 6, 5, 3, 5, 8}};
        const int64_t B = 3, P = 7, V = c.vocab, steps = 4;
        std::vector<int32_t> flat((size_t)(B * P), 0), cur((size_t)B);
        std::vector<int64_t> lens((size_t)B), pos((size_t)B);
        for (int64_t b = 0; b < B; ++b) {
            const auto & pr = prompts[(size_t)b];
            std::copy(pr.begin(), pr.end(), flat.begin() + b * P);
            lens[(size_t)b] = (int64_t)pr.size() - 1;
            pos[(size_t)b] = lens[(size_t)b];
            cur[(size_t)b] = pr.back();
        }
        host.cache_reset(B, c.context);
        dev.cache_reset(B, c.context);
        host.prefill(flat.data(), lens.data(), P);
        dev.prefill(flat.data(), lens.data(), P);
        float worst = 0;
        for (int64_t s = 0; s < steps; ++s) {
            host.decode_rows(cur.data(), pos.data());
            std::vector<float> logits((size_t)(B * V)), values((size_t)B);
            dev.decode_rows(cur.data(), pos.data(), logits.data(), values.data());
            worst = std::max({worst, worst_diff(logits, host.step_logits), worst_diff(values, host.step_values)});
            for (int64_t b = 0; b < B; ++b) {
                const float * row = host.step_logits.data() + b * V;
                cur[(size_t)b] = (int32_t)(std::max_element(row, row + V) - row);
                ++pos[(size_t)b];
            }
        }
        CHECK(worst < 1e-5f, "%s: device decoding differs from the host model's by %g", var.name, worst);
        // Decoding without the heads leaves the same cache: the last step again, heads asked only now.
        host.cache_reset(B, c.context);
        dev.cache_reset(B, c.context);
        std::vector<int64_t> at((size_t)B, 0);
        std::vector<int32_t> t0 = {1, 2, 3};
        dev.decode_rows(t0.data(), at.data(), nullptr, nullptr);
        host.decode_rows(t0.data(), at.data());
        at.assign((size_t)B, 1);
        std::vector<float> logits((size_t)(B * V));
        dev.decode_rows(t0.data(), at.data(), logits.data(), nullptr);
        host.decode_rows(t0.data(), at.data());
        CHECK(worst_diff(logits, host.step_logits) < 1e-5f, "%s: a step without heads changed the cache", var.name);
    }
}

// LoRA adapters on the device: the host model keeps them (the reference `host` and the device's owner `twin` have the
// same adapters); the selected adapter's forward, gradients (pulled back for the host step) and steps are the CPU's
// bits, the base stays frozen, and a decode step with a different adapter per row follows the CPU decoder.
TEST(device_lora_adapters_train_and_decode_as_on_the_host) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> host(c), twin(c);
        perturb(host, 21);
        perturb(twin, 21);
        Dev dev(c, &twin);
        dev.upload(0, twin.params.data(), twin.layout.total);
        L::LoraConfig a, b;
        a.rank = 3;
        a.alpha = 6;
        b.rank = 2;
        b.alpha = 4;
        b.rslora = true;
        b.targets = (1u << L::kQ) | (1u << L::kV) | (1u << L::kDown);
        for (L::Model<float> * m : {&host, &twin}) {
            m->lora_add(a, 5);
            m->lora_add(b, 6);
            std::mt19937 r(7);
            std::uniform_real_distribution<float> u(-0.3f, 0.3f);
            for (auto & ad : m->adapters) {
                for (auto & x : ad->params) x += u(r);  // B away from zero: the terms count
                ad->weights_changed();
            }
            m->active = 0;
        }
        const int64_t B = 2, T = 7, N = B * T, V = c.vocab;
        std::vector<int32_t> tok((size_t)N);
        for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((5 * i + 2) % V);
        std::mt19937 r(8);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> dlogits((size_t)(N * V)), dvalues((size_t)N);
        for (auto & x : dlogits) x = u(r);
        for (auto & x : dvalues) x = u(r);
        const maporl::gpt::AdamW h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
        for (int step = 1; step <= 2; ++step)
            for (int64_t id : {0, 1}) {
                host.active = twin.active = id;
                host.forward(tok.data(), B, T);
                std::vector<float> logits((size_t)(N * V)), values((size_t)N);
                dev.forward(tok.data(), B, T, true, logits.data(), values.data());
                CHECK(logits == host.logits && values == host.values, "%s adapter %lld step %d: forward differs by %g",
                      var.name, (long long)id, step, worst_diff(logits, host.logits));
                host.zero_grad();
                host.backward(dlogits.data(), dvalues.data());
                dev.zero_grad();
                dev.backward(dlogits.data(), dvalues.data());
                dev.pull_adapter_grads();
                CHECK(twin.adapters[(size_t)id]->grads == host.adapters[(size_t)id]->grads,
                      "%s adapter %lld step %d: gradients differ", var.name, (long long)id, step);
                CHECK(host.update(h, 0.5) == twin.update(h, 0.5), "%s: norms differ", var.name);
            }
        CHECK(download(dev, 0) == host.params, "%s: the base changed under its adapters", var.name);
        // A decode step whose rows run adapter 0, the base and adapter 1, after a ragged prefill.
        host.active = twin.active = -1;
        host.cache_reset(3, c.context);
        dev.cache_reset(3, c.context);
        host.row_adapter = twin.row_adapter = {0, -1, 1};
        const std::vector<int32_t> flat = {3, 0, 0, 1, 4, 1, 9, 2, 6};
        const std::vector<int64_t> lens = {0, 2, 3};
        std::vector<int64_t> pos = lens;
        std::vector<int32_t> cur = {3, 5, 5};
        host.prefill(flat.data(), lens.data(), 3);
        dev.prefill(flat.data(), lens.data(), 3);
        float worst = 0;
        for (int s = 0; s < 4; ++s) {
            host.decode_rows(cur.data(), pos.data());
            std::vector<float> logits((size_t)(3 * V)), values(3);
            dev.decode_rows(cur.data(), pos.data(), logits.data(), values.data());
            worst = std::max({worst, worst_diff(logits, host.step_logits), worst_diff(values, host.step_values)});
            for (int64_t bb = 0; bb < 3; ++bb)
                cur[(size_t)bb] = (int32_t)((cur[(size_t)bb] + 4) % V), ++pos[(size_t)bb];
        }
        CHECK(worst < 1e-5f, "%s: decoding with per-row adapters differs by %g", var.name, worst);
    }
}

TEST(device_model_misuse_is_named) {
    const L::Config c = decoder_config(variants()[0]);
    auto refused = [&](auto fn, const char * needle) {
        try {
            fn();
        } catch (const maporl::Error & e) { return e.message.find(needle) != std::string::npos; }
        return false;
    };
    Dev dev(c);
    std::vector<float> buf((size_t)dev.layout.total);
    CHECK(refused([&] { dev.upload(0, buf.data(), 3); }, "count"), "a wrong parameter count");
    CHECK(refused([&] { dev.backward(nullptr, nullptr); }, "no forward"), "a backward before any forward");
    const int32_t bad[2] = {1, 99};
    CHECK(refused([&] { dev.forward(bad, 1, 2, true, nullptr, nullptr); }, "tokens: expected ids in [0, 13), got 99"),
          "a token past the vocabulary");
    CHECK(refused([&] { dev.forward(bad, 1, 99, true, nullptr, nullptr); }, "T: expected 1..12"), "T past the context");
    const int32_t ok[2] = {1, 2};
    dev.forward(ok, 1, 2, false, nullptr, nullptr);
    CHECK(refused([&] { dev.head_backward_rows(buf.data(), 0, 1); }, "backward_begin"),
          "head rows before backward_begin");
    CHECK(refused([&] { dev.head_rows(buf.data(), 1, 2); }, "rows 1..3 of 2"), "head rows past the batch");
    CHECK(refused([&] { dev.decode_rows(ok, nullptr, nullptr, nullptr); }, "cache_reset"),
          "decoding before cache_reset");
    CHECK(refused([&] { dev.cache_reset(1, 13); }, "max_len: expected 1..12"), "a cache past the context");
    dev.cache_reset(2, 4);
    const int64_t far[2] = {0, 4};
    CHECK(refused([&] { dev.decode_rows(ok, far, nullptr, nullptr); }, "pos: expected 0..3, got 4 at row 1"),
          "a position past the cache");
    const int64_t lens[2] = {1, 3};
    CHECK(refused([&] { dev.prefill(ok, lens, 2); }, "lens: expected 0..2 at row 1"), "a prompt length past P");
    L::Config h = c;
    h.bf16 = true;
    Dev frozen(h);
    const uint16_t half[2] = {0, 0};
    CHECK(refused([&] { frozen.upload_frozen(half, 2, nullptr, 0, nullptr, 0); }, "bfloat16 values"),
          "a frozen base's matrices of the wrong size");
    h.int8 = true;
    CHECK(refused([&] { Dev d(h); }, "bf16 and int8 both set"), "a base both bfloat16 and int8");
}

}  // namespace

int main() { return check::run_all("test_llama_device"); }
