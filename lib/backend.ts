// backend.ts: what the native core is (version, threads, SIMD, CUDA devices) and the device choice that
// every kernel's `device` option goes through.
import { native } from "./native.js";
import { requireChoice, requireInteger } from "./validate.js";

/** A CUDA device as the core sees it. */
export interface DeviceInfo {
    index: number;
    /** e.g. `"NVIDIA H200"` */
    name: string;
    /** Bytes of device memory. */
    totalMemory: number;
    /** e.g. `"9.0"` */
    computeCapability: string;
    multiprocessors: number;
}

export interface BackendInfo {
    /** Version of the native core, e.g. `"0.1.0"`. */
    version: string;
    /** Threads the CPU kernels use, the calling thread included. */
    threads: number;
    /** SIMD level the CPU kernels use: `"avx512"`, `"avx2"` or `"scalar"` (see {@link setSimd}). */
    simd: string;
    /** Float32 matmul precision on CUDA (see {@link setMatmulPrecision}). */
    matmulPrecision: MatmulPrecision;
    cuda: {
        /** Whether this binary contains the CUDA kernels (`MAPORL_CUDA=1` build). */
        compiled: boolean;
        /** Usable devices; empty without a GPU or driver. */
        devices: DeviceInfo[];
    };
}

/** `'auto'` picks CUDA only when the work repays the host-device copies (see each kernel). */
export type Device = "cpu" | "cuda" | "auto";
export const DEVICES: readonly Device[] = ["cpu", "cuda", "auto"];

let cachedDeviceCount: number | undefined;

/** Reports the native backend. */
export function backend(): BackendInfo {
    const info = native.backendInfo();
    cachedDeviceCount = info.cuda.devices.length;
    return info;
}

/**
 * Sets the number of threads of the CPU kernels (the calling thread included). `0` means one per
 * hardware thread, the default. Results never depend on it. Returns the count now in use.
 */
export function setThreads(threads: number): number {
    requireInteger("setThreads", "threads", threads, 0, 1024);
    return native.setThreads(threads);
}

/** SIMD levels of the CPU kernels, lowest first. */
export type SimdLevel = "scalar" | "avx2" | "avx512";
const SIMD_LEVELS = ["scalar", "avx2", "avx512", "best"] as const;

/**
 * Lowers the SIMD level of the CPU kernels (or restores it with `'best'`), e.g. to test every code path or to
 * reproduce another machine's rounding. Every level agrees with the others to float rounding. A level this
 * CPU lacks is a MaporlError (`MAPORL_ERR_INVALID_ARG`). The `MAPORL_SIMD` environment variable sets the
 * starting level. Returns the level now in use.
 */
export function setSimd(level: SimdLevel | "best"): SimdLevel {
    requireChoice("setSimd", "level", level, SIMD_LEVELS, "best");
    return native.setSimd(level) as SimdLevel;
}

/** PyTorch's names (torch.set_float32_matmul_precision): 'highest' = float32, 'high' = TF32 tensor cores. */
export type MatmulPrecision = "highest" | "high";
const MATMUL_PRECISIONS: readonly MatmulPrecision[] = ["highest", "high"];

/**
 * Sets the precision of the embedded GPT's float32 matmuls on CUDA, process-wide, as PyTorch's
 * `torch.set_float32_matmul_precision` does: `'highest'` (the default) computes in float32, within float rounding
 * of the CPU; `'high'` runs them on TF32 tensor cores (sm_80+: operands rounded to 10-bit mantissas, sums in
 * float32; ~1e-3 relative per product). The CPU kernels always compute in float32. Returns the precision now in use.
 */
export function setMatmulPrecision(precision: MatmulPrecision): MatmulPrecision {
    const p = requireChoice("setMatmulPrecision", "precision", precision, MATMUL_PRECISIONS, "highest");
    if (precision === undefined)
        throw new TypeError('setMatmulPrecision: precision: expected one of "highest", "high", got undefined');
    native.setMatmulPrecision(p);
    return native.backendInfo().matmulPrecision;
}

function cudaDeviceCount(): number {
    if (cachedDeviceCount === undefined) cachedDeviceCount = native.backendInfo().cuda.devices.length;
    return cachedDeviceCount;
}

/**
 * Resolves a `device` option to the native device number. `'auto'` takes CUDA when a device exists and
 * `elements >= autoThreshold`; `'cuda'` without a device is left to the core, which answers
 * MAPORL_ERR_NO_DEVICE.
 */
export function resolveDevice(fn: string, device: unknown, elements: number, autoThreshold: number): "cpu" | "cuda" {
    const d = requireChoice(fn, "device", device, DEVICES, "auto");
    if (d !== "auto") return d;
    return cudaDeviceCount() > 0 && elements >= autoThreshold ? "cuda" : "cpu";
}
