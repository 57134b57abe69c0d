// test_policy_loss.cpp: the policy, value and fused logits losses in C++ without Node.
//   - gradients of the double path against central finite differences of its own loss, for every loss type,
//     KL estimator (plain and straight-through) and aggregation, on a batch with masked tokens, an empty row
//     and ratios far outside the clip range;
//   - the fused kernel's gradient w.r.t. logits against finite differences (N = 7 tokens, V = 13), and the
//     fused result against logprobs + policy_loss composed by the chain rule (every SIMD level);
//   - every SIMD level of the float path against the double path; thread-count invariance;
//   - error statuses; and, when a GPU is visible, CUDA against the CPU.
#include <algorithm>
#include <chrono>
#include <string>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test/native/core/check.h"
#include "maporl.h"
#include "native/rl/policy_loss.h"

namespace {

struct Batch {
    int64_t B, T;
    std::vector<double> lp, old, adv, ref, ent;
    std::vector<uint8_t> m;
};

// Row 1 has no valid token; the rest mix valid and masked tokens. Log-ratios span [-3, 3] so that ratios fall
// far outside every clip range; masked positions hold NaN (they must never be read into a result).
Batch make_batch(int64_t B, int64_t T, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    Batch x{B, T, {}, {}, {}, {}, {}, {}};
    const int64_t n = B * T;
    x.lp.resize(n);
    x.old.resize(n);
    x.adv.resize(n);
    x.ref.resize(n);
    x.ent.resize(n);
    x.m.resize(n);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / T;
        x.m[i] = b == 1 ? 0 : (u(g) < 0.75 ? 1 : 0);
        x.lp[i] = -0.1 - 3.0 * u(g);
        x.old[i] = x.lp[i] + 6.0 * (u(g) - 0.5);
        x.adv[i] = 4.0 * (u(g) - 0.5);
        x.ref[i] = x.lp[i] + 4.0 * (u(g) - 0.5);
        x.ent[i] = 3.0 * u(g);
        if (!x.m[i]) {
            x.lp[i] = NAN;
            x.old[i] = NAN;
            x.ref[i] = NAN;
            x.ent[i] = NAN;
        }
    }
    return x;
}

// Loss of the double path. `shift` moves old_logp with logp by the same amount at the perturbed index (CISPO's
// importance weight is detached: its gradient is that of the loss with the ratio held fixed).
double loss_of(const Batch & x, const std::vector<double> & lp, const std::vector<double> & ent,
               const maporl_policy_loss_params & p, std::vector<double> * grad, std::vector<double> * gent,
               const std::vector<double> * old = nullptr) {
    maporl::PolicyLossArgs<double> a{lp.data(),
                                     (old ? *old : x.old).data(),
                                     x.adv.data(),
                                     0,
                                     x.m.data(),
                                     MAPORL_MASK_U8,
                                     x.ref.data(),
                                     ent.data(),
                                     x.B,
                                     x.T,
                                     p,
                                     grad ? grad->data() : nullptr,
                                     gent ? gent->data() : nullptr};
    maporl_policy_loss_stats st;
    maporl::policy_loss_cpu<double>(a, &st);
    return st.loss;
}

const maporl_loss_type kTypes[] = {MAPORL_LOSS_PPO, MAPORL_LOSS_GSPO, MAPORL_LOSS_CISPO, MAPORL_LOSS_REINFORCE};
const maporl_loss_agg kAggs[] = {MAPORL_AGG_TOKEN_MEAN, MAPORL_AGG_SEQ_MEAN_TOKEN_SUM, MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN,
                                 MAPORL_AGG_SEQ_MEAN_TOKEN_SUM_NORM};

TEST(gradients_match_finite_differences) {
    // GSPO's token-form gradient equals the derivative of its loss when the advantage is constant over a
    // sequence (sequence-level rewards, as GSPO is used), so that batch has per-sequence advantages.
    const Batch xt = make_batch(4, 9, 7);
    Batch xs = xt;
    for (size_t i = 0; i < xs.adv.size(); ++i) xs.adv[i] = xs.adv[(i / xs.T) * xs.T];
    for (maporl_loss_type type : kTypes)
        for (int kl = 0; kl <= 4; ++kl)
            for (int st = 0; st <= 1; ++st)
                for (maporl_loss_agg agg : kAggs) {
                    if (st && kl == 0) continue;
                    maporl_policy_loss_params p = maporl_policy_loss_default_params();
                    p.type = type;
                    p.kl = (maporl_kl_estimator)kl;
                    p.kl_straight_through = st;
                    p.kl_coef = kl ? 0.3f : 0.0f;
                    p.entropy_coef = 0.01f;
                    p.agg = agg;
                    p.clip_high = 0.28f;
                    const Batch & x = type == MAPORL_LOSS_GSPO ? xs : xt;
                    std::vector<double> g(x.lp.size()), ge(x.lp.size());
                    loss_of(x, x.lp, x.ent, p, &g, &ge);
                    int bad = 0;
                    for (size_t i = 0; i < x.lp.size(); ++i) {
                        if (!x.m[i]) {
                            bad += g[i] != 0.0 || ge[i] != 0.0;
                            continue;
                        }
                        const double h = 1e-6;
                        std::vector<double> lp = x.lp, old = x.old;
                        const bool shift = type == MAPORL_LOSS_CISPO;
                        // The straight-through gradient is not the derivative of the loss: check the k2 part.
                        lp[i] = x.lp[i] + h;
                        if (shift) old[i] = x.old[i] + h;
                        double up = loss_of(x, lp, x.ent, p, nullptr, nullptr, &old);
                        lp[i] = x.lp[i] - h;
                        if (shift) old[i] = x.old[i] - h;
                        double dn = loss_of(x, lp, x.ent, p, nullptr, nullptr, &old);
                        double fd = (up - dn) / (2 * h);
                        if (st) {
                            maporl_policy_loss_params q = p;
                            q.kl = MAPORL_KL_K2;
                            q.kl_straight_through = 0;
                            lp[i] = x.lp[i] + h;
                            if (shift) old[i] = x.old[i] + h;
                            up = loss_of(x, lp, x.ent, q, nullptr, nullptr, &old);
                            lp[i] = x.lp[i] - h;
                            if (shift) old[i] = x.old[i] - h;
                            dn = loss_of(x, lp, x.ent, q, nullptr, nullptr, &old);
                            fd = (up - dn) / (2 * h);
                        }
                        bad += !check::close(g[i], fd, 1e-5, 1e-8, std::fabs(fd));
                        std::vector<double> e = x.ent;
                        e[i] = x.ent[i] + h;
                        up = loss_of(x, x.lp, e, p, nullptr, nullptr);
                        e[i] = x.ent[i] - h;
                        dn = loss_of(x, x.lp, e, p, nullptr, nullptr);
                        bad += !check::close(ge[i], (up - dn) / (2 * h), 1e-5, 1e-9, 1.0);
                    }
                    CHECK(bad == 0, "type %d kl %d st %d agg %d: %d gradient entries off", (int)type, kl, st, (int)agg,
                          bad);
                }
}

