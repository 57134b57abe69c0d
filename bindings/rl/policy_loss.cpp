// policy_loss.cpp: N-API glue for maporl_policy_loss, maporl_value_loss, maporl_logprobs and
// maporl_fused_policy_loss. Each has a sync and an Async (Promise) entry; the loss calls return their
// statistics as a plain object. Each takes one object of named fields (lib/native.ts types them); optional arrays are
// null. JS:
//   policyLoss({logp, oldLogp|null, advantages, advPerSeq, mask, refLogp|null, entropy|null, B, T, params, device,
//               gradLogp|null, gradEntropy|null}) -> stats
//   valueLoss({values, oldValues|null, returns, mask, B, T, clip, agg, normalizer, device, gradValues|null}) -> stats
//   logprobs({logits, targets, N, V, temperature, device, logp, entropy|null})
//   fusedPolicyLoss({logits, targets, oldLogp|null, advantages, advPerSeq, mask, refLogp|null, B, T, V, temperature,
//                    params, device, gradLogits, logp|null, entropy|null, gradLogp|null}) -> stats
// logits (both) is a Float32Array, or a Uint16Array of bfloat16 bit patterns (the _bf16 C entry points).
// `params` is {type, clipLow, clipHigh, dualClip, logRatioClamp, kl, klStraightThrough, klCoef, entropyCoef, agg,
// normalizer}, all numbers (enums as their C values); lib/rl/policyLoss.ts builds it after validation.
#include <napi.h>

#include <memory>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kPolicyLossFields[] = {"logp",    "oldLogp",  "advantages", "advPerSeq", "mask",
                                              "refLogp", "entropy",  "B",          "T",         "params",
                                              "device",  "gradLogp", "gradEntropy"};
constexpr CallSpec kPolicyLoss{"policyLoss", kPolicyLossFields, 13, false};
constexpr const char * kValueLossFields[] = {"values", "oldValues", "returns",    "mask",   "B",         "T",
                                             "clip",   "agg",       "normalizer", "device", "gradValues"};
constexpr CallSpec kValueLoss{"valueLoss", kValueLossFields, 11, false};
constexpr const char * kLogprobsFields[] = {"logits", "targets", "N", "V", "temperature", "device", "logp", "entropy"};
constexpr CallSpec kLogprobs{"logprobs", kLogprobsFields, 8, false};
constexpr const char * kFusedPolicyLossFields[] = {
    "logits", "targets",     "oldLogp", "advantages", "advPerSeq",  "mask", "refLogp", "B",       "T",
    "V",      "temperature", "params",  "device",     "gradLogits", "logp", "entropy", "gradLogp"};
constexpr CallSpec kFusedPolicyLoss{"fusedPolicyLoss", kFusedPolicyLossFields, 17, false};

// A Float32Array / mask / Int32Array argument that may be null.
struct Arr {
    void * data = nullptr;
    size_t bytes = 0;
    napi_typedarray_type type = napi_float32_array;
};

Arr Optional(const Fields & f, const char * name, std::initializer_list<napi_typedarray_type> types, size_t n,
             std::vector<Napi::Value> * keep) {
    Arr a;
    if (!f.Has(name)) return a;
    Napi::TypedArray t = RequireTypedArray(f, name, types, n);
    a.data = DataOf(t);
    a.bytes = t.ByteLength();
    a.type = t.TypedArrayType();
    if (keep) keep->push_back(t);
    return a;
}

Arr Required(const Fields & f, const char * name, std::initializer_list<napi_typedarray_type> types, size_t n,
             std::vector<Napi::Value> * keep) {
    Napi::TypedArray t = RequireTypedArray(f, name, types, n);
    if (keep) keep->push_back(t);
    return Arr{DataOf(t), t.ByteLength(), t.TypedArrayType()};
}

