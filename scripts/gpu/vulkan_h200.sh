#!/usr/bin/env bash
# One job on the GPU machine (../shared/device/README.md): Vulkan loader from .gl/, the Vulkan
# tests on NVIDIA's driver, `edgeseek devices`, and the Vulkan benches of the R1-distill shapes.
# Binaries are built here (Debian 12) and carried in .gpubin/ (edgeseek, es_test_vulkan and the
# shared libraries Ubuntu lacks in .gpubin/lib); scripts/gpu/pack_vulkan.sh fills it.
# Usage (device tool): run(command="bash scripts/gpu/vulkan_h200.sh", carry=[".gl", ".gpubin"])
set -uo pipefail
cd "$(dirname "$0")/../.."
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
B=.gpubin
export LD_LIBRARY_PATH=$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ES_VK_CACHE_DIR=/tmp/es_vk_cache ES_BINARY_DIR=/tmp/es_bin ES_SOURCE_DIR=$PWD ES_CLI=$PWD/$B/edgeseek
mkdir -p "$ES_BINARY_DIR"
if ! $B/edgeseek devices >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; git log -1 --oneline 2>/dev/null
echo "== devices"; ES_VK_TRACE=1 timeout 60 $B/edgeseek devices --bandwidth; echo "devices rc=$?"
echo "== tests (NVIDIA driver, validation layers absent there)"
ES_VK_VALIDATION=0 timeout ${ES_TEST_TIMEOUT:-80} $B/es_test_vulkan --gtest_brief=1 2>&1 | grep -v "^vulkan profile\|^  shader time" | tail -40
# f16 math (cooperative-matrix prefill GEMM where the device has it) and the --profile split.
for m in ${ES_BENCH_MODELS:-r1-distill-qwen-1.5b r1-distill-qwen-7b}; do
  echo "== bench $m f16 (pp512, tg128), ES_VK_F16_ACT=${ES_VK_F16_ACT:-1}, --profile"
  ES_VK_F16_ACT=${ES_VK_F16_ACT:-1} timeout ${ES_BENCH_TIMEOUT:-140} $B/edgeseek bench --backend vulkan \
    --synthetic "$m" --dtype f16 -p 512 -n 128 -r 1 --profile 2>&1 | tee "$OUT/bench_$m.txt"
done
