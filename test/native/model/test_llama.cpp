// test_llama.cpp: the Llama model family (native/model/llama.h) in double against central finite differences of
// L = sum(logits * R) + sum(values * Rv) for every parameter of tiny models of each variant (Llama with GQA, a tied
// head and llama3 rope scaling; Llama with attention biases; Qwen2's q/k/v biases with linear scaling; Qwen3's
// q/k norms and a head_dim unrelated to hidden_size, with MQA); the ops' own backward against finite differences;
// KV-cache decoding against the full forward at every position (and prefilled ragged rows against each alone); the same parameters after training for any thread
// count; and a float model that memorises a batch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/model/llama_variants.h"
#include "test/native/model/model_check.h"
#include "native/core/bf16.h"
#include "native/core/core.h"
#include "native/model/llama.h"
#include "maporl.h"

namespace {

using namespace llama_variants;

TEST(every_parameter_gradient_matches_finite_differences) {
    for (const Variant & var : variants()) {
        L::Model<double> m(var.c);
        m.init(3);
        std::mt19937 r(4);
        std::uniform_real_distribution<double> u(-1, 1);
        for (auto & x : m.params) x += 0.3 * u(r);  // away from the init's unit norms and zero biases
        for (auto & x : m.params) x *= 1.5;
        const int64_t B = 2, T = 5;
        const std::vector<int32_t> tok = {1, 5, 2, 2, 8, 0, 3, 1, 7, 4};
        std::vector<double> R((size_t)(B * T * var.c.vocab)), Rv((size_t)(B * T));
        for (auto & x : R) x = u(r);
        for (auto & x : Rv) x = u(r);
        auto loss = [&] {
            m.forward(tok.data(), B, T);
            double s = 0;
            for (size_t i = 0; i < R.size(); ++i) s += m.logits[i] * R[i];
            for (size_t i = 0; i < Rv.size(); ++i) s += m.values[i] * Rv[i];
            return s;
        };
        loss();
        m.zero_grad();
        m.backward(R.data(), Rv.data());
        const std::vector<double> g = m.grads;
        const int bad = model_check::fd_mismatches(m.params, g, loss, var.name);
        CHECK(bad == 0, "%s: %d of %zu parameter gradients off", var.name, bad, m.params.size());
    }
}

// Each op's backward against central differences of sum(out * R) in double, on its own.
TEST(op_backwards_match_finite_differences) {
    std::mt19937 r(9);
    std::uniform_real_distribution<double> u(-1, 1);
    auto fill = [&](std::vector<double> & a) {
        for (auto & x : a) x = u(r);
    };
    auto fd_check = [&](const char * what, std::vector<double> & x, const std::vector<double> & analytic,
                        const std::function<double()> & f) {
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double x0 = x[i], h = 1e-6;
            x[i] = x0 + h;
            const double up = f();
            x[i] = x0 - h;
            const double dn = f();
            x[i] = x0;
            const double fd = (up - dn) / (2 * h);
            if (!(std::fabs(fd - analytic[i]) <= 1e-7 * std::max(1.0, std::fabs(fd)))) ++bad;
        }
        CHECK(bad == 0, "%s: %d of %zu gradients off", what, bad, x.size());
    };
    {  // RMSNorm
        const int64_t N = 5, C = 7;
        std::vector<double> x((size_t)(N * C)), w((size_t)C), R((size_t)(N * C)), out((size_t)(N * C)), rs((size_t)N);
        fill(x);
        fill(w);
        fill(R);
        auto f = [&] {
            maporl::llama::rmsnorm_forward(out.data(), rs.data(), x.data(), w.data(), N, C, 1e-5);
            double s = 0;
            for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
            return s;
        };
        f();
        std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
        L::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rs.data(), N, C);
        fd_check("rmsnorm dx", x, dx, f);
        fd_check("rmsnorm dweight", w, dw, f);
    }
    {  // RoPE with llama3 scaling, from position 3
        const int64_t B = 2, T = 3, H = 2, D = 8;
        L::RopeScaling s;
        s.type = L::RopeScaling::Llama3;
        s.factor = 8;
        s.original_max_position = 32;
        std::vector<double> cs, sn;
        L::rope_tables(cs, sn, L::rope_inv_freq(D, 500000.0, s), 16);
        std::vector<double> x((size_t)(B * T * H * D)), R(x.size()), out(x.size());
        fill(x);
        fill(R);
        auto f = [&] {
            L::rope_forward(out.data(), x.data(), cs.data(), sn.data(), B, T, 3, H, D);
            double v = 0;
            for (size_t i = 0; i < out.size(); ++i) v += out[i] * R[i];
            return v;
        };
        f();
        std::vector<double> dx(x.size(), 0.0);
        L::rope_backward(dx.data(), R.data(), cs.data(), sn.data(), B, T, 3, H, D);
        fd_check("rope dx", x, dx, f);
        f();
        double n0 = 0, n1 = 0;  // a rotation keeps each head's norm
        for (size_t i = 0; i < x.size(); ++i) {
            n0 += x[i] * x[i];
            n1 += out[i] * out[i];
        }
        CHECK(std::fabs(n0 - n1) < 1e-12 * n0, "rope changed the norm: %.17g -> %.17g", n0, n1);
    }
    {  // SwiGLU
        const int64_t n = 33;
        std::vector<double> g((size_t)n), up((size_t)n), R((size_t)n), out((size_t)n);
        fill(g);
        fill(up);
        fill(R);
        for (auto & x : g) x *= 4;
        auto f = [&] {
            L::swiglu_forward(out.data(), g.data(), up.data(), n);
            double v = 0;
            for (int64_t i = 0; i < n; ++i) v += out[(size_t)i] * R[(size_t)i];
            return v;
        };
        f();
        std::vector<double> dg((size_t)n, 0.0), du((size_t)n, 0.0);
        L::swiglu_backward(dg.data(), du.data(), R.data(), g.data(), up.data(), n);
        fd_check("swiglu dgate", g, dg, f);
        fd_check("swiglu dup", up, du, f);
    }
    {  // GQA attention: 4 query heads over 2 kv heads
        const int64_t B = 2, T = 4, NH = 4, NKV = 2, hs = 3;
        std::vector<double> q((size_t)(B * T * NH * hs)), k((size_t)(B * T * NKV * hs)), v(k.size()), R(q.size()),
            out(q.size()), att((size_t)(B * NH * T * T));
        fill(q);
        fill(k);
        fill(v);
        fill(R);
        auto f = [&] {
            L::attention_gqa_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, NKV, hs);
            double s = 0;
            for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
            return s;
        };
        f();
        std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
        L::attention_gqa_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(), att.data(),
                                  B, T, NH, NKV, hs);
        fd_check("gqa dq", q, dq, f);
        fd_check("gqa dk", k, dk, f);
        fd_check("gqa dv", v, dv, f);
    }
}

