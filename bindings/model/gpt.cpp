// gpt.cpp: N-API glue for the embedded GPT (maporl_gpt_* in maporl.h). A model is a JS External that frees the
// native model when collected (or at gptFree). lib/model/nativePolicy.ts serialises calls on one model, so a
// model never runs two calls at once. Beyond the handle a call takes one value or one object of named fields
// (lib/native.ts types each). JS:
//   gptCreate({vocab, context, layers, heads, dModel, mlpRatio, tieEmbeddings, seed}) -> handle
//   gptFree(handle); gptTensors(handle) -> [{name, shape, offset}]; gptParamCount(handle) -> number
//   gptGet(handle, {which, out}); gptSet(handle, {which, input}); gptGetStep(handle); gptSetStep(handle, step)
//   gptForward(handle, {tokens, B, T, logits|null, values|null}) [+ Async]
//   gptBackward(handle, {dlogits|null, dvalues|null}) [+ Async]; gptZeroGrad(handle)
//   gptStep(handle, {lr, beta1, beta2, eps, weightDecay, maxGradNorm}) -> grad norm [+ Async]
//   gptCacheReset(handle, {batch, maxLen}); gptCacheRelease(handle); gptCacheSwap(handle, slot);
//   gptCacheInfo(handle) -> {batch, maxLen}; gptDecode(handle, {tokens, pos, logits|null, values|null}) [+ Async]
//   gptPrefillAsync(handle, {tokens, lens, P}); gptDecodeRowsAsync(handle, {tokens, pos, logits|null, values|null})
//   gptSetDevice(handle, 0 cpu | 1 cuda | 2 emulated cuda (a Llama model, for tests)); gptGetDevice(handle) -> 0 | 1
//   llamaCreate({..., seed | null}) -> a Llama-family handle for every call above;
//   gptSetTensor(handle, {index, dtype, data})
//   gptScore(handle, {tokens, targets, B, T, temperature, chunk, logp, entropy|null, values|null}) [+ Async]
//   gptScoreBackward(handle, {gradLogp|null, gradEntropy|null, dvalues|null}) [+ Async]
#include <napi.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/model/handle.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kGptCreateFields[] = {"vocab",  "context",  "layers",        "heads",
                                             "dModel", "mlpRatio", "tieEmbeddings", "seed"};
constexpr CallSpec kGptCreate{"gptCreate", kGptCreateFields, 8, false};
constexpr const char * kLlamaCreateFields[] = {"vocab",
                                               "context",
                                               "layers",
                                               "dModel",
                                               "heads",
                                               "kvHeads",
                                               "headDim",
                                               "intermediate",
                                               "rmsEps",
                                               "ropeTheta",
                                               "ropeScaling",
                                               "ropeFactor",
                                               "ropeLowFreqFactor",
                                               "ropeHighFreqFactor",
                                               "ropeOriginalMaxPosition",
                                               "qkvBias",
                                               "oBias",
                                               "qkNorm",
                                               "tieEmbeddings",
                                               "bf16",
                                               "int8",
                                               "seed"};