TEST(value_loss_gradient_matches_finite_differences) {
    const int64_t B = 3, T = 7;
    std::mt19937 g(3);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> v(B * T), old(B * T), R(B * T), gr(B * T);
    std::vector<uint8_t> m(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
        v[i] = u(g);
        old[i] = v[i] + u(g);
        R[i] = u(g);
        m[i] = (i % 4) != 1;
    }
    for (maporl_loss_agg agg : kAggs)
        for (double clip : {0.0, 0.3}) {
            maporl_value_loss_stats st;
            maporl::value_loss_cpu<double>(v.data(), old.data(), R.data(), m.data(), MAPORL_MASK_U8, B, T, clip, agg,
                                           0.0, gr.data(), &st);
            int bad = 0;
            for (int64_t i = 0; i < B * T; ++i) {
                std::vector<double> w = v;
                maporl_value_loss_stats a, b;
                w[i] = v[i] + 1e-6;
                maporl::value_loss_cpu<double>(w.data(), old.data(), R.data(), m.data(), MAPORL_MASK_U8, B, T, clip,
                                               agg, 0.0, nullptr, &a);
                w[i] = v[i] - 1e-6;
                maporl::value_loss_cpu<double>(w.data(), old.data(), R.data(), m.data(), MAPORL_MASK_U8, B, T, clip,
                                               agg, 0.0, nullptr, &b);
                bad += !check::close(gr[i], (a.loss - b.loss) / 2e-6, 1e-5, 1e-9, 1.0);
            }
            CHECK(bad == 0, "agg %d clip %g: %d entries off", (int)agg, clip, bad);
            CHECK(clip == 0.0 || st.clip_frac > 0.0, "clip_frac %g: the test should exercise the clip", st.clip_frac);
        }
}

// Fused loss over logits in double: total loss as a function of the logits.
struct Fused {
    int64_t B, T, V;
    std::vector<double> z, old, adv;
    std::vector<int32_t> y;
    std::vector<uint8_t> m;
};

double fused_loss(const Fused & f, const std::vector<double> & z, const maporl_policy_loss_params & p, double temp,
                  std::vector<double> * gz, std::vector<double> * lp, std::vector<double> * ent) {
    maporl::FusedArgs<double> a;
    a.logits = z.data();
    a.targets = f.y.data();
    a.loss =
        maporl::PolicyLossArgs<double>{nullptr, f.old.data(), f.adv.data(), 0, f.m.data(), MAPORL_MASK_U8, f.old.data(),
                                       nullptr, f.B,          f.T,          p, nullptr,    nullptr};
    a.V = f.V;
    a.temperature = temp;
    std::vector<double> scratch(z.size());
    a.grad_logits = gz ? gz->data() : scratch.data();
    a.logp_out = lp ? lp->data() : nullptr;
    a.entropy_out = ent ? ent->data() : nullptr;
    a.grad_logp_out = nullptr;
    maporl_policy_loss_stats st;
    maporl::fused_policy_loss_cpu<double>(a, &st);
    return st.loss;
}

Fused make_fused(int64_t B, int64_t T, int64_t V, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    Fused f{B,
            T,
            V,
            std::vector<double>(B * T * V),
            std::vector<double>(B * T),
            std::vector<double>(B * T),
            std::vector<int32_t>(B * T),
            std::vector<uint8_t>(B * T)};
    for (auto & z : f.z) z = 3.0 * u(g);
    for (int64_t n = 0; n < B * T; ++n) {
        f.y[n] = (int32_t)(g() % (uint32_t)V);
        f.old[n] = -2.5 + 0.8 * u(g);
        f.adv[n] = u(g);
        f.m[n] = n % 5 != 3;
    }
    return f;
}

TEST(fused_gradient_matches_finite_differences) {
    // CISPO's detached weight makes its gradient differ from the loss derivative; it is checked against the
    // composition instead (fused_equals_composition). GSPO gets one advantage per sequence (see above).
    Fused f = make_fused(2, 7, 13, 11);
    for (maporl_loss_type type : {MAPORL_LOSS_PPO, MAPORL_LOSS_GSPO, MAPORL_LOSS_REINFORCE})
        for (double temp : {1.0, 0.7}) {
            if (type == MAPORL_LOSS_GSPO)
                for (int64_t n = 0; n < f.B * f.T; ++n) f.adv[n] = f.adv[(n / f.T) * f.T];
            maporl_policy_loss_params p = maporl_policy_loss_default_params();
            p.type = type;
            p.kl = MAPORL_KL_K3;
            p.kl_coef = 0.2f;
            p.entropy_coef = 0.05f;
            p.agg = MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN;
            std::vector<double> gz(f.z.size());
            fused_loss(f, f.z, p, temp, &gz, nullptr, nullptr);
            int bad = 0;
            for (size_t i = 0; i < f.z.size(); ++i) {
                std::vector<double> z = f.z;
                z[i] = f.z[i] + 1e-6;
                const double up = fused_loss(f, z, p, temp, nullptr, nullptr, nullptr);
                z[i] = f.z[i] - 1e-6;
                const double dn = fused_loss(f, z, p, temp, nullptr, nullptr, nullptr);
                bad += !check::close(gz[i], (up - dn) / 2e-6, 1e-5, 1e-9, 1.0);
            }
            CHECK(bad == 0, "type %d temp %g: %d of %zu entries off", (int)type, temp, bad, f.z.size());
        }
}