// The float SwiGLU: the same bits at every SIMD level (vector body and tails), within float rounding of the double
// path, and silu's limits kept at the extremes (+-Inf, +-100, NaN propagates).
TEST(float_swiglu_is_the_same_at_every_simd_level_and_close_to_double) {
    const int64_t n = 1037;
    std::mt19937 r(7);
    std::uniform_real_distribution<double> u(-12.0, 12.0);
    std::vector<double> g(n), up(n), d(n);
    for (int64_t i = 0; i < n; ++i) g[(size_t)i] = u(r), up[(size_t)i] = u(r) / 6, d[(size_t)i] = u(r) / 6;
    g[0] = 0.0, g[1] = -0.0, g[2] = 100.0, g[3] = -100.0, g[4] = INFINITY, g[5] = -200.0, g[6] = 1e-30, g[7] = -90.0;
    std::vector<double> out(n), dg(n, 0.5), du(n, -0.5);
    L::swiglu_forward(out.data(), g.data(), up.data(), n);
    L::swiglu_backward(dg.data(), du.data(), d.data(), g.data(), up.data(), n);
    std::vector<float> fg(g.begin(), g.end()), fu(up.begin(), up.end()), fd(d.begin(), d.end());
    fg[8] = NAN;
    std::vector<std::vector<float>> levels;
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        std::vector<float> fo(n), fdg(n, 0.5f), fdu(n, -0.5f);
        L::swiglu_forward(fo.data(), fg.data(), fu.data(), n);
        L::swiglu_backward(fdg.data(), fdu.data(), fd.data(), fg.data(), fu.data(), n);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
            if (i == 4 || i == 8) continue;
            worst = std::max({worst, std::fabs(fo[(size_t)i] - out[(size_t)i]),
                              std::fabs(fdg[(size_t)i] - dg[(size_t)i]), std::fabs(fdu[(size_t)i] - du[(size_t)i])});
        }
        CHECK(worst < 1e-5, "%s: float SwiGLU differs from double by %g", level, worst);
        CHECK(fo[4] == INFINITY * fu[4] && fo[3] == 0.0f && std::isnan(fo[8]) && std::isnan(fdg[8]),
              "%s: limits: %g %g %g %g", level, fo[4], fo[3], fo[8], fdg[8]);
        fo.insert(fo.end(), fdg.begin(), fdg.end());
        fo.insert(fo.end(), fdu.begin(), fdu.end());
        levels.push_back(fo);
    }
    for (size_t l = 1; l < levels.size(); ++l)
        for (size_t i = 0; i < levels[0].size(); ++i)
            if (!(std::isnan(levels[l][i]) && std::isnan(levels[0][i])))  // (a NaN's payload may differ)
                CHECK(std::memcmp(&levels[l][i], &levels[0][i], sizeof(float)) == 0,
                      "SIMD level %zu changed the bits at %zu: %.9g vs %.9g", l, i, levels[l][i], levels[0][i]);
    maporl_set_simd("best");
}