constexpr CallSpec kLlamaCreate{"llamaCreate", kLlamaCreateFields, 22, false};
constexpr const char * kGptGetFields[] = {"which", "out"};
constexpr CallSpec kGptGet{"gptGet", kGptGetFields, 2, true};
constexpr const char * kGptSetFields[] = {"which", "input"};
constexpr CallSpec kGptSet{"gptSet", kGptSetFields, 2, true};
constexpr const char * kGptSetTensorFields[] = {"index", "dtype", "data"};
constexpr CallSpec kGptSetTensor{"gptSetTensor", kGptSetTensorFields, 3, true};
constexpr const char * kGptForwardFields[] = {"tokens", "B", "T", "logits", "values"};
constexpr CallSpec kGptForward{"gptForward", kGptForwardFields, 5, true};
constexpr const char * kGptBackwardFields[] = {"dlogits", "dvalues"};
constexpr CallSpec kGptBackward{"gptBackward", kGptBackwardFields, 2, true};
constexpr const char * kGptStepFields[] = {"lr", "beta1", "beta2", "eps", "weightDecay", "maxGradNorm"};
constexpr CallSpec kGptStep{"gptStep", kGptStepFields, 6, true};
constexpr const char * kGptCacheResetFields[] = {"batch", "maxLen"};
constexpr CallSpec kGptCacheReset{"gptCacheReset", kGptCacheResetFields, 2, true};
constexpr const char * kGptDecodeFields[] = {"tokens", "pos", "logits", "values"};
constexpr CallSpec kGptDecode{"gptDecode", kGptDecodeFields, 4, true};
constexpr const char * kGptPrefillFields[] = {"tokens", "lens", "P"};
constexpr CallSpec kGptPrefill{"gptPrefill", kGptPrefillFields, 3, true};
constexpr const char * kGptDecodeRowsFields[] = {"tokens", "pos", "logits", "values"};
constexpr CallSpec kGptDecodeRows{"gptDecodeRows", kGptDecodeRowsFields, 4, true};
constexpr const char * kGptScoreFields[] = {"tokens", "targets", "B",       "T",     "temperature",
                                            "chunk",  "logp",    "entropy", "values"};
constexpr CallSpec kGptScore{"gptScore", kGptScoreFields, 9, true};
constexpr const char * kGptScoreBackwardFields[] = {"gradLogp", "gradEntropy", "dvalues"};
constexpr CallSpec kGptScoreBackward{"gptScoreBackward", kGptScoreBackwardFields, 3, true};

int64_t Field(const Fields & o, const char * key, int64_t fallback) {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined()) return fallback;
    if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), o.Where(key) + ": expected an integer");
    return v.As<Napi::Number>().Int64Value();
}

// A JS External owning the model; `bytes_per_param` of native memory reported to V8.
Napi::Value Wrap(Napi::Env env, maporl_gpt * g, int64_t bytes_per_param) {
    auto h = std::make_unique<Handle>();
    h->gpt = g;
    int64_t n = 0;
    maporl_gpt_param_count(h->gpt, &n);
    h->external = bytes_per_param * n;
    Napi::MemoryManagement::AdjustExternalMemory(env, h->external);
    return Napi::External<Handle>::New(env, h.release(), [](Napi::Env e, Handle * p) {
        p->Release(e);  // (no call is in flight: each keeps the handle referenced)
        delete p;
    });
}

Napi::Value Create(const Napi::CallbackInfo & info) {
    const Fields o(info, kGptCreate);
    maporl_gpt_config c = maporl_gpt_default_config();
    c.vocab = Field(o, "vocab", 0);
    c.context = Field(o, "context", 0);
    c.layers = Field(o, "layers", 0);
    c.heads = Field(o, "heads", 0);
    c.d_model = Field(o, "dModel", 0);
    c.mlp_ratio = Field(o, "mlpRatio", 4);
    const Napi::Value tie = o.Get("tieEmbeddings");
    c.tie_embeddings = tie.IsBoolean() ? (tie.As<Napi::Boolean>().Value() ? 1 : 0) : (int)Field(o, "tieEmbeddings", 1);
    const double seed = RequireNumber(o, "seed");
    maporl_gpt * g = nullptr;
    const maporl_status st = maporl_gpt_create(&c, (uint64_t)seed, &g);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptCreate");
    return Wrap(info.Env(), g, 16);
}

double Real(const Fields & o, const char * key, double fallback) {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined()) return fallback;
    if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), o.Where(key) + ": expected a number");
    return v.As<Napi::Number>().DoubleValue();
}

int Flag(const Fields & o, const char * key) {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined()) return 0;
    if (!v.IsBoolean()) throw Napi::TypeError::New(o.Env(), o.Where(key) + ": expected a boolean");
    return v.As<Napi::Boolean>().Value() ? 1 : 0;
}