// logprobs in long double, the plain two-pass formula.
void logprobs_ref(const float * z, int64_t V, int32_t y, double temp, double * lp, double * H) {
    long double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max<long double>(mx, (long double)z[v] / temp);
    long double s = 0, t = 0;
    for (int64_t v = 0; v < V; ++v) {
        const long double x = (long double)z[v] / temp;
        const long double e = std::exp(x - mx);
        s += e;
        if (e > 0) t += e * (x - mx);
    }
    *lp = (double)((long double)z[y] / temp - mx - std::log(s));
    *H = (double)(std::log(s) - t / s);
}

TEST(logprobs_every_simd_level_matches_long_double) {
    std::mt19937 g(5);
    std::normal_distribution<float> nd(0.0f, 4.0f);
    for (int64_t V : {1, 13, 16, 100, 1000, 4099}) {
        const int64_t N = 6;
        std::vector<float> z(N * V);
        for (auto & v : z) v = nd(g);
        std::vector<int32_t> y(N);
        for (auto & t : y) t = (int32_t)(g() % (uint32_t)V);
        if (V > 1) {
            for (int64_t v = 0; v < V; v += 2) z[1 * V + v] = -INFINITY;  // half the row -Inf
            z[1 * V + 1] = 0.5f;
            z[2 * V + y[2]] = 80.0f;  // one dominant logit
            z[3 * V + (y[3] + 1) % V] = -INFINITY;
        }
        for (const char * level : {"scalar", "avx2", "avx512"}) {
            if (maporl_set_simd(level) != MAPORL_OK) continue;
            for (double temp : {1.0, 0.6}) {
                std::vector<float> lp(N), H(N);
                CHECK(maporl_logprobs(MAPORL_DEVICE_CPU, z.data(), y.data(), N, V, (float)temp, lp.data(), H.data()) ==
                          MAPORL_OK,
                      "%s", maporl_last_error());
                for (int64_t n = 0; n < N; ++n) {
                    double rl, rh;
                    logprobs_ref(z.data() + n * V, V, y[n], temp, &rl, &rh);
                    CHECK(check::close(lp[n], rl, 2e-6, 2e-6, std::fabs(rl)) || (std::isinf(rl) && lp[n] == rl),
                          "%s V %lld row %lld: logp %g vs %g", level, (long long)V, (long long)n, lp[n], rl);
                    CHECK(check::close(H[n], rh, 2e-5, 2e-6, 1.0), "%s V %lld row %lld: entropy %g vs %g", level,
                          (long long)V, (long long)n, H[n], rh);
                }
            }
        }
    }
    maporl_set_simd("best");
    std::vector<float> z(8, -INFINITY), lp(1);
    int32_t y = 0;
    CHECK(maporl_logprobs(MAPORL_DEVICE_CPU, z.data(), &y, 1, 8, 1.0f, lp.data(), nullptr) == MAPORL_OK, "all -inf");
    CHECK(std::isnan(lp[0]), "an all -Inf row gives NaN, got %g", lp[0]);
}

std::vector<float> to_f(const std::vector<double> & v) { return std::vector<float>(v.begin(), v.end()); }

struct FloatRun {
    maporl_policy_loss_stats st;
    std::vector<float> g, ge;
};

FloatRun run_float(maporl_device dev, const Batch & x, const maporl_policy_loss_params & p) {
    const std::vector<float> lp = to_f(x.lp), old = to_f(x.old), adv = to_f(x.adv), ref = to_f(x.ref),
                             ent = to_f(x.ent);
    FloatRun r{{}, std::vector<float>(lp.size()), std::vector<float>(lp.size())};
    const maporl_status s = maporl_policy_loss(dev, lp.data(), old.data(), adv.data(), 0, x.m.data(), MAPORL_MASK_U8,
                                               ref.data(), ent.data(), x.B, x.T, p, r.g.data(), r.ge.data(), &r.st);
    CHECK(s == MAPORL_OK, "%s", maporl_last_error());
    return r;
}

TEST(float_paths_match_double_and_thread_count) {
    const Batch x = make_batch(37, 301, 9);  // rows not a multiple of any vector width
    for (maporl_loss_type type : kTypes)
        for (int kl : {0, 1, 4}) {
            maporl_policy_loss_params p = maporl_policy_loss_default_params();
            p.type = type;
            p.kl = (maporl_kl_estimator)kl;
            p.kl_coef = 0.1f;
            p.entropy_coef = 0.01f;
            p.agg = MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN;
            std::vector<double> g(x.lp.size()), ge(x.lp.size());
            maporl::PolicyLossArgs<double> a{x.lp.data(),  x.old.data(), x.adv.data(), 0,   x.m.data(), MAPORL_MASK_U8,
                                             x.ref.data(), x.ent.data(), x.B,          x.T, p,          g.data(),
                                             ge.data()};
            maporl_policy_loss_stats want;
            maporl::policy_loss_cpu<double>(a, &want);
            for (const char * level : {"scalar", "avx2", "avx512"}) {
                if (maporl_set_simd(level) != MAPORL_OK) continue;
                maporl_set_threads(1);
                const FloatRun one = run_float(MAPORL_DEVICE_CPU, x, p);
                maporl_set_threads(3);
                const FloatRun three = run_float(MAPORL_DEVICE_CPU, x, p);
                CHECK(std::memcmp(&one.st, &three.st, sizeof one.st) == 0 && one.g == three.g,
                      "%s type %d: results depend on the thread count", level, (int)type);
                int bad = 0;
                for (size_t i = 0; i < g.size(); ++i) bad += !check::close(one.g[i], g[i], 2e-5, 1e-9, std::fabs(g[i]));
                CHECK(bad == 0, "%s type %d kl %d: %d gradient entries differ from double", level, (int)type, kl, bad);
                const double * wv = &want.loss;
                const double * gv = &one.st.loss;
                for (int k = 0; k < 13; ++k)
                    CHECK(check::close(gv[k], wv[k], 2e-5, 1e-7, std::fabs(wv[k])),
                          "%s type %d kl %d stat %d: %g vs %g", level, (int)type, kl, k, gv[k], wv[k]);
            }
        }
    maporl_set_simd("best");
    maporl_set_threads(0);
}

