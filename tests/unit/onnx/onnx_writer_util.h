// Test ONNX files written from C++ with the protobuf API (no onnx Python package here): a tiny
// Hugging Face checkpoint (tests/golden/data/models/...) as
//  - an ORT-GenAI builder-style graph (GroupQueryAttention with rotary inside and cos/sin caches,
//    SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, Sigmoid*x SiLU, MatMul or
//    MatMulNBits, Gather or GatherBlockQuantized), or
//  - a decomposed torch.onnx-style graph with past KV (Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul
//    RMSNorm, Slice/Neg/Concat RoPE from an inv_freq initializer, MatMul/Softmax attention over
//    Concat(past, new) with repeat_kv by Unsqueeze/Expand/Reshape), or
//  - the same as torch.onnx's dynamo exporter writes it: the mask from Range/LessOrEqual/And and
//    a GatherND of the attention mask, Where(mask, 0, -FLT_MAX); inv_freq a folded [1, hd/2, 1]
//    constant; Shape with start/end; the rope's Slices on axis 3.
#pragma once

#include <functional>
#include <string>

namespace es::test {

enum class OnnxStyle { kGenAi, kTorch, kDynamo };

struct OnnxWriteOptions {
  OnnxStyle style = OnnxStyle::kGenAi;
  // Matmul weights (q/k/v/o/gate/up/down/lm_head) as MatMulNBits: each row Q4_0-quantized by
  // edgeseek's quantizer, written as 4-bit blocks of `block` (a multiple of 32 repeats nothing:
  // the Q4_0 scales of a block's 32-column parts must agree, so block 32 only) with f32 scales
  // holding the f16 values, zero points absent (8) or written explicitly.
  bool int4 = false;
  bool explicit_zero_points = false;
  bool int4_embedding = false;  // GatherBlockQuantized (Q4_0 rows, block 32) for the embedding
  bool dequantized_embedding = false;  // Gather of the same Q4_0 rows dequantized (its twin)
  bool f16 = false;                    // matmul weights in f16
  bool packed_qkv = false;     // one q|k|v MatMul, GroupQueryAttention's key/value inputs empty
  bool rotary_nodes = false;   // com.microsoft RotaryEmbedding on q and k, do_rotary = 0
  bool external_data = false;  // initializers in model.onnx.data
  bool genai_config = true;    // write genai_config.json (GenAi style)
  // Edits the graph before it is saved (error tests), on the serialized node list: op type of
  // the first node whose op type is `replace_op` becomes `with_op`.
  std::string replace_op, with_op;
};

// Writes OUT_DIR/model.onnx (+ model.onnx.data, genai_config.json) from the checkpoint folder.
void WriteOnnxFromHf(const std::string& hf_dir, const std::string& out_dir,
                     const OnnxWriteOptions& o);

}  // namespace es::test
