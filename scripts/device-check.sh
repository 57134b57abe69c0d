#!/usr/bin/env bash
# device-check.sh: the one script to run on a GPU machine (CMake, nvcc, python3 with PyTorch; no Node), from a clean
# checkout, in under 8 minutes on an H200. It builds the core, the C++ tests and bench/device/bench_device with CUDA
# through CMake, runs every test binary (each compares the CUDA kernels with the CPU ones where a device is visible)
# under a timeout, runs compute-sanitizer (memcheck, racecheck, synccheck) on the model, sampling and loss tests,
# measures (bench_device: bandwidth, the RL kernels, GEMMs, decode, a training step, each against the device's limits)
# and times the PyTorch equivalents. Without a visible device (CI) it still builds, runs the tests (the emulation
# tests; the CUDA ones say they were left out), runs bench_device's emulated model path, and says no device is
# visible. The last line is `RESULT: PASS` or `RESULT: FAIL (reasons)`; the exit status follows it.
#   usage: bash scripts/device-check.sh [build-dir]            (default build-device)
#          bash scripts/device-check.sh --list-tests DIR       (the test binaries a run would take from DIR)
#   env:   OUT (the log device-check.log and the figures device-check.json go there), CUDA_ARCHS (default: the visible
#          device's compute capability, e.g. 90-real; without one 80-real;90-real;90-virtual), TEST_TIMEOUT (s a
#          binary, 300), SANITIZE_TIMEOUT (s a sanitizer run, 150), BUDGET (s for the whole run, 450), MAPORL_PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."

# The test binaries of a build directory: executable files named test_<name> with no dot in the name (test_x.json,
# CMake's own files are not tests). The name is matched, never the directory's path (which may hold dots).
list_tests() {
    local f name
    for f in "$1"/test_*; do
        name=$(basename "$f")
        [ -f "$f" ] && [ -x "$f" ] || continue
        case "$name" in *.*) continue ;; esac
        echo "$f"
    done
}
if [ "${1:-}" = "--list-tests" ]; then
    list_tests "${2:?usage: device-check.sh --list-tests DIR}"
    exit 0
fi

fails=()
fig() { [ -n "${figures:-}" ] && echo "$1" >> "$figures"; }  # one JSON object a line
devices=0
# Runs every test binary of build dir $1 under a timeout ($devices > 0: the CUDA comparisons with --bench), adding
# to fails; a binary without a summary line (a crash, a timeout) fails, and so does a directory with no test binary.
run_tests() {
    local build=$1 t name out rc p f why
    local passed=0 failed=0 ran=0
    summary() {  # $1 = output: echoes "passed failed" of its summary line, or nothing
        echo "$1" | grep -E '^# .*: [0-9]+ passed, [0-9]+ failed' | tail -n 1 | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2/'
}
while read -r t; do
    [ -n "$t" ] || continue
    name=$(basename "$t")
    args=()
    case "$name" in
        test_gae|test_group_advantages|test_policy_loss|test_sampling|test_gpt_cuda|test_matmul_cuda|test_llama_cuda|test_w8a8_cuda) [ "$devices" -gt 0 ] && args=(--bench) ;;
    esac
    out=$(timeout -k 5 "${TEST_TIMEOUT:-300}" "$t" "${args[@]}" 2>&1)
    rc=$?
    echo "$out"
    ran=$((ran + 1))
    read -r p f < <(summary "$out"; echo)
    if [ -z "${p:-}" ]; then
        failed=$((failed + 1))
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after ${TEST_TIMEOUT:-300} s" || why="exit $rc, no summary"
        echo "$name: $why"
        fails+=("$name: $why")
        continue
    fi
    passed=$((passed + p)) failed=$((failed + f))
    [ "$f" -eq 0 ] && [ $rc -eq 0 ] || fails+=("$name: $f failed, exit $rc")