// fused = logprobs + policy_loss composed by the chain rule, on every SIMD level, in place and not.
// V = 4103: rows over 16 KiB take the non-temporal store path with a misaligned head and a ragged tail.
TEST(fused_equals_composition) {
    for (int64_t V : {37, 4103}) {
        const int64_t B = 3, T = 5, N = B * T;
        const Fused fd = make_fused(B, T, V, 21);
        const std::vector<float> z = to_f(fd.z), old = to_f(fd.old), adv = to_f(fd.adv);
        for (maporl_loss_type type : kTypes)
            for (const char * level : {"scalar", "avx2", "avx512"}) {
                if (maporl_set_simd(level) != MAPORL_OK) continue;
                maporl_policy_loss_params p = maporl_policy_loss_default_params();
                p.type = type;
                p.entropy_coef = 0.03f;
                p.kl = MAPORL_KL_K2;
                p.kl_coef = 0.1f;
                const float temp = 0.8f;
                std::vector<float> lp(N), H(N), gl(N), ge(N), gz(N * V), flp(N), fH(N), fgl(N);
                CHECK(maporl_logprobs(MAPORL_DEVICE_CPU, z.data(), fd.y.data(), N, V, temp, lp.data(), H.data()) ==
                          MAPORL_OK,
                      "%s", maporl_last_error());
                for (int64_t n = 0; n < N; ++n)
                    if (!fd.m[n]) lp[n] = H[n] = 0.0f;
                maporl_policy_loss_stats s1, s2, s3;
                CHECK(maporl_policy_loss(MAPORL_DEVICE_CPU, lp.data(), old.data(), adv.data(), 0, fd.m.data(),
                                         MAPORL_MASK_U8, old.data(), H.data(), B, T, p, gl.data(), ge.data(),
                                         &s1) == MAPORL_OK,
                      "%s", maporl_last_error());
                CHECK(maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), fd.y.data(), old.data(), adv.data(), 0,
                                               fd.m.data(), MAPORL_MASK_U8, old.data(), B, T, V, temp, p, gz.data(),
                                               flp.data(), fH.data(), fgl.data(), &s2) == MAPORL_OK,
                      "%s", maporl_last_error());
                std::vector<float> zin = z;  // in place
                CHECK(maporl_fused_policy_loss(MAPORL_DEVICE_CPU, zin.data(), fd.y.data(), old.data(), adv.data(), 0,
                                               fd.m.data(), MAPORL_MASK_U8, old.data(), B, T, V, temp, p, zin.data(),
                                               nullptr, nullptr, nullptr, &s3) == MAPORL_OK,
                      "%s", maporl_last_error());
                CHECK(zin == gz, "%s type %d: in place differs from out of place", level, (int)type);
                CHECK(check::close(s2.loss, s1.loss, 1e-5, 1e-7, std::fabs(s1.loss)), "%s type %d: loss %g vs %g",
                      level, (int)type, s2.loss, s1.loss);
                int bad = 0;
                for (int64_t n = 0; n < N; ++n) {
                    bad += !check::close(flp[n], lp[n], 1e-6, 1e-6, std::fabs(lp[n]));
                    bad += !check::close(fgl[n], gl[n], 1e-5, 1e-8, std::fabs(gl[n]));
                    double S = 0;
                    for (int64_t v = 0; v < V; ++v) S += std::exp((double)z[n * V + v] / temp);
                    for (int64_t v = 0; v < V; ++v) {
                        const double x = (double)z[n * V + v] / temp, pr = std::exp(x) / S;
                        const double lse = std::log(S);
                        double want = ((v == fd.y[n] ? 1.0 : 0.0) - pr) * gl[n] / temp;
                        want += ge[n] * (-pr * (x - lse + H[n])) / temp;
                        if (!fd.m[n]) want = 0;
                        bad += !check::close(gz[n * V + v], want, 1e-4, 1e-8, std::fabs(gl[n]) + std::fabs(ge[n]));
                    }
                }
                CHECK(bad == 0, "%s V %lld type %d: %d entries differ from the composition", level, (long long)V,
                      (int)type, bad);
            }
    }
    maporl_set_simd("best");
}

