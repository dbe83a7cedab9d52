#!/usr/bin/env bash
# One job on the GPU machine: batched decode of one model file with two builds of edgeseek, side
# by side on the same machine (session 40's A/B of the MoE expert GEMVs; a change to the decode
# step of 2-64 rows is measured this way), then the serving load on the new build.
#   here:  scripts/gpu/pack_vulkan.sh build && rm -f .gpubin/es_test_* && tar cJf .gpubin.txz .gpubin
#          (the new build), and the base build packed the same way, renamed .gpubase, into
#          .gpubase.txz (both git-ignored; edgeseek alone keeps the carry within 64 MiB)
#   there: run(command="bash scripts/gpu/batched_ab.sh", carry=[".gl", ".gpubin.txz", ".gpubase.txz"])
# Environment: ES_AB_MODEL ("preset:type", default deepseek-v2-lite:q4_0, converted there with a
# 102,400-id tokenizer for V2-Lite, else the 151,936-id one; ES_AB_VOCAB another size), ES_AB_ROWS (bench -b, default
# 1,8,32,64), ES_AB_ROUNDS (alternating rounds, default 1), ES_AB_PROFILE=N (--profile of -b N with
# both builds), ES_AB_SERVE=0 skips the serving load (CLIENTS "1 8 32 64", SLOTS 32, 300-word
# prompts, 128 out), ES_AB_F16=1 adds V2-Lite f16 tg128 from an empty cache with both builds,
# ES_AB_PREFILL=1 pp512 and pp4096 with both builds, twice, alternating; ES_AB_PROMPT the bench's
# prompt (default 400; the serving load's 300-word prompts are ~915 tokens with the chat template,
# so its decode rows sit at contexts ~915-1,043), ES_AB_KNOBS="A=1 B=2|A=4|..." then benches the
# new build once per '|'-separated set of knob settings (an A/B grid on one machine).
set -u
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
[ -f .gpubin.txz ] && tar xJf .gpubin.txz
[ -f .gpubase.txz ] && tar xJf .gpubase.txz
. scripts/gpu/device_env.sh .gpubin
exec > >(tee "$OUT/batched_ab.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
MODEL=${ES_AB_MODEL:-deepseek-v2-lite:q4_0}
preset=${MODEL%%:*} type=${MODEL##*:}
vocab=${ES_AB_VOCAB:-151936}
[ "$preset" = deepseek-v2-lite ] && [ -z "${ES_AB_VOCAB:-}" ] && vocab=102400
python3 tests/server/bench_tokenizer.py /tmp/ab_tok --vocab "$vocab" > /dev/null
G=/tmp/ab_$(basename "$preset")_$type.gguf
$B/edgeseek convert --synthetic "$preset" --type "$type" --tokenizer /tmp/ab_tok -t 12 -o $G > /tmp/ab_convert.log 2>&1 ||
  tail -3 /tmp/ab_convert.log
echo "converted $MODEL at $(( $(date +%s) - T0 )) s"
P=${ES_AB_PROMPT:-400}
# decode_bench BIN [KNOB=VALUE ...]: the decode steps of -b ROWS at the prompt P
decode_bench() {
  local bin=$1
  shift
  env "$@" ./$bin/edgeseek bench --backend vulkan -m $G -b "${ES_AB_ROWS:-1,8,32,64}" -p $P -n 32 2>&1 | grep -E "^decode"
}
bins=(.gpubin)
[ -d .gpubase ] && bins=(.gpubase .gpubin)
for round in $(seq 1 "${ES_AB_ROUNDS:-1}"); do
  for bin in "${bins[@]}"; do
    echo "== $bin, round $round: bench -b ${ES_AB_ROWS:-1,8,32,64} -p $P -n 32"
    decode_bench $bin
  done
  [ ${#bins[@]} = 2 ] && bins=("${bins[1]}" "${bins[0]}")  # the other order next round
done
if [ -n "${ES_AB_KNOBS:-}" ]; then
  IFS='|' read -ra sets <<< "$ES_AB_KNOBS"
  for set in "${sets[@]}"; do
    echo "== .gpubin with $set: bench -b ${ES_AB_ROWS:-1,8,32,64} -p $P -n 32"
    # shellcheck disable=SC2086
    decode_bench .gpubin $set
  done
fi
if [ "${ES_AB_PREFILL:-0}" = 1 ]; then
  for bin in .gpubase .gpubin .gpubase .gpubin; do
    [ -d $bin ] || continue
    echo "== $bin: prefill pp512, pp4096"
    ./$bin/edgeseek bench --backend vulkan -m $G -p 512 -n 1 -r 3 2>&1 | grep -E "^prefill"
    ./$bin/edgeseek bench --backend vulkan -m $G -p 4096 -n 1 -r 1 2>&1 | grep -E "^prefill"
  done
fi
if [ -n "${ES_AB_PROFILE:-}" ]; then
  for bin in .gpubase .gpubin; do
    [ -d $bin ] || continue
    echo "== $bin --profile -b $ES_AB_PROFILE"
    ./$bin/edgeseek bench --backend vulkan -m $G -b "$ES_AB_PROFILE" -p $P -n 16 --profile > "$OUT/profile_$bin.txt" 2>&1
    grep -A24 "decode (" "$OUT/profile_$bin.txt"
  done
fi
if [ "${ES_AB_F16:-0}" = 1 ]; then
  for bin in .gpubin .gpubase; do
    [ -d $bin ] || continue
    echo "== $bin: V2-Lite f16 tg128 from an empty cache"
    ./$bin/edgeseek bench --backend vulkan --synthetic deepseek-v2-lite --dtype f16 -p 0 -n 128 -r 2 2>&1 | grep -E "^decode|^bandwidth"
  done
fi
if [ "${ES_AB_SERVE:-1}" = 1 ]; then
  echo "== serving ($B/edgeseek) at $(( $(date +%s) - T0 )) s"
  SLOTS=32 CLIENTS=${CLIENTS:-"1 8 32 64"} PROMPT_WORDS=300 MAX_TOKENS=128 CONTEXT=4096 THREADS=8 \
    ES_SERVE_ARGS="--backend vulkan" bash tests/server/load_bench.sh $B/edgeseek $G "$OUT/lb" 2>&1 |
    grep -E "clients|output|inter-token|first token|^metrics"
fi
echo "done at $(( $(date +%s) - T0 )) s"
