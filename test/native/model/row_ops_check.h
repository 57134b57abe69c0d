// row_ops_check.h: the comparison of a device's per-row rotation (rope_rows) and KV-cache store (kv_store) with their
// emulation (native/model/llama_device_host.h), shared by test_llama_cuda.cpp (the CUDA kernels, where a GPU is) and
// test_llama_rows.cpp (on any machine, a rotation computed with fused multiply-adds as the GPU's contracted
// cuda/model/rope.cu computes it). The rotation is compared with a tolerance (the GPU contracts b*c + a*s into an FMA;
// the CPU builds with -ffp-contract=off: the last bits differ), the store bit for bit, like with like: the emulation
// stores the device's own rotated keys.
#pragma once

#include <cstdint>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/core/gpu_check.h"
#include "native/model/llama_device_host.h"
#include "native/model/llama_ops.h"

namespace row_ops_check {

using Vec = std::vector<float>;
using IVec = std::vector<int32_t>;

// The test's shapes and inputs (rows at positions 0 .. max_len - 1 of three cache rows).
struct Case {
    int64_t N = 5, NH = 6, NKV = 2, hd = 24, batch = 3, max_len = 40;
    IVec rb = {0, 2, 1, 2, 0}, rt = {0, 39, 7, 38, 1};
    Vec cos, sin, q, k, v, kc, vc;
    Case() {
        namespace L = maporl::llama;
        L::rope_tables(cos, sin, L::rope_inv_freq(hd, 10000.0, L::RopeScaling()), max_len);
        q = gpu_check::rnd((size_t)(N * NH * hd), 1), k = gpu_check::rnd((size_t)(N * NKV * hd), 2),
        v = gpu_check::rnd((size_t)(N * NKV * hd), 3);
        kc = gpu_check::rnd((size_t)(batch * NKV * max_len * hd), 4),
        vc = gpu_check::rnd((size_t)(batch * NKV * max_len * hd), 5);
    }
};

// How many of x and y differ in any bit.
inline int64_t bits_differ(const Vec & x, const Vec & y) {
    int64_t n = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) n += x[i] != y[i];
    return n + (int64_t)(x.size() > y.size() ? x.size() - y.size() : y.size() - x.size());
}

// dev_rope_rows(x, cos, sin, pos, N, H, hd) rotates host x in place on the device; dev_kv_store(kc, vc, k, v, rb, rt, N,
// NKV, max_len, hd) stores on the device and returns the host caches. Returns the device's rotated rows and caches, and
// how many rotated keys differ in their last bits from the emulation's (the reason the store is compared like with like).
struct Result {
    Vec qd, kd, kcd, vcd, ke;
    int64_t keys_differ = 0;
};
template <class RopeRows, class KvStore>
Result check_rope_rows_and_kv_store(const Case & c, RopeRows && dev_rope_rows, KvStore && dev_kv_store,
                                    const char * who) {
    using E = maporl::llama::HostDevice;
    Vec qe = c.q, ke = c.k, qd = c.q, kd = c.k;
    E::rope_rows(qe.data(), c.cos.data(), c.sin.data(), c.rt.data(), c.N, c.NH, c.hd);
    E::rope_rows(ke.data(), c.cos.data(), c.sin.data(), c.rt.data(), c.N, c.NKV, c.hd);
    dev_rope_rows(qd, c.cos, c.sin, c.rt, c.N, c.NH, c.hd);
    dev_rope_rows(kd, c.cos, c.sin, c.rt, c.N, c.NKV, c.hd);
    CHECK(gpu_check::close_rel(qd, qe, 1e-6, "rope_rows q") && gpu_check::close_rel(kd, ke, 1e-6, "rope_rows k"),
          "%s: rope_rows", who);
    Vec kc = c.kc, vc = c.vc, kcd = c.kc, vcd = c.vc;
    E::kv_store(kc.data(), vc.data(), kd.data(), c.v.data(), c.rb.data(), c.rt.data(), c.N, c.NKV, c.max_len,
                c.hd);  // (the device's keys)
    dev_kv_store(kcd, vcd, kd, c.v, c.rb, c.rt, c.N, c.NKV, c.max_len, c.hd);
    CHECK(kcd == kc && vcd == vc, "%s: kv_store of the device's rotated keys: %lld key and %lld value elements differ",
          who, (long long)bits_differ(kcd, kc), (long long)bits_differ(vcd, vc));
    return Result{qd, kd, kcd, vcd, ke, bits_differ(kd, ke)};
}

}  // namespace row_ops_check
