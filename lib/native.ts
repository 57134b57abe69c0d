// native.ts: loads the addon (bindings/loader.cjs) and declares its raw interface. Internal: the public API
// validates every argument before calling in here.
import { createRequire } from "node:module";

import { MaporlError } from "./errors.js";

/** Raw mask arrays accepted by the kernels. */
export type MaskArray = Uint8Array | Float32Array;

export interface NativeDeviceInfo {
    index: number;
    name: string;
    totalMemory: number;
    computeCapability: string;
    multiprocessors: number;
}

export interface NativeBackendInfo {
    version: string;
    threads: number;
    simd: string;
    cuda: { compiled: boolean; devices: NativeDeviceInfo[] };
}

/** The addon's functions (bindings/*.cpp). Device: 0 = CPU, 1 = CUDA. */
export interface NativeBinding {
    backendInfo(): NativeBackendInfo;
    setThreads(n: number): number;
    setSimd(level: string): string;
    measureCopyBandwidth(bytes: number, reps: number): number;
    setErrorClass(ctor: typeof MaporlError): void;
    gae(rewards: Float32Array, values: Float32Array, mask: MaskArray, B: number, T: number, gamma: number,
        lambda: number, whiten: boolean, device: 0 | 1, advantages: Float32Array, returns: Float32Array): void;
    groupAdvantages(scores: Float32Array, groups: Int32Array, weights: Float32Array | null, N: number,
        baseline: 0 | 1 | 2 | 3, scaleByStd: boolean, stdUnbiased: boolean, eps: number, singletonZero: boolean,
        nanExclude: boolean, whiten: boolean, device: 0 | 1, out: Float32Array): void;
    groupAdvantagesAsync(scores: Float32Array, groups: Int32Array, weights: Float32Array | null, N: number,
        baseline: 0 | 1 | 2 | 3, scaleByStd: boolean, stdUnbiased: boolean, eps: number, singletonZero: boolean,
        nanExclude: boolean, whiten: boolean, device: 0 | 1, out: Float32Array): Promise<void>;
    broadcastRows(values: Float32Array, mask: MaskArray, N: number, T: number, device: 0 | 1, out: Float32Array): void;
    reinforceReturns(rewards: Float32Array, mask: MaskArray, B: number, T: number, gamma: number, whiten: boolean,
        device: 0 | 1, returns: Float32Array, advantages: Float32Array): void;
    reinforceReturnsAsync(rewards: Float32Array, mask: MaskArray, B: number, T: number, gamma: number, whiten: boolean,
        device: 0 | 1, returns: Float32Array, advantages: Float32Array): Promise<void>;
    gaeAsync(rewards: Float32Array, values: Float32Array, mask: MaskArray, B: number, T: number, gamma: number,
        lambda: number, whiten: boolean, device: 0 | 1, advantages: Float32Array,
        returns: Float32Array): Promise<void>;
}

const require = createRequire(import.meta.url);

function load(): NativeBinding {
    try {
        return require("../bindings/loader.cjs") as NativeBinding;
    } catch (e) {
        const reason = e instanceof Error ? e.message : String(e);
        throw new Error(
            `maporl: the native addon could not be loaded (${reason}). ` +
            "Build it with `npm rebuild maporl` (CPU) or `MAPORL_CUDA=1 npm rebuild maporl` (CUDA).");
    }
}

export const native: NativeBinding = load();
native.setErrorClass(MaporlError);
