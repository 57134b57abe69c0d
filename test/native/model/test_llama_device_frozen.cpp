// test_llama_device_frozen.cpp: a frozen bfloat16 or int8 base on the device (native/model/llama_device_weights.h),
// run on the CPU through the emulated op table (llama_device_host.h), against llama::Model holding the same base: the
// forward's logits and values, LoRA adapters' gradients and steps (the CPU's bits: the same products in the same
// order), decoding with a different adapter per row, the base's training refused by name, and the bytes by kind
// against device_plan, with every byte the emulated device holds. The widths make an int8 base mixed, as real ones
// can be: the matrices whose rows are a multiple of 32 long are int8 (q, k, v, gate, up, the embedding and head),
// the others bfloat16 (o_proj with the variants' narrow heads, down_proj with intermediate 80).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test/native/core/check.h"
#include "native/model/llama_device_host.h"
#include "test/native/model/llama_variants.h"
#include "native/core/core.h"

namespace {

using namespace llama_variants;
using E = maporl::llama::HostDevice;
using Dev = L::DeviceLlama<E>;

L::Config frozen_config(const Variant & var, bool int8) {
    L::Config c = var.c;
    c.context = 12;
    c.d_model = 64;
    c.intermediate = 80;
    c.vocab = 13;
    (int8 ? c.int8 : c.bf16) = true;
    return c;
}

// The host model (init, then norms and biases perturbed) and a device model holding its base.
void setup(L::Model<float> & m, uint64_t seed) {
    m.init(seed);
    std::mt19937 r((uint32_t)seed + 1);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (auto & x : m.params) x += 0.2f * u(r);
}
void upload(Dev & d, const L::Model<float> & m) {
    d.upload(0, m.params.data(), m.layout.total);
    d.upload_frozen(m.half.data(), (int64_t)m.half.size(), m.q8.data(), (int64_t)m.q8.size(), m.q8d.data(),
                    (int64_t)m.q8d.size());
}

float worst_diff(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size()) return INFINITY;
    float w = 0;
    for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]));
    return w;
}

bool refused(const std::function<void()> & fn, const char * needle) {
    try {
        fn();
    } catch (const maporl::Error & e) {
        if (e.message.find(needle) != std::string::npos) return true;
        std::printf("  (message: %s)\n", e.message.c_str());
    }
    return false;
}

TEST(a_frozen_base_forward_and_its_adapters_training_are_the_host_models_bits) {
    for (bool int8 : {false, true})
        for (const Variant & var : variants()) {
            const L::Config c = frozen_config(var, int8);
            const char * dt = int8 ? "int8" : "bf16";
            L::Model<float> host(c), twin(c);
            setup(host, 31);
            setup(twin, 31);
            CHECK(!int8 || (!host.q8.empty() && !host.half.empty()), "%s: an int8 base here is mixed", var.name);
            Dev dev(c, &twin);
            upload(dev, twin);
            const int64_t B = 2, T = 7, N = B * T, V = c.vocab;
            std::vector<int32_t> tok((size_t)N);
            for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)((7 * i + 3) % V);
            // The base alone: logits and values.
            host.forward(tok.data(), B, T);
            std::vector<float> logits((size_t)(N * V)), values((size_t)N);
            dev.forward(tok.data(), B, T, true, logits.data(), values.data());
            CHECK(logits == host.logits && values == host.values, "%s %s: the base's forward differs by %g", dt,
                  var.name, worst_diff(logits, host.logits));
            // The base does not train: the backward and the step are refused, naming the dtype and the way out.
            CHECK(refused([&] { dev.backward(nullptr, nullptr); }, "frozen: train a LoRA adapter"),
                  "%s %s: a backward of the frozen base is refused", dt, var.name);
            CHECK(refused([&] { dev.update(maporl::gpt::AdamW{}, 1.0, 1); }, int8 ? "int8" : "bfloat16"),
                  "%s %s: a step of the frozen base is refused", dt, var.name);
            // An adapter trains on it: forward, gradients and two steps as on the host.
            L::LoraConfig a;
            a.rank = 4;
            a.alpha = 8;
            for (L::Model<float> * m : {&host, &twin}) {
                m->active = m->lora_add(a, 5);
                std::mt19937 r(6);
                std::uniform_real_distribution<float> u(-0.2f, 0.2f);
                for (auto & x : m->adapters[0]->params) x += u(r);
                m->adapters[0]->weights_changed();
            }
            std::mt19937 r(8);
            std::uniform_real_distribution<float> u(-1, 1);
            std::vector<float> dlogits((size_t)(N * V)), dvalues((size_t)N);
            for (auto & x : dlogits) x = u(r);
            for (auto & x : dvalues) x = u(r);
            const maporl::gpt::AdamW h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
            for (int step = 1; step <= 2; ++step) {
                host.forward(tok.data(), B, T);
                dev.forward(tok.data(), B, T, true, logits.data(), values.data());
                CHECK(logits == host.logits && values == host.values, "%s %s step %d: the forward differs by %g", dt,
                      var.name, step, worst_diff(logits, host.logits));
                host.zero_grad();
                host.backward(dlogits.data(), dvalues.data());
                dev.zero_grad();
                dev.backward(dlogits.data(), dvalues.data());
                dev.pull_adapter_grads();
                CHECK(twin.adapters[0]->grads == host.adapters[0]->grads, "%s %s step %d: the gradients differ by %g",
                      dt, var.name, step, worst_diff(twin.adapters[0]->grads, host.adapters[0]->grads));
                CHECK(host.update(h, 0.5) == twin.update(h, 0.5), "%s %s: the norms differ", dt, var.name);
            }
            // Decoding: row 0 runs the adapter, row 1 the base, after a ragged prefill. The attention over the cache
            // sums in another order than the forward's (1e-6 here); with int8 an activation that lands on the other
            // side of a rounding step moves by one quantum of its block (max |x| / 127) before the weights.
            host.active = twin.active = -1;
            host.cache_reset(2, c.context);
            dev.cache_reset(2, c.context);
            host.row_adapter = twin.row_adapter = {0, -1};
            const std::vector<int32_t> flat = {3, 1, 4, 1, 5, 9};
            const std::vector<int64_t> lens = {3, 1};
            std::vector<int64_t> pos = lens;
            std::vector<int32_t> cur = {2, 6};
            host.prefill(flat.data(), lens.data(), 3);
            dev.prefill(flat.data(), lens.data(), 3);
            float worst = 0;
            for (int s = 0; s < 4; ++s) {
                host.decode_rows(cur.data(), pos.data());
                std::vector<float> lg((size_t)(2 * V)), vl(2);
                dev.decode_rows(cur.data(), pos.data(), lg.data(), vl.data());
                worst = std::max({worst, worst_diff(lg, host.step_logits), worst_diff(vl, host.step_values)});
                for (int64_t b = 0; b < 2; ++b) cur[(size_t)b] = (int32_t)((cur[(size_t)b] + 5) % V), ++pos[(size_t)b];
            }
            CHECK(worst < (int8 ? 2e-3f : 1e-5f), "%s %s: decoding differs by %g", dt, var.name, worst);
        }
}

