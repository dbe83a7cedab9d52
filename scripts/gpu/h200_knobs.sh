#!/usr/bin/env bash
# Knob comparisons on the H200 after `h200_compare.sh run` (same job, same binaries in .esbin/):
# one line per setting, appended to $OUT/knobs.txt. ES_KNOBS picks the groups (gemm cm2 cm2b
# cm2prof gemv idot tpr_idot tpr_gemv). `idot` and `gemv` end with their small-TPR settings
# (docs/vulkan.md "Small TPR"), which `tpr_idot` and `tpr_gemv` run alone; those take
# /tmp/PRESET-TYPE.gguf where h200_compare.sh wrote it, else the synthetic model (slower to
# load). All four files, then each group in a call of its own (10 minutes a call; the machine
# and /tmp stay between calls while it is warm):
#   run(command="ES_GGUFS='r1-distill-qwen-1.5b:q4_0 r1-distill-qwen-1.5b:q8_0 r1-distill-qwen-7b:q4_0
#     r1-distill-qwen-7b:q8_0' ES_TESTS=0 ES_LLAMA=0 bash scripts/gpu/h200_compare.sh run",
#     carry=[".gl", ".llama", ".esbin"])
#   run(command="ES_KNOBS=tpr_idot bash scripts/gpu/h200_knobs.sh", ...), then ES_KNOBS=tpr_gemv
#   run(command="bash scripts/gpu/h200_compare.sh run; bash scripts/gpu/h200_knobs.sh", carry=[...])
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/device_env.sh .esbin
bench() {  # label, env..., -- bench args
  local label=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local line
  line=$(env "${envs[@]}" timeout 120 "$B/edgeseek" bench --backend vulkan "$@" 2>&1 | grep -E "prefill|decode" | tr '\n' ' ')
  echo "$label: $line" | tee -a "$OUT/knobs.txt"
}
# The model args of a preset and weight type: the GGUF h200_compare.sh wrote, else the synthetic model.
model() {
  local f=/tmp/$1-$2.gguf
  if [[ -f $f ]]; then echo "-m $f"; else echo "--synthetic $1 --dtype $2"; fi
}
# Small TPR (4-16 invocations per output group, clustered subgroup sums: docs/vulkan.md "Small
# TPR") against the defaults: each argument one setting of ES_VK_GEMV_<KNOB> words (spaces or
# ";"), over the 7B and 1.5B distills in the weight types given by $TPR_TYPES. Rows per
# workgroup = WG / TPR * QR: the first look (TPR 8 QR 4 WG 256 = 128 rows) lost to the default
# (16 rows), maybe for want of workgroups (the 7B's 3584 outputs: 28), so the lists span 16 to
# 128 rows. ES_TPR_IDOT_KNOBS / ES_TPR_GEMV_KNOBS replace them (settings apart by spaces, the
# words of one joined by ";").
TPR_IDOT_DEFAULT=("IDOT=0" "IDOT=1" "IDOT=1 IDOT_TPR=8 IDOT_QR=4 IDOT_WG=256" "IDOT=1 IDOT_TPR=8 IDOT_QR=2 IDOT_WG=128"
  "IDOT=1 IDOT_TPR=8 IDOT_QR=1 IDOT_WG=128" "IDOT=1 IDOT_TPR=16 IDOT_QR=4 IDOT_WG=256"
  "IDOT=1 IDOT_TPR=16 IDOT_QR=2 IDOT_WG=128" "IDOT=1 IDOT_TPR=16 IDOT_QR=2 IDOT_WG=256"
  "IDOT=1 IDOT_TPR=4 IDOT_QR=2 IDOT_WG=128" "IDOT=1 IDOT_LOCAL=0 IDOT_TPR=8 IDOT_QR=2 IDOT_WG=128")
TPR_GEMV_DEFAULT=("IDOT=0" "IDOT=0 TPR=8 QR=4" "IDOT=0 TPR=8 QR=2" "IDOT=0 TPR=16 QR=4" "IDOT=0 TPR=16 QR=2"
  "IDOT=0 TPR=4 QR=2")