TEST(errors_name_the_argument_and_leave_inputs_untouched) {
    const Fused fd = make_fused(1, 4, 9, 2);
    std::vector<float> z = to_f(fd.z), old = to_f(fd.old), adv = to_f(fd.adv);
    std::vector<int32_t> y = fd.y;
    std::vector<uint8_t> m(4, 1);
    y[2] = 9;  // == V
    const std::vector<float> z0 = z;
    maporl_policy_loss_params p = maporl_policy_loss_default_params();
    maporl_status s = maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), y.data(), old.data(), adv.data(), 0,
                                               m.data(), MAPORL_MASK_U8, nullptr, 1, 4, 9, 1.0f, p, z.data(), nullptr,
                                               nullptr, nullptr, nullptr);
    CHECK(s == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "targets") != nullptr, "%s",
          maporl_last_error());
    CHECK(z == z0, "a rejected in-place call must not touch the logits");
    m[2] = 0;  // a masked target is never read
    s = maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), y.data(), old.data(), adv.data(), 0, m.data(),
                                 MAPORL_MASK_U8, nullptr, 1, 4, 9, 1.0f, p, z.data(), nullptr, nullptr, nullptr,
                                 nullptr);
    CHECK(s == MAPORL_OK, "%s", maporl_last_error());
    m[1] = 2;
    std::vector<float> g(4);
    s = maporl_policy_loss(MAPORL_DEVICE_CPU, old.data(), old.data(), adv.data(), 0, m.data(), MAPORL_MASK_U8, nullptr,
                           nullptr, 1, 4, p, g.data(), nullptr, nullptr);
    CHECK(s == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "mask") != nullptr, "%s",
          maporl_last_error());
    m[1] = 1;
    struct Case {
        const char * field;
        void (*set)(maporl_policy_loss_params &);
    };
    const Case cases[] = {
        {"params.clip_low", [](maporl_policy_loss_params & q) { q.clip_low = NAN; }},
        {"params.clip_high", [](maporl_policy_loss_params & q) { q.clip_high = -0.1f; }},
        {"params.dual_clip", [](maporl_policy_loss_params & q) { q.dual_clip = 0.5f; }},
        {"params.type", [](maporl_policy_loss_params & q) { q.type = (maporl_loss_type)9; }},
        {"params.agg", [](maporl_policy_loss_params & q) { q.agg = (maporl_loss_agg)9; }},
        {"params.normalizer", [](maporl_policy_loss_params & q) { q.normalizer = INFINITY; }},
        {"ref_logp", [](maporl_policy_loss_params & q) { q.kl = MAPORL_KL_K3; }},
        {"entropy", [](maporl_policy_loss_params & q) { q.entropy_coef = 0.1f; }},
        {"params.kl_coef", [](maporl_policy_loss_params & q) { q.kl_coef = NAN; }},
    };
    for (const Case & c : cases) {
        maporl_policy_loss_params q = maporl_policy_loss_default_params();
        c.set(q);
        s = maporl_policy_loss(MAPORL_DEVICE_CPU, old.data(), old.data(), adv.data(), 0, m.data(), MAPORL_MASK_U8,
                               nullptr, nullptr, 1, 4, q, g.data(), nullptr, nullptr);
        CHECK(s == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), c.field) != nullptr, "%s: %s", c.field,
              maporl_last_error());
    }
    s = maporl_logprobs(MAPORL_DEVICE_CPU, z.data(), y.data(), 1, 9, 0.0f, old.data(), nullptr);
    CHECK(s == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "temperature") != nullptr, "%s",
          maporl_last_error());
}

}  // namespace

// Device copy of a host vector (freed by the caller's list).
template <typename X>
void * to_dev(const std::vector<X> & v, std::vector<void *> & owned) {
    void * d = nullptr;
    maporl_device_malloc(sizeof(X) * (v.empty() ? 1 : v.size()), &d);
    if (!v.empty()) maporl_memcpy_to_device(d, v.data(), sizeof(X) * v.size());
    owned.push_back(d);
    return d;
}
template <typename X>
std::vector<X> from_dev(const void * d, size_t n) {
    std::vector<X> v(n);
    maporl_memcpy_to_host(v.data(), d, sizeof(X) * n);
    return v;
}

