// test_llama_q8.cpp: a Llama-family base with int8 matrices (cfg.int8: Q8_0 blocks, frozen, computed W8A8: w8a8.h)
// at every SIMD level: close to a float model holding its dequantized values (the forward, the head in row chunks,
// decoded batches, a LoRA adapter's gradients: only the activations' rounding differs), and, where every matrix is
// int8, decoding two rows gives the bits of those rows decoded among nine (one kernel for the GEMV and the GEMM); a matrix whose rows are not a
// multiple of 32 long stays bfloat16; training or merging into the base is refused. Through the C API: set_tensor quantizes float
// data as the format says, takes GGUF's Q8_0 blocks as they are, and names the tensor of a non-finite value.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "maporl.h"
#include "native/core/bf16.h"
#include "native/core/core.h"
#include "native/core/q8.h"
#include "native/model/llama.h"
#include "native/model/model_handle.h"
#include "test/native/core/check.h"

namespace {

namespace L = maporl::llama;

struct Variant {
    const char * name;
    L::Config c;
};

std::vector<Variant> variants() {
    L::Config base;
    base.vocab = 40;
    base.context = 12;
    base.layers = 2;
    base.d_model = 32;
    base.heads = 2;
    base.kv_heads = 1;
    base.head_dim = 16;
    base.intermediate = 64;
    base.rms_eps = 1e-5;
    L::Config tied = base;
    tied.tie_embeddings = true;
    L::Config bias = base;  // Qwen2's q/k/v biases, an untied head
    bias.qkv_bias = true;
    L::Config q3 = base;  // Qwen3's q/k norms; the MLP's down projection reads 48 values a row: kept bfloat16
    q3.qk_norm = true;
    q3.intermediate = 48;
    return {{"llama-tied", tied}, {"qwen2-bias", bias}, {"qwen3-i48", q3}};
}

bool refused(const std::function<void()> & fn, const char * needle) {
    try {
        fn();
    } catch (const maporl::Error & e) { return e.message.find(needle) != std::string::npos; }
    return false;
}

// max |a - b| / max |b|.
double rel(const std::vector<float> & a, const std::vector<float> & b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::fabs((double)a[i] - (double)b[i]));
        den = std::max(den, std::fabs((double)b[i]));
    }
    return a.size() == b.size() && den > 0 ? num / den : INFINITY;
}

