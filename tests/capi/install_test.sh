#!/bin/sh
# The C API as a program outside the tree sees it: `cmake --install` into a temporary prefix,
# examples/simple.c compiled against that copy through pkg-config, run on a golden model; its
# greedy ids must be what `edgeseek generate` gives for the same prompt ids, and the installed
# libedgeseek.so must export nothing but es_* symbols.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR EDGESEEK_CLI
set -eu
build=$1 src=$2 cli=$3
model=$src/tests/golden/data/models/qwen2_realdim
tok=$src/tests/data/tiny_tokenizer
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name edgeseek.pc)
[ -n "$pc" ] || { echo "FAIL: edgeseek.pc not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir edgeseek)
[ -f "$(pkg-config --variable=includedir edgeseek)/edgeseek/edgeseek.h" ] || { echo "FAIL: header not installed"; exit 1; }
if find "$prefix" -path '*edgeseek/internal*' | grep -q .; then echo "FAIL: internal headers installed"; exit 1; fi

# Only the C API leaves the library.
others=$(nm -D --defined-only "$libdir/libedgeseek.so" | awk '{print $3}' | grep -v '^es_' || true)
[ -z "$others" ] || { echo "FAIL: libedgeseek.so exports non-API symbols:"; echo "$others" | head; exit 1; }

cc -std=c11 -Wall -Wextra -Werror "$src/examples/simple.c" $(pkg-config --cflags --libs edgeseek) -o "$prefix/simple"
LD_LIBRARY_PATH=$libdir "$prefix/simple" -m "$model" --tokenizer "$tok" -n 24 -p "Hello there" --ids \
  >"$prefix/out.txt" 2>"$prefix/err.txt" || { cat "$prefix/err.txt"; exit 1; }
prompt=$(sed -n 's/^prompt_ids: //p' "$prefix/err.txt")
ids=$(sed -n 's/^ids: //p' "$prefix/err.txt")
[ -n "$prompt" ] && [ -n "$ids" ] || { echo "FAIL: simple printed no ids"; cat "$prefix/err.txt"; exit 1; }
# An EOS id ends simple's answer (finish 1, ES_FINISH_STOP: it is the last id); `generate` masks
# EOS, so the ids before it are compared.
set -- $ids
n=$#
if grep -q '^finish: 1,' "$prefix/err.txt"; then
  n=$((n - 1))
  ids=$(echo "$ids" | awk -v n=$n '{for (i = 1; i <= n; ++i) printf "%s%s", (i > 1 ? " " : ""), $i}')
fi
[ "$n" -gt 0 ] || { echo "FAIL: the answer is empty"; exit 1; }
want=$("$cli" generate -m "$model" --ids "$prompt" -n "$n" --temp 0)
if [ "$ids" != "$want" ]; then
  echo "FAIL: simple.c generated [$ids], edgeseek generate [$want]"
  exit 1
fi
echo "ok: $n greedy ids equal edgeseek generate's; text: $(cat "$prefix/out.txt")"
