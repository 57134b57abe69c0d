"""Entry point of the Python baselines: reads one JSON spec on stdin
{"kernel": "gae", "threads": 2, "reps": 5, "warmup": 1, "device": "cpu" | "cuda", ...sizes}, runs that kernel's baseline with
torch.set_num_threads(threads), and prints one JSON line: {"ok": true, "torch": ..., "median_ms": ...,
"samples_ms": [...], "peak_extra_bytes": ...} or {"ok": false, "error": ...}."""
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    spec = json.loads(sys.stdin.read())
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"ok": False, "error": f"PyTorch is not importable: {e}"}))
        return 0
    import common

    torch.set_num_threads(int(spec.get("threads", 1)))
    kernel = importlib.import_module(spec["kernel"])
    fn = kernel.run(spec)
    if spec.get("device", "cpu") == "cuda":
        inner = fn

        def fn():  # time the work, not the launch
            inner()
            torch.cuda.synchronize()
    peak = common.peak_extra_bytes(fn)
    median, samples = common.median_ms(fn, int(spec.get("reps", 5)), int(spec.get("warmup", 1)))
    print(json.dumps({"ok": True, "torch": torch.__version__, "threads": torch.get_num_threads(), "blas": common.blas_library(),
                      "median_ms": median, "samples_ms": samples, "peak_extra_bytes": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
