#!/usr/bin/env bash
# One job on the one-GPU machine (issue 18; docs/server.md "Structured output"): where a
# schema-constrained decode step's extra time goes on Vulkan, 7B Q4_0 (synthetic weights, the
# 151,936-id tokenizer of tests/server/bench_tokenizer.py). A constrained row takes the logits
# path (its row comes back, is masked and sampled on the host); session 34 measured +12-18%
# inter-token time for one stream and +54-57% for eight on an H100, where the CPU backend's same
# load costs +2%. A server with --profile carries the backend's upload / dispatch / shader /
# download split on each step: /metrics is scraped around each loadtest and the per-step deltas
# printed (plain against constrained, 1 and 8 clients, twice); then a server without --profile
# gives the inter-token gaps of the same loads.
#   here:  scripts/gpu/pack_vulkan.sh build && cp -r /work/main/.gl .   (the Vulkan loader debs)
#   there: run(command="bash scripts/gpu/structured_h200.sh", carry=[".gl", ".gpubin"])
# ES_SJ_BIN names another edgeseek binary.
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
. scripts/gpu/device_env.sh .gpubin
E=${ES_SJ_BIN:-$B/edgeseek}
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
# ES_SJ_MODEL="ARGS" serves other model arguments and ES_SJ_BACKEND another backend (a smoke
# test here: ES_SJ_MODEL="--synthetic tests/server/tiny_config.json --tokenizer
# tests/data/tiny_tokenizer" ES_SJ_BACKEND=cpu); by default the synthetic 7B is converted first.
BACKEND=${ES_SJ_BACKEND:-vulkan}
if [ -z "${ES_SJ_MODEL:-}" ]; then
  python3 tests/server/bench_tokenizer.py /tmp/bench_tok > /dev/null
  $E convert --synthetic r1-distill-qwen-7b --type q4_0 --tokenizer /tmp/bench_tok -o /tmp/7b_tok.gguf > /tmp/conv.log 2>&1 || tail -3 /tmp/conv.log
  echo "converted at $(( $(date +%s) - T0 )) s"
fi
read -r -a MODEL <<< "${ES_SJ_MODEL:--m /tmp/7b_tok.gguf}"
echo '{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}' > /tmp/s1.json
cat > /tmp/scrape.py <<'PY'
import re, sys, json, urllib.request
def scrape(port):
    t = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = {}
    for line in t.splitlines():
        if line.startswith("#"): continue
        mm = re.match(r'^(\w+)(\{[^}]*\})?\s+([-0-9.eE+naif]+)$', line)
        if not mm: continue
        name, labels, v = mm.group(1), mm.group(2) or "", float(mm.group(3))
        ph = re.search(r'phase="(\w+)"', labels)
        key = name + (":" + ph.group(1) if ph else "")
        m[key] = m.get(key, 0.0) + v
    return m
port, mode = sys.argv[1], sys.argv[2]
if mode == "save":
    json.dump(scrape(port), open("/tmp/m0.json", "w"))
else:
    a, b = json.load(open("/tmp/m0.json")), scrape(port)
    d = {k: b.get(k, 0) - a.get(k, 0) for k in b}
    steps = d.get("edgeseek_engine_steps_total", 0) or 1
    out = {"steps": steps, "step_ms": 1e3 * d.get("edgeseek_step_seconds_sum", 0) / steps}
    for p in ("upload", "dispatch", "shader", "download"):
        out[p + "_ms"] = 1e3 * d.get("edgeseek_backend_seconds_total:" + p, 0) / steps
    # What the step spent outside the backend's phases: the engine's host work in the step.
    out["other_ms"] = out["step_ms"] - sum(out[p + "_ms"] for p in ("upload", "dispatch", "shader", "download"))
    out["batch_tokens"] = d.get("edgeseek_batch_tokens_sum", 0) / steps
    print("per step:", " ".join(f"{k}={v:.3f}" for k, v in out.items()))
PY
serve() {  # port, extra flags
  $E serve "${MODEL[@]}" --alias bench --port $1 --slots 8 --backend "$BACKEND" --context 4096 "${@:2}" 2>> "$OUT/serve.log" &
  pid=$!
  for _ in $(seq 1 120); do python3 -c "import urllib.request,sys; sys.exit(0 if b'\"ok\"' in urllib.request.urlopen('http://127.0.0.1:$1/health').read() else 1)" 2>/dev/null && break; sleep 1; done
}
L() { $E loadtest --port $P --model bench --prompt-words 64 --max-tokens 128 "$@" 2>&1 | grep -E '^loadtest|^ok|^inter-token|failed with'; }
for P in 18311 18312; do
  if [ $P = 18311 ]; then serve $P --profile; echo "== server with --profile (ready at $(( $(date +%s) - T0 )) s)"; else serve $P; echo "== server without --profile"; fi
  L -c 2 -n 2 --max-tokens 8 --seed 7 > /dev/null
  for c in 1 8; do
    n=$(( c * 2 > 4 ? c * 2 : 4 ))
    for kind in plain s1 plain s1; do
      python3 /tmp/scrape.py $P save
      if [ $kind = plain ]; then echo "-- $c clients plain"; L -c $c -n $n --seed $((c+1)); else echo "-- $c clients s1"; L -c $c -n $n --seed $((c+1)) --response-format /tmp/s1.json; fi
      python3 /tmp/scrape.py $P diff
    done
  done
  kill $pid; wait $pid 2>/dev/null
done
echo "done at $(( $(date +%s) - T0 )) s"
