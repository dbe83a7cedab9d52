#!/usr/bin/env bash
# Fails, naming the files, when any tracked C/C++ source differs from what clang-format 14 makes
# of it (.clang-format; the tree was formatted whole in commit 7e3de54). Seconds for the tree.
#     scripts/check_format.sh            every tracked *.cpp, *.h, *.c
# Fix one change's lines:   git clang-format --binary clang-format-14 $(git merge-base HEAD main)
# Fix whole files:          clang-format-14 -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$CF" ] || ! "$CF" --version | grep -q 'version 14\.'; then
  echo "check_format: clang-format 14 is needed (scripts/setup.sh installs it)" >&2
  exit 2
fi
report=$(git ls-files -z '*.cpp' '*.h' '*.c' |
  xargs -0 -n 64 -P "$(nproc)" "$CF" --dry-run -Werror 2>&1 || true)
bad=$(echo "$report" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be .*/\1/p' | sort -u)
other=$(echo "$report" | grep -E '(^|: )error:' | grep -v 'code should be clang-formatted' || true)
if [ -n "$other" ]; then
  echo "check_format: clang-format failed:" >&2
  echo "$other" >&2
  exit 2
fi
if [ -n "$bad" ]; then
  echo "check_format: these files differ from clang-format 14's output:" >&2
  echo "$bad" | sed 's/^/  /' >&2
  echo "fix: clang-format-14 -i <files> (or git clang-format on your change)" >&2
  exit 1
fi
echo "check_format: $(git ls-files '*.cpp' '*.h' '*.c' | wc -l) files formatted"
