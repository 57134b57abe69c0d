// addon.cpp: module init only. Each kernel family registers its functions from bindings/<stem>.cpp.
#include <napi.h>

#include "bindings/core/args.h"

namespace maporl_js {
void InitBackend(Napi::Env env, Napi::Object exports);
void InitGae(Napi::Env env, Napi::Object exports);
void InitGroupAdvantages(Napi::Env env, Napi::Object exports);
void InitPolicyLoss(Napi::Env env, Napi::Object exports);
void InitRolloutCorrection(Napi::Env env, Napi::Object exports);
void InitSampling(Napi::Env env, Napi::Object exports);
void InitGpt(Napi::Env env, Napi::Object exports);
void InitLora(Napi::Env env, Napi::Object exports);
void InitOutputPool(Napi::Env env, Napi::Object exports);
}  // namespace maporl_js

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    env.SetInstanceData(new maporl_js::AddonData());
    maporl_js::InitBackend(env, exports);
    maporl_js::InitGae(env, exports);
    maporl_js::InitGroupAdvantages(env, exports);
    maporl_js::InitPolicyLoss(env, exports);
    maporl_js::InitRolloutCorrection(env, exports);
    maporl_js::InitSampling(env, exports);
    maporl_js::InitGpt(env, exports);
    maporl_js::InitLora(env, exports);
    maporl_js::InitOutputPool(env, exports);
    return exports;
}

NODE_API_MODULE(maporl, Init)
