#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (issue 21) with clang, ASan and UBSan in their own
# build dir (no Vulkan, no benchmarks; only the libraries the targets link are compiled) and
# runs each for SECONDS (default 60) on a scratch copy of its corpus. Crashers land in
# build-fuzz/artifacts/<target>/; add each to tests/fuzz/corpus/<target>/ (the ctest
# fuzz_corpus_<target> replays them with any compiler) and fix the bug.
#     scripts/fuzz.sh [SECONDS] [TARGET...]      (targets: tests/fuzz/CMakeLists.txt)
# ES_FUZZ_RUNS=N runs each target for N executions instead of SECONDS (issue 21 asks 1,000,000);
# ES_BUILD_LOCK=FILE builds under `flock FILE` (a machine shared with other builds); each target
# runs in one process on one core (libFuzzer's default: no -jobs/-workers). ES_FUZZ_TIMEOUT=S
# (default 10) is libFuzzer's -timeout, in seconds of wall time: at nice 19 under a parallel build
# a seed that needs 1.5 s of CPU can take over 10 s.
# ES_FUZZ_FORK=N runs each target as one libFuzzer session of N worker processes (-fork=N: the
# corpus is shared and merged, -runs counts the executions of all of them, a crash, leak or
# timeout in any ends the session with its input saved); for a million executions on a machine
# with many cores. ES_FUZZ_PREBUILT=1 runs the targets already in build-fuzz/ without configuring
# or building (a machine without clang that was handed the binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(server_request chat_template gguf_metadata safetensors_header tokenizer_json grammar
           model_config onnx_model)
fi
B=build-fuzz
[ -n "${ES_FUZZ_PREBUILT:-}" ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DES_FUZZ=ON -DES_VULKAN=OFF -DES_BUILD_BENCH=OFF \
  ${ES_FUZZ_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$ES_FUZZ_LAUNCHER} >/dev/null
[ -n "${ES_FUZZ_PREBUILT:-}" ] ||
  ${ES_BUILD_LOCK:+flock "$ES_BUILD_LOCK"} ninja -C $B "${TARGETS[@]/#/es_fuzz_}"
# ES_FUZZ_JOBS=N runs N targets at a time (default 1; CI: 2, one a core); each target's summary
# is printed once it ends, in the order given.
JOBS=${ES_FUZZ_JOBS:-1}
fuzz_one() {  # target -> its summary on stdout; exit 1 on a finding
  local t=$1 work=$B/work/$1 art=$B/artifacts/$1 limit rc=0
  rm -rf "$work" && mkdir -p "$work" "$art"
  # README.md files are notes, not inputs.
  find tests/fuzz/corpus/$t -type f ! -name README.md -exec cp {} "$work"/ \;
  if [ -n "${ES_FUZZ_RUNS:-}" ]; then limit=(-runs="$ES_FUZZ_RUNS"); else limit=(-max_total_time="$SECONDS_PER"); fi
  [ -z "${ES_FUZZ_FORK:-}" ] || limit+=(-fork="$ES_FUZZ_FORK")
  echo "== $t: ${limit[*]}"
  # -rss_limit_mb: a parser must not need more for inputs of at most -max_len bytes.
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      $B/tests/fuzz/es_fuzz_$t "$work" "${limit[@]}" -max_len=65536 \
      -rss_limit_mb=2048 -timeout="${ES_FUZZ_TIMEOUT:-10}" -artifact_prefix="$art/" \
      -print_final_stats=1 \
      2>"$B/$t.log"; then
    rc=1
    echo "   FINDING: see $B/$t.log and $art/"
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^Done [0-9]+ runs|^INFO: fuzzed for' \
    "$B/$t.log" | sed 's/^/   /' || true
  # A fork session's last progress line: executions, corpus, exec/s, oom/timeout/crash counts.
  [ -z "${ES_FUZZ_FORK:-}" ] || grep -E '^#[0-9]+: cov' "$B/$t.log" | tail -1 | sed 's/^/   /' || true
  return $rc
}
status=0
for t in "${TARGETS[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  rm -f "$B/$t.failed"
  (fuzz_one "$t" || touch "$B/$t.failed") > "$B/$t.summary" 2>&1 &
done
wait
for t in "${TARGETS[@]}"; do
  cat "$B/$t.summary"
  [ ! -e "$B/$t.failed" ] || status=1
done
exit $status
