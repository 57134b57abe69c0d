// rope.cpp: rotary position embeddings (llama_ops.h) in transformers' rotate-half convention: the first and the
// second half of each head are the two coordinates of dim / 2 planes, plane i turning by pos * inv_freq[i]. The
// frequencies (with the linear and llama3 scalings of transformers' modeling_rope_utils) and the tables are
// computed in double and rounded once.
#include <cmath>
#include <vector>

#include "native/model/llama_ops.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace llama {

std::vector<double> rope_inv_freq(int64_t dim, double theta, const RopeScaling & s) {
    const int64_t half = dim / 2;
    std::vector<double> f((size_t)half);
    for (int64_t i = 0; i < half; ++i) f[(size_t)i] = 1.0 / std::pow(theta, (double)(2 * i) / (double)dim);
    if (s.type == RopeScaling::Linear) {
        for (double & x : f) x /= s.factor;
    } else if (s.type == RopeScaling::Llama3) {
        const double old = (double)s.original_max_position;
        const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
        for (double & x : f) {
            const double wavelen = 2.0 * M_PI / x;
            if (wavelen > low_wavelen) {
                x = x / s.factor;                  // low frequencies: interpolated
            } else if (wavelen >= high_wavelen) {  // medium: a smooth blend of the two
                const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                x = (1.0 - smooth) * x / s.factor + smooth * x;
            }  // high frequencies: unchanged
        }
    }
    return f;
}

template <typename F>
void rope_tables(std::vector<F> & cos, std::vector<F> & sin, const std::vector<double> & inv_freq, int64_t positions) {
    const int64_t half = (int64_t)inv_freq.size();
    cos.resize((size_t)(positions * half));
    sin.resize((size_t)(positions * half));
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const double a = (double)p * inv_freq[(size_t)i];
            cos[(size_t)(p * half + i)] = (F)std::cos(a);
            sin[(size_t)(p * half + i)] = (F)std::sin(a);
        }
}

template <typename F>
void rope_forward(F * out, const F * inp, const F * cos, const F * sin, int64_t B, int64_t T, int64_t pos0, int64_t H,
                  int64_t dim) {
    const int64_t half = dim / 2;
    parallel_for(B * T, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t pos = pos0 + r % T;
            const F * c = cos + pos * half;
            const F * s = sin + pos * half;
            for (int64_t h = 0; h < H; ++h) {
                const F * x = inp + (r * H + h) * dim;
                F * o = out + (r * H + h) * dim;
                for (int64_t i = 0; i < half; ++i) {
                    const F x1 = x[i], x2 = x[i + half];
                    o[i] = x1 * c[i] - x2 * s[i];
                    o[i + half] = x2 * c[i] + x1 * s[i];
                }
            }
        }
    });
}

template <typename F>
void rope_backward(F * dinp, const F * dout, const F * cos, const F * sin, int64_t B, int64_t T, int64_t pos0,
                   int64_t H, int64_t dim) {
    const int64_t half = dim / 2;
    parallel_for(B * T, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t pos = pos0 + r % T;
            const F * c = cos + pos * half;
            const F * s = sin + pos * half;
            for (int64_t h = 0; h < H; ++h) {
                const F * d = dout + (r * H + h) * dim;
                F * di = dinp + (r * H + h) * dim;
                for (int64_t i = 0; i < half; ++i) {
                    const F d1 = d[i], d2 = d[i + half];
                    di[i] += d1 * c[i] + d2 * s[i];
                    di[i + half] += d2 * c[i] - d1 * s[i];
                }
            }
        }
    });
}

#define MAPORL_INSTANTIATE(F)                                                                                         \
    template void rope_tables<F>(std::vector<F> &, std::vector<F> &, const std::vector<double> &, int64_t);           \
    template void rope_forward<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t, int64_t, int64_t); \
    template void rope_backward<F>(F *, const F *, const F *, const F *, int64_t, int64_t, int64_t, int64_t, int64_t);
MAPORL_INSTANTIATE(float)
MAPORL_INSTANTIATE(double)
#undef MAPORL_INSTANTIATE

}  // namespace llama
}  // namespace maporl
