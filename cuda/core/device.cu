// device.cu: the device layer of the CUDA build: device count and properties, device memory, copies.
// A machine without a GPU or driver reports 0 devices (cudart is linked statically, so the addon loads).
#include <cstring>

#include "cuda/core/common.cuh"

namespace maporl {

static int device_count_or_zero() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // no driver, no device, insufficient driver: all mean "none usable"
        return 0;
    }
    return n;
}

maporl_status cuda_require_device(const char * what) {
    if (device_count_or_zero() > 0) return MAPORL_OK;
    return set_error(MAPORL_ERR_NO_DEVICE, "%s: no CUDA device is visible (no GPU, or no driver)", what);
}

}  // namespace maporl

extern "C" {

int maporl_cuda_compiled(void) { return 1; }

maporl_status maporl_cuda_device_count(int * count_out) {
    return maporl::guarded([&] {
        if (count_out == nullptr)
            maporl::throw_error(MAPORL_ERR_INVALID_ARG, "count_out: expected a non-NULL pointer, got NULL");
        *count_out = maporl::device_count_or_zero();
        return MAPORL_OK;
    });
}

maporl_status maporl_cuda_device_info(int index, maporl_device_info * info_out) {
    return maporl::guarded([&]() -> maporl_status {
        if (info_out == nullptr)
            maporl::throw_error(MAPORL_ERR_INVALID_ARG, "info_out: expected a non-NULL pointer, got NULL");
        const int n = maporl::device_count_or_zero();
        if (index < 0 || index >= n)
            return maporl::set_error(n == 0 ? MAPORL_ERR_NO_DEVICE : MAPORL_ERR_INVALID_ARG,
                                     "index: expected a device index in [0, %d), got %d", n, index);
        cudaDeviceProp prop;
        MAPORL_CUDA_CALL(cudaGetDeviceProperties(&prop, index));
        std::memset(info_out, 0, sizeof *info_out);
        std::strncpy(info_out->name, prop.name, sizeof info_out->name - 1);
        info_out->total_memory = (int64_t)prop.totalGlobalMem;
        info_out->compute_major = prop.major;
        info_out->compute_minor = prop.minor;
        info_out->multiprocessors = prop.multiProcessorCount;
        return MAPORL_OK;
    });
}

maporl_status maporl_device_malloc(size_t bytes, void ** ptr_out) {
    return maporl::guarded([&]() -> maporl_status {
        if (ptr_out == nullptr)
            maporl::throw_error(MAPORL_ERR_INVALID_ARG, "ptr_out: expected a non-NULL pointer, got NULL");
        *ptr_out = nullptr;
        MAPORL_RETURN_IF_ERROR(maporl::cuda_require_device("device_malloc"));
        cudaError_t e = cudaMalloc(ptr_out, bytes == 0 ? 1 : bytes);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            return maporl::set_error(MAPORL_ERR_OUT_OF_MEMORY,
                                     "device_malloc: out of device memory asking for %zu bytes", bytes);
        }
        MAPORL_CUDA_CALL(e);
        return MAPORL_OK;
    });
}

maporl_status maporl_device_free(void * ptr) {
    return maporl::guarded([&]() -> maporl_status {
        if (ptr == nullptr) return MAPORL_OK;
        MAPORL_CUDA_CALL(cudaFree(ptr));
        return MAPORL_OK;
    });
}

maporl_status maporl_memcpy_to_device(void * dst, const void * src, size_t bytes) {
    return maporl::guarded([&]() -> maporl_status {
        if (bytes == 0) return MAPORL_OK;
        MAPORL_RETURN_IF_ERROR(maporl::cuda_require_device("memcpy_to_device"));
        MAPORL_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
        return MAPORL_OK;
    });
}

maporl_status maporl_memcpy_to_host(void * dst, const void * src, size_t bytes) {
    return maporl::guarded([&]() -> maporl_status {
        if (bytes == 0) return MAPORL_OK;
        MAPORL_RETURN_IF_ERROR(maporl::cuda_require_device("memcpy_to_host"));
        MAPORL_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
        return MAPORL_OK;
    });
}

}  // extern "C"