// transformers' llama3 rule by its three bands: high frequencies unchanged, low ones divided by the factor, the
// middle interpolated (strictly between); linear divides every frequency.
TEST(rope_scaling_follows_the_bands) {
    L::RopeScaling none, lin, l3;
    lin.type = L::RopeScaling::Linear;
    lin.factor = 2;
    l3.type = L::RopeScaling::Llama3;
    l3.factor = 8;
    l3.low_freq_factor = 1;
    l3.high_freq_factor = 4;
    l3.original_max_position = 8192;
    const auto f0 = L::rope_inv_freq(64, 500000.0, none), fl = L::rope_inv_freq(64, 500000.0, lin),
               f3 = L::rope_inv_freq(64, 500000.0, l3);
    CHECK(std::fabs(f0[1] - std::pow(500000.0, -2.0 / 64)) < 1e-15, "inv_freq[1] = %.17g", f0[1]);
    int high = 0, low = 0, mid = 0;
    for (size_t i = 0; i < f0.size(); ++i) {
        CHECK(std::fabs(fl[i] - f0[i] / 2) <= 1e-15 * f0[i], "linear: %zu", i);
        const double wl = 2 * M_PI / f0[i];
        if (wl < 8192.0 / 4) {
            ++high;
            CHECK(f3[i] == f0[i], "llama3 high band changed at %zu", i);
        } else if (wl > 8192.0) {
            ++low;
            CHECK(std::fabs(f3[i] - f0[i] / 8) <= 1e-15 * f0[i], "llama3 low band at %zu", i);
        } else {
            ++mid;
            CHECK(f3[i] < f0[i] && f3[i] > f0[i] / 8, "llama3 middle band at %zu: %g of %g", i, f3[i], f0[i]);
        }
    }
    CHECK(high > 0 && low > 0 && mid > 0, "bands: %d high, %d mid, %d low", high, mid, low);
}

TEST(kv_cache_decoding_equals_the_full_forward) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> m(c);
        perturb(m, 5);
        const float worst = model_check::cached_decode_vs_forward(m, 3, 10, c.vocab, 1, true, [](int64_t) {});
        CHECK(worst < 1e-5f, "%s: cached decode differs from the full forward by %g", var.name, worst);
    }
}

