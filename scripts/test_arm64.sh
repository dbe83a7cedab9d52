#!/usr/bin/env bash
# ARM64 kernel tests under emulation: cross-builds the CPU matmul kernels and their tests for
# aarch64 (cmake/toolchain-aarch64.cmake, the minimal project tests/kernels/arm64) and runs them
# with qemu-user on two CPU models — `max` (dotprod and i8mm: all three integer paths, Highway's
# SVE2 target) and cortex-a72 (ARMv8.0, no dotprod: the plain NEON path, Highway's NEON target) —
# and with ES_CPU_ARM_PATH forcing each path. qemu checks correctness only; it says nothing
# about ARM speed. Called by scripts/test.sh; needs scripts/setup.sh's arm64 packages.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ES_ARM64_BUILD_DIR:-build-arm64}
cmake -S tests/kernels/arm64 -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_TOOLCHAIN_FILE=$PWD/cmake/toolchain-aarch64.cmake" >/dev/null
ninja -C "$B" ${ES_JOBS:+-j "$ES_JOBS"} es_test_arm_kernels  # ES_JOBS=1 on a shared machine
T="$B/es_test_arm_kernels"
ARM_ONLY='CpuMatMulArm.*:CpuMatMulTargets.*'
run() {  # cpu model, forced path ("" = the CPU's best), test filter
  echo "== aarch64 kernel tests: qemu -cpu $1, ES_CPU_ARM_PATH=${2:-(best)}, filter $3"
  QEMU_CPU=$1 ES_CPU_ARM_PATH=$2 qemu-aarch64 "$T" --gtest_filter="$3" --gtest_brief=1
}
# The whole suite once, on the best path; CpuMatMulArm.* checks every path the CPU has against
# plain NEON bit for bit in each run, so the forced runs need only the ARM tests.
run max "" '*'
run max neon "$ARM_ONLY"
run max dotprod "$ARM_ONLY"
run cortex-a72 "" "$ARM_ONLY"
run cortex-a72 i8mm "$ARM_ONLY"  # clamped to NEON: no SIGILL on a CPU without dotprod/i8mm
