// rollout_correction.cpp: N-API glue for maporl_rollout_correction. JS (lib/native.ts has the signature):
//   rolloutCorrection({oldLogp, rolloutLogp, mask, B, T, params, device, weights|null, keep|null}) -> stats
// and rolloutCorrectionAsync(same) -> Promise<stats>. `params` is {is, isMode, isThreshold, isThresholdLower,
// batchNormalize, rs: [option, lower, upper, ...]}, all numbers (enums as their C values); lib/rl/rolloutCorrection.ts
// builds it after validation.
#include <napi.h>

#include <memory>

#include "bindings/core/args.h"
#include "bindings/core/async.h"
#include "bindings/core/staging.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kRolloutCorrectionFields[] = {"oldLogp", "rolloutLogp", "mask",    "B",   "T",
                                                     "params",  "device",      "weights", "keep"};
constexpr CallSpec kRolloutCorrection{"rolloutCorrection", kRolloutCorrectionFields, 9, false};

maporl_rollout_correction_params Params(const Fields & o) {
    maporl_rollout_correction_params p = maporl_rollout_correction_default_params();
    p.is = (maporl_rollout_is)(int)RequireNumber(o, "is");
    p.is_mode = (maporl_rollout_is_mode)(int)RequireNumber(o, "isMode");
    p.is_threshold = RequireNumber(o, "isThreshold");
    p.is_threshold_lower = RequireNumber(o, "isThresholdLower");
    p.batch_normalize = (int)RequireNumber(o, "batchNormalize");
    Napi::Value rs = o.Get("rs");
    if (!rs.IsArray()) throw Napi::TypeError::New(o.Env(), o.Where("rs") + ": expected an array");
    Napi::Array a = rs.As<Napi::Array>();
    if (a.Length() % 3 != 0 || a.Length() / 3 > MAPORL_ROLLOUT_RS_MAX)
        throw Napi::RangeError::New(o.Env(), o.Where("rs") + ": expected at most 4 (option, lower, upper) triples");
    p.rs_count = (int)(a.Length() / 3);
    for (uint32_t k = 0; k < a.Length(); ++k) {
        Napi::Value v = a.Get(k);
        if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), o.Where("rs") + ": expected numbers");
        const double x = v.As<Napi::Number>().DoubleValue();
        maporl_rollout_rs_criterion & c = p.rs[k / 3];
        if (k % 3 == 0)
            c.option = (maporl_rollout_rs)(int)x;
        else if (k % 3 == 1)
            c.lower = x;
        else
            c.upper = x;
    }
    return p;
}

Napi::Value Stats(Napi::Env env, const maporl_rollout_correction_stats & s) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("tokens", s.tokens);
    o.Set("sequences", s.sequences);
    o.Set("isMean", s.is_mean);
    o.Set("isMax", s.is_max);
    o.Set("isMin", s.is_min);
    o.Set("isStd", s.is_std);
    o.Set("isEss", s.is_ess);
    o.Set("isFractionHigh", s.is_fraction_high);
    o.Set("isFractionLow", s.is_fraction_low);
    o.Set("isCorrectedFraction", s.is_corrected_fraction);
    o.Set("batchNormFactor", s.batch_norm_factor);
    o.Set("rsMaskedFraction", s.rs_masked_fraction);
    o.Set("rsSeqMaskedFraction", s.rs_seq_masked_fraction);
    o.Set("kl", s.kl);
    o.Set("k3Kl", s.k3_kl);
    o.Set("chi2Token", s.chi2_token);
    o.Set("chi2Seq", s.chi2_seq);
    o.Set("trainingPpl", s.training_ppl);
    o.Set("rolloutPpl", s.rollout_ppl);
    o.Set("logPplDiff", s.log_ppl_diff);
    o.Set("logPplAbsDiff", s.log_ppl_abs_diff);
    return o;
}

struct RcCall {
    const void *old, *roll, *mask;
    size_t fbytes, mask_bytes;
    maporl_mask_type mask_type;
    int64_t B, T;
    maporl_rollout_correction_params p;
    maporl_device device;
    float *w, *keep;
    std::shared_ptr<maporl_rollout_correction_stats> stats = std::make_shared<maporl_rollout_correction_stats>();

    maporl_status run() const {
        return RunOn(device,
                     {{(void *)old, fbytes, true, false},
                      {(void *)roll, fbytes, true, false},
                      {(void *)mask, mask_bytes, true, false},
                      {w, w ? fbytes : 0, false, true},
                      {keep, keep ? fbytes : 0, false, true}},
                     [&](const std::vector<void *> & d) {
                         return maporl_rollout_correction(device, (const float *)d[0], (const float *)d[1], d[2],
                                                          mask_type, B, T, p, (float *)d[3], (float *)d[4],
                                                          stats.get());
                     });
    }
    Napi::Value result(Napi::Env env) const { return Stats(env, *stats); }
};

RcCall Unpack(const Napi::CallbackInfo & info, std::vector<Napi::Value> * keep) {
    const Fields f(info, kRolloutCorrection);
    RcCall c;
    const size_t n = (size_t)RequireDims(f, "B", "T", &c.B, &c.T);
    Napi::TypedArray o = RequireTypedArray(f, "oldLogp", {napi_float32_array}, n);
    Napi::TypedArray r = RequireTypedArray(f, "rolloutLogp", {napi_float32_array}, n);
    Napi::TypedArray m = RequireTypedArray(f, "mask", {napi_uint8_array, napi_float32_array}, n);
    if (keep) *keep = {o, r, m};
    c.old = DataOf(o);
    c.roll = DataOf(r);
    c.mask = DataOf(m);
    c.fbytes = sizeof(float) * n;
    c.mask_bytes = m.ByteLength();
    c.mask_type = m.TypedArrayType() == napi_uint8_array ? MAPORL_MASK_U8 : MAPORL_MASK_F32;
    c.p = Params(f.Object("params"));
    c.device = (maporl_device)RequireInt(f, "device", 0, 1);
    c.w = OptionalF32(f, "weights", n, keep);
    c.keep = OptionalF32(f, "keep", n, keep);
    return c;
}

Napi::Value JsRc(const Napi::CallbackInfo & info) { return RunCall(info, "rolloutCorrection", Unpack); }
Napi::Value JsRcAsync(const Napi::CallbackInfo & info) { return QueueCall(info, "rolloutCorrection", Unpack); }

}  // namespace

void InitRolloutCorrection(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kRolloutCorrection, JsRc, JsRcAsync);
}

}  // namespace maporl_js