// llamaCreate({vocab, context, layers, dModel, heads, kvHeads, headDim, intermediate, rmsEps, ropeTheta, ropeScaling:
// 0|1|2, ropeFactor, ropeLowFreqFactor, ropeHighFreqFactor, ropeOriginalMaxPosition, qkvBias, oBias, qkNorm,
// tieEmbeddings, bf16, int8 (optional: matrices stored as bfloat16 / Q8_0, frozen), seed | null}) -> handle (answers
// every gpt* call; seed null: parameters 0, for a loader)
Napi::Value LlamaCreate(const Napi::CallbackInfo & info) {
    const Fields o(info, kLlamaCreate);
    maporl_llama_config c = maporl_llama_default_config();
    c.vocab = Field(o, "vocab", 0);
    c.context = Field(o, "context", 0);
    c.layers = Field(o, "layers", 0);
    c.d_model = Field(o, "dModel", 0);
    c.heads = Field(o, "heads", 0);
    c.kv_heads = Field(o, "kvHeads", 0);
    c.head_dim = Field(o, "headDim", 0);
    c.intermediate = Field(o, "intermediate", 0);
    c.rms_eps = Real(o, "rmsEps", c.rms_eps);
    c.rope_theta = Real(o, "ropeTheta", c.rope_theta);
    c.rope_scaling = (int)Field(o, "ropeScaling", 0);
    c.rope_factor = Real(o, "ropeFactor", c.rope_factor);
    c.rope_low_freq_factor = Real(o, "ropeLowFreqFactor", c.rope_low_freq_factor);
    c.rope_high_freq_factor = Real(o, "ropeHighFreqFactor", c.rope_high_freq_factor);
    c.rope_original_max_position = Field(o, "ropeOriginalMaxPosition", c.rope_original_max_position);
    c.qkv_bias = Flag(o, "qkvBias");
    c.o_bias = Flag(o, "oBias");
    c.qk_norm = Flag(o, "qkNorm");
    c.tie_embeddings = Flag(o, "tieEmbeddings");
    c.bf16_matrices = Flag(o, "bf16");
    c.int8_matrices = Flag(o, "int8");
    maporl_gpt * g = nullptr;
    const maporl_status st = o.Get("seed").IsNull() ? maporl_llama_create_zeroed(&c, &g)
                                                    : maporl_llama_create(&c, (uint64_t)RequireNumber(o, "seed"), &g);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "llamaCreate");
    return Wrap(info.Env(), g, 4);  // the weights; gradients and moments come with the first training call
}

Napi::Value Free(const Napi::CallbackInfo & info) {
    if (info.Length() > 0 && info[0].IsExternal()) {
        Handle * h = info[0].As<Napi::External<Handle>>().Data();
        h->freed = true;
        if (h->pending == 0) h->Release(info.Env());  // else when the last call in flight completes
    }
    return info.Env().Undefined();
}

// QueueCall on a model: counts the call in flight on its handle (checked free and idle by the unpacker's Get).
template <typename Call>
Napi::Value QueueGpt(const Napi::CallbackInfo & info, const char * where,
                     Call (*unpack)(const Napi::CallbackInfo &, std::vector<Napi::Value> *)) {
    Handle * h = Get(info);
    Napi::Value p = QueueCall(info, where, unpack, [h](Napi::Env env) {
        if (--h->pending == 0 && h->freed) h->Release(env);
    });
    ++h->pending;  // after the unpacker's checks (which may throw)
    return p;
}

