#!/usr/bin/env bash
# Load benchmark of docs/performance.md ("Serving"; the runs are in docs/log/): `edgeseek
# loadtest` against `edgeseek serve` and, when given, llama.cpp's llama-server, on the same GGUF
# file, at 1, 4 and 8 concurrent closed-loop streaming clients (CLIENTS="1 8 32 64" for others).
# Not a test: it prints the table rows and keeps the JSON.
#
#   tests/server/load_bench.sh EDGESEEK GGUF OUT_DIR [LLAMA_SERVER]
#
# The GGUF: python3 tests/server/bench_tokenizer.py /tmp/bench_tok &&
#   edgeseek convert --synthetic r1-distill-qwen-1.5b --type q4_0 --tokenizer /tmp/bench_tok -o X.gguf
# Both servers: SLOTS sequences (default 8), THREADS threads (2), CONTEXT tokens of context per
# slot (4096; llama.cpp: -c SLOTS*CONTEXT -np SLOTS); PROMPT_WORDS (16) words a prompt, MAX_TOKENS
# (32) tokens a request, twice as many requests as clients (at least 4).
# Extra server arguments: ES_SERVE_ARGS (e.g. "--backend vulkan"), LLAMA_ARGS (e.g. "-ngl 99").
set -euo pipefail
es=$1 gguf=$2 out=$3 llama=${4:-}
threads=${THREADS:-2} words=${PROMPT_WORDS:-16} max_tokens=${MAX_TOKENS:-32}
slots=${SLOTS:-8} context=${CONTEXT:-4096} clients=${CLIENTS:-1 4 8}
mkdir -p "$out"

wait_ready() {  # url
  for _ in $(seq 1 300); do
    if command -v curl >/dev/null; then
      if curl -sf "$1/health" | grep -q '"ok"'; then return 0; fi
    elif python3 -c "import urllib.request,sys; sys.exit(0 if b'\"ok\"' in urllib.request.urlopen('$1/health').read() else 1)" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  echo "server at $1 not ready" >&2
  return 1
}

run_loads() {  # name url
  for c in $clients; do
    n=$((c * 2 > 4 ? c * 2 : 4))
    echo "== $1: $c clients, $n requests (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    # Prompts of their own each client count (--seed): no run is served from a prefix cache that
    # an earlier run or the warm-up filled (llama-server's slots keep their last prompt too).
    "$es" loadtest --url "$2" --model bench -c "$c" -n "$n" --prompt-words "$words" --max-tokens "$max_tokens" \
      --seed "$((1000 * c + 1))" --json "$out/$1_c$c.json"
    # edgeseek's step histograms (cumulative over the client counts run so far); the decode-only
    # steps' and the host gaps' buckets: the served step beside the bench's
    [ "$1" = edgeseek ] && python3 -c "import urllib.request; print(urllib.request.urlopen('$2/metrics').read().decode())" 2>/dev/null |
      grep -E '^edgeseek_(step_seconds|decode_step_seconds|step_host_seconds|inter_token_latency_seconds|batch_tokens|batch_sequences)_(sum|count)|^edgeseek_(decode_step|step_host)_seconds_bucket|^edgeseek_engine_steps_total|^edgeseek_kv_preemptions_total|^edgeseek_preemptions_total' |
      sed "s/^/metrics c$c: /" || true
  done
}

# shellcheck disable=SC2086
"$es" serve -m "$gguf" --alias bench --port 18301 --slots "$slots" -t "$threads" --context "$context" ${ES_SERVE_ARGS:-} 2> "$out/edgeseek_serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready http://127.0.0.1:18301
warm() {  # url: pages the weights in and builds the batched shapes (GPU pipelines, recorded steps)
  local cmax=1
  for c in $clients; do [ "$c" -gt "$cmax" ] && cmax=$c; done
  "$es" loadtest --url "$1" --model bench -c "$cmax" -n "$cmax" --prompt-words "$words" --max-tokens 8 \
    --seed 999001 > /dev/null
}
warm http://127.0.0.1:18301
run_loads edgeseek http://127.0.0.1:18301
kill -TERM $pid && wait $pid || true

if [ -n "$llama" ]; then
  # shellcheck disable=SC2086
  "$llama" -m "$gguf" --alias bench --port 18302 -np "$slots" -c $((slots * context)) -t "$threads" --cont-batching ${LLAMA_ARGS:-} 2> "$out/llama_server.log" > /dev/null &
  pid=$!
  wait_ready http://127.0.0.1:18302
  warm http://127.0.0.1:18302
  run_loads llama_cpp http://127.0.0.1:18302
  kill -TERM $pid && wait $pid || true
fi
