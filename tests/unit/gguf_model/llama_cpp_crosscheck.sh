#!/usr/bin/env bash
# Cross-check with llama.cpp (not a CI test: CI has no llama.cpp). llama.cpp's own quantizer
# (llama-quantize, Feb-2025 CPU build) requantizes f16 GGUF files that edgeseek wrote; edgeseek
# must load llama.cpp's output and give logits close to the f16 file's, and as close as its own
# quantization of the same file (same block formats, same reference encoders).
#
#   tests/unit/gguf_model/llama_cpp_crosscheck.sh BUILD_DIR [LLAMA_CPP_BIN]
#
# Inputs: two synthetic models written by `edgeseek convert` (llama and qwen2 shapes, rows of
# 512/1536 so that the k-quants apply), and the dsv2_realdim golden written by es_test_gguf_model
# (run it first; the converter does not write deepseek2's kv_b yet). Results go to stdout as a
# table (docs/gguf.md keeps the measured one).
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [LLAMA_CPP_BIN]}
LLAMA=${2:-/work/llama.cpp/build-cpu/bin}
ES=$BUILD/edgeseek
OUT=$BUILD/test_tmp/llama_cpp_crosscheck
mkdir -p "$OUT"
IDS=1,17,42,99,7,200,255,64,128,90,3,5,8,13,21,34  # below every vocabulary size

cat > "$OUT/llama.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024, "hidden_size": 512,
 "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
 "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "tie_word_embeddings": false,
 "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 256}, "dtype": "float32"}
EOF
cat > "$OUT/qwen2.json" <<'EOF'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 1024, "hidden_size": 512,
 "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
 "rms_norm_eps": 1e-6, "max_position_embeddings": 2048, "tie_word_embeddings": true,
 "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "dtype": "float32"}
EOF

rel() {  # rel L2 of two f32 files, and the share of positions with the same top token
  python3 - "$1" "$2" "$3" <<'EOF'
import sys, array, math
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
b = array.array('f'); b.frombytes(open(sys.argv[2], 'rb').read())
V = int(sys.argv[3]); T = len(b) // V
num = sum((x - y) ** 2 for x, y in zip(a, b)); den = sum(y * y for y in b)
top = sum(max(range(V), key=lambda i: a[t*V+i]) == max(range(V), key=lambda i: b[t*V+i]) for t in range(T))
print(f"{math.sqrt(num / den):.4f} {top}/{T}")
EOF
}

logits() { "$ES" logits -m "$1" --ids "$IDS" --out "$2" -t 2 >/dev/null; }

models=()
for arch in llama qwen2; do
  "$ES" convert --synthetic "$OUT/$arch.json" --seed 7 -o "$OUT/${arch}_f16.gguf" --type f16 >/dev/null
  models+=("$OUT/${arch}_f16.gguf:1024")
done
for v in dsv2_realdim:256 dsv3:384; do
  DS=$BUILD/test_tmp/Models_GgufGolden.LogitsMatchSafetensors_${v%%:*}/m_f16.gguf
  if [ -f "$DS" ]; then cp "$DS" "$OUT/${v%%:*}_f16.gguf"; models+=("$OUT/${v%%:*}_f16.gguf:${v##*:}"); fi
done

printf "| model | type | llama.cpp file: rel L2 vs f16, top-1 | edgeseek file: rel L2 vs f16, top-1 | llama.cpp vs edgeseek file | identical tensors |\n"
printf "|---|---|---|---|---|---|\n"
for mv in "${models[@]}"; do
  m=${mv%%:*}; V=${mv##*:}; base=${m%_f16.gguf}
  logits "$m" "$base.f16.logits"
  for t in q8_0 q4_0 q4_k_m; do
    LT=$(echo $t | tr a-z A-Z)
    if ! "$LLAMA/llama-quantize" "$m" "$base.lcpp_$t.gguf" "$LT" 2 >"$base.lcpp_$t.log" 2>&1; then
      printf "| %s | %s | llama-quantize refuses the file: %s | | | |\n" "$(basename "$base")" "$t" \
        "$(grep -m1 'failed to quantize' "$base.lcpp_$t.log" | sed 's/.*failed to quantize: //')"
      continue
    fi
    "$ES" quantize "$m" "$base.es_$t.gguf" --type "$t" -t 2 >/dev/null 2>&1
    logits "$base.lcpp_$t.gguf" "$base.lcpp_$t.logits"
    logits "$base.es_$t.gguf" "$base.es_$t.logits"
    same=$(python3 "$(dirname "$0")/gguf_same_tensors.py" "$base.lcpp_$t.gguf" "$base.es_$t.gguf")
    printf "| %s | %s | %s | %s | %s | %s |\n" "$(basename "$base")" "$t" \
      "$(rel "$base.lcpp_$t.logits" "$base.f16.logits" "$V")" "$(rel "$base.es_$t.logits" "$base.f16.logits" "$V")" \
      "$(rel "$base.lcpp_$t.logits" "$base.es_$t.logits" "$V")" "$same"
  done
done

