#!/usr/bin/env bash
# One job on the GPU machine (../shared/device/README.md): Vulkan loader from .gl/, the Vulkan
# tests on NVIDIA's driver, `edgeseek devices`, and the Vulkan benches of the R1-distill shapes.
# Binaries are built here (Debian 12) and carried in .gpubin/ (edgeseek, es_test_vulkan and the
# shared libraries Ubuntu lacks in .gpubin/lib); scripts/gpu/pack_vulkan.sh fills it.
# Usage (device tool): run(command="bash scripts/gpu/vulkan_h200.sh", carry=[".gl", ".gpubin"])
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/device_env.sh .gpubin
export ES_BINARY_DIR=/tmp/es_bin ES_SOURCE_DIR=$PWD ES_CLI=$B/edgeseek
mkdir -p "$ES_BINARY_DIR"
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; git log -1 --oneline 2>/dev/null
echo "== devices"; timeout 60 $B/edgeseek devices --bandwidth 2>&1 | grep -i "H200\|coop\|subgroup\|bandwidth\|error"
echo "== tests (NVIDIA driver, validation layers absent there)"
# Full logs go to $OUT (the tool returns only the last 12 kB of stdout); summaries here.
ES_VK_VALIDATION=0 timeout ${ES_TEST_TIMEOUT:-80} $B/es_test_vulkan > "$OUT/es_test_vulkan.txt" 2>&1
grep "FAILED\|PASSED\|Failure\|tests ran" "$OUT/es_test_vulkan.txt" | head -20
bench() {  # bench MODEL DTYPE [env...]: pp512 + tg128 with the --profile split
  local m=$1 t=$2; shift 2
  echo "== bench $m $t $*"
  env "$@" timeout ${ES_BENCH_TIMEOUT:-140} $B/edgeseek bench --backend vulkan --synthetic "$m" --dtype "$t" \
    -p 512 -n 128 -r 1 --profile 2>&1 | tee "$OUT/bench_${m}_${t}_$#.txt"
}
# f16 math (cooperative-matrix prefill GEMM where the device has it).
bench r1-distill-qwen-1.5b f16 ES_VK_F16_ACT=1
bench r1-distill-qwen-7b f16 ES_VK_F16_ACT=1
echo "== goldens through --backend vulkan in f32 math (ES_VK_F16_ACT=0: the files' tolerances, 1e-4)"
ES_VK_F16_ACT=0 ES_GOLDEN_BACKENDS=vulkan timeout 60 $B/es_test_golden --gtest_filter='*vulkan*:*Vulkan*' --gtest_brief=1 > "$OUT/golden_f32.txt" 2>&1
grep "actual\|PASSED\|tests ran\|FAILED TEST" "$OUT/golden_f32.txt" | head -20
echo "== goldens, f16 math (ES_VK_F16_ACT=1; the tests allow f16 math 2e-3)"
ES_VK_F16_ACT=1 ES_GOLDEN_BACKENDS=vulkan timeout 60 $B/es_test_golden --gtest_filter='*vulkan*:*Vulkan*' --gtest_brief=1 > "$OUT/golden_f16.txt" 2>&1
grep "actual\|PASSED\|tests ran\|FAILED TEST" "$OUT/golden_f16.txt" | head -30
# Default f32 math (plain GEMM prefill) and quantized weights (quantized at load).
bench r1-distill-qwen-1.5b f16
bench r1-distill-qwen-1.5b q8_0
bench r1-distill-qwen-1.5b q4_0
bench r1-distill-qwen-7b q4_0
