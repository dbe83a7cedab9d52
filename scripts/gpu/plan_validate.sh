#!/usr/bin/env bash
# plan_validate.sh EDGESEEK OUTDIR: calibrate a device profile, then compare
# `plan --json` predictions with `bench` measurements (issue 20).
#   ES_PV_BACKEND  backend (default vulkan)
#   ES_PV_ROWS     rows "MODEL:TYPE ..." (MODEL: synthetic preset or config.json, or a .gguf
#                  file: plan and bench then read it with -m, TYPE only labels the row)
#   ES_PV_P/ES_PV_N prompt / generated tokens (default 512 / 128)
#   ES_PV_QUICK=1  calibrate with --quick (local tests)
#   ES_PV_NO_CPU=1 no CPU profile beside a GPU's (a short device job)
#   ES_PV_T        threads (-t) for calibration and bench (default: the backend's)
#   ES_PV_CONVERT=1 a synthetic row is converted to a GGUF file first (`convert --synthetic`,
#                  deleted after its row) and planned and benched from it: the file's types are
#                  plan's (a synthetic bench keeps a Q4_0/Q8_0 preset's embedding in bf16: 0.2 GiB
#                  more device weights for the 1.5B, 0.5 for the 7B) and a file is mmapped as a
#                  user's is (peak RSS on the CPU); synced to disk before the bench
# Memory: on a discrete GPU plan's allocations (weights + KV + activations, without the profile's
# nominal driver share) against the bytes bench reports the backend's device-local pools used at
# their peaks (device_memory; the blocks held beside them); elsewhere (CPU, integrated GPU,
# lavapipe: device memory is host memory) plan's whole figure against peak RSS. Plan takes the
# context bench allocates (P + N + 8). The last column but one also gives the bench's run-queue
# wait as a share of a decode step (p50s): a large share says the machine, not plan, was measured.
# The last columns tell a model error from the host's swing (session 41): the decode ratio at
# bench's p50 step (its tokens/s is the mean, which a slow state's steps pull down), the
# profile's bandwidth beside bench's own read sum, and the bench threads' CPU time over a decode
# step (the thread count when they all ran).
# A failing row prints its error and the script continues.
set -u
BIN=${1:?usage: plan_validate.sh EDGESEEK OUTDIR}
OUT=${2:?usage: plan_validate.sh EDGESEEK OUTDIR}
BACKEND=${ES_PV_BACKEND:-vulkan}
P=${ES_PV_P:-512}
N=${ES_PV_N:-128}
ROWS=${ES_PV_ROWS:-"r1-distill-qwen-1.5b:q4_0 r1-distill-qwen-1.5b:q8_0 r1-distill-qwen-1.5b:f16 \
r1-distill-qwen-7b:q4_0 r1-distill-qwen-7b:q8_0 r1-distill-qwen-7b:f16 deepseek-v2-lite:q4_0"}
mkdir -p "$OUT"
Q=(); [ -n "${ES_PV_QUICK:-}" ] && Q=(--quick)
T=(); [ -n "${ES_PV_T:-}" ] && T=(-t "$ES_PV_T")
PROFILE="$OUT/profile-$BACKEND.json"
echo "== calibrate ($BACKEND)"
if ! "$BIN" devices --calibrate --backend "$BACKEND" "${Q[@]}" "${T[@]}" --json "$PROFILE" >"$OUT/calibrate-$BACKEND.log" 2>&1; then
  echo "calibrate failed (see $OUT/calibrate-$BACKEND.log); using the stock profile"
  tail -5 "$OUT/calibrate-$BACKEND.log"
  PROFILE=""
fi
if [ "$BACKEND" != cpu ] && [ -z "${ES_PV_NO_CPU:-}" ]; then
  "$BIN" devices --calibrate --backend cpu "${Q[@]}" "${T[@]}" --json "$OUT/profile-cpu.json" >"$OUT/calibrate-cpu.log" 2>&1 ||
    echo "cpu calibrate failed (see $OUT/calibrate-cpu.log)"
