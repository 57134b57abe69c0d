// bench_device.cu: the measurements of scripts/device-check.sh, each figure next to the device limit it is measured
// against in the same run. Prints one JSON object per line ({"name": ..., ...}); the script gathers them.
//   device copy and read-only bandwidth (cudaMemcpy device to device; a read-only reduction kernel);
//   GAE, the policy loss, the fused loss and sampling through the C entry points on device pointers: bytes moved / time
//   against the copy bandwidth;
//   GEMM TFLOP/s (gpt::cuda::matmul_forward) at the SmolLM2-135M shapes (decode M = 1, 8; training M = 1024; the LM
//   head) in float32 and TF32 against the nominal peaks of the architecture (SMs x clock x lanes);
//   decode tokens/s of the SmolLM2-135M shape at B = 1, 8, 64 (the device Llama, KV cache) against the weight-read
//   floor (every weight read once a step at the read bandwidth), with the kernel launches of a step;
//   one training step (forward, LM head, backward, AdamW) of that shape.
// Without a device: the decode and training-step code runs on the emulated device (llama_device_host.h) at a tiny
// shape (the figures are not measurements: "emulated": true), so the program's model path is exercised anywhere.
//   usage: bench_device [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/core/common.cuh"
#include "maporl.h"
#include "native/model/gpt_cuda.h"
#include "native/model/llama.h"
#include "native/model/llama_cuda.h"
#include "native/model/llama_device_host.h"

