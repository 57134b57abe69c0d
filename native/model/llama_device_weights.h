// llama_device_weights.h: the base's matrices on a device (llama_device.h): float32 in the model's parameter buffer,
// or a frozen base held as the CPU model holds it (llama.h's frozen_layout): bfloat16 values, or int8 in q8.h's
// packed layout with its half scales, uploaded as they are. The products go through the op table D:
//   matmul_forward_bf16(out, inp, w16, bias, N, C, OC), matmul_backward_input_bf16(dinp, dout, w16, N, C, OC)
//   (the float GEMM on the exactly widened weight), matmul_forward_w8a8(out, inp, pq, pd, bias, N, C, OC, xq, xd)
//   (w8a8.h's arithmetic: the input quantized per block of 32 into xq [N, C] and xd [N, C / 32], integer block dots,
//   the same fma chain), matmul_backward_input_q8(dinp, dout, pq, pd, N, C, OC) (the float GEMM on q * d),
//   embedding_forward_bf16(out, tok, w16, N, C) and embedding_forward_q8(out, tok, pq, pd, N, C).
// A frozen matrix has no gradient: the device model trains adapters on it, never the base.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <vector>

#include "native/core/core.h"
#include "native/core/q8.h"
#include "native/model/llama.h"

namespace maporl {
namespace llama {

// A device buffer that grows: the new block is allocated before the old one is released (out of memory leaves the
// old one valid).
template <class D, typename T = float>
struct DevBuf {
    T * p = nullptr;
    int64_t cap = 0;
    DevBuf() = default;
    DevBuf(const DevBuf &) = delete;
    DevBuf & operator=(const DevBuf &) = delete;
    DevBuf(DevBuf && o) noexcept : p(o.p), cap(o.cap) { o.p = nullptr, o.cap = 0; }
    ~DevBuf() { D::release(p); }
    T * need(int64_t n) {
        if (n > cap) {
            T * q = static_cast<T *>(D::alloc(std::max<int64_t>(n, 1) * (int64_t)sizeof(T)));
            D::release(p);
            p = q;
            cap = n;
        }
        return p;
    }
    void free() {
        D::release(p);
        p = nullptr;
        cap = 0;
    }
    T * zeroed(int64_t n) {
        need(n);
        D::zero(p, n * (int64_t)sizeof(T));
        return p;
    }
    int64_t bytes() const { return cap * (int64_t)sizeof(T); }
};

// The base's matrices: `params` is the device model's float parameter buffer (layout's offsets), the frozen ones
// live here.
template <class D>
struct DeviceWeights {
    const Config & cfg;
    const Layout & layout;
    FrozenLayout fz;  // (empty offsets: a float32 base)
    DevBuf<D, uint16_t> half, q8d;
    DevBuf<D, uint8_t> q8;
    DevBuf<D, int8_t> xq;  // the W8A8 input's values and scales (activations: the largest input so far)
    DevBuf<D, float> xd;

    DeviceWeights(const Config & c, Layout & L) : cfg(c), layout(L) {
        if (c.bf16 || c.int8) {  // (frozen_layout refuses both at once)
            fz = frozen_layout(c, L);
            half.zeroed(fz.half);
            q8.zeroed(fz.q8);  // (with zero scales every weight is 0 until the upload)
            q8d.zeroed(fz.q8 / kQ8Block);
        }
    }
    bool is_half(int64_t t) const { return !fz.half_off.empty() && fz.half_off[(size_t)t] >= 0; }
    bool is_q8(int64_t t) const { return !fz.q8_off.empty() && fz.q8_off[(size_t)t] >= 0; }
    bool frozen() const { return cfg.bf16 || cfg.int8; }
    const char * dtype() const { return cfg.int8 ? "int8" : cfg.bf16 ? "bfloat16" : "float32"; }
    const uint16_t * h(int64_t t) const { return half.p + fz.half_off[(size_t)t]; }
    const uint8_t * q(int64_t t) const { return q8.p + fz.q8_off[(size_t)t]; }
    const uint16_t * d(int64_t t) const { return q8d.p + fz.q8_off[(size_t)t] / kQ8Block; }

    // The frozen matrices from the host model's arrays (llama::Model's half, q8, q8d), sizes checked.
    void upload(const uint16_t * h16, int64_t nh, const uint8_t * pq, int64_t nq, const uint16_t * pd, int64_t nd) {
        if (nh != fz.half || nq != fz.q8 || nd != fz.q8 / kQ8Block)
            throw_error(MAPORL_ERR_INVALID_ARG,
                        "upload: expected a %s base of %lld bfloat16 values, %lld int8 values and %lld scales, got "
                        "%lld, %lld and %lld",
                        dtype(), (long long)fz.half, (long long)fz.q8, (long long)(fz.q8 / kQ8Block), (long long)nh,
                        (long long)nq, (long long)nd);
        D::to_device(half.p, h16, nh * 2);
        D::to_device(q8.p, pq, nq);
        D::to_device(q8d.p, pd, nd * 2);
    }

    // out [N, OC] = inp [N, Cin] @ W^T (+ bias) for matrix tensor t (w: its float values when it is float).
    void lin(float * out, const float * inp, int64_t t, const float * w, const float * bias, int64_t N, int64_t Cin,
             int64_t OC) {
        if (is_q8(t)) {
            D::matmul_forward_w8a8(out, inp, q(t), d(t), bias, N, Cin, OC, xq.need(N * Cin), xd.need(N * Cin / 32));
        } else if (is_half(t)) {
            D::matmul_forward_bf16(out, inp, h(t), bias, N, Cin, OC);
        } else {
            D::matmul_forward(out, inp, w, bias, N, Cin, OC);
        }
    }
    // The W8A8 scratch for inputs of up to N x Cin (reserved before a backward: nothing there allocates in between).
    void reserve(int64_t N, int64_t Cin) {
        if (cfg.int8) xq.need(N * Cin), xd.need(N * Cin / 32);
    }
    // dinp [N, Cin] += dout [N, OC] @ W; dw, db (+)= the weight's and bias's gradients (null: frozen, or not asked).
    void lin_back(float * dinp, float * dw, float * db, const float * dout, const float * inp, int64_t t,
                  const float * w, int64_t N, int64_t Cin, int64_t OC) {
        if (is_q8(t) || is_half(t)) {
            if (dw || db)
                throw_error(MAPORL_ERR_INTERNAL, "device: a gradient asked of the frozen %s tensor %s", dtype(),
                            layout.tensors[(size_t)t].name.c_str());
            if (is_q8(t))
                D::matmul_backward_input_q8(dinp, dout, q(t), d(t), N, Cin, OC);
            else
                D::matmul_backward_input_bf16(dinp, dout, h(t), N, Cin, OC);
            return;
        }
        D::matmul_backward(dinp, dw, db, dout, inp, w, N, Cin, OC);
    }
    // out [N, C] = the embedding rows of the device tokens tok (w: the float embedding when it is float).
    void embed(float * out, const int32_t * tok, const float * w, int64_t N, int64_t C) {
        const int64_t t = layout.embed;
        if (is_q8(t))
            D::embedding_forward_q8(out, tok, q(t), d(t), N, C);
        else if (is_half(t))
            D::embedding_forward_bf16(out, tok, h(t), N, C);
        else
            D::embedding_forward(out, tok, w, N, C);
    }
    int64_t bytes() const { return half.bytes() + q8.bytes() + q8d.bytes(); }
    int64_t scratch_bytes() const { return xq.bytes() + xd.bytes(); }
};

}  // namespace llama
}  // namespace maporl