// bfloat16 logits: the float path's outputs on the widened values, bit for bit (every loss type, GSPO's two-pass
// path included, masked rows, every SIMD level); the gradient may not overlap the 2-byte logits; and on a GPU the
// CUDA bf16 kernels against the CPU.
TEST(bf16_logits_equal_the_float_path_on_widened_values) {
    const int64_t B = 3, T = 5, N = B * T;
    for (int64_t V : {13, 4103}) {
        Fused fd = make_fused(B, T, V, 77);
        std::vector<uint16_t> zb((size_t)(N * V));
        std::vector<float> zw((size_t)(N * V));
        for (size_t i = 0; i < zb.size(); ++i) {
            float x = (float)fd.z[i];
            uint32_t bits;
            std::memcpy(&bits, &x, 4);
            zb[i] = (uint16_t)(bits >> 16);  // truncate: any bf16 value will do
            bits = (uint32_t)zb[i] << 16;
            std::memcpy(&zw[i], &bits, 4);
        }
        zb[5] = 0xFF80;  // -Inf
        zw[5] = -INFINITY;
        const std::vector<float> fo = to_f(fd.old), fa = to_f(fd.adv);
        for (const char * level : {"scalar", "avx2", "avx512"}) {
            if (maporl_set_simd(level) != MAPORL_OK) continue;
            std::vector<float> lp1(N), H1(N), lp2(N), H2(N);
            CHECK(maporl_logprobs(MAPORL_DEVICE_CPU, zw.data(), fd.y.data(), N, V, 0.8f, lp1.data(), H1.data()) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            CHECK(maporl_logprobs_bf16(MAPORL_DEVICE_CPU, zb.data(), fd.y.data(), N, V, 0.8f, lp2.data(), H2.data()) ==
                      MAPORL_OK,
                  "%s", maporl_last_error());
            CHECK(std::memcmp(lp1.data(), lp2.data(), 4 * N) == 0 && std::memcmp(H1.data(), H2.data(), 4 * N) == 0,
                  "logprobs bf16 vs widened float, %s V=%lld", level, (long long)V);
            for (maporl_loss_type type : kTypes) {
                maporl_policy_loss_params p = maporl_policy_loss_default_params();
                p.type = type;
                p.entropy_coef = 0.01f;
                std::vector<float> g1(N * V), g2(N * V, 7.0f), l1(N), l2(N), e1(N), e2(N), d1(N), d2(N);
                maporl_policy_loss_stats s1, s2;
                CHECK(maporl_fused_policy_loss(MAPORL_DEVICE_CPU, zw.data(), fd.y.data(), fo.data(), fa.data(), 0,
                                               fd.m.data(), MAPORL_MASK_U8, nullptr, B, T, V, 0.8f, p, g1.data(),
                                               l1.data(), e1.data(), d1.data(), &s1) == MAPORL_OK,
                      "%s", maporl_last_error());
                CHECK(maporl_fused_policy_loss_bf16(MAPORL_DEVICE_CPU, zb.data(), fd.y.data(), fo.data(), fa.data(), 0,
                                                    fd.m.data(), MAPORL_MASK_U8, nullptr, B, T, V, 0.8f, p, g2.data(),
                                                    l2.data(), e2.data(), d2.data(), &s2) == MAPORL_OK,
                      "%s", maporl_last_error());
                CHECK(
                    g1 == g2 && l1 == l2 && e1 == e2 && d1 == d2 && s1.loss == s2.loss && s1.clip_frac == s2.clip_frac,
                    "fused bf16 vs widened float, %s type %d V=%lld", level, (int)type, (long long)V);
            }
        }
        maporl_set_simd("best");
        // The gradient over the bf16 logits' own memory is refused before anything is written.
        std::vector<float> lp(N), big(N * V);
        std::vector<uint16_t> zin = zb;
        uint16_t * alias = reinterpret_cast<uint16_t *>(big.data());
        std::copy(zb.begin(), zb.end(), alias);
        const maporl_status st = maporl_fused_policy_loss_bf16(
            MAPORL_DEVICE_CPU, alias, fd.y.data(), fo.data(), fa.data(), 0, fd.m.data(), MAPORL_MASK_U8, nullptr, B, T,
            V, 0.8f, maporl_policy_loss_default_params(), big.data(), lp.data(), nullptr, nullptr, nullptr);
        CHECK(st == MAPORL_ERR_INVALID_ARG && std::strstr(maporl_last_error(), "grad_logits_out") != nullptr &&
                  std::equal(zb.begin(), zb.end(), alias),
              "bf16 in place: status %d, %s", (int)st, maporl_last_error());
        int count = 0;
        maporl_cuda_device_count(&count);
        if (count == 0) continue;
        std::vector<void *> own;
        std::vector<float> lpc(N), Hc(N), gc(N * V), lc(N);
        maporl_policy_loss_stats sc, sg;
        maporl_policy_loss_params p = maporl_policy_loss_default_params();
        p.entropy_coef = 0.01f;
        maporl_logprobs_bf16(MAPORL_DEVICE_CPU, zb.data(), fd.y.data(), N, V, 0.8f, lpc.data(), Hc.data());
        maporl_fused_policy_loss_bf16(MAPORL_DEVICE_CPU, zb.data(), fd.y.data(), fo.data(), fa.data(), 0, fd.m.data(),
                                      MAPORL_MASK_U8, nullptr, B, T, V, 0.8f, p, gc.data(), lc.data(), nullptr, nullptr,
                                      &sc);
        void * dz = to_dev(zb, own);
        void * dy = to_dev(fd.y, own);
        void * dlp = to_dev(std::vector<float>(N), own);
        void * dH = to_dev(std::vector<float>(N), own);
        void * dg = to_dev(std::vector<float>(N * V), own);
        CHECK(maporl_logprobs_bf16(MAPORL_DEVICE_CUDA, (uint16_t *)dz, (int32_t *)dy, N, V, 0.8f, (float *)dlp,
                                   (float *)dH) == MAPORL_OK,
              "%s", maporl_last_error());
        const std::vector<float> lpg = from_dev<float>(dlp, N), Hg = from_dev<float>(dH, N);
        CHECK(maporl_fused_policy_loss_bf16(MAPORL_DEVICE_CUDA, (uint16_t *)dz, (int32_t *)dy, (float *)to_dev(fo, own),
                                            (float *)to_dev(fa, own), 0, to_dev(fd.m, own), MAPORL_MASK_U8, nullptr, B,
                                            T, V, 0.8f, p, (float *)dg, nullptr, nullptr, nullptr, &sg) == MAPORL_OK,
              "%s", maporl_last_error());
        const std::vector<float> gg = from_dev<float>(dg, (size_t)(N * V));
        int bad = 0;
        for (int64_t i = 0; i < N; ++i)
            bad += !check::close(lpg[i], lpc[i], 1e-5, 1e-6, std::fabs(lpc[i])) +
                !check::close(Hg[i], Hc[i], 1e-5, 1e-6, 1.0);
        for (int64_t i = 0; i < N * V; ++i) bad += !check::close(gg[i], gc[i], 1e-4, 1e-9, 1e-4);
        CHECK(bad == 0 && check::close(sg.loss, sc.loss, 1e-5, 1e-7, std::fabs(sc.loss)), "CUDA bf16 V=%lld: %d off",
              (long long)V, bad);
        for (void * q : own) maporl_device_free(q);
    }
}

TEST(cuda_matches_cpu_or_reports_no_device) {
    int count = 0;
    CHECK(maporl_cuda_device_count(&count) == MAPORL_OK, "%s", maporl_last_error());
    if (count == 0) {
        float x = -1.0f, g = 0.0f;
        uint8_t m = 1;
        const maporl_status s =
            maporl_policy_loss(MAPORL_DEVICE_CUDA, &x, &x, &x, 0, &m, MAPORL_MASK_U8, nullptr, nullptr, 1, 1,
                               maporl_policy_loss_default_params(), &g, nullptr, nullptr);
        CHECK(s == MAPORL_ERR_NO_DEVICE, "policy loss on CUDA without a device: status %d", (int)s);
        std::printf("  (no CUDA device: compiled=%d; CUDA-vs-CPU comparison not run)\n", maporl_cuda_compiled());
        return;
    }
    const Batch x = make_batch(37, 301, 13);
    const std::vector<float> lp = to_f(x.lp), old = to_f(x.old), adv = to_f(x.adv), ref = to_f(x.ref),
                             ent = to_f(x.ent);
    const size_t n = lp.size();
    for (maporl_loss_type type : kTypes) {
        maporl_policy_loss_params p = maporl_policy_loss_default_params();
        p.type = type;
        p.kl = MAPORL_KL_K3;
        p.kl_coef = 0.1f;
        p.entropy_coef = 0.01f;
        p.agg = MAPORL_AGG_SEQ_MEAN_TOKEN_SUM;
        const FloatRun cpu = run_float(MAPORL_DEVICE_CPU, x, p);
        std::vector<void *> own;
        void * dg = to_dev(std::vector<float>(n), own);
        void * dge = to_dev(std::vector<float>(n), own);
        maporl_policy_loss_stats st;
        const maporl_status s = maporl_policy_loss(
            MAPORL_DEVICE_CUDA, (float *)to_dev(lp, own), (float *)to_dev(old, own), (float *)to_dev(adv, own), 0,
            to_dev(x.m, own), MAPORL_MASK_U8, (float *)to_dev(ref, own), (float *)to_dev(ent, own), x.B, x.T, p,
            (float *)dg, (float *)dge, &st);
        CHECK(s == MAPORL_OK, "%s", maporl_last_error());
        const std::vector<float> g = from_dev<float>(dg, n);
        int bad = 0;
        for (size_t i = 0; i < n; ++i) bad += !check::close(g[i], cpu.g[i], 1e-5, 1e-9, std::fabs(cpu.g[i]));
        CHECK(bad == 0, "CUDA type %d: %d gradient entries differ from the CPU", (int)type, bad);
        const double * a = &st.loss;
        const double * b = &cpu.st.loss;
        for (int k = 0; k < 13; ++k)
            CHECK(check::close(a[k], b[k], 1e-5, 1e-7, std::fabs(b[k])), "CUDA type %d stat %d: %g vs %g", (int)type, k,
                  a[k], b[k]);
        for (void * q : own) maporl_device_free(q);
    }
    // fused and logprobs
    for (int64_t V : {37, 4103}) {
        const Fused fd = make_fused(3, 5, V, 31);
        const std::vector<float> z = to_f(fd.z), fo = to_f(fd.old), fa = to_f(fd.adv);
        const int64_t N = 15;
        maporl_policy_loss_params p = maporl_policy_loss_default_params();
        p.entropy_coef = 0.02f;
        std::vector<float> gz(N * V), flp(N), fH(N);
        maporl_policy_loss_stats cs, gs;
        CHECK(maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), fd.y.data(), fo.data(), fa.data(), 0, fd.m.data(),
                                       MAPORL_MASK_U8, nullptr, 3, 5, V, 0.9f, p, gz.data(), flp.data(), fH.data(),
                                       nullptr, &cs) == MAPORL_OK,
              "%s", maporl_last_error());
        std::vector<void *> own;
        void * dz = to_dev(z, own);
        void * dlp = to_dev(std::vector<float>(N), own);
        void * dH = to_dev(std::vector<float>(N), own);
        CHECK(maporl_fused_policy_loss(MAPORL_DEVICE_CUDA, (float *)dz, (int32_t *)to_dev(fd.y, own),
                                       (float *)to_dev(fo, own), (float *)to_dev(fa, own), 0, to_dev(fd.m, own),
                                       MAPORL_MASK_U8, nullptr, 3, 5, V, 0.9f, p, (float *)dz, (float *)dlp,
                                       (float *)dH, nullptr, &gs) == MAPORL_OK,
              "%s", maporl_last_error());
        const std::vector<float> g2 = from_dev<float>(dz, (size_t)(N * V)), lp2 = from_dev<float>(dlp, N);
        int bad = 0;
        for (int64_t i = 0; i < N * V; ++i) bad += !check::close(g2[i], gz[i], 1e-4, 1e-9, 1e-4);
        for (int64_t i = 0; i < N; ++i) bad += !check::close(lp2[i], flp[i], 1e-5, 1e-6, std::fabs(flp[i]));
        CHECK(bad == 0 && check::close(gs.loss, cs.loss, 1e-5, 1e-7, std::fabs(cs.loss)), "CUDA fused V %lld: %d off",
              (long long)V, bad);
        for (void * q : own) maporl_device_free(q);
    }
}

