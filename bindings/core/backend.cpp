// backend.cpp: N-API glue for build info, threads, devices, the copy-bandwidth and peak-FLOP probes and the
// huge-page advice for large outputs (lib/alloc.ts).
#include <napi.h>

#include <cstdint>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "bindings/core/args.h"

namespace maporl_js {
namespace {

Napi::Value JsBackendInfo(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("version", maporl_version());
    o.Set("threads", maporl_get_threads());
    o.Set("simd", maporl_simd());
    o.Set("matmulPrecision", maporl_get_matmul_precision() == MAPORL_MATMUL_HIGH ? "high" : "highest");
    Napi::Object cuda = Napi::Object::New(env);
    cuda.Set("compiled", maporl_cuda_compiled() != 0);
    Napi::Array devices = Napi::Array::New(env);
    int count = 0;
    if (maporl_cuda_device_count(&count) != MAPORL_OK) count = 0;
    for (int i = 0; i < count; ++i) {
        maporl_device_info d;
        maporl_status st = maporl_cuda_device_info(i, &d);
        if (st != MAPORL_OK) ThrowStatus(env, st, "backend");
        Napi::Object dev = Napi::Object::New(env);
        dev.Set("index", i);
        dev.Set("name", d.name);
        dev.Set("totalMemory", (double)d.total_memory);
        dev.Set("computeCapability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor));
        dev.Set("multiprocessors", d.multiprocessors);
        devices.Set((uint32_t)i, dev);
    }
    cuda.Set("devices", devices);
    o.Set("cuda", cuda);
    return o;
}

Napi::Value JsSetThreads(const Napi::CallbackInfo & info) {
    int n = (int)RequireInt(info, 0, "threads", 0, 1024);
    maporl_status st = maporl_set_threads(n);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "setThreads");
    return Napi::Number::New(info.Env(), maporl_get_threads());
}

Napi::Value JsSetSimd(const Napi::CallbackInfo & info) {
    if (info.Length() < 1 || !info[0].IsString())
        throw Napi::TypeError::New(info.Env(), "setSimd: level: expected a string");
    std::string level = info[0].As<Napi::String>().Utf8Value();
    maporl_status st = maporl_set_simd(level.c_str());
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "setSimd");
    return Napi::String::New(info.Env(), maporl_simd());
}

Napi::Value JsSetMatmulPrecision(const Napi::CallbackInfo & info) {
    if (info.Length() < 1 || !info[0].IsString())
        throw Napi::TypeError::New(info.Env(), "setMatmulPrecision: precision: expected a string");
    const std::string p = info[0].As<Napi::String>().Utf8Value();
    if (p != "highest" && p != "high")
        throw Napi::RangeError::New(info.Env(),
                                    "setMatmulPrecision: precision: expected 'highest' or 'high', got \"" + p + "\"");
    maporl_status st = maporl_set_matmul_precision(p == "high" ? MAPORL_MATMUL_HIGH : MAPORL_MATMUL_HIGHEST);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "setMatmulPrecision");
    return info.Env().Undefined();
}

// measureCopyBandwidth / measureReadBandwidth(bytes, reps) -> bytes per second (the probe's median).
Napi::Value ProbeBandwidth(const Napi::CallbackInfo & info, maporl_status (*probe)(size_t, int, double *),
                           const char * name) {
    int64_t bytes = RequireInt(info, 0, "bytes", 4096, (int64_t)1 << 34);
    int reps = (int)RequireInt(info, 1, "reps", 1, 1000);
    double rate = 0;
    maporl_status st = probe((size_t)bytes, reps, &rate);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, name);
    return Napi::Number::New(info.Env(), rate);
}
Napi::Value JsCopyBandwidth(const Napi::CallbackInfo & info) {
    return ProbeBandwidth(info, maporl_measure_copy_bandwidth, "measureCopyBandwidth");
}
Napi::Value JsReadBandwidth(const Napi::CallbackInfo & info) {
    return ProbeBandwidth(info, maporl_measure_read_bandwidth, "measureReadBandwidth");
}

Napi::Value JsPeakFlops(const Napi::CallbackInfo & info) {
    int reps = (int)RequireInt(info, 0, "reps", 1, 1000);
    double rate = 0;
    maporl_status st = maporl_measure_peak_flops(reps, &rate);
    if (st != MAPORL_OK) ThrowStatus(info.Env(), st, "measurePeakFlops");
    return Napi::Number::New(info.Env(), rate);
}

// adviseHugePages(typedArray) -> whether the kernel took the advice: MADV_HUGEPAGE on the 2 MiB-aligned pages
// inside the array, so that its first writes fault in 2 MiB pages where transparent huge pages are enabled
// ('madvise' or 'always'). Only ever given fresh outputs of at least 32 MiB, which glibc maps on their own (its
// mmap threshold tops out at 32 MiB), so no other allocation shares the advised pages. false elsewhere.
Napi::Value JsAdviseHugePages(const Napi::CallbackInfo & info) {
    if (info.Length() < 1 || !info[0].IsTypedArray())
        throw Napi::TypeError::New(info.Env(), "adviseHugePages: array: expected a typed array");
    Napi::TypedArray a = info[0].As<Napi::TypedArray>();
    bool ok = false;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20, p = (uintptr_t)DataOf(a);
    const uintptr_t begin = (p + huge - 1) & ~(huge - 1), end = (p + a.ByteLength()) & ~(huge - 1);
    ok = p != 0 && end > begin && madvise((void *)begin, end - begin, MADV_HUGEPAGE) == 0;
#endif
    return Napi::Boolean::New(info.Env(), ok);
}

Napi::Value JsSetErrorClass(const Napi::CallbackInfo & info) {
    if (info.Length() < 1 || !info[0].IsFunction())
        throw Napi::TypeError::New(info.Env(), "setErrorClass: expected a constructor");
    AddonData * data = info.Env().GetInstanceData<AddonData>();
    data->error_ctor = Napi::Persistent(info[0].As<Napi::Function>());
    return info.Env().Undefined();
}

}  // namespace

void InitBackend(Napi::Env env, Napi::Object exports) {
    exports.Set("backendInfo", Napi::Function::New(env, JsBackendInfo, "backendInfo"));
    exports.Set("setThreads", Napi::Function::New(env, JsSetThreads, "setThreads"));
    exports.Set("setSimd", Napi::Function::New(env, JsSetSimd, "setSimd"));
    exports.Set("setMatmulPrecision", Napi::Function::New(env, JsSetMatmulPrecision, "setMatmulPrecision"));
    exports.Set("measureCopyBandwidth", Napi::Function::New(env, JsCopyBandwidth, "measureCopyBandwidth"));
    exports.Set("measureReadBandwidth", Napi::Function::New(env, JsReadBandwidth, "measureReadBandwidth"));
    exports.Set("measurePeakFlops", Napi::Function::New(env, JsPeakFlops, "measurePeakFlops"));
    exports.Set("adviseHugePages", Napi::Function::New(env, JsAdviseHugePages, "adviseHugePages"));
    exports.Set("setErrorClass", Napi::Function::New(env, JsSetErrorClass, "setErrorClass"));
}

}  // namespace maporl_js