Napi::Value Tensors(const Napi::CallbackInfo & info) {
    Handle * h = Get(info, 0, true);
    int64_t n = 0;
    maporl_gpt_tensor_count(h->gpt, &n);
    Napi::Array out = Napi::Array::New(info.Env(), (size_t)n);
    for (int64_t i = 0; i < n; ++i) {
        char name[64];
        int64_t dims[2], off = 0;
        maporl_gpt_tensor_info(h->gpt, i, name, dims, &off);
        Napi::Object t = Napi::Object::New(info.Env());
        t.Set("name", name);
        Napi::Array shape = Napi::Array::New(info.Env(), dims[1] ? 2 : 1);
        shape.Set(0u, Napi::Number::New(info.Env(), (double)dims[0]));
        if (dims[1]) shape.Set(1u, Napi::Number::New(info.Env(), (double)dims[1]));
        t.Set("shape", shape);
        t.Set("offset", (double)off);
        out.Set((uint32_t)i, t);
    }
    return out;
}

Napi::Value ParamCount(const Napi::CallbackInfo & info) {
    int64_t n = 0;
    maporl_gpt_param_count(Get(info, 0, true)->gpt, &n);
    return Napi::Number::New(info.Env(), (double)n);
}

Napi::Value GetSet(const Napi::CallbackInfo & info, bool set) {
    Handle * h = Get(info);
    const Fields f(info, set ? kGptSet : kGptGet);
    const int which = (int)RequireInt(f, "which", 0, 2);
    int64_t n = 0;
    maporl_gpt_param_count(h->gpt, &n);
    Napi::TypedArray a = RequireTypedArray(f, set ? "input" : "out", {napi_float32_array}, (size_t)n);
    const maporl_status st = set ? maporl_gpt_set(h->gpt, which, (const float *)DataOf(a), n)
                                 : maporl_gpt_get(h->gpt, which, (float *)DataOf(a), n);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, set ? "gptSet" : "gptGet");
    return info.Env().Undefined();
}
Napi::Value JsGet(const Napi::CallbackInfo & info) { return GetSet(info, false); }

// gptSetTensor(handle, {index, dtype: 0 f32 | 1 bf16 | 2 f16 | 3 q8_0, data: Uint8Array of the tensor's raw
// little-endian bytes})
Napi::Value SetTensor(const Napi::CallbackInfo & info) {
    Handle * h = Get(info);
    const Fields f(info, kGptSetTensor);
    const int64_t index = RequireInt(f, "index", 0, (int64_t)1 << 40), dtype = RequireInt(f, "dtype", 0, 3);
    const Napi::Value data = f.Get("data");
    if (!data.IsTypedArray() || data.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
        throw Napi::TypeError::New(info.Env(), "gptSetTensor: data: expected a Uint8Array");
    Napi::Uint8Array a = data.As<Napi::Uint8Array>();
    // Values per `unit` bytes: 1 per 4 (f32), 1 per 2 (bf16, f16), 32 per 34 (Q8_0 blocks).
    const int64_t unit = dtype == 0 ? 4 : dtype == 3 ? 34 : 2, per = dtype == 3 ? 32 : 1;
    if ((int64_t)a.ByteLength() % unit != 0)
        throw Napi::RangeError::New(info.Env(),
                                    "gptSetTensor: data: the byte length is not a multiple of the dtype's width");
    const maporl_status st =
        maporl_gpt_set_tensor(h->gpt, index, (int)dtype, a.Data(), (int64_t)a.ByteLength() / unit * per);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptSetTensor");
    return info.Env().Undefined();
}
Napi::Value JsSet(const Napi::CallbackInfo & info) { return GetSet(info, true); }

Napi::Value GetStep(const Napi::CallbackInfo & info) {
    int64_t s = 0;
    maporl_gpt_get_step(Get(info)->gpt, &s);
    return Napi::Number::New(info.Env(), (double)s);
}
Napi::Value SetStep(const Napi::CallbackInfo & info) {
    const maporl_status st = maporl_gpt_set_step(Get(info)->gpt, RequireInt(info, 1, "step", 0, (int64_t)1 << 52));
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptSetStep");
    return info.Env().Undefined();
}

struct ForwardCall {
    maporl_gpt * gpt;
    const int32_t * tokens;
    int64_t B, T;
    float * logits;
    float * values;
    maporl_status run() const { return maporl_gpt_forward(gpt, tokens, B, T, logits, values); }
};

ForwardCall UnpackForward(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptForward);
    ForwardCall c;
    c.gpt = h->gpt;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    Napi::TypedArray t = RequireTypedArray(f, "tokens", {napi_int32_array}, n);
    c.tokens = (const int32_t *)DataOf(t);
    int64_t V = 0;
    maporl_gpt_cache_info(h->gpt, nullptr, nullptr, &V);
    if (keep) *keep = {info[0], t};
    c.logits = OptionalF32(f, "logits", n * (size_t)V, keep);
    c.values = OptionalF32(f, "values", n, keep);
    return c;
}