namespace {

namespace L = maporl::llama;
namespace GC = maporl::gpt::cuda;
bool quick = false;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median seconds of fn over reps (after one warm-up), synchronising the device around each.
double median_s(const std::function<void()> & fn, int reps, bool device = true) {
    fn();
    if (device) cudaDeviceSynchronize();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_s();
        fn();
        if (device) cudaDeviceSynchronize();
        t.push_back(now_s() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

void ok(maporl_status s, const char * what) {
    if (s != MAPORL_OK) {
        std::fprintf(stderr, "bench_device: %s: %s\n", what, maporl_last_error());
        std::exit(1);
    }
}

template <typename T>
T * dev(int64_t n, float fill = 0.5f) {
    void * p = nullptr;
    ok(maporl_device_malloc((size_t)n * sizeof(T), &p), "device_malloc");
    std::vector<T> h((size_t)n, (T)fill);
    ok(maporl_memcpy_to_device(p, h.data(), (size_t)n * sizeof(T)), "memcpy");
    return static_cast<T *>(p);
}

__global__ void read_kernel(const float4 * x, int64_t n, float * out) {
    float acc = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *out = acc;  // (never true for the data: keeps the reads)
}

struct Limits {
    double copy_bw = 0, read_bw = 0, fp32_peak = 0, tf32_peak = 0;
};

Limits bandwidth_and_peaks() {
    Limits lim;
    const int64_t bytes = quick ? (256ll << 20) : (2ll << 30);
    float *a = dev<float>(bytes / 4), *b = dev<float>(bytes / 4), *sink = dev<float>(1);
    const double tc = median_s([&] { cudaMemcpy(b, a, (size_t)bytes, cudaMemcpyDeviceToDevice); }, 10);
    int sms = 0, clock_khz = 0, major = 0, minor = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    const double tr = median_s([&] { read_kernel<<<sms * 8, 512>>>((const float4 *)a, bytes / 16, sink); }, 10);
    lim.copy_bw = 2.0 * bytes / tc, lim.read_bw = bytes / tr;
    // Nominal: 128 float32 lanes an SM (sm_80 64) x 2 flops an FMA; TF32 dense tensor-core flops an SM a clock: sm_80
    // 1024, sm_90 2048 (A100 156 TF, H100 SXM 495 TF at their boost clocks).
    const double clk = clock_khz * 1e3;
    lim.fp32_peak = 2.0 * (major == 8 && minor == 0 ? 64 : 128) * sms * clk;
    lim.tf32_peak = (major >= 9 ? 2048.0 : 1024.0) * sms * clk;
    std::printf(
        "{\"name\": \"device\", \"sms\": %d, \"clock_ghz\": %.3f, \"cc\": \"%d.%d\", \"fp32_peak_tflops\": %.1f, "
        "\"tf32_peak_tflops\": %.1f}\n",
        sms, clk / 1e9, major, minor, lim.fp32_peak / 1e12, lim.tf32_peak / 1e12);
    std::printf("{\"name\": \"bandwidth\", \"bytes\": %lld, \"copy_gbs\": %.1f, \"read_gbs\": %.1f}\n",
                (long long)bytes, lim.copy_bw / 1e9, lim.read_bw / 1e9);
    maporl_device_free(a), maporl_device_free(b), maporl_device_free(sink);
    return lim;
}

void kernel_line(const char * name, const char * shape, double s, double bytes, const Limits & lim) {
    std::printf(
        "{\"name\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"bytes\": %.0f, \"gbs\": %.1f, \"of_copy_bw\": %.3f}\n",
        name, shape, s * 1e3, bytes, bytes / s / 1e9, bytes / s / lim.copy_bw);
}

void rl_kernels(const Limits & lim) {
    {  // GAE B=256 T=4096: rewards, values, mask (u8) read; advantages, returns written
        const int64_t B = 256, T = 4096, n = B * T;
        float *r = dev<float>(n), *v = dev<float>(n), *a = dev<float>(n), *ret = dev<float>(n);
        uint8_t * m = dev<uint8_t>(n, 1);
        for (int whiten : {0, 1}) {
            maporl_gae_params p = maporl_gae_default_params();
            p.whiten = whiten;
            const double s = median_s(
                [&] { ok(maporl_gae(MAPORL_DEVICE_CUDA, r, v, m, MAPORL_MASK_U8, B, T, p, a, ret), "gae"); }, 10);
            kernel_line(whiten ? "gae_whiten" : "gae", "B=256 T=4096", s, (double)n * (4 + 4 + 1 + 4 + 4), lim);
        }
        for (void * q : {(void *)r, (void *)v, (void *)a, (void *)ret, (void *)m}) maporl_device_free(q);
    }
    {  // policy loss B=64 T=4096: logp, old, advantages, mask read; grad_logp written
        const int64_t B = 64, T = 4096, n = B * T;
        float *lp = dev<float>(n, -1.0f), *old = dev<float>(n, -1.1f), *adv = dev<float>(n), *g = dev<float>(n);
        uint8_t * m = dev<uint8_t>(n, 1);
        const maporl_policy_loss_params p = maporl_policy_loss_default_params();
        maporl_policy_loss_stats st;
        const double s = median_s(
            [&] {
                ok(maporl_policy_loss(MAPORL_DEVICE_CUDA, lp, old, adv, 0, m, MAPORL_MASK_U8, nullptr, nullptr, B, T, p,
                                      g, nullptr, &st),
                   "policy_loss");
            },
            20);
        kernel_line("policy_loss", "B=64 T=4096", s, (double)n * (4 * 4 + 1), lim);
        for (void * q : {(void *)lp, (void *)old, (void *)adv, (void *)g, (void *)m}) maporl_device_free(q);
    }
    {  // fused loss N=2048 V=32768: logits read, grad_logits written (the per-token vectors are noise beside them)
        const int64_t B = 2, T = 1024, N = B * T, V = 32768;
        float *z = dev<float>(N * V, 0.01f), *gz = dev<float>(N * V), *old = dev<float>(N, -10.0f),
              *adv = dev<float>(N), *lp = dev<float>(N);
        int32_t * y = dev<int32_t>(N, 3);
        uint8_t * m = dev<uint8_t>(N, 1);
        const maporl_policy_loss_params p = maporl_policy_loss_default_params();
        maporl_policy_loss_stats st;
        const double s = median_s(
            [&] {
                ok(maporl_fused_policy_loss(MAPORL_DEVICE_CUDA, z, y, old, adv, 0, m, MAPORL_MASK_U8, nullptr, B, T, V,
                                            1.0f, p, gz, lp, nullptr, nullptr, &st),
                   "fused_policy_loss");
            },
            10);
        kernel_line("fused_policy_loss", "N=2048 V=32768", s, 2.0 * N * V * 4, lim);
        for (void * q : {(void *)z, (void *)gz, (void *)old, (void *)adv, (void *)lp, (void *)y, (void *)m})
            maporl_device_free(q);
    }
    {  // sampling B=64 V=151936 (top-k 50, top-p 0.9, temperature 0.7): the logits read
        const int64_t B = 64, V = 151936;
        float *z = dev<float>(B * V, 0.0f), *lp = dev<float>(B);
        int32_t * tok = dev<int32_t>(B, 0);
        maporl_sample_params p = maporl_sample_default_params();
        p.temperature_all = 0.7f, p.top_k_all = 50, p.top_p_all = 0.9f;
        const double s = median_s(
            [&] { ok(maporl_sample(MAPORL_DEVICE_CUDA, z, B, V, &p, tok, lp, nullptr, nullptr), "sample"); }, 10);
        kernel_line("sampling", "B=64 V=151936 top_k=50 top_p=0.9", s, (double)B * V * 4, lim);
        for (void * q : {(void *)z, (void *)lp, (void *)tok}) maporl_device_free(q);
    }
}

void gemms(const Limits & lim) {
    struct S {
        const char * what;
        int64_t M, K, N;
    };
    const S shapes[] = {{"decode q_proj", 1, 576, 576},       {"decode up_proj", 8, 576, 1536},
                        {"decode lm_head", 8, 576, 49152},    {"train up_proj", 1024, 576, 1536},
                        {"train down_proj", 1024, 1536, 576}, {"train lm_head", 1024, 576, 49152}};
    for (int prec : {MAPORL_MATMUL_HIGHEST, MAPORL_MATMUL_HIGH}) {
        ok(maporl_set_matmul_precision(prec), "set_matmul_precision");
        for (const S & s : shapes) {
            float *x = GC::alloc_f32(s.M * s.K), *w = GC::alloc_f32(s.K * s.N), *o = GC::alloc_f32(s.M * s.N);
            GC::fill_zero(x, s.M * s.K * 4), GC::fill_zero(w, s.K * s.N * 4);
            const double t = median_s([&] { GC::matmul_forward(o, x, w, nullptr, s.M, s.K, s.N); }, 20);
            const double fl = 2.0 * s.M * s.K * s.N / t,
                         peak = prec == MAPORL_MATMUL_HIGH ? lim.tf32_peak : lim.fp32_peak;
            const double bytes = 4.0 * (s.M * s.K + s.K * s.N + s.M * s.N);
            std::printf(
                "{\"name\": \"gemm\", \"precision\": \"%s\", \"shape\": \"%s M=%lld K=%lld N=%lld\", \"ms\": %.4f, "
                "\"tflops\": %.2f, \"of_peak\": %.3f, "
                "\"of_read_bw\": %.3f}\n",
                prec == MAPORL_MATMUL_HIGH ? "tf32" : "fp32", s.what, (long long)s.M, (long long)s.K, (long long)s.N,
                t * 1e3, fl / 1e12, fl / peak, bytes / t / lim.read_bw);
            GC::release(x), GC::release(w), GC::release(o);
        }
    }
    ok(maporl_set_matmul_precision(MAPORL_MATMUL_HIGHEST), "set_matmul_precision");
}

L::Config smollm2_135m() {
    L::Config c;
    c.vocab = 49152, c.context = 2048, c.layers = 30, c.d_model = 576, c.heads = 9, c.kv_heads = 3, c.head_dim = 64,
    c.intermediate = 1536;
    c.rms_eps = 1e-5, c.rope_theta = 100000, c.tie_embeddings = true;
    return c;
}
L::Config tiny() {
    L::Config c;
    c.vocab = 64, c.context = 64, c.layers = 2, c.d_model = 32, c.heads = 4, c.kv_heads = 2, c.head_dim = 8,
    c.intermediate = 48;
    return c;
}

// Decode tokens/s at B rows (prompt 16, then `steps` steps) and one training step, on the device model `make` returns.
void model(const L::Config & c, const Limits & lim, bool emulated) {
    L::Model<float> host(c);
    host.init(1);
    auto make = [&]() -> std::unique_ptr<L::DeviceModel> {
        std::unique_ptr<L::DeviceModel> d(
            emulated ? static_cast<L::DeviceModel *>(new L::DeviceLlama<L::HostDevice>(c, &host))
                     : L::cuda_model_create(c, &host));
        d->upload(0, host.params.data(), host.layout.total);
        return d;
    };
    const double weight_bytes = 4.0 * host.layout.total;
    const int64_t P = 16, steps = quick || emulated ? 8 : 64;
    for (int64_t B : {1, 8, 64}) {
        auto d = make();
        d->cache_reset(B, P + steps + 1);
        std::vector<int32_t> tok((size_t)(B * P));
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)(i * 7 % (size_t)c.vocab);
        const std::vector<int64_t> lens((size_t)B, P);
        d->prefill(tok.data(), lens.data(), P);
        std::vector<float> logits((size_t)(B * c.vocab));
        std::vector<int64_t> pos((size_t)B, P);
        std::vector<int32_t> next((size_t)B, 1);
        const int64_t l0 = maporl::cuda_launches.load();
        d->decode_rows(next.data(), pos.data(), logits.data(), nullptr);
        const int64_t launches = maporl::cuda_launches.load() - l0;
        if (!emulated) cudaDeviceSynchronize();
        const double t0 = now_s();
        for (int64_t s = 1; s < steps; ++s) {
            for (auto & p : pos) p = P + s;
            d->decode_rows(next.data(), pos.data(), logits.data(),
                           nullptr);  // (the logits come to the host, as sampling on the host needs)
        }
        if (!emulated) cudaDeviceSynchronize();
        const double per_step = (now_s() - t0) / (double)(steps - 1);
        const double floor_s = emulated ? 0 : weight_bytes / lim.read_bw;
        std::printf(
            "{\"name\": \"decode\", \"model\": \"%s\", \"B\": %lld, \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, "
            "\"weight_read_floor_ms\": %.3f, "
            "\"of_floor\": %.3f, \"launches_per_step\": %lld, \"emulated\": %s}\n",
            emulated ? "tiny" : "SmolLM2-135M shape", (long long)B, per_step * 1e3, B / per_step, floor_s * 1e3,
            floor_s / per_step, (long long)launches, emulated ? "true" : "false");
    }
    {  // one training step: B x T tokens, the LM head in 512-row chunks, the full model trained (AdamW)
        const int64_t B = emulated ? 2 : 8, T = emulated ? 16 : 256, N = B * T, chunk = std::min<int64_t>(512, N),
                      V = c.vocab;
        auto d = make();
        std::vector<int32_t> tok((size_t)N);
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)(i * 5 % (size_t)V);
        std::vector<float> z((size_t)(chunk * V)), dv((size_t)N, 0.01f);
        const maporl::gpt::AdamW h{1e-5f, 0.9f, 0.95f, 1e-8f, 0.0f};
        int64_t t = 0;
        auto step = [&] {
            d->zero_grad();
            d->forward(tok.data(), B, T, false, nullptr, nullptr);
            d->backward_begin();
            for (int64_t n0 = 0; n0 < N; n0 += chunk) {
                const int64_t r = std::min(chunk, N - n0);
                d->head_rows(z.data(), n0, r);
                for (auto & x : z) x *= 1e-4f;  // (a stand-in gradient of the logits)
                d->head_backward_rows(z.data(), n0, r);
            }
            d->backward_hidden(dv.data());
            d->update(h, 1.0, ++t);
        };
        const double s = median_s(step, emulated ? 1 : 3, !emulated);
        const L::DeviceBytes mem = d->memory();
        std::printf(
            "{\"name\": \"train_step\", \"model\": \"%s\", \"B\": %lld, \"T\": %lld, \"ms\": %.2f, \"tokens_per_s\": "
            "%.0f, \"device_bytes\": %lld, "
            "\"emulated\": %s}\n",
            emulated ? "tiny" : "SmolLM2-135M shape", (long long)B, (long long)T, s * 1e3, N / s,
            (long long)mem.total(), emulated ? "true" : "false");
    }
}

}  // namespace

int main(int argc, char ** argv) {
    for (int i = 1; i < argc; ++i) quick = quick || std::string(argv[i]) == "--quick";
    int n = 0;
    maporl_cuda_device_count(&n);
    try {
        if (n == 0) {
            std::printf("{\"name\": \"device\", \"visible\": 0}\n");
            model(tiny(), Limits(), true);
            return 0;
        }
        const Limits lim = bandwidth_and_peaks();
        rl_kernels(lim);
        gemms(lim);
        model(smollm2_135m(), lim, false);
    } catch (const maporl::Error & e) {
        std::fprintf(stderr, "bench_device: %s\n", e.message.c_str());
        return 1;
    }
    return 0;
}
