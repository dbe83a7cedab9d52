#!/usr/bin/env bash
# One job on the GPU machine (issue 17, 85d0a40): serving on an empty pipeline cache. A server
# warms its programs up before it reports ready (Engine::Warm); this checks that no pipeline is
# left to be built under load: `edgeseek serve --slots 32` on an empty ES_VK_CACHE_DIR, then 8 and
# 32 closed-loop clients (300-word prompts, 128 tokens out), then the same server restarted on the
# filled cache and the same loads. Compare the cold run's TTFT P99 and throughput with the warm
# one's and the two warm-up times ("warmed up ... in N s" in $OUT/cold_serve.log).
#   here:  scripts/gpu/pack_vulkan.sh build && tar cJf .gpubin.txz .gpubin  (with .gl/: ../shared/device)
#   there: run(command="tar xJf .gpubin.txz && ES_VK_PIPELINE_STATS=1 bash scripts/gpu/cold_cache_h200.sh", carry=[".gl", ".gpubin.txz"])
# ES_CC_MODEL="ARGS" serves other model arguments (default: the synthetic 7B as Q4_0, converted
# first with tests/server/bench_tokenizer.py's 151,936-id tokenizer).
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. scripts/gpu/device_env.sh .gpubin
exec > >(tee "$OUT/cold_cache.txt") 2>&1
if [ -z "${ES_CC_MODEL:-}" ]; then
  G=/tmp/r1-distill-qwen-7b-q4_0.gguf
  if [ ! -f $G ]; then
    python3 tests/server/bench_tokenizer.py /tmp/bench_tok > /dev/null
    $B/edgeseek convert --synthetic r1-distill-qwen-7b --type q4_0 --tokenizer /tmp/bench_tok -t 12 -o $G > /tmp/cc_convert.log 2>&1 || tail -3 /tmp/cc_convert.log
  fi
  ES_CC_MODEL="-m $G"
fi
read -r -a MODEL <<< "$ES_CC_MODEL"
# The NVIDIA driver keeps a shader cache of its own (session 39: an earlier job of the same machine
# had filled it, and the "empty" server warmed up as fast as the filled one): it goes into the same
# directory, so the first server starts with neither cache.
serve() {  # cache dir, port
  echo "== server on $1, port $2" >> "$OUT/cold_serve.log"
  ES_VK_CACHE_DIR=$1 __GL_SHADER_DISK_CACHE_PATH=$1/driver $B/edgeseek serve "${MODEL[@]}" --alias bench --port $2 --slots 32 --backend vulkan --context 4096 2>> "$OUT/cold_serve.log" &
  pid=$!
  local t0=$(date +%s.%N)
  for _ in $(seq 1 480); do
    python3 -c "import urllib.request,sys; sys.exit(0 if b'\"ok\"' in urllib.request.urlopen('http://127.0.0.1:$2/health').read() else 1)" 2>/dev/null && break
    sleep 0.5
  done
  echo "ready after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
}
L() { $B/edgeseek loadtest --port $P --model bench --prompt-words 300 --max-tokens 128 "$@" 2>&1 | grep -vE '^\s*$' | head -8; }
rm -rf /tmp/cc_cache && mkdir -p /tmp/cc_cache/driver
P=18401; echo "== empty pipeline cache"; serve /tmp/cc_cache $P
echo "-- 8 clients"; L -c 8 -n 16 --seed 3; echo "-- 32 clients"; L -c 32 -n 64 --seed 4
kill $pid; wait $pid 2>/dev/null
P=18402; echo "== the cache filled"; serve /tmp/cc_cache $P
echo "-- 8 clients"; L -c 8 -n 16 --seed 5; echo "-- 32 clients"; L -c 32 -n 64 --seed 6
kill $pid; wait $pid 2>/dev/null
grep -E "warmed up" "$OUT/cold_serve.log"
# With ES_VK_PIPELINE_STATS=1 every pipeline built prints a line: none may come after the first
# server's warm-up (pipelines the warm-up missed, built under load).
if [ "${ES_VK_PIPELINE_STATS:-0}" = 1 ]; then
  echo "pipelines built after the cold server's warm-up: $(awk '/^== server/{s++} /warmed up/{w++} s == 1 && w == 1 && /vulkan pipeline/' "$OUT/cold_serve.log" | tee "$OUT/late_pipelines.txt" | wc -l)"
fi
echo "done at $(( $(date +%s) - T0 )) s"