TEST(an_int8_base_is_close_to_its_dequantized_float_twin) {
    for (const char * level : {"scalar", "avx2", "avx512"}) {
        if (maporl_set_simd(level) != MAPORL_OK) continue;
        for (const Variant & var : variants()) {
            L::Config qc = var.c;
            qc.int8 = true;
            L::Model<float> qm(qc), f(var.c);
            qm.init(11);
            int64_t q8_elems = 0, q8_pad = 0, half_elems = 0;
            for (size_t k = 0; k < f.layout.tensors.size(); ++k) {
                const auto & t = f.layout.tensors[k];
                float * x = f.p((int64_t)k);
                if (t.shape.size() == 2 && t.shape[1] % 32 == 0) {
                    CHECK(qm.is_q8((int64_t)k), "%s: %s is not int8", var.name, t.name.c_str());
                    for (int64_t r = 0; r < t.shape[0]; ++r)
                        maporl::q8_unpack_row(x + r * t.shape[1], qm.q8q((int64_t)k), qm.q8s((int64_t)k), t.shape[1],
                                              r);
                    q8_elems += t.size;
                    q8_pad += (maporl::q8_padded_rows(t.shape[0]) - t.shape[0]) * t.shape[1];
                } else if (t.shape.size() == 2) {
                    CHECK(qm.is_half((int64_t)k), "%s: %s is not bfloat16", var.name, t.name.c_str());
                    for (int64_t i = 0; i < t.size; ++i) x[i] = maporl::bf16_to_float(qm.h((int64_t)k)[i]);
                    half_elems += t.size;
                } else {
                    std::copy(qm.p((int64_t)k), qm.p((int64_t)k) + t.size, x);
                }
            }
            CHECK((int64_t)qm.q8.size() == q8_elems + q8_pad && (int64_t)qm.q8d.size() * 32 == q8_elems + q8_pad &&
                      (int64_t)qm.half.size() == half_elems && (half_elems > 0) == (var.c.intermediate % 32 != 0),
                  "%s: %zu int8, %zu scales, %zu bf16 for %lld + %lld", var.name, qm.q8.size(), qm.q8d.size(),
                  qm.half.size(), (long long)q8_elems, (long long)half_elems);
            // the random init is the normal(0, 0.02) values quantized: not all zero, scales near 0.02 * 2.5 / 127
            const float d0 = maporl::f16_to_float(qm.q8d[0]);
            CHECK(d0 > 1e-4f && d0 < 1e-3f, "%s: first scale %g", var.name, d0);
            const int64_t B = 2, T = 7, V = var.c.vocab;
            std::vector<int32_t> tok((size_t)(B * T));
            for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)((i * 7 + 3) % (size_t)V);
            f.forward(tok.data(), B, T);
            qm.forward(tok.data(), B, T);
            // The activations' rounding (half a step of max |x| / 127 per block) moves logits by a few in a thousand.
            const double tol = 0.03;
            CHECK(rel(qm.logits, f.logits) < tol && rel(qm.values, f.values) < tol,
                  "%s %s: the forward is %.4f / %.4f from the float twin's (relative to its largest)", level, var.name,
                  rel(qm.logits, f.logits), rel(qm.values, f.values));
            CHECK(rel(qm.logits, f.logits) > 0, "%s %s: the int8 forward equals the float one: no W8A8?", level,
                  var.name);
            std::vector<float> zf((size_t)(3 * V)), zq((size_t)(3 * V));
            f.head_rows(zf.data(), 4, 3);
            qm.head_rows(zq.data(), 4, 3);
            CHECK(rel(zq, zf) < tol, "%s %s: head_rows %.4f apart", level, var.name, rel(zq, zf));
            std::vector<float> two_rows;
            for (int64_t rows : {2, 9}) {  // decode steps by the GEMV (<= 8 rows) and by the GEMM
                std::vector<int32_t> head((size_t)(rows * 3)), cur((size_t)rows);
                std::vector<int64_t> lens((size_t)rows), pos((size_t)rows);
                for (int64_t b = 0; b < rows; ++b) {
                    lens[(size_t)b] = 1 + b % 3;
                    for (int64_t t = 0; t < 3; ++t) head[(size_t)(b * 3 + t)] = (int32_t)((b + 2 * t + 1) % V);
                    cur[(size_t)b] = (int32_t)(b % V);
                    pos[(size_t)b] = lens[(size_t)b];
                }
                for (L::Model<float> * m : {&f, &qm}) {
                    m->cache_reset(rows, 8);
                    m->prefill(head.data(), lens.data(), 3);
                    m->decode_rows(cur.data(), pos.data());
                }
                CHECK(rel(qm.step_logits, f.step_logits) < tol && rel(qm.step_values, f.step_values) < tol,
                      "%s %s: %lld rows decode %.4f from the float twin", level, var.name, (long long)rows,
                      rel(qm.step_logits, f.step_logits));
                if (rows == 2)
                    two_rows = qm.step_logits;
                else if (half_elems == 0)  // (a bfloat16 matrix's GEMV and GEMM round differently)
                    CHECK(std::equal(two_rows.begin(), two_rows.end(), qm.step_logits.begin()),
                          "%s %s: two rows decoded alone (GEMV) differ from the same rows among nine (GEMM)", level,
                          var.name);
            }
            L::LoraConfig lc;
            lc.rank = 2;
            std::vector<std::vector<float>> grads;
            for (L::Model<float> * m : {&f, &qm}) {
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
            CHECK(rel(grads[1], grads[0]) < 0.05,
                  "%s %s: the adapter's gradients on the int8 base are %.4f from the float "
                  "base's",
                  level, var.name, rel(grads[1], grads[0]));
            const int64_t id = qm.active;
            CHECK(refused([&] { qm.lora_merge(id); }, "int8"), "%s: merging into the int8 base is refused", var.name);
            qm.active = -1;
            CHECK(refused([&] { qm.zero_grad(); }, "int8 and frozen"), "%s: training the int8 base is refused",
                  var.name);
        }
    }
    maporl_set_simd("best");
    L::Config both = variants()[0].c;
    both.int8 = both.bf16 = true;
    CHECK(refused([&] { L::Model<float> m(both); }, "bf16 and int8"), "bf16 and int8 together are refused");
    L::Config dbl = variants()[0].c;
    dbl.int8 = true;
    CHECK(refused([&] { L::Model<double> m(dbl); }, "int8: a float model only"), "an int8 double model is refused");
}