// CUDA's fused loss and logprobs check the mask and the targets before they write (they wrote the rows before the
// bad one, as the CPU never does): the CPU's error, outputs untouched. A masked row's target is not checked.
TEST(cuda_checks_mask_and_targets_before_writing) {
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;  // (the CPU's order is tested above)
    const int64_t B = 2, T = 3, N = B * T, V = 11;
    Fused fd = make_fused(B, T, V, 5);
    const std::vector<float> z = to_f(fd.z), fo = to_f(fd.old), fa = to_f(fd.adv);
    std::vector<int32_t> y = fd.y;
    std::vector<uint8_t> m(N, 1);
    m[1] = 0;
    y[1] = 99;  // masked: not checked
    maporl_policy_loss_params p = maporl_policy_loss_default_params();
    p.entropy_coef = 0.01f;
    for (int bad = 0; bad < 2; ++bad) {
        std::vector<int32_t> yy = y;
        std::vector<uint8_t> mm = m;
        if (bad == 0)
            yy[4] = V;  // an unmasked row's target out of range
        else
            mm[5] = 2;  // a mask value that is neither 0 nor 1
        std::vector<float> g(N * V), lp(N, 7.0f), H(N, 7.0f);
        const maporl_status cs = maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), yy.data(), fo.data(), fa.data(),
                                                          0, mm.data(), MAPORL_MASK_U8, nullptr, B, T, V, 1.0f, p,
                                                          g.data(), lp.data(), H.data(), nullptr, nullptr);
        const std::string cmsg = maporl_last_error();
        std::vector<void *> own;
        void * dlp = to_dev(std::vector<float>(N, 7.0f), own);
        void * dH = to_dev(std::vector<float>(N, 7.0f), own);
        const maporl_status gs = maporl_fused_policy_loss(
            MAPORL_DEVICE_CUDA, (float *)to_dev(z, own), (int32_t *)to_dev(yy, own), (float *)to_dev(fo, own),
            (float *)to_dev(fa, own), 0, to_dev(mm, own), MAPORL_MASK_U8, nullptr, B, T, V, 1.0f, p,
            (float *)to_dev(std::vector<float>(N * V), own), (float *)dlp, (float *)dH, nullptr, nullptr);
        CHECK(cs == MAPORL_ERR_INVALID_ARG && gs == MAPORL_ERR_INVALID_ARG && cmsg == maporl_last_error(),
              "case %d: cpu %s | cuda %s", bad, cmsg.c_str(), maporl_last_error());
        const std::vector<float> lp2 = from_dev<float>(dlp, N), H2 = from_dev<float>(dH, N);
        CHECK(std::all_of(lp2.begin(), lp2.end(), [](float x) { return x == 7.0f; }) &&
                  std::all_of(H2.begin(), H2.end(), [](float x) { return x == 7.0f; }),
              "case %d: nothing written", bad);
        if (bad == 0) {
            const maporl_status ls = maporl_logprobs(MAPORL_DEVICE_CUDA, (float *)to_dev(z, own),
                                                     (int32_t *)to_dev(yy, own), N, V, 1.0f, (float *)dlp, (float *)dH);
            CHECK(ls == MAPORL_ERR_INVALID_ARG && from_dev<float>(dlp, N) == lp2, "logprobs: %s", maporl_last_error());
        }
        for (void * q : own) maporl_device_free(q);
    }
}

