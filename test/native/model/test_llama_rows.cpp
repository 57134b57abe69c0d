// test_llama_rows.cpp: on any machine, the comparison test_llama_cuda.cpp makes of the device's per-row rotation and
// KV-cache store (row_ops_check.h), run against a rotation computed with fused multiply-adds, as the GPU computes
// cuda/model/rope.cu's a*c - b*s and b*c + a*s (nvcc contracts them; either operand order): some rotated keys then
// differ from the emulation's in their last bits, so a bit-exact comparison of the cache against the emulation's own
// keys (the comparison before) fails, and the like-with-like one (the emulation stores the device's keys) holds.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "test/native/core/check.h"
#include "test/native/model/row_ops_check.h"

namespace {

using namespace row_ops_check;
using E = maporl::llama::HostDevice;

// rope.cu's rope_rows_kernel with its products contracted: order 0 rounds a*c (b*c) first, order 1 the other product.
void rope_rows_fma(Vec & x, const Vec & cos, const Vec & sin, const IVec & pos, int64_t N, int64_t H, int64_t dim,
                   int order) {
    const int64_t half = dim / 2;
    for (int64_t nh = 0; nh < N * H; ++nh)
        for (int64_t i = 0; i < half; ++i) {
            const int64_t at = (int64_t)pos[(size_t)(nh / H)] * half + i;
            const float c = cos[(size_t)at], s = sin[(size_t)at];
            float * o = x.data() + nh * dim;
            const float a = o[i], b = o[i + half];
            o[i] = order == 0 ? std::fma(-b, s, a * c) : std::fma(a, c, -(b * s));
            o[i + half] = order == 0 ? std::fma(a, s, b * c) : std::fma(b, c, a * s);
        }
}

void kv_store_emulated(Vec & kc, Vec & vc, const Vec & k, const Vec & v, const IVec & rb, const IVec & rt, int64_t N,
                       int64_t NKV, int64_t max_len, int64_t hd) {
    E::kv_store(kc.data(), vc.data(), k.data(), v.data(), rb.data(), rt.data(), N, NKV, max_len, hd);
}

TEST(kv_store_is_compared_like_with_like_under_a_contracted_rotation) {
    const Case c;
    for (int order : {0, 1}) {
        const Result r = check_rope_rows_and_kv_store(
            c,
            [order](Vec & x, const Vec & cs, const Vec & sn, const IVec & pos, int64_t N, int64_t H, int64_t hd) {
                rope_rows_fma(x, cs, sn, pos, N, H, hd, order);
            },
            kv_store_emulated, order == 0 ? "fma order 0" : "fma order 1");
        std::printf("  fma order %d: %lld of %zu rotated keys differ from the emulation's in their last bits\n", order,
                    (long long)r.keys_differ, r.kd.size());
        CHECK(r.keys_differ > 0,
              "order %d: the contracted rotation differs from the emulation's in the last bits (%lld of %zu keys)",
              order, (long long)r.keys_differ, r.kd.size());
        // The comparison before: the emulation's own keys stored, against the device's cache, bit for bit.
        Vec kc = c.kc, vc = c.vc;
        kv_store_emulated(kc, vc, r.ke, c.v, c.rb, c.rt, c.N, c.NKV, c.max_len, c.hd);
        CHECK(kc != r.kcd && bits_differ(kc, r.kcd) == r.keys_differ,
              "order %d: the earlier bit-exact comparison would fail on %lld elements", order,
              (long long)bits_differ(kc, r.kcd));
    }
    // The uncontracted rotation (the emulation itself) gives the same bits: the check is exact where it can be.
    const Result same = check_rope_rows_and_kv_store(
        c,
        [](Vec & x, const Vec & cs, const Vec & sn, const IVec & pos, int64_t N, int64_t H, int64_t hd) {
            E::rope_rows(x.data(), cs.data(), sn.data(), pos.data(), N, H, hd);
        },
        kv_store_emulated, "uncontracted");
    CHECK(same.keys_differ == 0, "the emulation against itself: %lld keys differ", (long long)same.keys_differ);
}

}  // namespace

int main() { return check::run_all("test_llama_rows"); }
