// abort.ts: AbortSignal support for the async twins. The native work cannot be interrupted mid-kernel;
// an abort rejects the promise at once with signal.reason, the kernel finishes in the background (its
// inputs stay referenced until then) and its results are dropped.

/** Throws signal.reason if already aborted; else races `work` against the abort event. */
export async function withSignal<T>(work: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    if (signal === undefined) return work();
    if (!(signal instanceof AbortSignal)) throw new TypeError(`signal: expected an AbortSignal, got ${typeof signal}`);
    signal.throwIfAborted();
    const promise = work();
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
        onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
        return await Promise.race([promise, aborted]);
    } finally {
        signal.removeEventListener("abort", onAbort!);
        promise.catch(() => undefined); // a late failure after an abort is not an unhandled rejection
    }
}

/** Resolves after `ms`, or rejects with signal.reason as soon as the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
        if (signal?.aborted) return reject(signal.reason);
        const t = setTimeout(() => {
            signal?.removeEventListener("abort", stop);
            resolve();
        }, ms);
        const stop = () => {
            clearTimeout(t);
            reject(signal!.reason);
        };
        signal?.addEventListener("abort", stop, { once: true });
    });
}
