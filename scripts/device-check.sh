#!/usr/bin/env bash
# device-check.sh: the GPU check, for a machine with a GPU, CMake, nvcc and PyTorch but no Node (the device
# machine). Builds the core with CUDA through CMake, runs the C++ tests (which compare every CUDA kernel with
# the CPU one when a device is visible), then times CUDA against PyTorch on the same GPU. Under 5 minutes.
#   usage: bash scripts/device-check.sh [build-dir]     (env: CUDA_ARCHS, default 80-real;90-real;90-virtual)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
archs=${CUDA_ARCHS:-"80-real;90-real;90-virtual"}
export PATH="$PATH:/usr/local/cuda/bin"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"

t0=$(date +%s)
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMAPORL_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null || exit 1
cmake --build "$build" --parallel || exit 1
echo "build: $(( $(date +%s) - t0 )) s"

status=0
passed=0
failed=0
for t in "$build"/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.*) continue ;; esac
    case "$(basename "$t")" in
        test_gae|test_group_advantages|test_policy_loss|test_sampling|test_gpt_cuda|test_matmul_cuda|test_llama_cuda) out=$("$t" --bench); rc=$? ;;
        *) out=$("$t"); rc=$? ;;
    esac
    echo "$out"
    [ $rc -eq 0 ] || status=1
    line=$(echo "$out" | grep -E '^# .*: [0-9]+ passed, [0-9]+ failed' | tail -1)
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
done
echo "C++ tests: $passed passed, $failed failed"

echo "== PyTorch baselines on the GPU (verl-style loop, same sizes)"
py=${MAPORL_PYTHON:-python3}
for whiten in true false; do
    echo "{\"kernel\": \"gae\", \"B\": 256, \"T\": 4096, \"gamma\": 1.0, \"lambda\": 0.95, \"whiten\": $whiten, \"device\": \"cuda\", \"reps\": 5, \"threads\": 16}" \
        | "$py" bench/python/run.py | sed "s/^/torch gae cuda whiten=$whiten: /"
done
echo '{"kernel": "reinforce", "B": 256, "T": 4096, "gamma": 1.0, "whiten": true, "device": "cuda", "reps": 5, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch reinforce++ cuda whiten=true: /"
for layout in adjacent shuffled; do
    echo "{\"kernel\": \"grpo\", \"N\": 1048576, \"G\": 16, \"layout\": \"$layout\", \"device\": \"cuda\", \"reps\": 20, \"threads\": 16}" \
        | "$py" bench/python/run.py | sed "s/^/torch grpo cuda N=1048576 G=16 $layout: /"
done
echo '{"kernel": "policy_loss", "B": 64, "T": 4096, "device": "cuda", "reps": 20, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch policy_loss (vanilla+k3, autograd) cuda B=64 T=4096: /"
echo '{"kernel": "fused_policy_loss", "N": 2048, "V": 32768, "device": "cuda", "reps": 10, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch fused (log_softmax+gather+loss, autograd) cuda N=2048 V=32768: /"
for filt in '"top_k": 50, "top_p": 0.9, ' ''; do
    echo "{\"kernel\": \"sampling\", \"B\": 64, \"V\": 151936, \"temperature\": 0.7, $filt\"device\": \"cuda\", \"reps\": 10, \"threads\": 16}" \
        | "$py" bench/python/run.py | sed "s/^/torch sampling (vLLM-native mirror) cuda B=64 V=151936 $filt: /"
done
echo '{"kernel": "gpt", "vocab": 64, "context": 128, "layers": 4, "dModel": 128, "heads": 4, "batch": 32, "device": "cuda", "reps": 10, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch gpt train step (AdamW, cross-entropy) cuda B=32 T=128 d=128 L=4: /"
echo '{"kernel": "gpt", "vocab": 64, "context": 128, "layers": 4, "dModel": 128, "heads": 4, "batch": 32, "device": "cuda", "tf32": true, "reps": 10, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch gpt train step (AdamW, cross-entropy, allow_tf32) cuda B=32 T=128 d=128 L=4: /"
echo '{"kernel": "gpt", "mode": "generate", "vocab": 64, "context": 128, "layers": 4, "dModel": 128, "heads": 4, "batch": 32, "prompt": 17, "new": 64, "device": "cuda", "reps": 5, "threads": 16}' \
    | "$py" bench/python/run.py | sed "s/^/torch gpt generate (eager loop, KV cache, greedy) cuda B=32 prompt=17 new=64: /"
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
