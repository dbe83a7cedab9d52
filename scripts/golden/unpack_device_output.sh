#!/usr/bin/env bash
# Copies what scripts/golden/run_on_device.sh left under $OUT (fetched to FROM) into the repository:
# models → tests/golden/data/models, tokenizer → tests/golden/tokenizer, templates → tests/golden/templates,
# transformers sources → /tmp/golden_src (reference only, not committed).
set -euo pipefail
FROM=${1:?usage: unpack_device_output.sh FOLDER_WITH_golden.tgz.part-*}
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
cat "$FROM"/golden.tgz.part-* | tar -xzf - -C "$T"
mkdir -p tests/golden/data/models tests/golden/tokenizer tests/golden/templates
if [ -d "$T/models" ] && [ -n "$(ls -A "$T/models")" ]; then
  for d in "$T"/models/*/; do n=$(basename "$d"); rm -rf "tests/golden/data/models/$n"; cp -r "$d" "tests/golden/data/models/$n"; done
  cp "$T/models/summary.json" tests/golden/data/models/summary.json 2>/dev/null || true
fi
cp "$T"/tokenizer/*.jsonl "$T"/tokenizer/meta.json tests/golden/tokenizer/ 2>/dev/null || true
cp "$T"/templates/expected.jsonl "$T"/templates/meta.json tests/golden/templates/ 2>/dev/null || true
rm -rf /tmp/golden_src && cp -r "$T/src" /tmp/golden_src
du -sh tests/golden/data tests/golden/tokenizer tests/golden/templates
