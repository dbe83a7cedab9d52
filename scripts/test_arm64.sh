#!/usr/bin/env bash
# ARM64 under emulation: cross-builds the whole tree for aarch64 (the library, the `edgeseek` CLI
# and server, the test binaries; cmake/toolchain-aarch64.cmake: Debian's g++-aarch64-linux-gnu and
# arm64 libraries from multiarch, installed by scripts/setup.sh) and runs the unit, kernel and
# golden CPU tests with qemu-user. Called by scripts/test.sh; on 2 cores about 7.5 min to build
# (cold, no ccache) and 5 min to run (two test processes at a time). qemu checks correctness only; it says nothing about ARM speed.
#  - Whole suites on `-cpu max` (dotprod, i8mm, SVE2: every integer path, Highway's SVE2 target).
#  - Kernels and goldens again on cortex-a76 (NEON + dotprod, no i8mm, no SVE: RK3588's big cores,
#    and what Orin's A78AE has), goldens on cortex-a72 (ARMv8.0: plain NEON), and the ARM kernel
#    tests with ES_CPU_ARM_PATH forcing each path and on cortex-a72 (forcing i8mm there is clamped
#    to NEON, no SIGILL).
# ES_ARM64_SHADERS=DIR takes the SPIR-V of each Vulkan shader variant from DIR (scripts/test.sh:
# the x86 build's build/src/backends/vulkan/shaders; cmake/vulkan_shaders.cmake
# ES_SHADERS_PREBUILT) instead of compiling all of them again with glslc (~660 s of CPU, a third of
# this build); none of them runs here.
# Not built or run here: the Vulkan tests (lavapipe under qemu is not needed: the shaders are the
# x86 build's), the ONNX importer (-DES_ONNX=OFF: Debian 12's libonnx-dev:arm64 does not
# co-install with the amd64 one), the MPI layer split (-DES_MPI=OFF: no libopenmpi-dev:arm64),
# the micro benchmarks (qemu times nothing useful).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ES_ARM64_BUILD_DIR:-build-arm64}
# A build dir of another source tree (the former kernels-only project tests/kernels/arm64) is
# configured anew.
grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$PWD" "$B/CMakeCache.txt" 2>/dev/null || rm -rf "$B"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_TOOLCHAIN_FILE=$PWD/cmake/toolchain-aarch64.cmake" -DES_ONNX=OFF -DES_MPI=OFF \
  -DES_BUILD_BENCH=OFF "-DES_SHADERS_PREBUILT=${ES_ARM64_SHADERS:-}" ${ES_ARM64_CMAKE_ARGS:-} >/dev/null
SUITES=(core quant graph gguf gguf_model convert grammar jinja tokenizer runtime server tools capi
        kernels golden)
ninja -C "$B" ${ES_JOBS:+-j "$ES_JOBS"} edgeseek_cli "${SUITES[@]/#/es_test_}"  # ES_JOBS=1 when shared

