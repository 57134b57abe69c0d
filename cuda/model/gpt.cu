// gpt.cu: the embedded GPT on the device (native/model/gpt_cuda.h): device memory helpers and CudaModel, the model of
// native/model/gpt.h with parameters, gradients, AdamW moments, activations and the KV cache in device memory, composed
// from the CUDA ops exactly as gpt.cpp composes the CPU ones (same order, same accumulation rules). Activations
// live in one arena sized for the largest (B, T) seen; tokens, logits and their gradients cross to the host.
#include <algorithm>
#include <cmath>

#include "native/model/gpt_cuda.h"
#include "cuda/core/common.cuh"
#include "native/core/grow_buffer.h"

namespace maporl {
namespace gpt {
namespace cuda {

void require_device(const char * what) {
    const maporl_status st = cuda_require_device(what);
    if (st != MAPORL_OK) throw_error(st, "%s", maporl_last_error());
}

void synchronize(const char * what) {
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw_error(MAPORL_ERR_CUDA, "%s: a kernel failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    }
}

static void * alloc_bytes(int64_t bytes) {
    void * p = nullptr;
    const cudaError_t e = cudaMalloc(&p, (size_t)std::max<int64_t>(bytes, 1));
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw_error(MAPORL_ERR_OUT_OF_MEMORY, "out of device memory asking for %lld bytes", (long long)bytes);
    }
    MAPORL_CUDA_THROW(e);
    return p;
}

float * alloc_f32(int64_t n) { return static_cast<float *>(alloc_bytes(n * (int64_t)sizeof(float))); }
int32_t * alloc_i32(int64_t n) { return static_cast<int32_t *>(alloc_bytes(n * (int64_t)sizeof(int32_t))); }
void release(void * p) {
    if (p) cudaFree(p);
}
void to_device(void * dst, const void * src, int64_t bytes) {
    if (bytes > 0) MAPORL_CUDA_THROW(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyHostToDevice));
}
void to_host(void * dst, const void * src, int64_t bytes) {
    if (bytes > 0) MAPORL_CUDA_THROW(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost));
}
void fill_zero(void * dst, int64_t bytes) {
    if (bytes > 0) MAPORL_CUDA_THROW(cudaMemsetAsync(dst, 0, (size_t)bytes));
}

}  // namespace cuda

namespace {

// Device allocations released on scope exit (throws on failure, unlike DeviceBuffer's status). A reset allocates the
// new block before releasing the old (native/core/grow_buffer.h): out of memory, the old block and every pointer
// carved from it stay valid.
struct CudaAlloc {
    static void * allocate(int64_t bytes) { return cuda::alloc_f32((bytes + 3) / 4); }
    static void release(void * p) { cuda::release(p); }
};
using Dev = GrowBuffer<CudaAlloc>;

struct LayerPtrs {
    float *ln1, *ln1m, *ln1r, *qkv, *att, *atty, *attproj, *res2, *ln2, *ln2m, *ln2r, *fch, *fchg, *fcproj, *res3;
};

}  // namespace

struct CudaModel {
    Config cfg;
    Layout layout;
    Dev params, grads, m, v;

    // Activation arena for (B, T), and the backward's scratch (same arena). B = T = 0: no forward to go back through
    // (none yet, or the last one failed).
    int64_t B = 0, T = 0;
    Dev arena, tokens;
    std::vector<int32_t> host_tokens;
    float *encoded = nullptr, *lnf = nullptr, *lnfm = nullptr, *lnfr = nullptr, *logits = nullptr, *values = nullptr;
    std::vector<LayerPtrs> layers;
    float *dlnf = nullptr, *dres = nullptr, *dtmp = nullptr, *dfch = nullptr, *dln = nullptr, *datty = nullptr,
          *dqkv = nullptr, *dlogits = nullptr, *dvalues = nullptr, *attg = nullptr, *lnscratch = nullptr;

    // KV cache and the decoder's per-step buffers.
    int64_t cache_batch = 0, cache_len = 0;
    Dev kcache, vcache, step;
    float *x = nullptr, *ln = nullptr, *qkv = nullptr, *y = nullptr, *proj = nullptr, *h = nullptr, *hg = nullptr,
          *mean = nullptr, *rstd = nullptr, *scores = nullptr, *step_logits = nullptr, *step_values = nullptr;
    Dev step_tokens;

