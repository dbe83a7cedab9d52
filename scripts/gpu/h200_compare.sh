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
# Environment: ES_MODELS (presets of the synthetic f16 benches, default the 1.5B and 7B distills),
# ES_GGUFS ("preset:type ..." files written by `edgeseek convert` and benched by both programs),
# ES_TOKENIZER (vocabulary put in those files; llama.cpp needs one; /tmp/tok_PRESET, where it
# exists, for that preset's files), ES_DEPTH (also prefill that many tokens and decode after them,
# both programs), ES_GGUF_PROFILE=1 (edgeseek --profile of each file), ES_LLAMA_CUDA=1 (llama.cpp's
# CUDA backend too), ES_DEADLINE (seconds after
# which no new step starts), ES_TESTS=0 skips the Vulkan and golden tests (ES_TEST_FILTER: a
# gtest filter for es_test_vulkan), ES_LLAMA=0 skips
# llama.cpp, ES_GOLDEN_MODES (default "0 1": f32 and f16 math), ES_LLAMA_CM1 ("preset:type ...":
# llama-bench pp512 again with its coopmat2 path off), ES_EXTRA_ENVS ("NAME=VALUE ...": each GGUF's
# edgeseek bench again with that setting), ES_BATCHES ("1 8 32 64": each GGUF's batched decode,
# `bench -b 1,8,32,64` in one process, also under each ES_EXTRA_ENVS setting, or ES_BATCH_ENVS where
# given; ES_BATCH_PROFILE=N: --profile of -b N), ES_SINGLE=0 skips each GGUF's single-sequence
# benches, ES_TEST_ENVS ("A=1,B=2 C=3": es_test_vulkan again under each comma-joined setting, with
# the filter ES_TEST_FILTER2), ES_SERVE=1 adds the serving load benchmark
# (tests/server/load_bench.sh: edgeseek serve on Vulkan next to llama-server with -ngl 99, same
# file: ES_SERVE_GGUF "preset:type" of ES_GGUFS, default a 1.5B q4_0; CLIENTS, SLOTS, PROMPT_WORDS,
# MAX_TOKENS, CONTEXT go to load_bench.sh; with ES_LLAMA_CUDA=1 the peer is llama.cpp's CUDA
# server), ES_LLAMA_VULKAN=0 builds only llama.cpp's CUDA backend, ES_LLAMA_LATE=1 uses llama.cpp
# only in the serving benchmark and waits for its build only there. ES_SUITE=FILE (e.g.
# configs/bench/h200.json, whose models are the /tmp files ES_GGUFS writes): `edgeseek bench
# --suite` after the per-file benches, its JSON lines and report (plots, one Perfetto trace a
# case) packed into $OUT/suite.tgz. ES_BASE=FILE.txz (a `pack` of another tree, tarred as
# .esbin/): binaries to A/B against without a knob — an entry ES_BIN=base in ES_BATCH_ENVS runs
# that batched bench with them (e.g. ES_BATCH_ENVS='ES_BIN=base ES_NONE=1 ES_BIN=base'), and
# ES_BATCH_PROFILE profiles both; ES_BATCH_PROMPT (128) is the batched benches' prompt length
# (their decode attention reads that much context a row). Every log goes to
# $OUT/all.txt (the device tool returns at most 8 files).
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

FINAL_OUT=${OUT:-/tmp/out}
OUT=/tmp/es_logs
mkdir -p "$OUT" "$FINAL_OUT"
trap 'for f in "$OUT"/*; do echo "#### $f"; cat "$f"; done > "$FINAL_OUT/all.txt" 2>/dev/null' EXIT
. scripts/gpu/device_env.sh .esbin  # ES_NO_DPKG=1: a dry run here
export ES_BINARY_DIR=/tmp/es_bin ES_SOURCE_DIR=$PWD ES_CLI=$B/edgeseek
mkdir -p "$ES_BINARY_DIR"
MODELS=${ES_MODELS:-r1-distill-qwen-1.5b r1-distill-qwen-7b}
BASE=""  # ES_BASE: the binaries of another tree, for A/B runs
if [[ -n "${ES_BASE:-}" ]]; then
  mkdir -p /tmp/es_base && tar xJf "$ES_BASE" -C /tmp/es_base && BASE=/tmp/es_base/.esbin
fi