template <typename Fn>
static double time_ms(Fn && fn, int reps) {
    std::vector<double> ts;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

// --bench: policy loss at B=64, T=4096 and the fused loss at N=2048, V=32768, CPU and (with a GPU) CUDA, with
// the effective bandwidth (bytes a single pass must move / time).
static void bench() {
    const int64_t B = 64, T = 4096, n = B * T, NB = 1, NT = 2048, V = 32768, NV = NB * NT * V;
    Batch x = make_batch(B, T, 1);
    std::fill(x.m.begin(), x.m.end(), 1);
    for (size_t i = 0; i < x.lp.size(); ++i) {
        x.lp[i] = -1.0;
        x.old[i] = -1.0 + 0.1 * std::sin((double)i);
        x.ref[i] = -1.1;
    }
    const std::vector<float> lp = to_f(x.lp), old = to_f(x.old), adv = to_f(x.adv), ref = to_f(x.ref);
    std::vector<float> g(n);
    maporl_policy_loss_params p = maporl_policy_loss_default_params();
    p.kl = MAPORL_KL_K3;
    p.kl_coef = 0.001f;
    maporl_policy_loss_stats st;
    const double pl = time_ms(
        [&] {
            maporl_policy_loss(MAPORL_DEVICE_CPU, lp.data(), old.data(), adv.data(), 0, x.m.data(), MAPORL_MASK_U8,
                               ref.data(), nullptr, B, T, p, g.data(), nullptr, &st);
        },
        30);
    std::printf("BENCH policy_loss cpu B=%lld T=%lld threads=%d simd=%s median_ms=%.4f GBps=%.1f\n", (long long)B,
                (long long)T, maporl_get_threads(), maporl_simd(), pl, 21.0 * n / (pl * 1e-3) / 1e9);
    std::mt19937 rg(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> z(NV), gz(NV), flp(NT), fold(NT, -3.0f), fadv(NT, 0.5f);
    for (auto & v : z) v = nd(rg);
    std::vector<int32_t> y(NT);
    for (auto & t : y) t = (int32_t)(rg() % (uint32_t)V);
    std::vector<uint8_t> fm(NT, 1);
    maporl_policy_loss_params fp = maporl_policy_loss_default_params();
    const double fu = time_ms(
        [&] {
            maporl_fused_policy_loss(MAPORL_DEVICE_CPU, z.data(), y.data(), fold.data(), fadv.data(), 0, fm.data(),
                                     MAPORL_MASK_U8, nullptr, NB, NT, V, 1.0f, fp, gz.data(), flp.data(), nullptr,
                                     nullptr, &st);
        },
        10);
    std::printf("BENCH fused_policy_loss cpu N=%lld V=%lld median_ms=%.3f GBps=%.1f (read + write of the logits)\n",
                (long long)NT, (long long)V, fu, 8.0 * NV / (fu * 1e-3) / 1e9);
    int count = 0;
    maporl_cuda_device_count(&count);
    if (count == 0) return;
    void *dlp, *dold, *dadv, *dref, *dm, *dg, *dz, *dgz, *dy, *dflp, *dfold, *dfadv, *dfm;
    maporl_device_malloc(4 * n, &dlp);
    maporl_device_malloc(4 * n, &dold);
    maporl_device_malloc(4 * n, &dadv);
    maporl_device_malloc(4 * n, &dref);
    maporl_device_malloc(n, &dm);
    maporl_device_malloc(4 * n, &dg);
    maporl_device_malloc(4 * NV, &dz);
    maporl_device_malloc(4 * NV, &dgz);
    maporl_device_malloc(4 * NT, &dy);
    maporl_device_malloc(4 * NT, &dflp);
    maporl_device_malloc(4 * NT, &dfold);
    maporl_device_malloc(4 * NT, &dfadv);
    maporl_device_malloc(NT, &dfm);
    maporl_memcpy_to_device(dlp, lp.data(), 4 * n);
    maporl_memcpy_to_device(dold, old.data(), 4 * n);
    maporl_memcpy_to_device(dadv, adv.data(), 4 * n);
    maporl_memcpy_to_device(dref, ref.data(), 4 * n);
    maporl_memcpy_to_device(dm, x.m.data(), n);
    maporl_memcpy_to_device(dz, z.data(), 4 * NV);
    maporl_memcpy_to_device(dy, y.data(), 4 * NT);
    maporl_memcpy_to_device(dfold, fold.data(), 4 * NT);
    maporl_memcpy_to_device(dfadv, fadv.data(), 4 * NT);
    maporl_memcpy_to_device(dfm, fm.data(), NT);
    const double cpl = time_ms(
        [&] {
            maporl_policy_loss(MAPORL_DEVICE_CUDA, (float *)dlp, (float *)dold, (float *)dadv, 0, dm, MAPORL_MASK_U8,
                               (float *)dref, nullptr, B, T, p, (float *)dg, nullptr, &st);
        },
        50);
    std::printf("BENCH policy_loss cuda B=%lld T=%lld median_ms=%.4f GBps=%.1f\n", (long long)B, (long long)T, cpl,
                21.0 * n / (cpl * 1e-3) / 1e9);
    const double cfu = time_ms(
        [&] {
            maporl_fused_policy_loss(MAPORL_DEVICE_CUDA, (float *)dz, (int32_t *)dy, (float *)dfold, (float *)dfadv, 0,
                                     dfm, MAPORL_MASK_U8, nullptr, NB, NT, V, 1.0f, fp, (float *)dgz, (float *)dflp,
                                     nullptr, nullptr, &st);
        },
        30);
    std::printf("BENCH fused_policy_loss cuda N=%lld V=%lld median_ms=%.4f GBps=%.1f\n", (long long)NT, (long long)V,
                cfu, 8.0 * NV / (cfu * 1e-3) / 1e9);
    for (void * q : {dlp, dold, dadv, dref, dm, dg, dz, dgz, dy, dflp, dfold, dfadv, dfm}) maporl_device_free(q);
}

int main(int argc, char ** argv) {
    const int rc = check::run_all("test_policy_loss");
    if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) bench();
    return rc;
}