// Ragged prompts prefilled at once (every position but the last through the GEMM), then each row decoding its own
// position: every row's logits are the bits it gets prefilled and decoded alone, and the full forward's within
// float rounding, at every step.
TEST(prefilled_ragged_rows_decode_as_each_alone_and_as_the_full_forward) {
    for (const Variant & var : variants()) {
        const L::Config c = decoder_config(var);
        L::Model<float> m(c);
        perturb(m, 8);
        const std::vector<std::vector<int32_t>> prompts = {{3}, {1, 4, 1, 5}, {9, 2, 6, 5, 3, 5, 8}};
        const int64_t B = (int64_t)prompts.size(), P = 6, steps = 4, V = c.vocab;
        // Decodes `rows` of prompts (prefill, then steps greedy tokens): logits [row][step][V].
        auto run = [&](const std::vector<int64_t> & rows) {
            const int64_t n = (int64_t)rows.size();
            std::vector<int32_t> head((size_t)(n * P), 0), cur((size_t)n);
            std::vector<int64_t> lens((size_t)n), pos((size_t)n);
            for (int64_t i = 0; i < n; ++i) {
                const auto & pr = prompts[(size_t)rows[(size_t)i]];
                lens[(size_t)i] = (int64_t)pr.size() - 1;
                std::copy(pr.begin(), pr.end() - 1, head.begin() + i * P);
                cur[(size_t)i] = pr.back();
            }
            m.cache_reset(n, 11);
            m.prefill(head.data(), lens.data(), P);
            std::vector<std::vector<float>> out((size_t)n);
            for (int64_t s = 0; s < steps; ++s) {
                for (int64_t i = 0; i < n; ++i) pos[(size_t)i] = lens[(size_t)i] + s;
                m.decode_rows(cur.data(), pos.data());
                for (int64_t i = 0; i < n; ++i) {
                    const float * z = m.step_logits.data() + i * V;
                    out[(size_t)i].insert(out[(size_t)i].end(), z, z + V);
                    cur[(size_t)i] = (int32_t)(std::max_element(z, z + V) - z);
                }
            }
            return out;
        };
        const auto together = run({0, 1, 2});
        float worst = 0;
        for (int64_t b = 0; b < B; ++b) {
            const auto alone = run({b});
            CHECK(alone[0] == together[(size_t)b], "%s: row %lld prefilled and decoded alone differs from the batch",
                  var.name, (long long)b);
            // The full forward over the prompt and the greedy tokens: its last position at every step.
            std::vector<int32_t> seq = prompts[(size_t)b];
            for (int64_t s = 0; s < steps; ++s) {
                m.forward(seq.data(), 1, (int64_t)seq.size());
                const float * z = together[(size_t)b].data() + s * V;
                for (int64_t v = 0; v < V; ++v)
                    worst = std::max(worst, std::fabs(m.logits[(size_t)((seq.size() - 1) * V + v)] - z[v]));
                seq.push_back((int32_t)(std::max_element(z, z + V) - z));
            }
        }
        CHECK(worst < 1e-5f, "%s: prefilled decoding differs from the full forward by %g", var.name, worst);
    }
}

