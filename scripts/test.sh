#!/usr/bin/env bash
# The one front door for checks: installs dependencies, fetches test data, builds, runs every
# test (unit, kernels, golden, tokenizer, Vulkan on lavapipe, server) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch_test_data.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