    explicit CudaModel(const Config & c) : cfg(c), layout(make_layout(c)) {
        const int64_t bytes = layout.total * (int64_t)sizeof(float);
        params.reset(bytes);
        grads.reset(bytes);
        m.reset(bytes);
        v.reset(bytes);
        cuda::fill_zero(params.p, bytes);
        cuda::fill_zero(grads.p, bytes);
        cuda::fill_zero(m.p, bytes);
        cuda::fill_zero(v.p, bytes);
    }
    float * p(int64_t t) const { return params.f() + layout.tensors[(size_t)t].offset; }
    float * g(int64_t t) const { return grads.f() + layout.tensors[(size_t)t].offset; }

    // Carves the arena for (B_, T_), growing it when needed.
    void shape(int64_t B_, int64_t T_) {
        const int64_t N = B_ * T_, C = cfg.d_model, H = cfg.mlp_ratio * C, NH = cfg.heads, V = cfg.vocab,
                      L = cfg.layers;
        const int64_t att = B_ * NH * T_ * T_;
        const int64_t per_layer = 10 * N * C + 2 * N * H + 4 * N + att;  // see the carve below
        const int64_t lnsc = cuda::layernorm_scratch(N, C);
        const int64_t total = 2 * N * C + 2 * N + N * V + N + L * per_layer +
            (4 * N * C + 2 * N * H + 3 * N * C + N * V + N + att + lnsc);
        arena.reserve(total * (int64_t)sizeof(float));  // (out of memory: throws, the old arena and carve intact)
        float * cur = arena.f();
        auto take = [&](int64_t n) {
            float * r = cur;
            cur += n;
            return r;
        };
        encoded = take(N * C);
        lnf = take(N * C);
        lnfm = take(N);
        lnfr = take(N);
        logits = take(N * V);
        values = take(N);
        layers.resize((size_t)L);
        for (auto & x_ : layers) {
            x_.ln1 = take(N * C);
            x_.ln1m = take(N);
            x_.ln1r = take(N);
            x_.qkv = take(3 * N * C);
            x_.att = take(att);
            x_.atty = take(N * C);
            x_.attproj = take(N * C);
            x_.res2 = take(N * C);
            x_.ln2 = take(N * C);
            x_.ln2m = take(N);
            x_.ln2r = take(N);
            x_.fch = take(N * H);
            x_.fchg = take(N * H);
            x_.fcproj = take(N * C);
            x_.res3 = take(N * C);
        }
        dlnf = take(N * C);
        dres = take(N * C);
        dln = take(N * C);
        datty = take(N * C);
        dtmp = take(N * H);
        dfch = take(N * H);
        dqkv = take(3 * N * C);
        dlogits = take(N * V);
        dvalues = take(N);
        attg = take(att);
        lnscratch = take(lnsc);
        if ((cur - arena.f()) * (int64_t)sizeof(float) > arena.bytes)
            throw_error(MAPORL_ERR_INTERNAL, "cuda gpt: arena carve overflow");
    }
};

CudaModel * cuda_model_create(const Config & cfg) {
    cuda::require_device("gpt (device cuda)");
    return new CudaModel(cfg);
}

void cuda_model_free(CudaModel * m) { delete m; }

static Dev & buffer_of(CudaModel * m, int which) {
    switch (which) {
        case 0:
            return m->params;
        case 1:
            return m->m;
        case 2:
            return m->v;
        case 3:
            return m->grads;
        default:
            throw_error(MAPORL_ERR_INVALID_ARG, "which: expected 0 (params), 1 (m), 2 (v) or 3 (grads), got %d", which);
    }
}

void cuda_model_upload(CudaModel * m, int which, const float * host, int64_t n) {
    if (n != m->layout.total)
        throw_error(MAPORL_ERR_INVALID_ARG, "count: expected %lld (the parameter count), got %lld",
                    (long long)m->layout.total, (long long)n);
    cuda::to_device(buffer_of(m, which).p, host, n * (int64_t)sizeof(float));
}

void cuda_model_download(const CudaModel * m, int which, float * host, int64_t n) {
    if (n != m->layout.total)
        throw_error(MAPORL_ERR_INVALID_ARG, "count: expected %lld (the parameter count), got %lld",
                    (long long)m->layout.total, (long long)n);
    cuda::to_host(host, buffer_of(const_cast<CudaModel *>(m), which).p, n * (int64_t)sizeof(float));
}

