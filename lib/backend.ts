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
    /** SIMD level the CPU kernels dispatch to: `"avx512"`, `"avx2"`, `"sse2"`, `"neon"` or `"scalar"`. */
    simd: string;
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