// A base kept in bfloat16 (cfg.bf16: matrices frozen as bf16, widened inside the GEMM's packing and the GEMV)
// computes the very bits of a float model holding the widened values: the forward, the head in row chunks, a
// prefilled and decoded batch, and a LoRA adapter's gradients on it; training the base or merging into it is
// refused; the matrices take half the bytes.
TEST(a_bf16_base_computes_the_bits_of_its_widened_float_twin) {
    for (const char * level : {"scalar", "avx2", "avx512"}) {  // each SIMD level's kernels (scalar: widened copies)
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (const Variant & var : variants()) {
            L::Config c = decoder_config(var);
            L::Model<float> f(c);
            f.init(11);
            L::Config hc = c;
            hc.bf16 = true;
            L::Model<float> hm(hc);
            int64_t matrix_elems = 0;
            for (size_t k = 0; k < f.layout.tensors.size(); ++k) {
                const auto & t = f.layout.tensors[k];
                float * x = f.p((int64_t)k);
                if (t.shape.size() == 2) {
                    CHECK(hm.is_half((int64_t)k), "%s: %s is not kept as bf16", var.name, t.name.c_str());
                    for (int64_t i = 0; i < t.size; ++i) {
                        hm.h((int64_t)k)[i] = maporl::float_to_bf16(x[i]);
                        x[i] = maporl::bf16_to_float(hm.h((int64_t)k)[i]);
                    }
                    matrix_elems += t.size;
                } else {
                    std::copy(x, x + t.size, hm.p((int64_t)k));
                }
            }
            CHECK((int64_t)hm.half.size() == matrix_elems &&
                      (int64_t)hm.params.size() == (int64_t)f.params.size() - matrix_elems,
                  "%s: %zu bf16 + %zu float elements for %lld matrix elements of %zu", var.name, hm.half.size(),
                  hm.params.size(), (long long)matrix_elems, f.params.size());
            const int64_t B = 2, T = 7, V = c.vocab;
            std::vector<int32_t> tok((size_t)(B * T));
            for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)((i * 5 + 3) % (size_t)V);
            f.forward(tok.data(), B, T);
            hm.forward(tok.data(), B, T);
            CHECK(f.logits == hm.logits && f.values == hm.values,
                  "%s: the bf16 base's forward differs from its float twin", var.name);
            std::vector<float> zf((size_t)(3 * V)), zh((size_t)(3 * V));
            f.head_rows(zf.data(), 4, 3);
            hm.head_rows(zh.data(), 4, 3);
            CHECK(zf == zh, "%s: head_rows differ", var.name);
            for (int64_t rows : {2, 9}) {  // decode steps by the GEMV (<= 8 rows) and by the GEMM
                std::vector<int32_t> head((size_t)(rows * 3)), cur((size_t)rows);
                std::vector<int64_t> lens((size_t)rows), pos((size_t)rows);
                for (int64_t b = 0; b < rows; ++b) {
                    lens[(size_t)b] = 1 + b % 3;
                    for (int64_t t = 0; t < 3; ++t) head[(size_t)(b * 3 + t)] = (int32_t)((b + 2 * t + 1) % V);
                    cur[(size_t)b] = (int32_t)(b % V);
                    pos[(size_t)b] = lens[(size_t)b];
                }
                for (L::Model<float> * m : {&f, &hm}) {
                    m->cache_reset(rows, 8);
                    m->prefill(head.data(), lens.data(), 3);
                    m->decode_rows(cur.data(), pos.data());
                }
                CHECK(f.step_logits == hm.step_logits && f.step_values == hm.step_values,
                      "%s: %lld rows decode differently on the bf16 base", var.name, (long long)rows);
            }
            // An adapter (B nonzero, so both factors get gradients) on each: the same gradients.
            L::LoraConfig lc;
            lc.rank = 2;
            std::vector<std::vector<float>> grads;
            for (L::Model<float> * m : {&f, &hm}) {
                m->active = m->lora_add(lc, 21);
                auto & ad = *m->adapters[(size_t)m->active];
                for (size_t i = 0; i < ad.params.size(); ++i) ad.params[i] = 0.05f * (float)((i * 7) % 11) - 0.25f;
                m->zero_grad();
                m->forward(tok.data(), B, T);
                std::vector<float> dl(m->logits.size()), dv(m->values.size());
                for (size_t i = 0; i < dl.size(); ++i) dl[i] = 0.01f * (float)((i * 3) % 7) - 0.03f;
                for (size_t i = 0; i < dv.size(); ++i) dv[i] = 0.1f * (float)(i % 3);
                m->backward(dl.data(), dv.data());
                grads.push_back(ad.grads);
            }
            CHECK(grads[0] == grads[1], "%s: the adapter's gradients differ on the bf16 base", var.name);
            auto refused = [&](auto fn, const char * needle) {
                try {
                    fn();
                } catch (const maporl::Error & e) { return e.message.find(needle) != std::string::npos; }
                return false;
            };
            const int64_t id = hm.active;
            CHECK(refused([&] { hm.lora_merge(id); }, "bfloat16"), "%s: merging into the bf16 base is refused",
                  var.name);
            hm.active = -1;
            CHECK(refused([&] { hm.zero_grad(); }, "frozen"), "%s %s: training the bf16 base is refused", level,
                  var.name);
        }
    }
    maporl_set_simd("best");
}

