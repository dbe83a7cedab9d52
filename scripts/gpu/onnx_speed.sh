#!/usr/bin/env bash
# One job on the GPU machine (issue 19: "an imported model runs at the speed of the same weights
# loaded from GGUF"): a synthetic R1-Distill-Qwen-1.5B-shaped ORT-GenAI-style int4 ONNX file (197
# MatMulNBits of 4 bits in blocks of 32, a GatherBlockQuantized embedding, external data), its
# GGUF conversion with every weight as the same q4_0 blocks (docs/onnx.md "Measured"), then
# `edgeseek bench --backend vulkan` of both, alternating, twice.
#   here:  the pack as for batched_ab.sh, with build/tests/es_onnx_write copied into .gpubin/
#   there: run(command="bash scripts/gpu/onnx_speed.sh", carry=[".gl", ".gpubin.txz"])
set -u
cd "$(dirname "$0")/../.." || exit 1
[ -f .gpubin.txz ] && [ ! -d .gpubin ] && tar xJf .gpubin.txz
. scripts/gpu/device_env.sh .gpubin
exec > >(tee "$OUT/onnx_speed.txt") 2>&1
D=/tmp/onnx_speed
rm -rf $D && mkdir -p $D
$B/es_onnx_write --synthetic r1-distill-qwen-1.5b $D > $D/write.log 2>&1 || tail -3 $D/write.log
cp tests/data/tiny_tokenizer/* $D/onnx/
echo '{"name": "q4_0_all", "default": "q4_0", "file_type": 2, "rules": []}' > $D/all_q4_0.json
$B/edgeseek convert $D/onnx/model.onnx -o $D/F.gguf --policy $D/all_q4_0.json > $D/convert.log 2>&1 ||
  tail -3 $D/convert.log
ls -l $D/onnx $D/F.gguf | awk '{print $5, $9}'
for round in 1 2; do
  for m in $D/onnx/model.onnx $D/F.gguf; do
    echo "== round $round: $m"
    $B/edgeseek bench --backend vulkan -m "$m" -p 512 -n 128 -r 3 2>&1 | grep -E "^(load|prefill|decode)"
  done
done
