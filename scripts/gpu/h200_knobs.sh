#!/usr/bin/env bash
# Knob comparisons on the H200 after `h200_compare.sh run` (same job, same binaries in .esbin/):
# one line per setting, appended to $OUT/knobs.txt. ES_KNOBS picks the groups (gemm cm2 cm2b
# cm2prof gemv idot).
#   run(command="bash scripts/gpu/h200_compare.sh run; bash scripts/gpu/h200_knobs.sh", carry=[...])
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$PWD/.esbin
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ES_VK_CACHE_DIR=/tmp/es_vk_cache ES_VK_VALIDATION=0
"$B/edgeseek" devices > /dev/null 2>&1 || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
bench() {  # label, env..., -- bench args
  local label=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local line
  line=$(env "${envs[@]}" timeout 120 "$B/edgeseek" bench --backend vulkan "$@" 2>&1 | grep -E "prefill|decode" | tr '\n' ' ')
  echo "$label: $line" | tee -a "$OUT/knobs.txt"
}
cm2_settings() {  # each argument one setting: ES_VK_CM2_<KNOB>=<value> words (";" or spaces), or CM2=0
  for m in r1-distill-qwen-1.5b r1-distill-qwen-7b; do
    for k in "$@"; do
      local_env=(ES_VK_CM2=1)
      for kv in ${k//;/ }; do local_env+=("ES_VK_CM2_$kv"); done
      [[ $k == CM2=0 ]] && local_env=(ES_VK_CM2=0)
      bench "$m f16 $k" "${local_env[@]}" -- --synthetic $m --dtype f16 -p 512 -n 4 -r 2
    done
  done
}
for g in ${ES_KNOBS:-gemm gemv}; do
  case $g in
    gemm)
      for m in r1-distill-qwen-1.5b r1-distill-qwen-7b; do
        for sb in 1 0; do for bm in 64 128; do
          bench "$m f16 SB=$sb BM=$bm" ES_VK_SHARED_BLOCK=$sb ES_VK_GEMM_BM=$bm -- --synthetic $m --dtype f16 -p 512 -n 4 -r 2
        done; done
      done ;;
    cm2)  # the workgroup-scope coopmat GEMM (on by default where present, matmul_gemm_cm2.comp): tiles,
          # operand order, x loads; needs binaries built with scripts/gpu/glslc_trixie.sh's glslc
      cm2_settings ${ES_CM2_KNOBS:-"TILE=128x128x32" "TILE=128x128x64" "TILE=128x256x64" "TILE=64x128x64" \
        "TILE=128x128x64 X32=1" "TILE=128x128x64 SWAP=1" "TILE=128x256x64 SWAP=1" "TILE=128x128x32 SWAP=1" \
        "TILE=64x128x64 SWAP=1" "TILE=128x128x64 SWAP=1 X32=1" "CM2=0"} ;;
    cm2b)  # variants after llama.cpp's coopmat2 matmul (docs/vulkan.md, "What llama.cpp's coopmat2
           # GEMM does differently"): unclamped whole-tile loop (FAST), 16-byte strides (ALIGN),
           # K-loop hint (LOOP=1: none, 0: don't unroll), f16 accumulators (ACC16), split-K
           # (SPLITK = max slices), its 128 weight x 256 token x 64 tile (TILE=256x128x64
           # SWAP=1); ours: activation tiles fastest in the launch order (ORDER). Since
           # 2026-11-30 FAST=1, LOOP=1 and SPLITK=4 are the defaults (set FAST=0 etc. to compare).
      cm2_settings ${ES_CM2B_KNOBS:-"TILE=256x128x64 SWAP=1 FAST=1 LOOP=1 ACC16=1 SPLITK=4" \
        "TILE=256x128x64 SWAP=1 FAST=1 LOOP=1 ACC16=1 SPLITK=4 ORDER=1" \
        "TILE=128x128x64 ACC16=1" "TILE=128x128x64 FAST=1 LOOP=1" "TILE=128x128x64 LOOP=1" \
        "TILE=128x128x64 ALIGN=1" "TILE=128x128x64 ORDER=1" "TILE=128x128x64 SPLITK=4" \
        "TILE=128x128x64" "CM2=0"} ;;
    cm2prof)  # where the prefill step's time goes (shader time per op family), cm2 reference and
              # the llama.cpp-like setting, 7B; ES_CM2B_PROF overrides the settings
      for k in ${ES_CM2B_PROF:-"TILE=128x128x64" "TILE=256x128x64 SWAP=1 FAST=1 LOOP=1 ACC16=1 SPLITK=4"}; do
        local_env=(ES_VK_CM2=1)
        for kv in ${k//;/ }; do local_env+=("ES_VK_CM2_$kv"); done
        env "${local_env[@]}" timeout 180 "$B/edgeseek" bench --backend vulkan --synthetic r1-distill-qwen-7b \
          --dtype f16 -p 512 -n 4 -r 1 --profile 2>&1 | grep -A1 -E "profile, prefill" | sed "s|^|7b $k: |" |
          tee -a "$OUT/knobs.txt"
      done ;;
    idot)  # the integer-dot GEMV (Q8_0/Q4_0 decode) against the float one and its knobs, then one
           # decode token's profile with it (ES_IDOT_KNOBS overrides the 7B q4_0 settings)
      for f in /tmp/r1-distill-qwen-7b-q4_0.gguf /tmp/r1-distill-qwen-7b-q8_0.gguf /tmp/r1-distill-qwen-1.5b-q4_0.gguf /tmp/r1-distill-qwen-1.5b-q8_0.gguf; do
        [[ -f $f ]] || continue
        ks=("IDOT=0" "IDOT=1" "IDOT_TPR=32 IDOT_QR=4 IDOT_WG=256" "IDOT_LOCAL=0 IDOT_TPR=128 IDOT_QR=4")
        [[ $f == *7b-q4_0* ]] && ks=(${ES_IDOT_KNOBS:-"IDOT=0" "IDOT=1" "IDOT_TPR=32 IDOT_QR=4" \
          "IDOT_TPR=32 IDOT_QR=4 IDOT_WG=256" "IDOT_TPR=64 IDOT_QR=4 IDOT_WG=256" "IDOT_TPR=128 IDOT_QR=4" \
          "IDOT_TPR=32 IDOT_QR=2 IDOT_WG=256" "IDOT_TPR=128 IDOT_QR=2" "IDOT_LOCAL=0 IDOT_TPR=128 IDOT_QR=4" \
          "IDOT_LOCAL=0 IDOT_TPR=64 IDOT_QR=2"})
        for k in "${ks[@]}"; do
          local_env=()
          for kv in $k; do local_env+=("ES_VK_GEMV_$kv"); done
          bench "$(basename $f) $k" "${local_env[@]}" -- -m $f -p 16 -n 128 -r 1
        done
      done
      f=/tmp/r1-distill-qwen-7b-q4_0.gguf
      [[ -f $f ]] && timeout 120 "$B/edgeseek" bench --backend vulkan -m $f -p 16 -n 16 -r 1 --profile 2>&1 |
        grep -A3 -E "profile, decode" | sed "s|^|7b q4_0 idot: |" | tee -a "$OUT/knobs.txt" ;;
    gemv)
      for f in /tmp/r1-distill-qwen-7b-q4_0.gguf /tmp/r1-distill-qwen-1.5b-q4_0.gguf /tmp/r1-distill-qwen-7b-q8_0.gguf; do
        [[ -f $f ]] || continue
        for k in "QR=2" "QR=4" "QR=8" "QR=4 TPR=32" "QR=4 TPR=128" "QR=4 SPL=2" "QR=8 SPL=2" "QR=4 MAGIC=0"; do
          local_env=()
          for kv in $k; do local_env+=("ES_VK_GEMV_$kv"); done
          bench "$(basename $f) $k" "${local_env[@]}" -- -m $f -p 16 -n 64 -r 1
        done
      done ;;
  esac
done