struct BackwardCall {
    maporl_gpt * gpt;
    const float * dlogits;
    const float * dvalues;
    maporl_status run() const { return maporl_gpt_backward(gpt, dlogits, dvalues); }
};

BackwardCall UnpackBackward(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    int64_t B = 0, T = 0, V = 0;
    maporl_gpt_forward_shape(h->gpt, &B, &T);
    maporl_gpt_cache_info(h->gpt, nullptr, nullptr, &V);
    if (B == 0) throw Napi::Error::New(info.Env(), "gptBackward: no forward to go back through");
    if (keep) keep->push_back(info[0]);
    BackwardCall c;
    c.gpt = h->gpt;
    const Fields f(info, kGptBackward);
    c.dlogits = OptionalF32(f, "dlogits", (size_t)(B * T * V), keep);  // the last forward's shape
    c.dvalues = OptionalF32(f, "dvalues", (size_t)(B * T), keep);
    return c;
}

struct StepCall {
    maporl_gpt * gpt;
    maporl_adamw_params p;
    double max_norm;
    std::shared_ptr<double> norm = std::make_shared<double>(0.0);
    maporl_status run() const { return maporl_gpt_step(gpt, &p, max_norm, norm.get()); }
    Napi::Value result(Napi::Env env) const { return Napi::Number::New(env, *norm); }
};

StepCall UnpackStep(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptStep);
    if (keep) keep->push_back(info[0]);
    StepCall c;
    c.gpt = h->gpt;
    c.p = maporl_adamw_params{(float)RequireNumber(f, "lr"), (float)RequireNumber(f, "beta1"),
                              (float)RequireNumber(f, "beta2"), (float)RequireNumber(f, "eps"),
                              (float)RequireNumber(f, "weightDecay")};
    c.max_norm = RequireNumber(f, "maxGradNorm");
    return c;
}

Napi::Value ZeroGrad(const Napi::CallbackInfo & info) {
    const maporl_status st = maporl_gpt_zero_grad(Get(info)->gpt);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptZeroGrad");
    return info.Env().Undefined();
}

Napi::Value SetDevice(const Napi::CallbackInfo & info) {
    Handle * h = Get(info);
    const int64_t d =
        RequireInt(info, 1, "device", 0, 2);  // 2: the CPU emulation of the Llama family's CUDA model (tests)
    const maporl_status st =
        d == 2 ? maporl_llama_emulate_device(h->gpt) : maporl_gpt_set_device(h->gpt, (maporl_device)d);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptSetDevice");
    return info.Env().Undefined();
}

Napi::Value GetDevice(const Napi::CallbackInfo & info) {
    maporl_device d = MAPORL_DEVICE_CPU;
    const maporl_status st = maporl_gpt_get_device(Get(info, 0, true)->gpt, &d);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptGetDevice");
    return Napi::Number::New(info.Env(), (double)d);
}

Napi::Value CacheReset(const Napi::CallbackInfo & info) {
    Handle * h = Get(info);
    const Fields f(info, kGptCacheReset);
    const maporl_status st = maporl_gpt_cache_reset(h->gpt, RequireInt(f, "batch", 1, (int64_t)1 << 24),
                                                    RequireInt(f, "maxLen", 1, (int64_t)1 << 24));
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptCacheReset");
    return info.Env().Undefined();
}