void cuda_model_forward(CudaModel * M, const int32_t * tok, int64_t B, int64_t T, float * logits_out,
                        float * values_out) {
    using namespace cuda;
    check_forward(M->cfg, tok, B, T);
    M->B = M->T = 0;  // a forward that fails (out of memory, a kernel error) leaves nothing to go back through
    M->shape(B, T);
    const int64_t N = B * T, C = M->cfg.d_model, H = M->cfg.mlp_ratio * C, NH = M->cfg.heads, V = M->cfg.vocab;
    const Layout & lay = M->layout;
    M->tokens.reserve(N * (int64_t)sizeof(int32_t));
    to_device(M->tokens.p, tok, N * (int64_t)sizeof(int32_t));
    M->host_tokens.assign(tok, tok + N);
    encoder_forward(M->encoded, M->tokens.i(), M->p(lay.wte), M->p(lay.wpe), B, T, C);
    const float * resid = M->encoded;
    for (int64_t l = 0; l < M->cfg.layers; ++l) {
        const auto & bl = lay.blocks[(size_t)l];
        LayerPtrs & x = M->layers[(size_t)l];
        layernorm_forward(x.ln1, x.ln1m, x.ln1r, resid, M->p(bl.ln1w), M->p(bl.ln1b), N, C);
        matmul_forward(x.qkv, x.ln1, M->p(bl.qkvw), M->p(bl.qkvb), N, C, 3 * C);
        attention_forward(x.atty, x.att, x.qkv, B, T, C, NH);
        matmul_forward(x.attproj, x.atty, M->p(bl.attprojw), M->p(bl.attprojb), N, C, C);
        residual_forward(x.res2, resid, x.attproj, N * C);
        layernorm_forward(x.ln2, x.ln2m, x.ln2r, x.res2, M->p(bl.ln2w), M->p(bl.ln2b), N, C);
        matmul_forward(x.fch, x.ln2, M->p(bl.fcw), M->p(bl.fcb), N, C, H);
        gelu_forward(x.fchg, x.fch, N * H);
        matmul_forward(x.fcproj, x.fchg, M->p(bl.fcprojw), M->p(bl.fcprojb), N, H, C);
        residual_forward(x.res3, x.res2, x.fcproj, N * C);
        resid = x.res3;
    }
    layernorm_forward(M->lnf, M->lnfm, M->lnfr, resid, M->p(lay.lnfw), M->p(lay.lnfb), N, C);
    matmul_forward(M->logits, M->lnf, M->p(lay.lm_head), nullptr, N, C, V);
    matmul_forward(M->values, M->lnf, M->p(lay.vw), M->p(lay.vb), N, C, 1);
    synchronize("gpt forward");
    if (logits_out) to_host(logits_out, M->logits, N * V * (int64_t)sizeof(float));
    if (values_out) to_host(values_out, M->values, N * (int64_t)sizeof(float));
    M->B = B;
    M->T = T;
}

