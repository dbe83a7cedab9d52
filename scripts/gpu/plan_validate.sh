#!/usr/bin/env bash
# plan_validate.sh EDGESEEK OUTDIR: calibrate a device profile, then compare
# `plan --json` predictions with `bench` measurements (issue 20).
#   ES_PV_BACKEND  backend (default vulkan)
#   ES_PV_ROWS     rows "MODEL:TYPE ..." (MODEL: synthetic preset or config.json, or a .gguf
#                  file: plan and bench then read it with -m, TYPE only labels the row)
#   ES_PV_P/ES_PV_N prompt / generated tokens (default 512 / 128)
#   ES_PV_QUICK=1  calibrate with --quick (local tests)
#   ES_PV_NO_CPU=1 no CPU profile beside a GPU's (a short device job)
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
PROFILE="$OUT/profile-$BACKEND.json"
echo "== calibrate ($BACKEND)"
if ! "$BIN" devices --calibrate --backend "$BACKEND" "${Q[@]}" --json "$PROFILE" >"$OUT/calibrate-$BACKEND.log" 2>&1; then
  echo "calibrate failed (see $OUT/calibrate-$BACKEND.log); using the stock profile"
  tail -5 "$OUT/calibrate-$BACKEND.log"
  PROFILE=""
fi
if [ "$BACKEND" != cpu ] && [ -z "${ES_PV_NO_CPU:-}" ]; then
  "$BIN" devices --calibrate --backend cpu "${Q[@]}" --json "$OUT/profile-cpu.json" >"$OUT/calibrate-cpu.log" 2>&1 ||
    echo "cpu calibrate failed (see $OUT/calibrate-cpu.log)"
fi
TABLE="$OUT/plan_validate.md"
{
  echo "| model | type | pred decode tok/s | meas decode | ratio | pred prefill tok/s | meas prefill | ratio | pred mem GiB | peak RSS GiB | ratio |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"
for row in $ROWS; do
  m=${row%%:*}; t=${row##*:}; tag=$(basename "$m" .json)-$t
  echo "== $m $t"
  dev=(); [ -n "$PROFILE" ] && dev=(--device "$PROFILE")
  src=(--synthetic "$m" --type "$t"); bsrc=(--synthetic "$m" --dtype "$t")
  case "$m" in *.gguf) src=(-m "$m"); bsrc=(-m "$m");; esac
  if ! "$BIN" plan "${src[@]}" "${dev[@]}" -p "$P" -n "$N" --json \
      >"$OUT/plan-$tag.json" 2>"$OUT/plan-$tag.err"; then
    echo "plan failed: $(tail -1 "$OUT/plan-$tag.err")"
  fi
  if ! "$BIN" bench --backend "$BACKEND" "${bsrc[@]}" -p "$P" -n "$N" --json \
      >"$OUT/bench-$tag.json" 2>"$OUT/bench-$tag.err"; then
    echo "bench failed: $(tail -1 "$OUT/bench-$tag.err")"
  fi
  python3 - "$OUT/plan-$tag.json" "$OUT/bench-$tag.json" "$m" "$t" >>"$TABLE" <<'PY'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return {}
pl, be = load(sys.argv[1]), load(sys.argv[2])
g = lambda d, k: float(d[k]) if isinstance(d.get(k), (int, float)) else None
pd, md = g(pl, "decode_tokens_per_s"), g(be, "decode_tokens_per_s")
pp, mp = g(pl, "prefill_tokens_per_s"), g(be, "prefill_tokens_per_s")
pm, mm = g(pl, "memory_bytes"), g(be, "peak_rss_bytes")
f = lambda x: "-" if x is None else "%.1f" % x
gb = lambda x: "-" if x is None else "%.2f" % (x / 2**30)
r = lambda a, b: "-" if not a or not b else "%.2f" % (a / b)
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (sys.argv[3], sys.argv[4],
      f(pd), f(md), r(pd, md), f(pp), f(mp), r(pp, mp), gb(pm), gb(mm), r(pm, mm)))
PY
done
cat "$TABLE"
