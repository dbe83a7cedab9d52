#!/usr/bin/env bash
# Fills .gpubin/ (git-ignored) with what scripts/gpu/vulkan_h200.sh runs on the GPU machine:
# the CLI, the Vulkan and golden test binaries from BUILD (default build-vk) and the shared libraries
# that Ubuntu 24.04 lacks (libvulkan is opened at run time and comes from .gl/).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-vk}
grep -qx '/.gpubin/' .git/info/exclude 2>/dev/null || echo '/.gpubin/' >> .git/info/exclude
rm -rf .gpubin && mkdir -p .gpubin/lib
cp "$BUILD/edgeseek" "$BUILD/tests/es_test_vulkan" "$BUILD/tests/es_test_golden" .gpubin/
for bin in .gpubin/edgeseek .gpubin/es_test_vulkan .gpubin/es_test_golden; do
  ldd "$bin" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libpthread.so*|libdl.so*|ld-linux*) ;;
      *) cp -L "$lib" .gpubin/lib/ ;;
    esac
  done
done
strip .gpubin/edgeseek .gpubin/es_test_vulkan .gpubin/es_test_golden
du -sh .gpubin