tpr_settings() {
  for m in r1-distill-qwen-7b r1-distill-qwen-1.5b; do
    for t in $TPR_TYPES; do
      for k in "$@"; do
        local_env=()
        for kv in ${k//;/ }; do local_env+=("ES_VK_GEMV_$kv"); done
        bench "$m $t $k" "${local_env[@]}" -- $(model $m $t) -p 16 -n 64 -r 2
      done
    done
  done
}
# The integer-dot path (Q4_0's default; Q8_0 needs IDOT=1), Q4_0 and Q8_0.
tpr_idot() {
  if [[ -n ${ES_TPR_IDOT_KNOBS:-} ]]; then TPR_TYPES="q4_0 q8_0" tpr_settings $ES_TPR_IDOT_KNOBS
  else TPR_TYPES="q4_0 q8_0" tpr_settings "${TPR_IDOT_DEFAULT[@]}"; fi
}
# The float path (AccumQuant: Q8_0's default; WG 128, so TPR 8 QR 4 is 64 rows a workgroup).
tpr_gemv() {
  if [[ -n ${ES_TPR_GEMV_KNOBS:-} ]]; then TPR_TYPES="q8_0" tpr_settings $ES_TPR_GEMV_KNOBS
  else TPR_TYPES="q8_0" tpr_settings "${TPR_GEMV_DEFAULT[@]}"; fi
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
           # GEMM does differently"): split-K (SPLITK = max slices), its 128 weight x 256 token x 64
           # tile (TILE=256x128x64 SWAP=1). The loop / stride / accumulator / launch-order flags
           # were settled (FAST, LOOP=1) and are no longer knobs (src/backends/vulkan/tuning.cpp).
      cm2_settings ${ES_CM2B_KNOBS:-"TILE=256x128x64 SWAP=1 SPLITK=4" "TILE=256x128x64 SWAP=1 SPLITK=0" \
        "TILE=128x128x64 SPLITK=0" "TILE=128x128x64 SPLITK=4" "TILE=128x128x64 SPLITK=8" "CM2=0"} ;;
    cm2prof)  # where the prefill step's time goes (shader time per op family), cm2 reference and
              # the llama.cpp-like setting, 7B; ES_CM2B_PROF overrides the settings
      for k in ${ES_CM2B_PROF:-"TILE=128x128x64" "TILE=256x128x64 SWAP=1 SPLITK=4"}; do
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
      tpr_idot
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
      done
      tpr_gemv ;;
    tpr_idot) tpr_idot ;;
    tpr_gemv) tpr_gemv ;;
    fa)  # prefill attention on tensor cores (attention_cm2.comp) against attention_rows.comp
         # (FA_CM2=0): tiles BRxBC and workgroup sizes, pp512 on the f16 files h200_compare.sh
         # wrote (else the synthetic models); ES_FA_KNOBS overrides (ES_VK_FA_<KNOB>=<value>
         # words joined by ";"); then 7B prefill profiles and a pp2048 pair
      for m in r1-distill-qwen-1.5b r1-distill-qwen-7b; do
        f=/tmp/$m-f16.gguf
        if [[ -f $f ]]; then margs="-m $f"; else margs="--synthetic $m --dtype f16"; fi
        for k in ${ES_FA_KNOBS:-"CM2=0" "TILE=64x64" "TILE=32x64" "TILE=16x64" "TILE=64x32" "TILE=128x64" \
          "TILE=64x64;WG=256" "TILE=32x32"}; do
          local_env=()
          for kv in ${k//;/ }; do local_env+=("ES_VK_FA_$kv"); done
          bench "$m f16 fa $k" "${local_env[@]}" -- $margs -p 512 -n 4 -r 2
        done
        for k in "CM2=0" "CM2=1"; do
          bench "$m f16 fa $k pp2048" ES_VK_FA_$k -- $margs -p 2048 -n 4 -r 1
        done
      done
      for k in "CM2=0" "CM2=1"; do
        f=/tmp/r1-distill-qwen-7b-f16.gguf
        if [[ -f $f ]]; then margs="-m $f"; else margs="--synthetic r1-distill-qwen-7b --dtype f16"; fi
        env ES_VK_FA_$k timeout 180 "$B/edgeseek" bench --backend vulkan $margs -p 512 -n 4 -r 1 --profile 2>&1 |
          grep -A1 -E "profile, prefill" | sed "s|^|7b fa $k: |" | tee -a "$OUT/knobs.txt"
      done ;;
  esac
done