Napi::Value CacheRelease(const Napi::CallbackInfo & info) {
    const maporl_status st = maporl_gpt_cache_release(Get(info)->gpt);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptCacheRelease");
    return info.Env().Undefined();
}

Napi::Value CacheInfo(const Napi::CallbackInfo & info) {
    int64_t batch = 0, max_len = 0;
    const maporl_status st = maporl_gpt_cache_info(Get(info)->gpt, &batch, &max_len, nullptr);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptCacheInfo");
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("batch", Napi::Number::New(info.Env(), (double)batch));
    o.Set("maxLen", Napi::Number::New(info.Env(), (double)max_len));
    return o;
}

Napi::Value CacheSwap(const Napi::CallbackInfo & info) {
    const maporl_status st = maporl_gpt_cache_swap(Get(info)->gpt, RequireInt(info, 1, "slot", INT32_MIN, INT32_MAX));
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "gptCacheSwap");
    return info.Env().Undefined();
}

// The KV cache a decoding call runs on (batch, max_len, vocab), or an error naming `where` before gptCacheReset.
struct Cache {
    int64_t batch = 0, max_len = 0, V = 0;
};
Cache RequireCache(const Napi::CallbackInfo & info, const Handle * h, const char * where) {
    Cache c;
    maporl_gpt_cache_info(h->gpt, &c.batch, &c.max_len, &c.V);
    if (c.batch == 0) throw Napi::Error::New(info.Env(), std::string(where) + ": call gptCacheReset first");
    return c;
}

// An Int32Array argument of n elements as int64 values (the C API's per-row lengths and positions).
std::vector<int64_t> Int64s(const Fields & f, const char * name, size_t n) {
    const int32_t * p = (const int32_t *)DataOf(RequireTypedArray(f, name, {napi_int32_array}, n));
    return std::vector<int64_t>(p, p + n);
}

struct DecodeCall {
    maporl_gpt * gpt;
    const int32_t * tokens;
    int64_t pos;
    float * logits;
    float * values;
    maporl_status run() const { return maporl_gpt_decode(gpt, tokens, pos, logits, values); }
};

DecodeCall UnpackDecode(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptDecode);
    const auto [batch, max_len, V] = RequireCache(info, h, "gptDecode");
    Napi::TypedArray t = RequireTypedArray(f, "tokens", {napi_int32_array}, (size_t)batch);
    DecodeCall c;
    c.gpt = h->gpt;
    c.tokens = (const int32_t *)DataOf(t);
    c.pos = RequireInt(f, "pos", 0, max_len - 1);
    if (keep) *keep = {info[0], t};
    c.logits = OptionalF32(f, "logits", (size_t)(batch * V), keep);
    c.values = OptionalF32(f, "values", (size_t)batch, keep);
    return c;
}

// gptPrefillAsync(handle, {tokens: Int32Array [batch * P], lens: Int32Array [batch], P}) (Llama family)
struct PrefillCall {
    maporl_gpt * gpt;
    const int32_t * tokens;
    std::vector<int64_t> lens;
    int64_t P;
    maporl_status run() const { return maporl_gpt_prefill(gpt, tokens, lens.data(), P); }
};

PrefillCall UnpackPrefill(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptPrefill);
    const Cache cache = RequireCache(info, h, "gptPrefill");
    PrefillCall c;
    c.gpt = h->gpt;
    c.P = RequireInt(f, "P", 0, cache.max_len);
    Napi::TypedArray t = RequireTypedArray(f, "tokens", {napi_int32_array}, (size_t)(cache.batch * c.P));
    c.tokens = (const int32_t *)DataOf(t);
    c.lens = Int64s(f, "lens", (size_t)cache.batch);
    if (keep) *keep = {info[0], t};
    return c;
}

