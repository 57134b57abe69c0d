// lora.cpp: N-API glue for LoRA adapters on a Llama-family model (maporl_lora_* in maporl.h). JS:
//   loraAdd(handle, {rank, alpha, targets (MAPORL_LORA_* bits), dropout, useRslora, seed}) -> id
//   loraRemove(handle, id); loraSelect(handle, id | -1); loraSelected(handle) -> id | -1
//   loraInfo(handle, id) -> {rank, alpha, targets, dropout, useRslora, count, seed}; loraMerge(handle, id)
//   loraCacheRows(handle, ids: number[]) (after gptCacheReset); gptSetTraining(handle, boolean)
//   gptSetScoreKeep(handle, bytes) (the training score's logits budget, maporl_gpt_set_score_keep)
#include <napi.h>

#include <vector>

#include "bindings/core/args.h"
#include "bindings/model/handle.h"

namespace maporl_js {
namespace {

// Each call's fields in the order the addon receives them (CallSpec: lib/native.ts passes one object).
constexpr const char * kLoraAddFields[] = {"rank", "alpha", "targets", "dropout", "useRslora", "seed"};
constexpr CallSpec kLoraAdd{"loraAdd", kLoraAddFields, 6, true};

void Check(const Napi::CallbackInfo & info, maporl_status st, const char * where) {
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, where);
}

int64_t Id(const Napi::CallbackInfo & info, size_t i) { return RequireInt(info, i, "id", -1, (int64_t)1 << 40); }

Napi::Value Add(const Napi::CallbackInfo & info) {
    Handle * h = Get(info);
    const Fields o(info, kLoraAdd);
    maporl_lora_config c = maporl_lora_default_config();
    auto num = [&](const char * k, double fallback) {
        Napi::Value v = o.Get(k);
        if (v.IsUndefined()) return fallback;
        if (!v.IsNumber()) throw Napi::TypeError::New(info.Env(), o.Where(k) + ": expected a number");
        return v.As<Napi::Number>().DoubleValue();
    };
    c.rank = (int64_t)num("rank", 8);
    c.alpha = num("alpha", 8);
    c.target_modules = (uint32_t)num("targets", MAPORL_LORA_ALL);
    c.dropout = num("dropout", 0);
    Napi::Value rs = o.Get("useRslora");
    c.use_rslora = rs.IsBoolean() && rs.As<Napi::Boolean>().Value() ? 1 : 0;
    const double seed = RequireNumber(o, "seed");
    int64_t id = -1;
    Check(info, maporl_lora_add(h->gpt, &c, (uint64_t)seed, &id), "loraAdd");
    return Napi::Number::New(info.Env(), (double)id);
}

Napi::Value Remove(const Napi::CallbackInfo & info) {
    Check(info, maporl_lora_remove(Get(info)->gpt, Id(info, 1)), "loraRemove");
    return info.Env().Undefined();
}

Napi::Value Select(const Napi::CallbackInfo & info) {
    Check(info, maporl_lora_select(Get(info)->gpt, Id(info, 1)), "loraSelect");
    return info.Env().Undefined();
}

Napi::Value Selected(const Napi::CallbackInfo & info) {
    int64_t id = -1;
    Check(info, maporl_lora_selected(Get(info, 0, true)->gpt, &id), "loraSelected");
    return Napi::Number::New(info.Env(), (double)id);
}

Napi::Value Info(const Napi::CallbackInfo & info) {
    maporl_lora_config c;
    int64_t n = 0;
    uint64_t seed = 0;
    Check(info, maporl_lora_info(Get(info, 0, true)->gpt, Id(info, 1), &c, &n, &seed), "loraInfo");
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("rank", (double)c.rank);
    o.Set("alpha", c.alpha);
    o.Set("targets", (double)c.target_modules);
    o.Set("dropout", c.dropout);
    o.Set("useRslora", Napi::Boolean::New(info.Env(), c.use_rslora != 0));
    o.Set("count", (double)n);
    o.Set("seed", (double)seed);  // (seeds come from JS as safe integers)
    return o;
}

Napi::Value Merge(const Napi::CallbackInfo & info) {
    Check(info, maporl_lora_merge(Get(info)->gpt, Id(info, 1)), "loraMerge");
    return info.Env().Undefined();
}

Napi::Value CacheRows(const Napi::CallbackInfo & info) {
    Handle * h = Get(info);
    if (info.Length() < 2 || !info[1].IsArray())
        throw Napi::TypeError::New(info.Env(), "loraCacheRows: ids: expected an array of adapter ids");
    Napi::Array a = info[1].As<Napi::Array>();
    std::vector<int64_t> ids(a.Length());
    for (uint32_t i = 0; i < a.Length(); ++i) {
        Napi::Value v = a.Get(i);
        if (!v.IsNumber()) throw Napi::TypeError::New(info.Env(), "loraCacheRows: ids: expected numbers");
        ids[i] = (int64_t)v.As<Napi::Number>().DoubleValue();
    }
    Check(info, maporl_lora_cache_rows(h->gpt, ids.data(), (int64_t)ids.size()), "loraCacheRows");
    return info.Env().Undefined();
}

Napi::Value SetTraining(const Napi::CallbackInfo & info) {
    Check(info, maporl_gpt_set_training(Get(info)->gpt, RequireBool(info, 1, "training") ? 1 : 0), "gptSetTraining");
    return info.Env().Undefined();
}

Napi::Value SetScoreKeep(const Napi::CallbackInfo & info) {
    Check(info, maporl_gpt_set_score_keep(Get(info)->gpt, RequireInt(info, 1, "bytes", 0, (int64_t)1 << 40)),
          "gptSetScoreKeep");
    return info.Env().Undefined();
}

}  // namespace

void InitLora(Napi::Env env, Napi::Object exports) {
    ExportCall(env, exports, kLoraAdd, Add);
    exports.Set("loraRemove", Napi::Function::New(env, Remove, "loraRemove"));
    exports.Set("loraSelect", Napi::Function::New(env, Select, "loraSelect"));
    exports.Set("loraSelected", Napi::Function::New(env, Selected, "loraSelected"));
    exports.Set("loraInfo", Napi::Function::New(env, Info, "loraInfo"));
    exports.Set("loraMerge", Napi::Function::New(env, Merge, "loraMerge"));
    exports.Set("loraCacheRows", Napi::Function::New(env, CacheRows, "loraCacheRows"));
    exports.Set("gptSetTraining", Napi::Function::New(env, SetTraining, "gptSetTraining"));
    exports.Set("gptSetScoreKeep", Napi::Function::New(env, SetScoreKeep, "gptSetScoreKeep"));
}

}  // namespace maporl_js
