#!/usr/bin/env bash
# Configures edgeseek (Release) into ./build and builds the given ninja targets: `edgeseek` (the
# CLI, all the README's first command needs) or, without arguments, every target (tests and
# benchmarks too: what scripts/test.sh needs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build "$@"
