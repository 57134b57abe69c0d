// types.ts (bench): what a benchmark entry receives and returns.
export interface BenchContext {
    threads: number;
    /** Repetitions of our kernels (median reported). */
    reps: number;
    /** Repetitions of the Python baselines. */
    pythonReps: number;
    /** Run the PyTorch baselines. */
    python: boolean;
    /** Progress lines (a row measured, a long baseline about to run with its estimate); defaults to none. */
    log?: (line: string) => void;
}

export interface BenchRow {
    kernel: string;
    size: string;
    impl: string;
    /** Median wall time, null when the implementation did not run. */
    medianMs: number | null;
    /** Peak resident-set growth during one call, null when unknown. */
    peakExtraBytes: number | null;
    /** Bytes the kernel must move at minimum (the memory floor's numerator). */
    bytesMoved: number;
    /** The kernel only reads those bytes (a decoding step reads the weights): its floor is over the read bandwidth,
     * not the copy bandwidth (read + write) of the other rows. */
    readOnly?: boolean;
    /** The same-run baseline's median this row is compared with, if any. */
    baselineMs: number | null;
    note?: string;
}