fi
TABLE="$OUT/plan_validate.md"
{
  echo "| model | type | pred decode tok/s | meas decode | ratio | pred prefill tok/s | meas prefill | ratio | pred mem GiB | meas mem GiB | ratio | measured | device held GiB | decode ratio at p50 | calib read GB/s | bench read GB/s | step CPU / wall |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"
for row in $ROWS; do
  m=${row%%:*}; t=${row##*:}; tag=$(basename "$m" .json)-$t
  echo "== $m $t"
  dev=(); [ -n "$PROFILE" ] && dev=(--device "$PROFILE")
  src=(--synthetic "$m" --type "$t"); bsrc=(--synthetic "$m" --dtype "$t")
  conv=""
  case "$m" in
    *.gguf) src=(-m "$m"); bsrc=(-m "$m");;
    *) if [ -n "${ES_PV_CONVERT:-}" ]; then
         conv="$OUT/$tag.gguf"
         if "$BIN" convert --synthetic "$m" --type "$t" -o "$conv" >"$OUT/convert-$tag.log" 2>&1; then
           # The file's dirty pages written out now, not by the kernel's writeback during the
           # bench (GBs for a 7B: seconds of a 2-core machine's time and its memory bandwidth).
           sync
           src=(-m "$conv"); bsrc=(-m "$conv")
         else
           echo "convert failed (see $OUT/convert-$tag.log); the row runs synthetic"
         fi
       fi;;
  esac
  if ! "$BIN" plan "${src[@]}" "${dev[@]}" -p "$P" -n "$N" -c $((P + N + 8)) --json \
      >"$OUT/plan-$tag.json" 2>"$OUT/plan-$tag.err"; then
    echo "plan failed: $(tail -1 "$OUT/plan-$tag.err")"
  fi
  if ! "$BIN" bench --backend "$BACKEND" "${bsrc[@]}" "${T[@]}" -p "$P" -n "$N" --json \
      >"$OUT/bench-$tag.json" 2>"$OUT/bench-$tag.err"; then
    echo "bench failed: $(tail -1 "$OUT/bench-$tag.err")"
  fi
  [ -n "$conv" ] && rm -f "$conv"
  python3 - "$OUT/plan-$tag.json" "$OUT/bench-$tag.json" "$m" "$t" "$PROFILE" >>"$TABLE" <<'PY'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return {}
pl, be = load(sys.argv[1]), load(sys.argv[2])
pr = load(sys.argv[5]) if sys.argv[5] else {}
g = lambda d, k: float(d[k]) if isinstance(d.get(k), (int, float)) else None
pd, md = g(pl, "decode_tokens_per_s"), g(be, "decode_tokens_per_s")
pp, mp = g(pl, "prefill_tokens_per_s"), g(be, "prefill_tokens_per_s")
dm = be.get("device_memory") or {}
held = None
if dm.get("discrete"):
    # The model's live allocations in device-local memory at their peaks; plan without its
    # nominal driver share (not in edgeseek's pools).
    pools = [p for p in dm.get("pools", {}).values() if p.get("device_local")]
    mm = float(sum(p.get("used_bytes", 0) for p in pools))
    held = g(dm, "device_local_bytes")
    pm = g(pl, "memory_bytes")
    pm = pm - (g(pl, "overhead_bytes") or 0) if pm is not None else None
    what = "device pools"
else:
    pm, mm, what = g(pl, "memory_bytes"), g(be, "peak_rss_bytes"), "peak RSS"
# A decode step whose threads waited long for a core measured the other tenants, not the engine.
w, st = g(be, "step_run_queue_wait_ms_p50"), g(be, "decode_token_ms_p50")
if w and st:
    what += "; run-queue wait %.0f%% of a step" % (100 * w / st)
f = lambda x: "-" if x is None else "%.1f" % x
gb = lambda x: "-" if x is None else "%.2f" % (x / 2**30)
r = lambda a, b: "-" if not a or not b else "%.2f" % (a / b)
p50 = 1000.0 / st if st else None
cb = g(pr.get("bandwidth") or {}, "value")
cpu = g(be, "step_cpu_ms_p50")
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
      sys.argv[3], sys.argv[4], f(pd), f(md), r(pd, md), f(pp), f(mp), r(pp, mp), gb(pm), gb(mm),
      r(pm, mm), what, gb(held), r(pd, p50), "-" if cb is None else "%.1f" % (cb / 1e9),
      f(g(be, "mem_read_bandwidth_gbs")), r(cpu, st)))
PY
done
cat "$TABLE"
