// Lifting an imported ONNX decoder (an OpGraph from edgeseek/internal/formats/onnx.h) into
// edgeseek's model: a ModelConfig and the checkpoint tensors under their Hugging Face names, so
// that ModelArch builds exactly the graph a Hugging Face folder or GGUF file of the same weights
// gives (same IR, same kernels, same speed on every backend).
//
// Two shapes of graph lift, after the import passes (edgeseek/internal/graph/passes/passes.h):
//  - ORT-GenAI builder style: com.microsoft GroupQueryAttention (rotary inside or RotaryEmbedding
//    before it; packed or separate q/k/v), MatMulNBits, (Skip)SimplifiedLayerNormalization,
//    GatherBlockQuantized;
//  - plain torch.onnx / optimum exports with past KV: decomposed RMSNorm, SiLU, RoPE and
//    attention, fused by the passes into es.RmsNorm / es.SwiGLU / es.Rope / es.Attention.
// The walk goes from the logits back along the residual stream, layer by layer, to the token
// embedding; the first node that does not fit is one es::Error naming it (name, op type,
// domain). Ops outside the known set fail before the walk, naming the node.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "edgeseek/internal/graph/op_graph.h"
#include "edgeseek/internal/models/config.h"

namespace es {

struct OnnxLifted {
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // Hugging Face names -> views of the file or converted
  std::vector<std::string> notes;         // one line each: what was found and how it was mapped
};

// Runs the import passes on `g` and lifts it. `where` names the file in errors.
OnnxLifted LiftOnnxDecoder(OpGraph g, const std::string& where);

}  // namespace es
