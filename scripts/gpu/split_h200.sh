#!/usr/bin/env bash
# One job on the one-GPU machine (issue 22; docs/scale.md): the step overhead of the layer split
# with one GPU as two logical devices (--devices 0,0) and CPU + GPU (--devices cpu,0), against
# the GPU alone, same job, same synthetic weights (1.5B and 7B distills, q4_0).
#   here:  scripts/gpu/pack_vulkan.sh build && cp -r /work/main/.gl .   (the Vulkan loader debs)
#   there: run(command="bash scripts/gpu/split_h200.sh", carry=[".gl", ".gpubin"])
# The hand-over cost per token is (split decode ms/token) - (single decode ms/token) for 0,0;
# cpu,0 adds the CPU's own layers (ES_CPU_LAYERS of them, default 2), so read it as a capacity
# split, not an overhead. Logs in $OUT (the tool returns the tail of stdout).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/device_env.sh .gpubin
echo "== machine"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
echo "== split tests on the GPU (VulkanSplit: 0,0, cpu,0, 0,cpu against the CPU runner)"
timeout 120 $B/es_test_vulkan --gtest_filter='*VulkanSplit*' > "$OUT/split_tests.txt" 2>&1
grep "FAILED\|PASSED\|Failure" "$OUT/split_tests.txt" | head
CPU_LAYERS=${ES_CPU_LAYERS:-2}
for m in r1-distill-qwen-1.5b r1-distill-qwen-7b; do
  L=28  # both distills have 28 layers
  for mode in single split00 cpusplit; do
    case $mode in
      single) args=(--backend vulkan --device 0) ;;
      split00) args=(--devices 0,0) ;;
      cpusplit) args=(--devices cpu,0 --split-layers "$CPU_LAYERS,$((L - CPU_LAYERS))") ;;
    esac
    echo "== $m q4_0 $mode: ${args[*]}"
    timeout 150 $B/edgeseek bench --synthetic "$m" --dtype q4_0 -p 512 -n 128 -r 3 "${args[@]}" \
      > "$OUT/bench_${m}_$mode.txt" 2>&1
    grep "backend\|prefill\|decode" "$OUT/bench_${m}_$mode.txt"
  done
done
