#!/usr/bin/env bash
# The one front door for checks: installs dependencies, fetches test data, builds, runs every
# test (unit, kernels, golden, tokenizer, Vulkan on lavapipe, server) through CTest, then the
# server and engine tests again under ThreadSanitizer (docs/server.md "Sanitizers"), and the fuzz
# corpora under ASan+UBSan (docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch_test_data.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
cd ..
# The whole tree cross-built for aarch64; its unit, kernel and golden CPU tests under qemu-user
# (NEON, dotprod, i8mm, SVE; ~15 min on 2 cores). On an ARM64 machine the run above was native.
if [ "$(uname -m)" = x86_64 ]; then
  scripts/test_arm64.sh
fi
# ThreadSanitizer: its own build (no Vulkan, no benchmarks), only the server/engine test target.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DES_VULKAN=OFF -DES_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread -g -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread >/dev/null
ninja -C build-tsan es_test_server
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/tests/es_test_server
# AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -O1 -g, build-asan): every fuzz corpus
# (each hostile input and crasher ever found) through the parsers, ~5 min cold on 2 cores. The
# whole unit suite under ASan (scripts/sanitize.sh without arguments, ~26 min to build) is not in
# CI: docs/fuzzing.md "Sanitizers" says why.
scripts/sanitize.sh --corpora