# The tests run the aarch64 CLI through qemu too; goldens on the CPU backend only.
export ES_CLI="qemu-aarch64 $PWD/$B/edgeseek" ES_GOLDEN_BACKENDS=cpu
# Wall-clock bounds of the tests (a template's render budget, HTTP deadlines) times 4: qemu-user
# runs the code several times slower (tests/common/test_util.h TimeScale).
export ES_TEST_TIME_SCALE=4
# Left out under qemu: the prefault tests (qemu-user 7.2, Debian 12's, answers madvise with success
# and does nothing, so MADV_POPULATE_READ / _WRITE map no page and the fault counts of
# CpuPrefault.PreparedFileWeightsTakeNoFaults and KvReserve.GenerateDecodeStepsTakeNoPageFaults
# cannot hold), and
# SampledSpec.DistributedAsTheTarget (a statistical test of the speculative sampler, thousands of
# decode steps: 214 of the runtime suite's 297 s under qemu; no ARM code of its own, the x86 run
# keeps it), and the greedy speculative-decoding equalities that decode hundreds of steps
# with and without drafts (GreedySpec.*, SpecEngine.GreedyOutputIdenticalWithAndWithoutDrafts and
# .MtpGreedyOutputIdenticalWithAndWithoutDrafts, MtpDrafter.GreedyOutputIdenticalToPlain and
# .DraftsEqualAFreshDrafterOverTheSameHistory: ~1,600 of the runtime suite's 2,239 s under qemu in
# session 32's CI, the longest pole of this stage). They test the engine's draft/verify
# bookkeeping, which has no ARM code; the ARM kernels under their verification rows are checked
# here by Models/CpuBatchedDecode.* (1-64 row steps bit for bit one-row steps) and the MTP module
# by MtpDrafter.CatchUpAfterAcceptedDraftsEqualsAFreshDrafter and SpecEngine.GreedyStepReadsIdsOnly,
# which stay; the x86 run keeps all of them.
SKIP='*Vulkan*:*vulkan*:CpuPrefault.PreparedFileWeightsTakeNoFaults:SampledSpec.DistributedAsTheTarget'
SKIP+=':KvReserve.GenerateDecodeStepsTakeNoPageFaults'
SKIP+=':GreedySpec.*:SpecEngine.GreedyOutputIdenticalWithAndWithoutDrafts'
SKIP+=':SpecEngine.MtpGreedyOutputIdenticalWithAndWithoutDrafts:MtpDrafter.GreedyOutputIdenticalToPlain'
SKIP+=':MtpDrafter.DraftsEqualAFreshDrafterOverTheSameHistory'
# The runs go two at a time (ES_ARM64_TEST_JOBS): qemu-user keeps about one core busy per test
# process, and the test binaries already run side by side under ctest -j. Each run's output is
# kept and printed in order once all have ended.
JOBS=${ES_ARM64_TEST_JOBS:-2}
LOGS=$B/qemu-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
n=0
run() {  # cpu model, forced ARM path ("" = the CPU's best), suite, filter
  local log
  log=$LOGS/$(printf %02d $n).log
  n=$((n + 1))
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  (
    echo "== aarch64 es_test_$3: qemu -cpu $1, ES_CPU_ARM_PATH=${2:-(best)}, filter $4"
    t0=$SECONDS
    QEMU_CPU=$1 ES_CPU_ARM_PATH=$2 qemu-aarch64 "$B/tests/es_test_$3" --gtest_filter="$4" \
      --gtest_brief=1 "--gtest_output=xml:$B/qemu-$3-$1${2:+-$2}.xml" ||
      echo "es_test_$3 on $1${2:+ ($2)}" > "$log.failed"
    echo "   ($((SECONDS - t0)) s)"
  ) > "$log" 2>&1 &
}
# The longest runs first (runtime and tools take ~90 s each here). The suites that time answers
# against bounds (jinja's render budget, the server's HTTP deadlines) run alone at the end.
SOLO=(jinja server)
for s in runtime tools; do run max "" "$s" "-$SKIP"; done
run cortex-a76 "" kernels "-$SKIP"
for s in "${SUITES[@]}"; do
  [[ $s == runtime || $s == tools || " ${SOLO[*]} " == *" $s "* ]] || run max "" "$s" "-$SKIP"
done
run cortex-a76 "" golden "-$SKIP"
run cortex-a72 "" golden "-$SKIP"
# CpuMatMulArm.* checks every path the CPU has against plain NEON bit for bit in each run, so the
# forced runs need only the ARM tests.
ARM_ONLY='CpuMatMulArm.*:CpuMatMulTargets.*'
run max neon kernels "$ARM_ONLY"
run max dotprod kernels "$ARM_ONLY"
run cortex-a72 "" kernels "$ARM_ONLY"
run cortex-a72 i8mm kernels "$ARM_ONLY"  # clamped to NEON
JOBS=1
for s in "${SOLO[@]}"; do run max "" "$s" "-$SKIP"; done
wait
cat "$LOGS"/*.log
failed=()
for f in "$LOGS"/*.failed; do
  if [[ -e $f ]]; then failed+=("$(cat "$f")"); fi
done
if ((${#failed[@]})); then
  printf 'aarch64 failures: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "aarch64: all suites passed"