done < <(list_tests "$build")
echo "C++ tests: $ran binaries, $passed passed, $failed failed"
fig "{\"name\": \"tests\", \"binaries\": $ran, \"passed\": $passed, \"failed\": $failed}"
[ "$ran" -gt 0 ] || fails+=("no test binary ran in $build")

}

verdict() {  # the last line, and the exit status
    if [ ${#fails[@]} -eq 0 ]; then
        echo "RESULT: PASS"
        return 0
    fi
    reasons=$(printf '%s; ' "${fails[@]}")
    echo "RESULT: FAIL (${reasons%; })"
    return 1
}

# --run-tests DIR: the test stage alone over an existing build (and the check of this script's own selection).
if [ "${1:-}" = "--run-tests" ]; then
    run_tests "${2:?usage: device-check.sh --run-tests DIR}"
    verdict
    exit $?
fi

main() {
    build=${1:-build-device}
    t0=$(date +%s)
    budget=${BUDGET:-450}
    left() { echo $((budget - ($(date +%s) - t0))); }
    export PATH="$PATH:/usr/local/cuda/bin"
    figures=$(mktemp)
    trap 'rm -f "$figures"' EXIT

    # ---- the device
    cc=""
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
        cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
    fi
    if [ "$devices" -eq 0 ]; then
        echo "device-check: no device is visible: building, running the tests (the emulation; the CUDA comparisons are left out) and the emulated bench"
    fi
    if [ -n "${CUDA_ARCHS:-}" ]; then archs=$CUDA_ARCHS
    elif [ -n "$cc" ]; then archs="${cc}-real"
    else archs="80-real;90-real;90-virtual"; fi
    cuda=ON
    if ! command -v nvcc >/dev/null 2>&1; then
        echo "device-check: nvcc not found: building the CPU core only"
        cuda=OFF
    fi
    echo "device-check: build $build, CUDA $cuda, architectures $archs, $devices device(s)"

    # ---- build
    gen=()
    command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    tb=$(date +%s)
    if ! cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMAPORL_CUDA=$cuda "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null ||
       ! cmake --build "$build" --parallel; then
        echo "RESULT: FAIL (build)"
        exit 1
    fi
    echo "build: $(( $(date +%s) - tb )) s"
    fig "{\"name\": \"build\", \"seconds\": $(( $(date +%s) - tb )), \"archs\": \"$archs\", \"cuda\": \"$cuda\"}"

    # ---- the tests
    run_tests "$build"

    # ---- compute-sanitizer on the model, sampling and loss tests (no --bench)
    if [ "$devices" -gt 0 ]; then
        if command -v compute-sanitizer >/dev/null 2>&1; then
            for tool in memcheck racecheck synccheck; do
                for name in test_llama_cuda test_w8a8_cuda test_sampling test_policy_loss; do
                    [ -x "$build/$name" ] || { fails+=("$name: not built"); continue; }
                    lim=$(( $(left) - 150 )); [ "$lim" -gt "${SANITIZE_TIMEOUT:-150}" ] && lim=${SANITIZE_TIMEOUT:-150}
                    if [ "$lim" -lt 20 ]; then echo "compute-sanitizer $tool $name: not run (the time budget is spent)"; fails+=("sanitizer $tool $name: no time left"); continue; fi
                    ts=$(date +%s)
                    out=$(timeout -k 5 "$lim" compute-sanitizer --tool "$tool" --error-exitcode 99 "$build/$name" 2>&1)
                    rc=$?
                    echo "$out" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|========= (Invalid|Race|Barrier|Error)|NOT OK|^# ' | head -n 20
                    echo "compute-sanitizer $tool $name: exit $rc, $(( $(date +%s) - ts )) s"
                    fig "{\"name\": \"sanitizer\", \"tool\": \"$tool\", \"test\": \"$name\", \"exit\": $rc, \"seconds\": $(( $(date +%s) - ts ))}"
                    [ $rc -eq 0 ] || fails+=("compute-sanitizer $tool $name: exit $rc")
                done
            done
        else
            echo "compute-sanitizer: not found"
            fails+=("compute-sanitizer not found")
        fi
    fi

    # ---- measurements
    if [ -x "$build/bench_device" ]; then
        bargs=()
        [ "$(left)" -lt 200 ] && bargs=(--quick)
        out=$(timeout -k 5 240 "$build/bench_device" "${bargs[@]}" 2>&1)
        rc=$?
        echo "$out"
        echo "$out" | grep '^{' >> "$figures"
        [ $rc -eq 0 ] || fails+=("bench_device: exit $rc")
    elif [ "$cuda" = ON ]; then
        fails+=("bench_device: not built")
    fi

    # ---- the PyTorch equivalents on the same GPU
    py=${MAPORL_PYTHON:-python3}
    if [ "$devices" -gt 0 ] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        torch_run() {  # $1 = label, $2 = spec
            [ "$(left)" -gt 30 ] || { echo "torch $1: not run (the time budget is spent)"; return; }
            local line
            line=$(echo "$2" | timeout -k 5 120 "$py" bench/python/run.py 2>&1 | tail -n 1)
            echo "torch $1: $line"
            case "$line" in "{"*) fig "{\"name\": \"torch\", \"what\": \"$1\", \"result\": $line}" ;; esac
        }
        torch_run "gae B=256 T=4096 whiten" '{"kernel": "gae", "B": 256, "T": 4096, "gamma": 1.0, "lambda": 0.95, "whiten": true, "device": "cuda", "reps": 5, "threads": 16}'
        torch_run "policy_loss B=64 T=4096" '{"kernel": "policy_loss", "B": 64, "T": 4096, "device": "cuda", "reps": 20, "threads": 16}'
        torch_run "fused_policy_loss N=2048 V=32768" '{"kernel": "fused_policy_loss", "N": 2048, "V": 32768, "device": "cuda", "reps": 10, "threads": 16}'
        torch_run "sampling B=64 V=151936 top_k=50 top_p=0.9" '{"kernel": "sampling", "B": 64, "V": 151936, "temperature": 0.7, "top_k": 50, "top_p": 0.9, "device": "cuda", "reps": 10, "threads": 16}'
        smol='"vocab": 49152, "hidden": 576, "layers": 30, "heads": 9, "kv_heads": 3, "intermediate": 1536, "tie": true'
        for b in 1 8 64; do
            torch_run "llama generate SmolLM2-135M shape B=$b prompt=16 new=64" "{\"kernel\": \"llama\", \"mode\": \"generate\", $smol, \"batch\": $b, \"prompt\": 16, \"new\": 64, \"device\": \"cuda\", \"reps\": 3, \"threads\": 16}"
        done
        torch_run "llama train step SmolLM2-135M shape B=8 T=256" "{\"kernel\": \"llama\", \"mode\": \"train\", $smol, \"batch\": 8, \"T\": 256, \"device\": \"cuda\", \"reps\": 3, \"threads\": 16}"
    elif [ "$devices" -gt 0 ]; then
        echo "torch: PyTorch with CUDA is not importable by $py: the PyTorch equivalents are not run"
    fi

    # ---- the figures, and the verdict
    total=$(( $(date +%s) - t0 ))
    echo "total: $total s"
    fig "{\"name\": \"total\", \"seconds\": $total, \"devices\": $devices}"
    if [ -n "${OUT:-}" ]; then
        if command -v python3 >/dev/null 2>&1; then
            python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()], indent=1))' "$figures" > "$OUT/device-check.json" ||
                fails+=("device-check.json: a figure is not JSON")
        else
            { echo "["; sed '$!s/$/,/' "$figures"; echo "]"; } > "$OUT/device-check.json"
        fi
    fi
    [ "$devices" -gt 0 ] || echo "device-check: no device is visible (CPU-only run: nothing on a GPU was checked or measured)"
    verdict
}

if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    main "$@" 2>&1 | tee "$OUT/device-check.log"
    exit "${PIPESTATUS[0]}"
fi
main "$@"
