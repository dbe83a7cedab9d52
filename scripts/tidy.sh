#!/usr/bin/env bash
# clang-tidy 14 with the curated checks of .clang-tidy on the C/C++ files a change touches in
# the library, the tools and the examples (src/, include/, tools/, examples/; the tests have
# -Werror and the sanitizers), through build/compile_commands.json (scripts/build.sh writes it;
# generated sources must exist, so build first). A changed header is checked through the source
# of the same name beside it, or else through the first source that includes it (directly or
# through other headers: an -inl.h kernel through matmul.cpp); findings in headers are reported
# only for the changed ones, so a change does not inherit another file's.
#     scripts/tidy.sh [BASE]   files changed since BASE (default: the merge-base with main; on
#                              main itself, or without a main branch, HEAD~1: the last commit)
# ES_TIDY_BUILD names another build directory. Exits 1 when clang-tidy reports anything.
# Cost: ~5-60 s a file on one core (server.cpp ~10 s); files run in parallel, one per core.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ES_TIDY_BUILD:-build}
TIDY=$(command -v clang-tidy-14 || true)
if [ -z "$TIDY" ]; then
  echo "tidy: clang-tidy-14 is needed (scripts/setup.sh installs it)" >&2
  exit 2
fi
if [ ! -f "$B/compile_commands.json" ]; then
  echo "tidy: $B/compile_commands.json is missing: run scripts/build.sh first" >&2
  exit 2
fi
if [ $# -ge 1 ]; then
  BASE=$1
else
  BASE=$(git merge-base HEAD main 2>/dev/null || true)
  if [ -z "$BASE" ] || [ "$BASE" = "$(git rev-parse HEAD)" ]; then BASE=HEAD~1; fi
fi
if ! git rev-parse --verify -q "$BASE^{commit}" >/dev/null; then
  if [ $# -eq 0 ]; then  # a shallow clone or a first commit: nothing to compare with
    echo "tidy: no base commit ($BASE): nothing checked; pass one, e.g. scripts/tidy.sh HEAD~3"
    exit 0
  fi
  echo "tidy: '$BASE' is not a commit" >&2
  exit 2
fi
# Sources in the compile database (absolute paths), changed files mapped onto them.
mapfile -t DB < <(python3 -c 'import json,sys; [print(e["file"]) for e in json.load(open(sys.argv[1]))]' \
  "$B/compile_commands.json" | sort -u)
SCOPE=()
for d in src include tools examples; do
  for e in cpp cc c h; do SCOPE+=("$d/*.$e"); done
done
# Headers whose findings count: the changed ones (a regex of their absolute paths).
HEADERS=$(git diff --name-only --diff-filter=ACMR "$BASE" -- "${SCOPE[@]}" | grep '\.h$' |
  sed -e 's/[.[\*^$()+?{|]/\\&/g' -e "s|^|$PWD/|" | paste -sd'|' || true)
HEADER_FILTER="^(${HEADERS:-a^})\$"
in_db() { printf '%s\n' "${DB[@]}" | grep -qxF "$PWD/$1"; }
# A header without a source of its name (an -inl.h kernel, a header-only type): the first compiled
# source that includes it, directly or through other headers of the tree.
includer() {
  local names=("$(basename "$1")") seen=" " n f
  while [ ${#names[@]} -gt 0 ]; do
    n=${names[0]}
    names=("${names[@]:1}")
    case "$seen" in *" $n "*) continue ;; esac
    seen="$seen$n "
    while IFS= read -r f; do
      if [[ $f == *.h ]]; then
        names+=("$(basename "$f")")
      elif in_db "$f"; then
        echo "$f"
        return
      fi
    done < <(grep -rlE "#include \"([^\"]*/)?$n\"" src include tools examples 2>/dev/null | sort)
  done
  return 0
}
FILES=()
while IFS= read -r f; do
  found=""
  for cand in "$f" "${f%.*}.cpp" "${f%.*}.c"; do
    if in_db "$cand"; then
      found=$cand
      break
    fi
  done
  [ -z "$found" ] && [[ $f == *.h ]] && found=$(includer "$f")
  [ -n "$found" ] && FILES+=("$found")
done < <(git diff --name-only --diff-filter=ACMR "$BASE" -- "${SCOPE[@]}" | sort -u)
mapfile -t FILES < <(printf '%s\n' "${FILES[@]}" | sed '/^$/d' | sort -u)
if [ ${#FILES[@]} -eq 0 ]; then
  echo "tidy: no compiled C/C++ file changed since $(git rev-parse --short "$BASE")"
  exit 0
fi
echo "tidy: ${#FILES[@]} file(s) changed since $(git rev-parse --short "$BASE")"
# The tests compile through a GCC precompiled header (tests/CMakeLists.txt: `-include
# .../cmake_pch.hxx`, beside it the GCC .gch that clang cannot read): clang-tidy reads a copy of
# the compile database without those flags, each file parsed from its own includes.
DBDIR=$(mktemp -d)
trap 'rm -rf "$DBDIR"' EXIT
python3 - "$B/compile_commands.json" "$DBDIR/compile_commands.json" <<'PY'
import json, re, sys
db = json.load(open(sys.argv[1]))
for e in db:
    e["command"] = re.sub(r" -Winvalid-pch| -include \S*cmake_pch\.hxx", "", e["command"])
json.dump(db, open(sys.argv[2], "w"), indent=0)
PY
# --warnings-as-errors: any finding fails the run; --quiet drops the "N warnings generated" noise.
if printf '%s\0' "${FILES[@]}" |
  xargs -0 -n 1 -P "$(nproc)" "$TIDY" -p "$DBDIR" --quiet --warnings-as-errors='*' \
    --header-filter="$HEADER_FILTER"; then
  echo "tidy: clean"
else
  echo "tidy: findings above (.clang-tidy says which checks run and why others do not)" >&2
  exit 1
fi