// gptDecodeRowsAsync(handle, {tokens: Int32Array [batch], pos: Int32Array [batch], logits?, values?}) (Llama family)
struct DecodeRowsCall {
    maporl_gpt * gpt;
    const int32_t * tokens;
    std::vector<int64_t> pos;
    float * logits;
    float * values;
    maporl_status run() const { return maporl_gpt_decode_rows(gpt, tokens, pos.data(), logits, values); }
};

DecodeRowsCall UnpackDecodeRows(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptDecodeRows);
    const Cache cache = RequireCache(info, h, "gptDecodeRows");
    const int64_t batch = cache.batch;
    Napi::TypedArray t = RequireTypedArray(f, "tokens", {napi_int32_array}, (size_t)batch);
    DecodeRowsCall c;
    c.gpt = h->gpt;
    c.tokens = (const int32_t *)DataOf(t);
    c.pos = Int64s(f, "pos", (size_t)batch);
    if (keep) *keep = {info[0], t};
    c.logits = OptionalF32(f, "logits", (size_t)(batch * cache.V), keep);
    c.values = OptionalF32(f, "values", (size_t)batch, keep);
    return c;
}

struct ScoreCall {
    maporl_gpt * gpt;
    const int32_t * tokens;
    const int32_t * targets;
    int64_t B, T, chunk;
    float temperature;
    float * logp;
    float * entropy;
    float * values;
    maporl_status run() const {
        return maporl_gpt_score(gpt, tokens, targets, B, T, temperature, chunk, logp, entropy, values);
    }
};

// gptScore(handle, {tokens, targets, B, T, temperature, chunk, logp, entropy | null, values | null})
ScoreCall UnpackScore(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptScore);
    ScoreCall c;
    c.gpt = h->gpt;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    Napi::TypedArray t = RequireTypedArray(f, "tokens", {napi_int32_array}, n);
    Napi::TypedArray y = RequireTypedArray(f, "targets", {napi_int32_array}, n);
    c.tokens = (const int32_t *)DataOf(t);
    c.targets = (const int32_t *)DataOf(y);
    c.temperature = (float)RequireNumber(f, "temperature");
    c.chunk = RequireInt(f, "chunk", 0, (int64_t)1 << 40);
    if (keep) *keep = {info[0], t, y};
    Napi::TypedArray lp = RequireTypedArray(f, "logp", {napi_float32_array}, n);
    if (keep) keep->push_back(lp);
    c.logp = (float *)DataOf(lp);
    c.entropy = OptionalF32(f, "entropy", n, keep);
    c.values = OptionalF32(f, "values", n, keep);
    return c;
}

struct ScoreBackwardCall {
    maporl_gpt * gpt;
    const float * grad_logp;
    const float * grad_entropy;
    const float * dvalues;
    maporl_status run() const { return maporl_gpt_score_backward(gpt, grad_logp, grad_entropy, dvalues); }
};

// gptScoreBackward(handle, {gradLogp | null, gradEntropy | null, dvalues | null}), each [B*T] of the last gptScore
ScoreBackwardCall UnpackScoreBackward(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    Handle * h = Get(info);
    const Fields f(info, kGptScoreBackward);
    int64_t B = 0, T = 0;
    maporl_gpt_forward_shape(h->gpt, &B, &T);
    if (B == 0) throw Napi::Error::New(info.Env(), "gptScoreBackward: no gptScore to go back through");
    if (keep) keep->push_back(info[0]);
    ScoreBackwardCall c;
    c.gpt = h->gpt;
    const size_t n = (size_t)(B * T);
    c.grad_logp = OptionalF32(f, "gradLogp", n, keep);
    c.grad_entropy = OptionalF32(f, "gradEntropy", n, keep);
    c.dvalues = OptionalF32(f, "dvalues", n, keep);
    return c;
}

