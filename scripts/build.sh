#!/usr/bin/env bash
# Configures edgeseek (Release) into ./build and builds it. Arguments starting with -D go to
# CMake (scripts/test.sh: -DES_WERROR=ON), the others are ninja targets: `edgeseek` (the CLI, all
# the README's first command needs) or, with none, every target (tests and benchmarks too).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=() targets=()
for a in "$@"; do
  if [[ $a == -D* ]]; then cmake_args+=("$a"); else targets+=("$a"); fi
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
ninja -C build "${targets[@]}"