TEST(set_tensor_quantizes_takes_q8_0_blocks_and_names_a_non_finite_value) {
    maporl_llama_config c = maporl_llama_default_config();
    c.vocab = 40;
    c.context = 8;
    c.layers = 1;
    c.d_model = 32;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 16;
    c.intermediate = 64;
    c.int8_matrices = 1;
    maporl_gpt * g = nullptr;
    CHECK(maporl_llama_create_zeroed(&c, &g) == MAPORL_OK, "create: %s", maporl_last_error());
    char name[64];
    int64_t dims[2], idx = -1;
    int64_t count = 0;
    maporl_gpt_tensor_count(g, &count);
    for (int64_t i = 0; i < count && idx < 0; ++i) {
        maporl_gpt_tensor_info(g, i, name, dims, nullptr);
        if (std::string(name) == "model.layers.0.mlp.up_proj.weight") idx = i;
    }
    CHECK(idx >= 0 && g->lm->is_q8(idx), "up_proj is int8");
    const int64_t n = 64 * 32;
    std::vector<float> w(n);
    for (int64_t i = 0; i < n; ++i) w[(size_t)i] = std::sin(0.37 * (double)i) * (1 + i % 5);
    CHECK(maporl_gpt_set_tensor(g, idx, MAPORL_DTYPE_F32, w.data(), n) == MAPORL_OK, "set f32: %s",
          maporl_last_error());
    // The stored blocks, read back row-major from the packed layout (q8.h).
    const uint8_t * pq = g->lm->q8q(idx);
    const uint16_t * pd = g->lm->q8s(idx);
    auto block_d = [&](int64_t b) { return pd[maporl::q8_packed_scale_index(32, b, 0)]; };  // up_proj: [64, 32]
    auto block_same = [&](int64_t b, const int8_t * q) {
        for (int64_t i = 0; i < 32; ++i)
            if ((int)pq[maporl::q8_packed_index(32, b, i)] - 128 != std::max(-127, (int)q[i])) return false;
        return true;
    };
    int bad = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        int8_t q[32];
        uint16_t d;
        maporl::q8_quantize_block(w.data() + b * 32, q, &d);
        if (d != block_d(b) || !block_same(b, q)) ++bad;
    }
    CHECK(bad == 0, "%d blocks differ from q8_quantize_block", bad);
    // GGUF's Q8_0: 34-byte blocks (half d, 32 int8), stored unchanged.
    std::vector<uint8_t> blocks((size_t)(n / 32 * 34));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = (uint8_t)(i * 13 + 1);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint16_t d = maporl::float_to_f16(0.001f * (float)(b + 1));
        std::memcpy(&blocks[(size_t)(b * 34)], &d, 2);
    }
    CHECK(maporl_gpt_set_tensor(g, idx, MAPORL_DTYPE_Q8_0, blocks.data(), n) == MAPORL_OK, "set q8_0: %s",
          maporl_last_error());
    bad = 0;
    auto stored = [&](int64_t b) {
        const uint16_t d = block_d(b);
        return std::memcmp(&d, &blocks[(size_t)(b * 34)], 2) == 0 &&
            block_same(b, (const int8_t *)&blocks[(size_t)(b * 34 + 2)]);
    };
    for (int64_t b = 0; b < n / 32; ++b) bad += !stored(b);
    CHECK(bad == 0, "%d Q8_0 blocks not stored as they are (-128 as -127)", bad);
    w[70] = NAN;
    CHECK(maporl_gpt_set_tensor(g, idx, MAPORL_DTYPE_F32, w.data(), n) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "up_proj.weight has a non-finite value") &&
              std::strstr(maporl_last_error(), "index 70"),
          "NaN: %s", maporl_last_error());
    // A refused write leaves the tensor as it was (the Q8_0 blocks above), here and after the Inf scale below.
    auto unchanged = [&] {
        for (int64_t b = 0; b < n / 32; ++b)
            if (!stored(b)) return false;
        return true;
    };
    CHECK(unchanged(), "a refused F32 write changed the tensor");
    const std::vector<uint8_t> kept = blocks;
    const uint16_t inf = 0x7c00;
    std::memcpy(&blocks[34 * 3], &inf, 2);
    CHECK(maporl_gpt_set_tensor(g, idx, MAPORL_DTYPE_Q8_0, blocks.data(), n) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "block 3's scale is not finite"),
          "Inf scale: %s", maporl_last_error());
    blocks = kept;
    CHECK(unchanged(), "a refused Q8_0 write changed the tensor");
    int64_t norm = -1;
    for (int64_t i = 0; i < count && norm < 0; ++i) {
        maporl_gpt_tensor_info(g, i, name, dims, nullptr);
        if (std::string(name) == "model.norm.weight") norm = i;
    }
    CHECK(maporl_gpt_set_tensor(g, norm, MAPORL_DTYPE_Q8_0, blocks.data(), 32) == MAPORL_ERR_INVALID_ARG &&
              std::strstr(maporl_last_error(), "Q8_0 (3) is for the matrices of an int8 base"),
          "Q8_0 into a float tensor: %s", maporl_last_error());
    maporl_gpt_free(g);
}

}  // namespace

int main() { return check::run_all("test_llama_q8"); }
