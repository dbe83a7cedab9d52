#!/usr/bin/env bash
# Makes every golden fixture on the GPU machine (transformers 5.17 there is the reference) and packs
# the results under $OUT for copying back. Run from the repository root with the tokenizer cache
# carried along, e.g. through the device tool:
#   run(command="bash scripts/golden/run_on_device.sh", carry=[".cache/tokenizers"])
# Then, here: bash scripts/golden/unpack_device_output.sh <files_at folder>
# Extra arguments are passed to make_models.py (e.g. --only dsv3,dsv3_fp8).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/golden_out}
STAGE=$(mktemp -d)
mkdir -p "$OUT" "$STAGE/models" "$STAGE/tokenizer" "$STAGE/templates" "$STAGE/src"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export CUDA_VISIBLE_DEVICES=""   # CPU float64 compute: deterministic, and tiny models need nothing more
LOG="$OUT/log.txt"
{
  echo "== versions"; python3 -c 'import sys,torch,transformers,tokenizers,safetensors,numpy,jinja2;print(sys.version);print("torch",torch.__version__,"transformers",transformers.__version__,"tokenizers",tokenizers.__version__,"safetensors",safetensors.__version__,"numpy",numpy.__version__,"jinja2",jinja2.__version__)'
  echo "== tokenizer goldens"
  timeout 240 python3 scripts/golden/make_tokenizer_golden.py --out "$STAGE/tokenizer"
  echo "== template goldens"
  timeout 120 python3 scripts/golden/make_template_golden.py --out "$STAGE/templates"
  echo "== transformers sources (for scripts/golden/FACTS.md)"
  python3 - "$STAGE/src" <<'PY'
import os, shutil, sys, transformers
root = os.path.dirname(transformers.__file__); dst = sys.argv[1]
rels = ["modeling_rope_utils.py", "conversion_mapping.py", "core_model_loading.py", "integrations/moe.py",
        "integrations/finegrained_fp8.py", "utils/chat_template_utils.py", "generation/logits_process.py",
        "masking_utils.py", "modeling_utils.py", "configuration_utils.py"]
for m in ["llama", "qwen2", "deepseek_v2", "deepseek_v3"]:
    d = os.path.join(root, "models", m)
    rels += [os.path.join("models", m, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]
for r in rels:
    p = os.path.join(root, r)
    if os.path.exists(p):
        os.makedirs(os.path.dirname(os.path.join(dst, r)), exist_ok=True); shutil.copy(p, os.path.join(dst, r))
    else:
        print("missing", r)
print("copied", len(rels))
PY
  echo "== model goldens"
  timeout 420 python3 scripts/golden/make_models.py --out "$STAGE/models" "$@"
  echo "== sizes"; du -sh "$STAGE"/*
} 2>&1 | tee "$LOG"
tar -C "$STAGE" -cf - . | gzip -1 | split -b 15000000 - "$OUT/golden.tgz.part-"
ls -la "$OUT"
