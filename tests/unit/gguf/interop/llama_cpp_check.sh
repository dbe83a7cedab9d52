#!/usr/bin/env bash
# Interop check: llama.cpp (the prebuilt CPU binary inside the npm package node-llama-cpp) loads
# the GGUF files edgeseek writes and decodes their blocks as we do. Needs the files that the
# test GgufInterop.TinyModelsForLlamaCpp leaves in BUILD_DIR/test_tmp/, and node + npm.
# For each type, llama.cpp's next-token distribution on the quantized file is compared with the
# one on its f32 twin (our own dequantization of that file); they differ only by llama.cpp's
# activation quantization, so KL stays far below what a layout error (or the quantization
# itself, compared with the original f32) produces. Exits non-zero above KL_LIMIT (0.01).
# Usage: tests/unit/gguf/interop/llama_cpp_check.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
dir="$build/test_tmp/GgufInterop.TinyModelsForLlamaCpp"
[ -f "$dir/tiny_llama_f32.gguf" ] || { echo "run es_test_gguf --gtest_filter=GgufInterop.* first" >&2; exit 2; }
work="$build/llama_cpp_check"
mkdir -p "$work"
cp "$here/check_llama_cpp.mjs" "$work/"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  (cd "$work" && npm install --no-audit --no-fund --silent node-llama-cpp@3.22.1 >/dev/null)
fi
status=0
for arch in llama qwen2; do
  for t in q8_0 q4_0 q4_k_m q4_1 q5_0 q5_1 q5_k q6_k f16 bf16; do
    (cd "$work" && node check_llama_cpp.mjs "$dir/tiny_${arch}_${t}_deq.gguf" "$dir/tiny_${arch}_${t}.gguf" \
        "$dir/tiny_${arch}_f32.gguf" 2>&1 | grep -v '^\[node-llama-cpp\]') || status=1
  done
done
exit $status