void cuda_model_backward(CudaModel * M, const float * dlogits, const float * dvalues) {
    using namespace cuda;
    if (M->B == 0) throw_error(MAPORL_ERR_INVALID_ARG, "backward: no forward to go back through");
    const int64_t B = M->B, T = M->T, N = B * T, C = M->cfg.d_model, H = M->cfg.mlp_ratio * C, NH = M->cfg.heads,
                  V = M->cfg.vocab;
    const Layout & lay = M->layout;
    const int64_t fb = (int64_t)sizeof(float);
    fill_zero(M->dlnf, N * C * fb);
    fill_zero(M->dres, N * C * fb);
    if (dlogits) {
        to_device(M->dlogits, dlogits, N * V * fb);
        matmul_backward(M->dlnf, M->g(lay.lm_head), nullptr, M->dlogits, M->lnf, M->p(lay.lm_head), N, C, V);
    }
    if (dvalues) {
        to_device(M->dvalues, dvalues, N * fb);
        matmul_backward(M->dlnf, M->g(lay.vw), M->g(lay.vb), M->dvalues, M->lnf, M->p(lay.vw), N, C, 1);
    }
    const float * last = M->cfg.layers > 0 ? M->layers.back().res3 : M->encoded;
    layernorm_backward(M->dres, M->g(lay.lnfw), M->g(lay.lnfb), M->dlnf, last, M->p(lay.lnfw), M->lnfm, M->lnfr, N, C,
                       M->lnscratch);
    for (int64_t l = M->cfg.layers - 1; l >= 0; --l) {
        const auto & bl = lay.blocks[(size_t)l];
        LayerPtrs & x = M->layers[(size_t)l];
        const float * resid = l == 0 ? M->encoded : M->layers[(size_t)(l - 1)].res3;
        fill_zero(M->dtmp, N * H * fb);
        matmul_backward(M->dtmp, M->g(bl.fcprojw), M->g(bl.fcprojb), M->dres, x.fchg, M->p(bl.fcprojw), N, H, C);
        fill_zero(M->dfch, N * H * fb);
        gelu_backward(M->dfch, x.fch, M->dtmp, N * H);
        fill_zero(M->dln, N * C * fb);
        matmul_backward(M->dln, M->g(bl.fcw), M->g(bl.fcb), M->dfch, x.ln2, M->p(bl.fcw), N, C, H);
        layernorm_backward(M->dres, M->g(bl.ln2w), M->g(bl.ln2b), M->dln, x.res2, M->p(bl.ln2w), x.ln2m, x.ln2r, N, C,
                           M->lnscratch);
        fill_zero(M->datty, N * C * fb);
        matmul_backward(M->datty, M->g(bl.attprojw), M->g(bl.attprojb), M->dres, x.atty, M->p(bl.attprojw), N, C, C);
        fill_zero(M->dqkv, 3 * N * C * fb);
        attention_backward(M->dqkv, M->datty, x.qkv, x.att, B, T, C, NH, M->attg);
        fill_zero(M->dln, N * C * fb);
        matmul_backward(M->dln, M->g(bl.qkvw), M->g(bl.qkvb), M->dqkv, x.ln1, M->p(bl.qkvw), N, C, 3 * C);
        layernorm_backward(M->dres, M->g(bl.ln1w), M->g(bl.ln1b), M->dln, resid, M->p(bl.ln1w), x.ln1m, x.ln1r, N, C,
                           M->lnscratch);
    }
    const TokenBuckets tb = bucket_tokens(M->host_tokens.data(), N);
    const int64_t nid = (int64_t)tb.ids.size();
    Dev buckets;
    buckets.reset((2 * nid + 1 + N) * (int64_t)sizeof(int32_t));
    int32_t * ids = buckets.i();
    to_device(ids, tb.ids.data(), nid * 4);
    to_device(ids + nid, tb.offsets.data(), (nid + 1) * 4);
    to_device(ids + 2 * nid + 1, tb.positions.data(), N * 4);
    encoder_backward(M->g(lay.wte), M->g(lay.wpe), M->dres, ids, ids + nid, ids + 2 * nid + 1, nid, B, T, C);
    synchronize("gpt backward");
}

void cuda_model_zero_grad(CudaModel * M) {
    cuda::fill_zero(M->grads.p, M->layout.total * (int64_t)sizeof(float));
    cuda::synchronize("gpt zero_grad");
}

double cuda_model_update(CudaModel * M, const AdamW & h, double max_norm, int64_t t) {
    const double norm = cuda::global_norm(M->grads.f(), M->layout.total);
    const double scale = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    cuda::adamw_update(M->params.f(), M->grads.f(), M->m.f(), M->v.f(), M->layout.total, h, t, (float)scale);
    cuda::synchronize("gpt step");
    return norm;
}

void cuda_model_cache_reset(CudaModel * M, int64_t batch, int64_t max_len) {
    if (batch < 1) throw_error(MAPORL_ERR_INVALID_ARG, "batch: expected >= 1, got %lld", (long long)batch);
    if (max_len < 1 || max_len > M->cfg.context)
        throw_error(MAPORL_ERR_INVALID_ARG, "max_len: expected 1..%lld (context), got %lld", (long long)M->cfg.context,
                    (long long)max_len);
    const int64_t C = M->cfg.d_model, H = M->cfg.mlp_ratio * C, NH = M->cfg.heads, V = M->cfg.vocab,
                  fb = (int64_t)sizeof(float);
    const int64_t n = M->cfg.layers * batch * max_len * C;
    // No cache until every buffer is in place: a failed allocation leaves "call cache_reset first", not sizes that
    // describe buffers of another shape.
    M->cache_batch = M->cache_len = 0;
    M->kcache.reset(n * fb);
    M->vcache.reset(n * fb);
    cuda::fill_zero(M->kcache.p, n * fb);
    cuda::fill_zero(M->vcache.p, n * fb);
    const int64_t per =
        4 * batch * C + 3 * batch * C + 2 * batch * H + 2 * batch + batch * NH * max_len + batch * V + batch;
    M->step.reset(per * fb);
    float * cur = M->step.f();
    auto take = [&](int64_t k) {
        float * r = cur;
        cur += k;
        return r;
    };
    M->x = take(batch * C);
    M->ln = take(batch * C);
    M->y = take(batch * C);
    M->proj = take(batch * C);
    M->qkv = take(3 * batch * C);
    M->h = take(batch * H);
    M->hg = take(batch * H);
    M->mean = take(batch);
    M->rstd = take(batch);
    M->scores = take(batch * NH * max_len);
    M->step_logits = take(batch * V);
    M->step_values = take(batch);
    M->step_tokens.reset(batch * (int64_t)sizeof(int32_t));
    M->cache_batch = batch;
    M->cache_len = max_len;
    cuda::synchronize("gpt cache_reset");
}