TEST(a_frozen_base_holds_its_bytes_as_planned) {
    for (bool int8 : {false, true}) {
        const L::Config c = frozen_config(variants()[3], int8);
        L::Config f = c;
        f.bf16 = f.int8 = false;
        L::Model<float> host(c);
        setup(host, 41);
        const int64_t before = E::counters().live;
        {
            Dev dev(c, &host);
            upload(dev, host);
            L::LoraConfig a;
            a.rank = 3;
            host.active = host.lora_add(a, 2);
            L::DevicePlan w;
            w.B = 2, w.T = 6, w.backward = true, w.head_rows = 12, w.lora_rank = a.rank, w.lora_targets = a.targets;
            const int64_t N = w.B * w.T;
            std::vector<int32_t> tok((size_t)N);
            for (int64_t i = 0; i < N; ++i) tok[(size_t)i] = (int32_t)(i % c.vocab);
            std::vector<float> dl((size_t)(N * c.vocab), 0.01f), dv((size_t)N, 0.1f);
            std::vector<float> logits((size_t)(N * c.vocab));
            dev.forward(tok.data(), w.B, w.T, true, logits.data(), nullptr);
            dev.backward(dl.data(), dv.data());
            const L::DeviceBytes got = dev.memory(), plan = L::device_plan(c, L::make_layout(c), w),
                                 fplan = L::device_plan(f, L::make_layout(f), w);
            CHECK(got.weights == plan.weights && got.activations == plan.activations &&
                      got.gradients == plan.gradients && got.adapters == plan.adapters && got.moments == 0,
                  "int8=%d: measured / planned weights %lld / %lld, activations %lld / %lld, gradients %lld / %lld",
                  (int)int8, (long long)got.weights, (long long)plan.weights, (long long)got.activations,
                  (long long)plan.activations, (long long)got.gradients, (long long)plan.gradients);
            CHECK(got.total() == E::counters().live - before, "int8=%d: the kinds count every byte held (%lld of %lld)",
                  (int)int8, (long long)got.total(), (long long)(E::counters().live - before));
            const double ratio = (double)got.weights / (double)fplan.weights;
            std::printf("  %s base: weights %lld bytes, %.3fx the float32 base's\n", int8 ? "int8" : "bf16",
                        (long long)got.weights, ratio);
            CHECK(ratio < (int8 ? 0.45 : 0.55), "int8=%d: the frozen base is %.3fx the float one", (int)int8, ratio);
        }
        CHECK(E::counters().live == before, "int8=%d: the model's release returns every byte", (int)int8);
    }
}

}  // namespace

int main() { return check::run_all("test_llama_device_frozen"); }