Napi::Value JsScore(const Napi::CallbackInfo & i) { return RunCall(i, "gptScore", UnpackScore); }
Napi::Value JsScoreAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptScore", UnpackScore); }
Napi::Value JsScoreBackward(const Napi::CallbackInfo & i) {
    return RunCall(i, "gptScoreBackward", UnpackScoreBackward);
}
Napi::Value JsScoreBackwardAsync(const Napi::CallbackInfo & i) {
    return QueueGpt(i, "gptScoreBackward", UnpackScoreBackward);
}
Napi::Value JsForward(const Napi::CallbackInfo & i) { return RunCall(i, "gptForward", UnpackForward); }
Napi::Value JsForwardAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptForward", UnpackForward); }
Napi::Value JsBackward(const Napi::CallbackInfo & i) { return RunCall(i, "gptBackward", UnpackBackward); }
Napi::Value JsBackwardAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptBackward", UnpackBackward); }
Napi::Value JsStep(const Napi::CallbackInfo & i) { return RunCall(i, "gptStep", UnpackStep); }
Napi::Value JsStepAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptStep", UnpackStep); }
Napi::Value JsDecode(const Napi::CallbackInfo & i) { return RunCall(i, "gptDecode", UnpackDecode); }
Napi::Value JsDecodeAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptDecode", UnpackDecode); }
Napi::Value JsPrefillAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptPrefill", UnpackPrefill); }
Napi::Value JsDecodeRowsAsync(const Napi::CallbackInfo & i) { return QueueGpt(i, "gptDecodeRows", UnpackDecodeRows); }

}  // namespace

void InitGpt(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kGptCreate, Create);
    ExportCall(env, exports, kLlamaCreate, LlamaCreate);
    ExportCall(env, exports, kGptSetTensor, SetTensor);
    exports.Set("gptFree", Napi::Function::New(env, Free, "gptFree"));
    ExportCall(env, exports, kGptScore, JsScore, JsScoreAsync);
    ExportCall(env, exports, kGptScoreBackward, JsScoreBackward, JsScoreBackwardAsync);
    exports.Set("gptTensors", Napi::Function::New(env, Tensors, "gptTensors"));
    exports.Set("gptParamCount", Napi::Function::New(env, ParamCount, "gptParamCount"));
    ExportCall(env, exports, kGptGet, JsGet);
    ExportCall(env, exports, kGptSet, JsSet);
    exports.Set("gptGetStep", Napi::Function::New(env, GetStep, "gptGetStep"));
    exports.Set("gptSetStep", Napi::Function::New(env, SetStep, "gptSetStep"));
    ExportCall(env, exports, kGptForward, JsForward, JsForwardAsync);
    ExportCall(env, exports, kGptBackward, JsBackward, JsBackwardAsync);
    exports.Set("gptZeroGrad", Napi::Function::New(env, ZeroGrad, "gptZeroGrad"));
    ExportCall(env, exports, kGptStep, JsStep, JsStepAsync);
    ExportCall(env, exports, kGptCacheReset, CacheReset);
    exports.Set("gptCacheRelease", Napi::Function::New(env, CacheRelease, "gptCacheRelease"));
    exports.Set("gptCacheSwap", Napi::Function::New(env, CacheSwap, "gptCacheSwap"));
    exports.Set("gptCacheInfo", Napi::Function::New(env, CacheInfo, "gptCacheInfo"));
    ExportCall(env, exports, kGptDecode, JsDecode, JsDecodeAsync);
    ExportCall(env, exports, kGptPrefill, nullptr, JsPrefillAsync);
    ExportCall(env, exports, kGptDecodeRows, nullptr, JsDecodeRowsAsync);
    exports.Set("gptSetDevice", Napi::Function::New(env, SetDevice, "gptSetDevice"));
    exports.Set("gptGetDevice", Napi::Function::New(env, GetDevice, "gptGetDevice"));
}

}  // namespace maporl_js