maporl_policy_loss_params Params(const Fields & o) {
    maporl_policy_loss_params p = maporl_policy_loss_default_params();
    p.type = (maporl_loss_type)(int)RequireNumber(o, "type");
    p.clip_low = (float)RequireNumber(o, "clipLow");
    p.clip_high = (float)RequireNumber(o, "clipHigh");
    p.dual_clip = (float)RequireNumber(o, "dualClip");
    p.log_ratio_clamp = (float)RequireNumber(o, "logRatioClamp");
    p.kl = (maporl_kl_estimator)(int)RequireNumber(o, "kl");
    p.kl_straight_through = RequireNumber(o, "klStraightThrough") != 0 ? 1 : 0;
    p.kl_coef = (float)RequireNumber(o, "klCoef");
    p.entropy_coef = (float)RequireNumber(o, "entropyCoef");
    p.agg = (maporl_loss_agg)(int)RequireNumber(o, "agg");
    p.normalizer = RequireNumber(o, "normalizer");
    p.seq_normalizer = RequireNumber(o, "seqNormalizer");
    return p;
}

maporl_mask_type MaskType(const Arr & m) { return m.type == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32; }

Napi::Value StatsObject(Napi::Env env, const maporl_policy_loss_stats & s) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("loss", s.loss);
    o.Set("pgLoss", s.pg_loss);
    o.Set("klLoss", s.kl_loss);
    o.Set("entropyLoss", s.entropy_loss);
    o.Set("clipFrac", s.clip_frac);
    o.Set("clipFracLower", s.clip_frac_lower);
    o.Set("approxKl", s.approx_kl);
    o.Set("klMean", s.kl_mean);
    o.Set("entropyMean", s.entropy_mean);
    o.Set("ratioMean", s.ratio_mean);
    o.Set("ratioMax", s.ratio_max);
    o.Set("tokens", s.tokens);
    o.Set("sequences", s.sequences);
    return o;
}

struct PolicyCall {
    Arr lp, old, adv, mask, ref, ent, g, ge;
    int adv_per_seq;
    int64_t B, T;
    maporl_policy_loss_params p;
    maporl_device device;
    std::shared_ptr<maporl_policy_loss_stats> stats = std::make_shared<maporl_policy_loss_stats>();

    maporl_status run() const {
        return RunOn(device,
                     {{lp.data, lp.bytes, true, false},
                      {old.data, old.bytes, true, false},
                      {adv.data, adv.bytes, true, false},
                      {mask.data, mask.bytes, true, false},
                      {ref.data, ref.bytes, true, false},
                      {ent.data, ent.bytes, true, false},
                      {g.data, g.bytes, false, true},
                      {ge.data, ge.bytes, false, true}},
                     [&](const std::vector<void *> & d) {
                         return maporl_policy_loss(device, (const float *)d[0], (const float *)d[1],
                                                   (const float *)d[2], adv_per_seq, d[3], MaskType(mask),
                                                   (const float *)d[4], (const float *)d[5], B, T, p, (float *)d[6],
                                                   (float *)d[7], stats.get());
                     });
    }
    Napi::Value result(Napi::Env env) const { return StatsObject(env, *stats); }
};

PolicyCall UnpackPolicy(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kPolicyLoss);
    PolicyCall c;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    c.adv_per_seq = RequireBool(f, "advPerSeq") ? 1 : 0;
    c.lp = Required(f, "logp", {napi_float32_array}, n, keep);
    c.old = Optional(f, "oldLogp", {napi_float32_array}, n, keep);
    c.adv = Required(f, "advantages", {napi_float32_array}, c.adv_per_seq ? (size_t)c.B : n, keep);
    c.mask = Required(f, "mask", {napi_uint8_array, napi_float32_array}, n, keep);
    c.ref = Optional(f, "refLogp", {napi_float32_array}, n, keep);
    c.ent = Optional(f, "entropy", {napi_float32_array}, n, keep);
    c.p = Params(f.Object("params"));
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.g = Optional(f, "gradLogp", {napi_float32_array}, n, keep);
    c.ge = Optional(f, "gradEntropy", {napi_float32_array}, n, keep);
    return c;
}

struct ValueCall {
    Arr v, old, R, mask, g;
    int64_t B, T;
    float clip;
    maporl_loss_agg agg;
    double normalizer;
    maporl_device device;
    std::shared_ptr<maporl_value_loss_stats> stats = std::make_shared<maporl_value_loss_stats>();

