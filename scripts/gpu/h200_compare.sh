#!/usr/bin/env bash
# One job on the H200 (../shared/device/README.md): edgeseek's Vulkan backend next to llama.cpp's
# Vulkan backend, same GPU, same job, same GGUF files.
#
# llama.cpp (the Feb-2025 snapshot, fetched with the `fetch` tool; its code never enters this
# repository) is built there from .llama/llama-src.tar.gz with Debian 13's glslc and Vulkan
# headers (.llama/debs/*.deb, unpacked under /tmp, never into /): Debian 12's glslc lacks
# GL_KHR_cooperative_matrix and GL_NV_cooperative_matrix2, which llama.cpp's fast paths need.
# edgeseek's binaries are built here and carried in .esbin/ (see the `pack` step below).
#
# Here (Debian 12):
#   scripts/gpu/h200_compare.sh pack BUILD_DIR     # fills .esbin/ from BUILD_DIR
#   (and .llama/: llama-src.tar.gz + debs, see docs/performance.md "How the H200 table is made")
# There (device tool):
#   run(command="bash scripts/gpu/h200_compare.sh run", carry=[".gl", ".llama", ".esbin"])
# Environment: ES_MODELS (presets, default the 1.5B and 7B distills), ES_TYPES (GGUF types,
# default f16), ES_TESTS=0 skips the Vulkan and golden tests, ES_LLAMA=0 skips llama.cpp.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [[ "${1:-}" == pack ]]; then
  BUILD=${2:-build}
  grep -qx '/.esbin/' .git/info/exclude 2>/dev/null || echo '/.esbin/' >> .git/info/exclude
  rm -rf .esbin && mkdir -p .esbin/lib
  cp "$BUILD/edgeseek" "$BUILD/tests/es_test_vulkan" "$BUILD/tests/es_test_golden" .esbin/
  for bin in .esbin/*; do
    [[ -f "$bin" ]] || continue
    ldd "$bin" | awk '/=> \//{print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libpthread.so*|libdl.so*|ld-linux*) ;;
        *) cp -L "$lib" .esbin/lib/ ;;
      esac
    done
    strip "$bin"
  done
  du -sh .esbin
  exit 0
fi

OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
B=$PWD/.esbin
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ES_VK_CACHE_DIR=/tmp/es_vk_cache ES_BINARY_DIR=/tmp/es_bin ES_SOURCE_DIR=$PWD ES_CLI=$B/edgeseek
export ES_VK_VALIDATION=0  # no validation layers there
mkdir -p "$ES_BINARY_DIR"
if ! "$B/edgeseek" devices >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
MODELS=${ES_MODELS:-r1-distill-qwen-1.5b r1-distill-qwen-7b}
TYPES=${ES_TYPES:-f16}

# llama.cpp build in the background (CPU) while the GPU runs edgeseek's tests.
build_llama() {
  local T=/tmp/trixie
  mkdir -p $T /tmp/bin /tmp/llama
  for f in .llama/debs/*.deb; do dpkg -x "$f" $T; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$T/usr/lib/x86_64-linux-gnu" "$T/usr/bin/glslc" > /tmp/bin/glslc
  chmod +x /tmp/bin/glslc
  export PATH=/tmp/bin:$PATH
  tar xzf .llama/llama-src.tar.gz -C /tmp/llama
  local t0=$SECONDS
  cmake -S /tmp/llama -B /tmp/llama/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DVulkan_INCLUDE_DIR=$T/usr/include -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
    -DVulkan_GLSLC_EXECUTABLE=/tmp/bin/glslc -DGLSLC_EXECUTABLE=/tmp/bin/glslc > /tmp/llama/cmake.log 2>&1 &&
    ninja -C /tmp/llama/b llama-bench > /tmp/llama/build.log 2>&1
  local rc=$?
  echo "llama.cpp build rc=$rc in $((SECONDS - t0)) s" >> /tmp/llama/build.log
  return $rc
}
if [[ "${ES_LLAMA:-1}" == 1 ]]; then
  build_llama & LLAMA_PID=$!
fi

echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== devices"; timeout 60 "$B/edgeseek" devices --bandwidth 2>&1 | tee "$OUT/devices.txt"; echo "rc=${PIPESTATUS[0]}"
if [[ "${ES_TESTS:-1}" == 1 ]]; then
  echo "== es_test_vulkan"; timeout 120 "$B/es_test_vulkan" --gtest_brief=1 2>&1 | tail -25
  echo "== golden on vulkan"; timeout 150 "$B/es_test_golden" --gtest_brief=1 --gtest_filter='*vulkan*' 2>&1 | tail -25
fi

for m in $MODELS; do
  echo "== edgeseek bench $m f16 synthetic (pp512, tg128)"
  timeout 150 "$B/edgeseek" bench --backend vulkan --synthetic "$m" --dtype f16 -p 512 -n 128 -r 1 2>&1 | tee "$OUT/es_$m.txt"
  echo "== edgeseek bench $m f16 --profile (one decode token split)"
  timeout 120 "$B/edgeseek" bench --backend vulkan --synthetic "$m" --dtype f16 -p 64 -n 8 -r 1 --profile 2>&1 | tail -60 | tee "$OUT/es_${m}_profile.txt"
done

if [[ "${ES_LLAMA:-1}" == 1 ]]; then
  wait $LLAMA_PID; echo "== llama.cpp build"; tail -3 /tmp/llama/build.log; grep -i "coopmat\|glslc" /tmp/llama/cmake.log | head
  LB=/tmp/llama/b/bin/llama-bench
  if [[ -x $LB ]]; then
    for m in $MODELS; do
      for ty in $TYPES; do
        g=/tmp/$m-$ty.gguf
        echo "== convert $m $ty"
        timeout 200 "$B/edgeseek" convert --synthetic "$m" --type "$ty" -o "$g" 2>&1 | tail -2 || continue
        echo "== llama-bench $m $ty"
        timeout 150 $LB -m "$g" -p 512 -n 128 -r 2 -ngl 99 2>&1 | tail -8 | tee "$OUT/llama_${m}_$ty.txt"
        echo "== edgeseek bench $m $ty (same file)"
        timeout 150 "$B/edgeseek" bench --backend vulkan -m "$g" -p 512 -n 128 -r 1 2>&1 | tee "$OUT/es_${m}_$ty.txt"
        rm -f "$g"
      done
    done
  fi
fi
