"""Shared helpers of the Python baselines: peak-memory probe and timing, the same method as the Node side
(lib/bench/measure.ts): the median of wall-clock repetitions after a warm-up, and the peak resident-set growth
read from /proc/self/status after resetting VmHWM through /proc/self/clear_refs."""
import statistics
import time


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_extra_bytes(fn):
    """Runs fn once and returns the growth of the resident set's high-water mark, in bytes (None if unknown)."""
    if not reset_peak():
        fn()
        return None
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    if before is None or peak is None:
        return None
    return max(0, peak - before) * 1024


def median_ms(fn, reps, warmup=1):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), samples


def token_batch(spec, arrays):
    """`arrays` uniform [B, T] tensors (seeded) and an all-ones mask, on spec["device"] (default cpu)."""
    import torch

    B, T = spec["B"], spec["T"]
    device = spec.get("device", "cpu")
    g = torch.Generator().manual_seed(1)
    xs = [torch.rand(B, T, generator=g).to(device) for _ in range(arrays)]
    return xs, torch.ones(B, T, device=device)


def blas_library():
    """The BLAS shared library this process loaded (Debian's torch calls whichever libblas.so.3 the alternatives
    system points at: the netlib reference BLAS is ~65x slower than OpenBLAS at a 512 x 576 x 49152 GEMM)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "blas" in path.lower() and ".so" in path:
                    return path
    except OSError:
        pass
    return None