# llama.cpp build in the background (CPU) while the GPU runs edgeseek's tests.
build_llama() {
  local T=/tmp/trixie
  mkdir -p $T /tmp/bin /tmp/llama
  for f in .llama/debs/*.deb; do dpkg -x "$f" $T; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$T/usr/lib/x86_64-linux-gnu" "$T/usr/bin/glslc" > /tmp/bin/glslc
  chmod +x /tmp/bin/glslc
  export PATH=/tmp/bin:$PATH
  tar xzf .llama/llama-src.tar.gz -C /tmp/llama
  local t0=$SECONDS rc=0
  if [[ "${ES_LLAMA_VULKAN:-1}" == 1 ]]; then
    cmake -S /tmp/llama -B /tmp/llama/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON \
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DVulkan_INCLUDE_DIR=$T/usr/include -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
      -DVulkan_GLSLC_EXECUTABLE=/tmp/bin/glslc -DGLSLC_EXECUTABLE=/tmp/bin/glslc > /tmp/llama/cmake.log 2>&1 &&
      ninja -C /tmp/llama/b llama-bench ${ES_SERVE:+llama-server} > /tmp/llama/build.log 2>&1
    rc=$?
    echo "llama.cpp build rc=$rc in $((SECONDS - t0)) s" >> /tmp/llama/build.log
  fi
  if [[ "${ES_LLAMA_CUDA:-0}" == 1 ]]; then  # the CUDA backend too, for the H200 only (sm_90)
    t0=$SECONDS
    cmake -S /tmp/llama -B /tmp/llama/bc -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF > /tmp/llama/cmake_cuda.log 2>&1 &&
      ninja -C /tmp/llama/bc llama-bench ${ES_SERVE:+llama-server} > /tmp/llama/build_cuda.log 2>&1
    echo "llama.cpp CUDA build rc=$? in $((SECONDS - t0)) s" >> /tmp/llama/build.log
  fi
  return $rc
}
if [[ "${ES_LLAMA:-1}" == 1 ]]; then
  (renice -n 19 $BASHPID > /dev/null; build_llama) & LLAMA_PID=$!  # niced: benches run meanwhile
fi

DEADLINE=${ES_DEADLINE:-560}   # seconds into the job after which no new step starts
left() { (( SECONDS < DEADLINE )); }
GGUFS=${ES_GGUFS:-"r1-distill-qwen-1.5b:f16 r1-distill-qwen-1.5b:q4_0 r1-distill-qwen-1.5b:q8_0 r1-distill-qwen-7b:q4_0 r1-distill-qwen-7b:f16"}
TOK=${ES_TOKENIZER:-.llama/tok}   # llama.cpp needs a vocabulary in the file
# The GGUF files are written on the CPU while the GPU runs the tests (and llama.cpp compiles).
convert_all() {
  for mt in $GGUFS; do
    local m=${mt%%:*} ty=${mt##*:}
    local t0=$SECONDS
    local tok=$TOK
    [[ -d /tmp/tok_$m ]] && tok=/tmp/tok_$m  # a preset's own vocabulary (V2-Lite: 102,400 tokens)
    "$B/edgeseek" convert --synthetic "$m" --type "$ty" --tokenizer "$tok" -t 8 -o "/tmp/$m-$ty.gguf.part" \
      > "/tmp/convert-$m-$ty.log" 2>&1 && mv "/tmp/$m-$ty.gguf.part" "/tmp/$m-$ty.gguf"
    echo "convert $m $ty rc=$? $((SECONDS - t0)) s" >> /tmp/convert.log
  done
}
convert_all & CONVERT_PID=$!

echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== devices"; timeout 60 "$B/edgeseek" devices --bandwidth > "$OUT/devices.txt" 2>&1; echo "rc=$?"; grep -i "bandwidth\|coop\|H200" "$OUT/devices.txt" | head -8
if [[ "${ES_TESTS:-1}" == 1 ]]; then
  echo "== es_test_vulkan ${ES_TEST_FILTER:-}"; timeout 300 "$B/es_test_vulkan" --gtest_filter="${ES_TEST_FILTER:-*}" > "$OUT/test_vulkan.txt" 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|tests ran" "$OUT/test_vulkan.txt" | head -12
  for set in ${ES_TEST_ENVS:-}; do
    echo "== es_test_vulkan ${ES_TEST_FILTER2:-*} under $set"
    env ${set//,/ } timeout 200 "$B/es_test_vulkan" --gtest_filter="${ES_TEST_FILTER2:-*}" > "$OUT/test_vulkan_${set//[=,\/]/_}.txt" 2>&1
    echo "rc=$?"; grep -E "PASSED|FAILED|tests ran|Expected|relative" "$OUT/test_vulkan_${set//[=,\/]/_}.txt" | head -24
  done
  for f16 in ${ES_GOLDEN_MODES:-0 1}; do
    echo "== goldens on vulkan, ES_VK_F16_ACT=$f16"
    ES_VK_F16_ACT=$f16 ES_GOLDEN_BACKENDS=vulkan timeout 150 "$B/es_test_golden" --gtest_filter='*vulkan*' > "$OUT/golden_f16_$f16.txt" 2>&1
    echo "rc=$?"; grep -E "PASSED|FAILED|tests ran" "$OUT/golden_f16_$f16.txt" | head -12
  done
fi

for m in $MODELS; do
  left || break
  for f16 in ${ES_MATH_MODES:-1 0}; do
    echo "== edgeseek bench $m synthetic f16 weights, ES_VK_F16_ACT=$f16 (pp512, tg128)"
    ES_VK_F16_ACT=$f16 timeout 150 "$B/edgeseek" bench --backend vulkan --synthetic "$m" --dtype f16 -p 512 -n 128 -r 1 > "$OUT/es_${m}_f16act$f16.txt" 2>&1
    grep -E "backend|prefill|decode|load" "$OUT/es_${m}_f16act$f16.txt"
  done
done
if [[ "${ES_PROFILE:-1}" == 1 ]] && left; then
  echo "== profile: one decode token, 7B f16 (ES_VK_F16_ACT=1)"
  ES_VK_F16_ACT=1 timeout 120 "$B/edgeseek" bench --backend vulkan --synthetic r1-distill-qwen-7b --dtype f16 -p 512 -n 16 -r 1 --profile > "$OUT/profile_7b.txt" 2>&1
  tail -30 "$OUT/profile_7b.txt"
fi

wait $CONVERT_PID; echo "== converts"; cat /tmp/convert.log
LATE=${ES_LLAMA_LATE:-0}  # 1: llama.cpp only for the serving benchmark, waited for there
if [[ "${ES_LLAMA:-1}" == 1 && $LATE != 1 ]]; then
  wait $LLAMA_PID; echo "== llama.cpp build"; tail -1 /tmp/llama/build.log; grep -i "coopmat" /tmp/llama/cmake.log | head -4
  tail -40 /tmp/llama/cmake.log > "$OUT/llama_cmake.txt"; tail -40 /tmp/llama/build.log > "$OUT/llama_build.txt"
fi
LB=/tmp/llama/b/bin/llama-bench LBC=/tmp/llama/bc/bin/llama-bench
# ES_DEPTH=N: also prefill N tokens and decode 128 after them (llama-bench -pg N,128; decode at
# depth = 128 / (pg time - N / ppN)); ES_GGUF_PROFILE=1: edgeseek --profile of each file's prefill
# and of decode after ES_DEPTH (or 512) tokens.
DEPTH=${ES_DEPTH:-}
LARGS=(-p "512${DEPTH:+,$DEPTH}" -n 128 ${DEPTH:+-pg "$DEPTH,128"} -ngl 99)
for mt in $GGUFS; do
  m=${mt%%:*}; ty=${mt##*:}; g=/tmp/$m-$ty.gguf
  [[ -f $g ]] || continue
  left || { echo "(deadline: $m $ty skipped)"; continue; }
  if [[ -x $LB && $LATE != 1 ]]; then
    echo "== llama-bench $m $ty"
    timeout 150 $LB -m "$g" "${LARGS[@]}" -r 3 > "$OUT/llama_${m}_$ty.txt" 2>&1
    grep -E "^\|" "$OUT/llama_${m}_$ty.txt" | tail -5
  fi
  if [[ -x $LBC && $LATE != 1 ]] && left; then
    echo "== llama-bench CUDA $m $ty"
    timeout 150 $LBC -m "$g" "${LARGS[@]}" -r 3 > "$OUT/llama_cuda_${m}_$ty.txt" 2>&1
    grep -E "^\|" "$OUT/llama_cuda_${m}_$ty.txt" | tail -5
  fi
  if [[ "${ES_SINGLE:-1}" == 1 ]]; then
  echo "== edgeseek bench $m $ty (same file, ES_VK_F16_ACT=1)"
  ES_VK_F16_ACT=1 timeout 120 "$B/edgeseek" bench --backend vulkan -m "$g" -p 512 -n 128 -r 3 > "$OUT/es_${m}_$ty.txt" 2>&1
  grep -E "backend|prefill|decode" "$OUT/es_${m}_$ty.txt"
  # The decode above follows the 512-token prompt (context 512..640); llama-bench's tg128 starts
  # from an empty cache, as this one does (a 1-token prompt).
  echo "== edgeseek bench $m $ty, decode from an empty cache (-p 0)"
  ES_VK_F16_ACT=1 timeout 120 "$B/edgeseek" bench --backend vulkan -m "$g" -p 0 -n 128 -r 3 > "$OUT/es_${m}_${ty}_tg0.txt" 2>&1
  grep -E "decode" "$OUT/es_${m}_${ty}_tg0.txt"
  if [[ -n $DEPTH ]] && left; then
    echo "== edgeseek bench $m $ty, decode after $DEPTH tokens (-p $DEPTH)"
    ES_VK_F16_ACT=1 timeout 150 "$B/edgeseek" bench --backend vulkan -m "$g" -p "$DEPTH" -n 128 -c $((DEPTH + 256)) -r 1 > "$OUT/es_${m}_${ty}_d$DEPTH.txt" 2>&1
    grep -E "prefill|decode" "$OUT/es_${m}_${ty}_d$DEPTH.txt"
  fi
  if [[ "${ES_GGUF_PROFILE:-0}" == 1 ]] && left; then
    for pp in 512 "${DEPTH:-512}"; do
      ES_VK_F16_ACT=1 timeout 150 "$B/edgeseek" bench --backend vulkan -m "$g" -p "$pp" -n 8 -c $((pp + 64)) -r 1 --profile > "$OUT/profile_${m}_${ty}_p$pp.txt" 2>&1
      echo "== profile $m $ty -p $pp"; grep -E "^vulkan profile|shader time per op" -A 14 "$OUT/profile_${m}_${ty}_p$pp.txt" | cut -c1-150
    done
  fi
  fi
  BL=${ES_BATCHES:-}
  for e in ES_NONE=1 ${ES_BATCH_ENVS:-${ES_EXTRA_ENVS:-}}; do  # batched decode, each batch size in one process
    [[ -n $BL ]] && left || break
    echo "== edgeseek bench $m $ty -b ${BL// /,}, $e"
    bin=$B/edgeseek
    [[ $e == ES_BIN=base && -n $BASE ]] && bin=$BASE/edgeseek
    env ES_VK_F16_ACT=1 ${e//,/ } timeout 200 "$bin" bench --backend vulkan -m "$g" -b "${BL// /,}" -p "${ES_BATCH_PROMPT:-128}" -n 64 -r 1 \
      > "$OUT/es_${m}_${ty}_batches_${e//[=\/]/_}.txt" 2>&1
    grep -E "decode" "$OUT/es_${m}_${ty}_batches_${e//[=\/]/_}.txt"
  done
  for bn in $BL; do
    if [[ $bn == "${ES_BATCH_PROFILE:-}" ]] && left; then  # where a step of bn rows goes
      for bin in $B ${BASE:+$BASE}; do
        tag=${bin//[\/.]/_}
        ES_VK_F16_ACT=1 timeout 120 "$bin/edgeseek" bench --backend vulkan -m "$g" -b "$bn" -p "${ES_BATCH_PROMPT:-128}" -n 8 -r 1 --profile \
          > "$OUT/profile_${m}_${ty}_b${bn}${tag}.txt" 2>&1
        echo "== profile $m $ty -b $bn ($bin)"
        grep -E "^vulkan profile|shader time per op" -A 14 "$OUT/profile_${m}_${ty}_b${bn}${tag}.txt" | cut -c1-150
      done
    fi
  done
  for e in ${ES_EXTRA_ENVS:-}; do  # the same bench again under other knob settings (A/B)
    [[ "${ES_SINGLE:-1}" == 1 ]] && left || break
    echo "== edgeseek bench $m $ty, $e"
    env ES_VK_F16_ACT=1 "$e" timeout 120 "$B/edgeseek" bench --backend vulkan -m "$g" -p 512 -n 128 -r 1 > "$OUT/es_${m}_${ty}_${e//[=\/]/_}.txt" 2>&1
    grep -E "prefill|decode" "$OUT/es_${m}_${ty}_${e//[=\/]/_}.txt"
  done
done
if [[ -n "${ES_SUITE:-}" ]] && left; then
  echo "== bench suite $ES_SUITE"
  rm -rf /tmp/es_suite && mkdir -p /tmp/es_suite
  timeout "${ES_SUITE_TIMEOUT:-400}" "$B/edgeseek" bench --suite "$ES_SUITE" --out /tmp/es_suite/results.jsonl \
    --report /tmp/es_suite/report > "$OUT/suite.txt" 2>&1
  echo "rc=$?"; cat "$OUT/suite.txt"
  tar czf "$FINAL_OUT/suite.tgz" -C /tmp es_suite
fi
if [[ -n "${ES_LLAMA_CM1:-}" && -x $LB ]]; then
  # llama.cpp's KHR cooperative-matrix path (coopmat2 off): what coopmat1 reaches on this driver.
  for mt in $ES_LLAMA_CM1; do
    g=/tmp/${mt%%:*}-${mt##*:}.gguf
    [[ -f $g ]] && left || continue
    echo "== llama-bench $mt, GGML_VK_DISABLE_COOPMAT2=1 (pp512)"
    GGML_VK_DISABLE_COOPMAT2=1 timeout 90 $LB -m "$g" -p 512 -n 0 -r 2 -ngl 99 > "$OUT/llama_cm1_${mt/:/_}.txt" 2>&1
    grep -E "^\|" "$OUT/llama_cm1_${mt/:/_}.txt" | tail -1
  done
fi
if [[ -n "${ES_SERVE:-}" ]]; then
  SG=${ES_SERVE_GGUF:-}
  if [[ -n $SG ]]; then
    SG=/tmp/${SG%%:*}-${SG##*:}.gguf
  else
    SG=/tmp/serve.gguf
    python3 tests/server/bench_tokenizer.py /tmp/bench_tok > /dev/null &&
      "$B/edgeseek" convert --synthetic r1-distill-qwen-1.5b --type q4_0 --tokenizer /tmp/bench_tok -t 8 \
        -o $SG > /dev/null 2>&1 || echo "convert for serving failed"
  fi
  echo "== serving load benchmark ($SG, Vulkan; slots ${SLOTS:-8}, clients ${CLIENTS:-1 4 8})"
  if [[ "${ES_LLAMA:-1}" == 1 && $LATE == 1 ]]; then
    wait $LLAMA_PID; echo "== llama.cpp build"; cat /tmp/llama/build.log | grep "rc="
  fi
  LS=/tmp/llama/b/bin/llama-server
  [[ "${ES_LLAMA_CUDA:-0}" == 1 ]] && LS=/tmp/llama/bc/bin/llama-server
  [[ -x $LS ]] || LS=""
  # ES_SERVE_VARIANTS="ARGS;ARGS...": edgeseek serve again with each set of extra arguments
  # (e.g. "--max-batch-tokens 1024;--profile"); llama.cpp runs with the first only.
  IFS=';' read -r -a variants <<< "${ES_SERVE_VARIANTS:-}"
  [[ ${#variants[@]} -gt 0 ]] || variants=("")
  for vi in "${!variants[@]}"; do
    v=${variants[$vi]}
    echo "== serving variant $vi: edgeseek serve --backend vulkan $v"
    rm -rf /tmp/serve_out
    ES_SERVE_ARGS="--backend vulkan $v" LLAMA_ARGS="-ngl 99" timeout "${ES_SERVE_TIMEOUT:-300}" bash tests/server/load_bench.sh \
      "$B/edgeseek" "$SG" /tmp/serve_out $LS 2>&1 | tee "$OUT/serve_$vi.txt" | grep -v "^$" | tail -80
    grep -E "^vulkan profile|^  |programs built" /tmp/serve_out/edgeseek_serve.log | head -60
    for f in /tmp/serve_out/*.json; do cp "$f" "$OUT/serve${vi}_$(basename "$f")"; done 2>/dev/null
    LS=""
  done
fi
echo "== job took $SECONDS s"
