// index.ts: the public API of maporl.
export { MaporlError, type MaporlErrorCode } from "./errors.js";
export { backend, setSimd, setThreads, type BackendInfo, type DeviceInfo, type Device, type SimdLevel } from "./backend.js";
export { gae, gaeAsync, type GaeBatch, type GaeOptions, type GaeAsyncOptions, type GaeResult } from "./rl/gae.js";
