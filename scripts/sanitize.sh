#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer over the tests that need no GPU (issue 21): gcc,
# -O1 -g1 (line tables: file:line in reports, a third faster to compile than -g), in its own
# build dir build-asan (no Vulkan, no benchmarks; the CPU kernels for three SIMD targets,
# CMakeLists.txt ES_FEW_SIMD_TARGETS). The `edgeseek` CLI is built the same way, so
# the unit tests that run it (bad input, convert, CLI verbs) run it sanitized; the fuzz corpora
# are replayed through the plain driver (fuzz_corpus_*). Any report (a bad read or write, a leak,
# undefined behaviour) fails its test: UBSan does not recover, ASan halts.
# The node end-to-end tests (server_*) are left out: they time answers, which the sanitizers
# slow down several times.
#     scripts/sanitize.sh [TEST_DIR...]   (default: every tests/unit folder but vulkan, and
#                                          kernels and golden on the CPU)
#     scripts/sanitize.sh --corpora       (only the fuzz corpora: the parsers' libraries, no
#                                          backends; ~5 min cold on 2 cores, what CI runs)
# ES_SANITIZE_LAUNCHER=ccache reuses objects between runs; ES_SANITIZE_JOBS sets ninja/ctest -j.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-asan
JOBS=${ES_SANITIZE_JOBS:-$(nproc)}
CORPORA_ONLY=0
if [ "${1:-}" = --corpora ]; then
  CORPORA_ONLY=1
  shift
fi
DIRS=("$@")
if [ $CORPORA_ONLY = 0 ] && [ ${#DIRS[@]} -eq 0 ]; then
  for d in tests/unit/*/; do
    n=$(basename "$d")
    [ "$n" = vulkan ] || DIRS+=("$n")
  done
  DIRS+=(kernels golden)
fi
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc \
  -DCMAKE_CXX_COMPILER=g++ "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" -DES_SANITIZE=ON -DES_VULKAN=OFF -DES_BUILD_BENCH=OFF \
  -DES_FEW_SIMD_TARGETS=ON \
  ${ES_SANITIZE_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$ES_SANITIZE_LAUNCHER} \
  ${ES_SANITIZE_LAUNCHER:+-DCMAKE_C_COMPILER_LAUNCHER=$ES_SANITIZE_LAUNCHER} >/dev/null
FUZZ=()
for f in tests/fuzz/targets/*.cpp; do FUZZ+=("es_fuzz_regress_$(basename "$f" .cpp)"); done
TARGETS=("${FUZZ[@]}")
[ $CORPORA_ONLY = 1 ] || TARGETS+=(edgeseek_cli "${DIRS[@]/#/es_test_}")
ninja -C $B -j "$JOBS" "${TARGETS[@]}"
# detect_leaks: LeakSanitizer at exit; the suppressions-free run must be clean.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
labels=$(IFS='|'; echo "${DIRS[*]}")
cd $B
# Left out: SampledSpec.DistributedAsTheTarget, a statistical test of the speculative sampler
# (thousands of decode steps, 50 s under the sanitizers); its acceptance rule runs sanitized in
# Acceptance.*, the speculative engine in GreedySpec.* and SpecEngine.*, and the plain build runs
# it whole.
[ $CORPORA_ONLY = 1 ] || ctest --output-on-failure -j "$JOBS" --timeout 1800 -L "^($labels)\$" \
  -E '^SampledSpec\.DistributedAsTheTarget$'
ctest --output-on-failure -j "$JOBS" --timeout 600 -R '^fuzz_corpus_'