// A prompt decoded without the heads (NativePolicy skips the LM head while every row reads its prompt) leaves the
// cache exactly as decoding it with them: the next position's logits and values are the same to the bit.
TEST(decoding_without_the_heads_caches_the_same) {
    for (const Variant & var : variants()) {
        L::Config c = decoder_config(var);
        L::Model<float> with(c), without(c);
        with.init(7);
        without.init(7);
        CHECK(model_check::heads_skipped_cache_the_same(with, without, c.vocab, 6),
              "%s: the last position's heads differ after a prompt decoded without them", var.name);
    }
}

// Cross-entropy training on a fixed batch (the gradient of mean -log softmax written out here): the loss falls,
// and 1 and 3 threads give the same parameters to the bit.
TEST(a_small_model_memorises_a_batch_the_same_for_any_thread_count) {
    L::Config c = variants()[3].c;  // Qwen3-style
    c.vocab = 16;
    c.context = 16;
    c.d_model = 16;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 4;
    c.intermediate = 32;
    const int64_t B = 4, T = 12, V = c.vocab, N = B * T;
    std::vector<int32_t> tok((size_t)(N + B));
    std::mt19937 r(11);
    for (auto & x : tok) x = (int32_t)(r() % (uint32_t)V);
    auto train = [&](int threads, int steps, std::vector<float> * curve) {
        maporl_set_threads(threads);
        L::Model<float> m(c);
        m.init(1);
        std::vector<int32_t> in((size_t)N), tgt((size_t)N);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                in[(size_t)(b * T + t)] = tok[(size_t)(b * (T + 1) + t)];
                tgt[(size_t)(b * T + t)] = tok[(size_t)(b * (T + 1) + t + 1)];
            }
        std::vector<float> dl((size_t)(N * V));
        for (int s = 0; s < steps; ++s) {
            m.forward(in.data(), B, T);
            const double loss = model_check::cross_entropy(m.logits.data(), tgt.data(), N, V, dl.data());
            if (curve) curve->push_back((float)loss);
            m.zero_grad();
            m.backward(dl.data(), nullptr);
            m.update(maporl::gpt::AdamW{3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f}, 1.0);
        }
        maporl_set_threads(0);
        return m.params;
    };
    std::vector<float> curve;
    const std::vector<float> p1 = train(1, 150, &curve);
    const std::vector<float> p3 = train(3, 150, nullptr);
    CHECK(p1 == p3, "parameters after 150 steps differ between 1 and 3 threads");
    std::printf("  cross-entropy: step 0 %.4f, 50 %.4f, 149 %.4f (chance %.4f)\n", curve[0], curve[50], curve.back(),
                std::log((double)V));
    CHECK(curve[0] > 2.2f && curve.back() < 0.3f * curve[0], "loss %g -> %g: the model did not learn", curve[0],
          curve.back());
}

TEST(bad_configs_are_named) {
    L::Config c = variants()[0].c;
    auto fails_with = [](L::Config x, const char * needle) {
        try {
            L::check_config(x);
        } catch (const maporl::Error & e) { return e.message.find(needle) != std::string::npos; }
        return false;
    };
    L::Config x = c;
    x.kv_heads = 3;
    CHECK(fails_with(x, "num_key_value_heads"), "kv heads");
    x = c;
    x.head_dim = 5;
    CHECK(fails_with(x, "head_dim"), "odd head_dim");
    x = c;
    x.rms_eps = NAN;
    CHECK(fails_with(x, "rms_norm_eps"), "NaN eps");
    x = c;
    x.rope.high_freq_factor = 0.5;
    CHECK(fails_with(x, "high_freq_factor"), "llama3 band order");
    L::Model<float> m(c);
    m.init(1);
    const int32_t bad[2] = {1, 9};
    bool threw = false;
    try {
        m.forward(bad, 1, 2);
    } catch (const maporl::Error & e) { threw = e.message.find("tokens") != std::string::npos; }
    CHECK(threw, "an out-of-vocabulary token is refused");
}

}  // namespace

int main() { return check::run_all("test_llama"); }