    maporl_status run() const {
        return RunOn(device,
                     {{v.data, v.bytes, true, false},
                      {old.data, old.bytes, true, false},
                      {R.data, R.bytes, true, false},
                      {mask.data, mask.bytes, true, false},
                      {g.data, g.bytes, false, true}},
                     [&](const std::vector<void *> & d) {
                         return maporl_value_loss(device, (const float *)d[0], (const float *)d[1], (const float *)d[2],
                                                  d[3], MaskType(mask), B, T, clip, agg, normalizer, (float *)d[4],
                                                  stats.get());
                     });
    }
    Napi::Value result(Napi::Env env) const {
        Napi::Object o = Napi::Object::New(env);
        o.Set("loss", stats->loss);
        o.Set("clipFrac", stats->clip_frac);
        o.Set("valueMean", stats->value_mean);
        o.Set("tokens", stats->tokens);
        return o;
    }
};

ValueCall UnpackValue(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kValueLoss);
    ValueCall c;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    c.v = Required(f, "values", {napi_float32_array}, n, keep);
    c.old = Optional(f, "oldValues", {napi_float32_array}, n, keep);
    c.R = Required(f, "returns", {napi_float32_array}, n, keep);
    c.mask = Required(f, "mask", {napi_uint8_array, napi_float32_array}, n, keep);
    c.clip = (float)RequireNumber(f, "clip");
    c.agg = (maporl_loss_agg)RequireInt(f, "agg", 0, 3);
    c.normalizer = RequireNumber(f, "normalizer");
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.g = Optional(f, "gradValues", {napi_float32_array}, n, keep);
    return c;
}

struct LogprobsCall {
    Arr z, y, lp, H;
    int64_t N, V;
    float temp;
    maporl_device device;

    maporl_status run() const {
        return RunOn(device,
                     {{z.data, z.bytes, true, false},
                      {y.data, y.bytes, true, false},
                      {lp.data, lp.bytes, false, true},
                      {H.data, H.bytes, false, true}},
                     [&](const std::vector<void *> & d) {
                         if (z.type == napi_uint16_array)  // bfloat16 bit patterns
                             return maporl_logprobs_bf16(device, (const uint16_t *)d[0], (const int32_t *)d[1], N, V,
                                                         temp, (float *)d[2], (float *)d[3]);
                         return maporl_logprobs(device, (const float *)d[0], (const int32_t *)d[1], N, V, temp,
                                                (float *)d[2], (float *)d[3]);
                     });
    }
};

LogprobsCall UnpackLogprobs(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kLogprobs);
    LogprobsCall c;
    const size_t nv = (size_t)RequireDims(f, "N", "V", &c.N, &c.V);
    c.z = Required(f, "logits", {napi_float32_array, napi_uint16_array}, nv, keep);
    c.y = Required(f, "targets", {napi_int32_array}, (size_t)c.N, keep);
    c.temp = (float)RequireNumber(f, "temperature");
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.lp = Required(f, "logp", {napi_float32_array}, (size_t)c.N, keep);
    c.H = Optional(f, "entropy", {napi_float32_array}, (size_t)c.N, keep);
    return c;
}

struct FusedCall {
    Arr z, y, old, adv, mask, ref, gz, lp, H, glp;
    int adv_per_seq;
    int64_t B, T, V;
    float temp;
    maporl_policy_loss_params p;
    maporl_device device;
    std::shared_ptr<maporl_policy_loss_stats> stats = std::make_shared<maporl_policy_loss_stats>();

