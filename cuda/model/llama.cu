// llama.cu: the Llama family's model on CUDA (native/model/llama_cuda.h's cuda_model_create): llama_device.h's
// DeviceLlama over the CUDA ops (this family's in llama_cuda.h, the GEMM, residual, AdamW and memory helpers of
// gpt_cuda.h). The composition is tested on the CPU through an emulated op table (test_llama_device.cpp) and, with
// these ops, against the CPU model where a GPU is visible (test_llama_cuda.cpp).
#include "native/model/gpt_cuda.h"
#include "native/model/llama_cuda.h"
#include "native/model/llama_device.h"

namespace maporl {
namespace llama {
namespace {

namespace C = llama::cuda;
namespace G = gpt::cuda;

struct CudaOps {
    static void * alloc(int64_t bytes) { return G::alloc_f32((bytes + 3) / 4); }
    static void release(void * p) { G::release(p); }
    static void to_device(void * d, const void * s, int64_t b) { G::to_device(d, s, b); }
    static void to_host(void * d, const void * s, int64_t b) { G::to_host(d, s, b); }
    static void zero(void * p, int64_t b) { G::fill_zero(p, b); }

    static void rmsnorm_forward(float * out, float * rstd, const float * inp, const float * w, int64_t N, int64_t Cc,
                                double eps) {
        C::rmsnorm_forward(out, rstd, inp, w, N, Cc, eps);
    }
    static int64_t rmsnorm_scratch(int64_t N, int64_t Cc) { return C::rmsnorm_scratch(N, Cc); }
    static void rmsnorm_backward(float * dinp, float * dw, const float * dout, const float * inp, const float * w,
                                 const float * rstd, int64_t N, int64_t Cc, float * scratch) {
        C::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, Cc, scratch);
    }
    static void rope_forward(float * out, const float * inp, const float * cos, const float * sin, int64_t B, int64_t T,
                             int64_t pos0, int64_t H, int64_t dim) {
        C::rope_forward(out, inp, cos, sin, B, T, pos0, H, dim);
    }
    static void rope_backward(float * dinp, const float * dout, const float * cos, const float * sin, int64_t B,
                              int64_t T, int64_t pos0, int64_t H, int64_t dim) {
        C::rope_backward(dinp, dout, cos, sin, B, T, pos0, H, dim);
    }
    static void rope_rows(float * x, const float * cos, const float * sin, const int32_t * pos, int64_t N, int64_t H,
                          int64_t dim) {
        C::rope_rows(x, cos, sin, pos, N, H, dim);
    }
    static void swiglu_forward(float * out, const float * gate, const float * up, int64_t n) {
        C::swiglu_forward(out, gate, up, n);
    }
    static void swiglu_backward(float * dgate, float * dup, const float * dout, const float * gate, const float * up,
                                int64_t n) {
        C::swiglu_backward(dgate, dup, dout, gate, up, n);
    }
    static void attention_gqa_forward(float * out, float * att, const float * q, const float * k, const float * v,
                                      int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
        C::attention_gqa_forward(out, att, q, k, v, B, T, NH, NKV, hs);
    }
    static void attention_gqa_backward(float * dq, float * dk, float * dv, const float * dout, const float * q,
                                       const float * k, const float * v, const float * att, int64_t B, int64_t T,
                                       int64_t NH, int64_t NKV, int64_t hs, float * scratch) {
        C::attention_gqa_backward(dq, dk, dv, dout, q, k, v, att, B, T, NH, NKV, hs, scratch);
    }
    static void kv_store(float * kc, float * vc, const float * k, const float * v, const int32_t * rb,
                         const int32_t * rt, int64_t N, int64_t NKV, int64_t max_len, int64_t hd) {
        C::kv_store(kc, vc, k, v, rb, rt, N, NKV, max_len, hd);
    }
    static void attention_rows(float * out, const float * q, const float * kc, const float * vc, const int32_t * rb,
                               const int32_t * rt, int64_t N, int64_t NH, int64_t NKV, int64_t max_len, int64_t hd,
                               float * scratch) {
        C::attention_rows(out, q, kc, vc, rb, rt, N, NH, NKV, max_len, hd, scratch);
    }
    static void matmul_forward(float * out, const float * inp, const float * w, const float * bias, int64_t N,
                               int64_t Cc, int64_t OC) {
        G::matmul_forward(out, inp, w, bias, N, Cc, OC);
    }
    static void matmul_backward(float * dinp, float * dw, float * db, const float * dout, const float * inp,
                                const float * w, int64_t N, int64_t Cc, int64_t OC) {
        G::matmul_backward(dinp, dw, db, dout, inp, w, N, Cc, OC);
    }
    static void matmul_forward_bf16(float * out, const float * inp, const uint16_t * w, const float * bias, int64_t N,
                                    int64_t Cc, int64_t OC) {
        G::matmul_forward_bf16(out, inp, w, bias, N, Cc, OC);
    }
    static void matmul_backward_input_bf16(float * dinp, const float * dout, const uint16_t * w, int64_t N, int64_t Cc,
                                           int64_t OC) {
        G::matmul_backward_input_bf16(dinp, dout, w, N, Cc, OC);
    }
    static void matmul_forward_w8a8(float * out, const float * inp, const uint8_t * pq, const uint16_t * pd,
                                    const float * bias, int64_t N, int64_t Cc, int64_t OC, int8_t * xq, float * xd) {
        G::matmul_forward_w8a8(out, inp, pq, pd, bias, N, Cc, OC, xq, xd);
    }
    static void matmul_backward_input_q8(float * dinp, const float * dout, const uint8_t * pq, const uint16_t * pd,
                                         int64_t N, int64_t Cc, int64_t OC) {
        G::matmul_backward_input_q8(dinp, dout, pq, pd, N, Cc, OC);
    }
    static void embedding_forward_bf16(float * out, const int32_t * tok, const uint16_t * w, int64_t N, int64_t Cc) {
        C::embedding_forward_bf16(out, tok, w, N, Cc);
    }
    static void embedding_forward_q8(float * out, const int32_t * tok, const uint8_t * pq, const uint16_t * pd,
                                     int64_t N, int64_t Cc) {
        C::embedding_forward_q8(out, tok, pq, pd, N, Cc);
    }
    static void add(float * out, const float * a, const float * b, int64_t n) { G::residual_forward(out, a, b, n); }
    static void scale(float * x, float s, int64_t n) { C::scale(x, s, n); }
    static void add_rows(float * out, const float * d, const int32_t * mask, int64_t N, int64_t Cc) {
        C::add_rows(out, d, mask, N, Cc);
    }
    static void embedding_forward(float * out, const int32_t * tok, const float * wte, int64_t N, int64_t Cc) {
        C::embedding_forward(out, tok, wte, N, Cc);
    }
    static void embedding_backward(float * dwte, const float * dout, const int32_t * host_tokens, int64_t N,
                                   int64_t Cc) {
        C::embedding_backward(dwte, dout, host_tokens, N, Cc);
    }
    static void adamw(float * params, const float * grads, float * m, float * v, int64_t n, const gpt::AdamW & h,
                      int64_t t, float scale) {
        G::adamw_update(params, grads, m, v, n, h, t, scale);
    }
    static double global_norm(const float * x, int64_t n) { return G::global_norm(x, n); }
};

// Every call ends with a device synchronisation, so a kernel's failure surfaces in the call that launched it.
struct CudaLlama final : DeviceLlama<CudaOps> {
    using Base = DeviceLlama<CudaOps>;
    CudaLlama(const Config & c, Model<float> * host) : Base(c, host) { G::synchronize("llama: to the device"); }
    void upload(int which, const float * host, int64_t n) override { Base::upload(which, host, n); }
    void upload_frozen(const uint16_t * h, int64_t nh, const uint8_t * q, int64_t nq, const uint16_t * d,
                       int64_t nd) override {
        Base::upload_frozen(h, nh, q, nq, d, nd);
        G::synchronize("llama: to the device");
    }
    void download(int which, float * host, int64_t n) const override { Base::download(which, host, n); }
    void forward(const int32_t * tok, int64_t B_, int64_t T_, bool head, float * logits, float * values) override {
        Base::forward(tok, B_, T_, head, logits, values);
        G::synchronize("llama forward");
    }
    void head_rows(float * out, int64_t n0, int64_t rows) override { Base::head_rows(out, n0, rows); }
    void backward_begin() override { Base::backward_begin(); }
    void head_backward_rows(const float * dlogits, int64_t n0, int64_t rows) override {
        Base::head_backward_rows(dlogits, n0, rows);
        G::synchronize("llama backward");
    }
    void backward_hidden(const float * dvalues) override {
        Base::backward_hidden(dvalues);
        G::synchronize("llama backward");
    }
    void backward(const float * dlogits, const float * dvalues) override {
        Base::backward(dlogits, dvalues);
        G::synchronize("llama backward");
    }
    void zero_grad() override { Base::zero_grad(); }
    double update(const gpt::AdamW & h, double max_norm, int64_t t) override {
        const double n = Base::update(h, max_norm, t);
        G::synchronize("llama update");
        return n;
    }
    void cache_reset(int64_t batch, int64_t max_len) override { Base::cache_reset(batch, max_len); }
    void decode_rows(const int32_t * tok, const int64_t * pos, float * logits, float * values) override {
        Base::decode_rows(tok, pos, logits, values);
        G::synchronize("llama decode");
    }
    void prefill(const int32_t * tok, const int64_t * lens, int64_t P) override {
        Base::prefill(tok, lens, P);
        G::synchronize("llama prefill");
    }
};

}  // namespace

DeviceModel * cuda_model_create(const Config & c, Model<float> * host) {
    G::require_device("device");
    return new CudaLlama(c, host);
}

}  // namespace llama
}  // namespace maporl