void cuda_model_decode(CudaModel * M, const int32_t * tok, int64_t pos, float * logits_out, float * values_out) {
    using namespace cuda;
    const int64_t Bc = M->cache_batch, C = M->cfg.d_model, H = M->cfg.mlp_ratio * C, NH = M->cfg.heads,
                  V = M->cfg.vocab;
    if (Bc == 0) throw_error(MAPORL_ERR_INVALID_ARG, "decode: call cache_reset first");
    if (pos < 0 || pos >= M->cache_len)
        throw_error(MAPORL_ERR_INVALID_ARG, "pos: expected 0..%lld, got %lld", (long long)(M->cache_len - 1),
                    (long long)pos);
    for (int64_t b = 0; b < Bc; ++b)
        if (tok[b] < 0 || tok[b] >= V)
            throw_error(MAPORL_ERR_INVALID_ARG, "tokens: expected ids in [0, %lld), got %d at index %lld", (long long)V,
                        (int)tok[b], (long long)b);
    const Layout & lay = M->layout;
    to_device(M->step_tokens.p, tok, Bc * (int64_t)sizeof(int32_t));
    encoder_forward(M->x, M->step_tokens.i(), M->p(lay.wte), M->p(lay.wpe) + pos * C, Bc, 1, C);
    const int64_t per_layer = Bc * M->cache_len * C;
    for (int64_t l = 0; l < M->cfg.layers; ++l) {
        const auto & bl = lay.blocks[(size_t)l];
        layernorm_forward(M->ln, M->mean, M->rstd, M->x, M->p(bl.ln1w), M->p(bl.ln1b), Bc, C);
        matmul_forward(M->qkv, M->ln, M->p(bl.qkvw), M->p(bl.qkvb), Bc, C, 3 * C);
        attention_decode(M->y, M->kcache.f() + l * per_layer, M->vcache.f() + l * per_layer, M->qkv, Bc, M->cache_len,
                         pos, C, NH, M->scores);
        matmul_forward(M->proj, M->y, M->p(bl.attprojw), M->p(bl.attprojb), Bc, C, C);
        residual_forward(M->x, M->x, M->proj, Bc * C);
        layernorm_forward(M->ln, M->mean, M->rstd, M->x, M->p(bl.ln2w), M->p(bl.ln2b), Bc, C);
        matmul_forward(M->h, M->ln, M->p(bl.fcw), M->p(bl.fcb), Bc, C, H);
        gelu_forward(M->hg, M->h, Bc * H);
        matmul_forward(M->proj, M->hg, M->p(bl.fcprojw), M->p(bl.fcprojb), Bc, H, C);
        residual_forward(M->x, M->x, M->proj, Bc * C);
    }
    layernorm_forward(M->ln, M->mean, M->rstd, M->x, M->p(lay.lnfw), M->p(lay.lnfb), Bc, C);
    matmul_forward(M->step_logits, M->ln, M->p(lay.lm_head), nullptr, Bc, C, V);
    matmul_forward(M->step_values, M->ln, M->p(lay.vw), M->p(lay.vb), Bc, C, 1);
    synchronize("gpt decode");
    if (logits_out) to_host(logits_out, M->step_logits, Bc * V * (int64_t)sizeof(float));
    if (values_out) to_host(values_out, M->step_values, Bc * (int64_t)sizeof(float));
}

}  // namespace gpt
}  // namespace maporl