    maporl_status run() const {
        return RunOn(device,
                     {{z.data, z.bytes, true, false},
                      {y.data, y.bytes, true, false},
                      {old.data, old.bytes, true, false},
                      {adv.data, adv.bytes, true, false},
                      {mask.data, mask.bytes, true, false},
                      {ref.data, ref.bytes, true, false},
                      {gz.data, gz.bytes, false, true},
                      {lp.data, lp.bytes, false, true},
                      {H.data, H.bytes, false, true},
                      {glp.data, glp.bytes, false, true}},
                     [&](const std::vector<void *> & d) {
                         // On CUDA the staged gradient is its own buffer even when the caller asked for in place.
                         if (z.type == napi_uint16_array)  // bfloat16 bit patterns
                             return maporl_fused_policy_loss_bf16(
                                 device, (const uint16_t *)d[0], (const int32_t *)d[1], (const float *)d[2],
                                 (const float *)d[3], adv_per_seq, d[4], MaskType(mask), (const float *)d[5], B, T, V,
                                 temp, p, (float *)d[6], (float *)d[7], (float *)d[8], (float *)d[9], stats.get());
                         return maporl_fused_policy_loss(
                             device, (const float *)d[0], (const int32_t *)d[1], (const float *)d[2],
                             (const float *)d[3], adv_per_seq, d[4], MaskType(mask), (const float *)d[5], B, T, V, temp,
                             p, (float *)d[6], (float *)d[7], (float *)d[8], (float *)d[9], stats.get());
                     });
    }
    Napi::Value result(Napi::Env env) const { return StatsObject(env, *stats); }
};

FusedCall UnpackFused(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kFusedPolicyLoss);
    FusedCall c;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    c.V = RequireInt(f, "V", 0, (int64_t)1 << 40);
    if (c.V > 0 && (int64_t)n > ((int64_t)1 << 40) / c.V)
        throw Napi::RangeError::New(info.Env(), "fusedPolicyLoss: B*T*V: expected at most 2^40 logits");
    const size_t nvv = n * (size_t)c.V;
    c.adv_per_seq = RequireBool(f, "advPerSeq") ? 1 : 0;
    c.z = Required(f, "logits", {napi_float32_array, napi_uint16_array}, nvv, keep);
    c.y = Required(f, "targets", {napi_int32_array}, n, keep);
    c.old = Optional(f, "oldLogp", {napi_float32_array}, n, keep);
    c.adv = Required(f, "advantages", {napi_float32_array}, c.adv_per_seq ? (size_t)c.B : n, keep);
    c.mask = Required(f, "mask", {napi_uint8_array, napi_float32_array}, n, keep);
    c.ref = Optional(f, "refLogp", {napi_float32_array}, n, keep);
    c.temp = (float)RequireNumber(f, "temperature");
    c.p = Params(f.Object("params"));
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.gz = Required(f, "gradLogits", {napi_float32_array}, nvv, keep);
    c.lp = Optional(f, "logp", {napi_float32_array}, n, keep);
    c.H = Optional(f, "entropy", {napi_float32_array}, n, keep);
    c.glp = Optional(f, "gradLogp", {napi_float32_array}, n, keep);
    return c;
}

Napi::Value JsPolicy(const Napi::CallbackInfo & i) { return RunCall(i, "policyLoss", UnpackPolicy); }
Napi::Value JsPolicyAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "policyLoss", UnpackPolicy); }
Napi::Value JsValue(const Napi::CallbackInfo & i) { return RunCall(i, "valueLoss", UnpackValue); }
Napi::Value JsValueAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "valueLoss", UnpackValue); }
Napi::Value JsLogprobs(const Napi::CallbackInfo & i) { return RunCall(i, "logprobs", UnpackLogprobs); }
Napi::Value JsLogprobsAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "logprobs", UnpackLogprobs); }
Napi::Value JsFused(const Napi::CallbackInfo & i) { return RunCall(i, "fusedPolicyLoss", UnpackFused); }
Napi::Value JsFusedAsync(const Napi::CallbackInfo & i) { return QueueCall(i, "fusedPolicyLoss", UnpackFused); }

}  // namespace

void InitPolicyLoss(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kPolicyLoss, JsPolicy, JsPolicyAsync);
    ExportCall(env, exports, kValueLoss, JsValue, JsValueAsync);
    ExportCall(env, exports, kLogprobs, JsLogprobs, JsLogprobsAsync);
    ExportCall(env, exports, kFusedPolicyLoss, JsFused, JsFusedAsync);
}

}  // namespace maporl_js
