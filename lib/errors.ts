// errors.ts: the error class of native failures. Wrong argument types are TypeError, wrong lengths or
// ranges RangeError (thrown in TS before any native call); a failure inside the core is a MaporlError whose
// `code` is the C status name. The addon receives this constructor at load, so `instanceof` works.

/** Status names of the C core (`maporl_status_name`). */
export type MaporlErrorCode =
    | "MAPORL_ERR_INVALID_ARG"
    | "MAPORL_ERR_OUT_OF_MEMORY"
    | "MAPORL_ERR_NO_DEVICE"
    | "MAPORL_ERR_CUDA"
    | "MAPORL_ERR_ABORTED"
    | "MAPORL_ERR_INTERNAL"
    | "MAPORL_ERR_UNKNOWN";

/** A failure reported by the native core. `code` is the C status name, e.g. `"MAPORL_ERR_NO_DEVICE"`. */
export class MaporlError extends Error {
    readonly code: MaporlErrorCode;

    constructor(message: string, code: MaporlErrorCode) {
        super(message);
        this.name = "MaporlError";
        this.code = code;
    }
}
