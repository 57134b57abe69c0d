// logits_online.h: the online softmax statistics of CUDA's logits kernels (cuda/rl/logits.cu): one thread's running
// (max m, sum of exp(x - m), sum of exp(x - m) * (x - m)) over its strided share of a row, and the merge of two
// threads' states (warp shuffles, then the block's warps). Host-compilable so that the tests run the kernels'
// decomposition on the CPU (test/native/rl/test_logits_online.cpp). The CPU's own path is logits_row.h.
// The sums are double: a thread adds V / 256 terms (593 at V = 151,936), where float sums drift toward the
// log-probs' 1e-5.
#pragma once

#include <math.h>

#include "native/core/hd.h"

namespace maporl {

struct OnlineSoftmax {
    float m;      // running max (-Inf: nothing added yet)
    double s, t;  // sum of exp(x - m), sum of exp(x - m) * (x - m)
};

MAPORL_HD OnlineSoftmax online_softmax_init() { return OnlineSoftmax{-INFINITY, 0.0, 0.0}; }

// Adds x (a tempered logit: finite or -Inf; the caller handles NaN and +Inf). `entropy`: keep t.
MAPORL_HD void online_softmax_push(OnlineSoftmax & o, float x, bool entropy) {
    if (x == -INFINITY) return;
    if (x > o.m) {
        // NOTE(first): before the first finite x the state holds no mass (m = -Inf, s = t = 0): m - x is -Inf and
        // 0 * -Inf is NaN, so the old sums are not rescaled but start from this element (exp(0) = 1, t = 0).
        if (o.s == 0.0) {
            o.s = 1.0;
            o.t = 0.0;
        } else {
            const double sc = (double)expf(o.m - x);
            if (entropy) o.t = sc * (o.t + o.s * (double)(o.m - x));
            o.s = o.s * sc + 1.0;
        }
        o.m = x;
    } else {
        const float q = x - o.m, e = expf(q);
        o.s += (double)e;
        if (entropy && e > 0.0f) o.t += (double)(e * q);
    }
}

// The state of a and b's elements together (either may hold none).
MAPORL_HD OnlineSoftmax online_softmax_merge(OnlineSoftmax a, OnlineSoftmax b) {
    const float M = fmaxf(a.m, b.m);
    if (M == -INFINITY) return OnlineSoftmax{M, 0.0, 0.0};
    const double ea = a.s == 0.0 ? 0.0 : (double)expf(a.m - M);
    const double eb = b.s == 0.0 ? 0.0 : (double)expf(b.m - M);
    OnlineSoftmax o;
    o.m = M;
    o.s = a.s * ea + b.s * eb;
    o.t = (a.s == 0.0 ? 0.0 : ea * (a.t + a.s * (double)(a.m - M))) +
        (b.s == 0.0 ? 0.0 : eb * (b.t + b.s * (double)(b.m - M)));
    return o;
}

// log-sum-exp and entropy of a merged state, in double (NaN for a row of only -Inf).
MAPORL_HD double online_softmax_lse(OnlineSoftmax r) { return r.m == -INFINITY ? NAN : (double)r.m + log(r.s); }
MAPORL_HD double online_softmax_entropy(OnlineSoftmax r) { return r.m == -INFINITY ? NAN : log(r.s) - r.t / r.s; }

}  // namespace maporl
